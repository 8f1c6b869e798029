package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SchemaSync copies the pre-data schema (schemas, types, tables, sequences)
// of source shard 0 to every destination shard with pg_dump. Each
// destination shard applies the whole script in one transaction together
// with its step marker, so a re-run skips shards that have it and redoes
// shards that do not.
func (t *Task) SchemaSync(ctx context.Context) error {
	return t.schemaSync(ctx, "pre-data", StepSchema)
}

// SchemaSyncPost copies the post-data schema (primary keys, indexes,
// constraints, triggers) after Copy, so that the copy loads tables without
// maintaining indexes.
func (t *Task) SchemaSyncPost(ctx context.Context) error {
	return t.schemaSync(ctx, "post-data", StepPostSchema)
}

const (
	// schemaLock names the transaction-level advisory lock a schema
	// script holds on its destination shard: its first key is hashtext
	// of this text, the second hashtext of the task's name.
	schemaLock = "shardgate-schema"
	// stepRecorded is the message of the error a schema script raises,
	// after taking schemaLock, when its step is recorded already.
	stepRecorded = "shardgate: schema step recorded already"
)

func (t *Task) schemaSync(ctx context.Context, section string, step Step) error {
	var script string
	for d := range t.dst.Shards {
		conn, err := t.connectDest(ctx, d)
		if err != nil {
			return fmt.Errorf("replication: schema sync: %w", err)
		}
		done, err := t.stepDone(ctx, conn, step)
		if err == nil && !done {
			if script == "" {
				if script, err = t.dump(ctx, section); err != nil {
					conn.Close(ctx)
					return err
				}
			}
			_, err = conn.PgConn().Exec(ctx, t.schemaScript(script, step)).ReadAll()
			if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "P0001" && pe.Message == stepRecorded {
				done, err = true, nil
			}
		}
		conn.Close(ctx)
		if err != nil {
			return fmt.Errorf("replication: schema sync %s: %s: %w", section, shardDesc("destination", t.dst, d), err)
		}
		if !done {
			t.log.Info("schema synced", "section", section, "shard", d)
		}
	}
	return nil
}

// schemaScript is the one Query that applies a section's script on a
// destination shard, as one transaction with step's marker. A run whose
// connection broke may still be running there, or its Query may reach the
// server only now (a slow network; its proxy dead), while a retry or
// another proxy runs the step: so the Query first takes schemaLock, which
// waits for the other run's transaction to end, and then checks for the
// marker, raising stepRecorded if that run committed it. Checking before
// the lock is not enough: the other run's tables would make the script
// fail with "relation already exists". One Query, not a transaction over
// several round trips, so that a stopped proxy never holds the lock.
func (t *Task) schemaScript(script string, step Step) string {
	name, stepName := quoteLiteral(t.Name), quoteLiteral(step.String())
	return "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(" + quoteLiteral(schemaLock) + "), pg_catalog.hashtext(" + name + "));\n" +
		"DO " + quoteLiteral("BEGIN IF EXISTS (SELECT 1 FROM shardgate_reshard.steps WHERE task = "+name+" AND step = "+stepName+") THEN "+
		"RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = "+quoteLiteral(stepRecorded)+"; END IF; END") + ";\n" +
		script + ";\nINSERT INTO shardgate_reshard.steps (task, step) VALUES (" + name + ", " + stepName + ")"
}

// dump runs pg_dump --schema-only for section against source shard 0 and
// returns the SQL without psql meta-commands (\restrict and the like).
func (t *Task) dump(ctx context.Context, section string) (string, error) {
	bin, err := pgDump()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, "--schema-only", "--section="+section,
		"--no-owner", "--no-privileges", "--no-publications", "--no-subscriptions",
		"--no-comments", "--exclude-schema="+bookkeepingSchema, "--exclude-schema="+clusterSchema, "--dbname="+t.dsn(t.src, 0, false))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		err = fmt.Errorf("replication: pg_dump %s of %s: %w: %s", section, shardDesc("source", t.src, 0), err, msg)
		if dumpLostServer(msg) {
			err = &lostServerError{err: err}
		}
		return "", err
	}
	var b strings.Builder
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, `\`) {
			continue
		}
		b.WriteString(line)
	}
	return b.String(), nil
}

// dumpLostServer reports whether pg_dump's messages say it lost, or
// could not reach, its server (a retry can succeed), as libpq words it.
func dumpLostServer(msg string) bool {
	for _, s := range []string{"server closed the connection unexpectedly", "could not connect",
		"Connection refused", "Connection reset", "connection to server", "terminating connection",
		"the database system is", "timeout expired", "could not receive data", "could not send data"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// lostServerError is a failure of a tool (pg_dump) whose server went away:
// transient.
type lostServerError struct{ err error }

func (e *lostServerError) Error() string { return e.err.Error() }
func (e *lostServerError) Unwrap() error { return e.err }

// pgDump finds pg_dump: in $PG_BINDIR, in the highest
// /usr/lib/postgresql/*/bin (Debian's /usr/bin/pg_dump is a wrapper that may
// pick another version), or in PATH. pg_dump must not be older than the
// source server.
func pgDump() (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		return filepath.Join(dir, "pg_dump"), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(a))), 64)
		vb, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(b))), 64)
		return int(va - vb)
	})
	if len(dirs) > 0 {
		return dirs[len(dirs)-1], nil
	}
	p, err := exec.LookPath("pg_dump")
	if err != nil {
		return "", fmt.Errorf("replication: pg_dump not found in $PG_BINDIR, /usr/lib/postgresql/*/bin or PATH")
	}
	return p, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
