package replication

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
			sql := script + ";\nINSERT INTO shardgate_reshard.steps (task, step) VALUES (" +
				quoteLiteral(t.Name) + ", " + quoteLiteral(step.String()) + ")"
			_, err = conn.PgConn().Exec(ctx, sql).ReadAll()
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
