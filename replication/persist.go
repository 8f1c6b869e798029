package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
)

// Tasks that copy or stream are recorded in shardgate_reshard.tasks on
// destination shard 0 (see bookkeeping): state "running" while they run,
// "failed" with the error when they fail. Drop deletes the row with the
// rest of the task's bookkeeping, so a finished or stopped task leaves
// nothing. Manager.Resume, at the proxy's start, restarts every task
// recorded as running; the engine's own records (steps, table_copies,
// replication origins) make it continue where it stopped.
//
// Just before a cutover rewrites the config file, the row also gets the
// source's shards (source_shards: host, port, database and user, never a
// password). A proxy that stops after the file names the destination's
// shards but before Drop finished would otherwise lose the only description
// of the shards whose slots hold WAL: Resume finds the source database
// already on the destination's shards (sameShards) and runs the drop on the
// recorded shards instead of the stream. An aborted cutover clears the
// column again.

// recordedShard is one source shard as the tasks row records it.
type recordedShard struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	User     string `json:"user,omitempty"`
}

// persist records the task's state on destination shard 0, with the
// source's shards while t.cutoverFrom is set. Most callers only log a
// failure (the record only matters for a restart); the cutover needs the
// record and gives up without it.
func (t *Managed) persist(ctx context.Context, state TaskState, taskErr error) error {
	return t.persistWithin(ctx, 10*time.Second, state, taskErr)
}

// persistWithin is persist giving up after d, whatever ctx says.
func (t *Managed) persistWithin(ctx context.Context, d time.Duration, state TaskState, taskErr error) error {
	if t.Kind == KindSchemaSync {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	conn, err := t.Task.connectDest(ctx, 0)
	if err == nil {
		err = t.writeRecord(ctx, conn, state, taskErr, false)
		conn.Close(ctx)
	}
	if err != nil {
		t.Task.log.Warn("could not record the task's state; a restart will not resume it", "id", t.ID, "err", err)
		return fmt.Errorf("record the task: %w", err)
	}
	return nil
}

// execer is a session or a transaction on destination shard 0.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// writeRecord writes the task's row (see persist) through conn. The
// source's shards recorded by a cutover stay unless this run records its
// own or clearSource says its cutover aborted (undoFence): a run that
// took the task over must not erase another's (claim.go).
func (t *Managed) writeRecord(ctx context.Context, conn execer, state TaskState, taskErr error, clearSource bool) error {
	var shards *string
	if db := t.cutoverFrom; db != nil {
		rec := make([]recordedShard, len(db.Shards))
		for i, sh := range db.Shards {
			rec[i] = recordedShard{Host: sh.Host, Port: sh.Port, Database: sh.Database, User: sh.User}
			if rec[i].Database == "" {
				rec[i].Database = db.Name
			}
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		s := string(b)
		shards = &s
	}
	var why *string
	if taskErr != nil {
		s := taskErr.Error()
		why = &s
	}
	n := t.Task.Names()
	if _, err := conn.Exec(ctx, recordColumns); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `INSERT INTO shardgate_reshard.tasks (task, kind, source, destination, state, error, source_shards, publication, slot)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, nullif($8, ''), nullif($9, ''))
		ON CONFLICT (task) DO UPDATE SET kind = $2, source = $3, destination = $4, state = $5, error = $6,
			source_shards = CASE WHEN $10 THEN $7::jsonb ELSE coalesce($7::jsonb, tasks.source_shards) END,
			publication = nullif($8, ''), slot = nullif($9, ''), updated = now()`,
		t.Task.Name, t.Kind.String(), t.Source, t.Dest, state.String(), why, shards, n.Publication, n.Slot, clearSource)
	return err
}

// Resume restarts the tasks recorded as running on shard 0 of any database
// of the running configuration (at the proxy's start), and finishes the
// cutovers that a stopped proxy left after rewriting the config file. It
// returns the tasks it started and every problem it met.
func (m *Manager) Resume(ctx context.Context) ([]*Managed, error) {
	cfg := m.gate.Config()
	seen := map[string]bool{}
	var started []*Managed
	var errs []error
	for i := range cfg.Databases {
		db := &cfg.Databases[i]
		if len(db.Shards) == 0 {
			continue
		}
		probe := &Task{}
		probe.user, probe.password = Credentials(cfg, db.Name)
		sh := db.Shards[0]
		key := net.JoinHostPort(sh.Host, strconv.Itoa(sh.Port)) + "/" + sh.Database
		if seen[key] {
			continue
		}
		seen[key] = true
		recs, err := recordedTasks(ctx, probe.dsn(db, 0, false))
		if err != nil {
			errs = append(errs, fmt.Errorf("database %q shard 0: %w", db.Name, err))
			continue
		}
		for _, r := range recs {
			if m.runsLocally(r.name) {
				continue
			}
			src, dst := cfg.Database(r.source), cfg.Database(r.dest)
			if src == nil || dst == nil {
				errs = append(errs, fmt.Errorf("task %s (%s → %s): a database is no longer configured", r.name, r.source, r.dest))
				continue
			}
			kind := KindReshard
			if r.kind == KindCopyData.String() {
				kind = KindCopyData
			}
			var t *Managed
			switch {
			case sameShards(src, dst) && r.sourceShards == nil:
				errs = append(errs, fmt.Errorf("task %s: %q already points at %q's shards (the proxy stopped during the cutover) "+
					"and the task's record has no source shards: drop the slots (%s) and publications on the old source shards by hand",
					r.name, r.source, r.dest, slotPattern(r)))
				continue
			case sameShards(src, dst):
				t, err = m.finishCutover(cfg, kind, r)
				if err == nil {
					m.log.Info("task resumed after its cutover: dropping what it left on the old source shards", "id", t.ID,
						"source", r.source, "destination", r.dest, "source_shards", r.sourceShards)
				}
			case r.state != TaskRunning.String():
				// A failed task that had not cut over: it resumes when
				// started again, as before.
				continue
			default:
				t, err = m.start(kind, r.source, r.dest, r.names, false)
				if err == nil {
					m.log.Info("task resumed", "id", t.ID, "kind", kind.String(), "source", r.source, "destination", r.dest)
				}
			}
			if errors.Is(err, errLeaseHeld) {
				continue // another proxy runs it
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("task %s: %w", r.name, err))
				continue
			}
			started = append(started, t)
		}
	}
	return started, errors.Join(errs...)
}

// finishCutover starts a task that only drops what task r left: its source
// database is rebuilt from the recorded shards, with the credentials a task
// on r.source uses (a shard's own password is taken from a configured shard
// with the same host, port and user, since the record holds none).
func (m *Manager) finishCutover(cfg *config.Config, kind TaskKind, r taskRecord) (*Managed, error) {
	old := &config.Database{Name: r.source, Shards: make([]config.Shard, len(r.sourceShards))}
	for i, rs := range r.sourceShards {
		old.Shards[i] = config.Shard{Host: rs.Host, Port: rs.Port, Database: rs.Database, User: rs.User,
			Password: shardPassword(cfg, rs)}
	}
	user, password := Credentials(cfg, r.source)
	task, err := New(old, cfg.Database(r.dest), user, password, m.log)
	if err != nil {
		return nil, err
	}
	if task.Name != r.name {
		return nil, fmt.Errorf("the recorded task name does not match %q → %q (%s)", r.source, r.dest, task.Name)
	}
	if err := task.UseNames(r.names); err != nil {
		return nil, fmt.Errorf("the recorded names: %w", err)
	}
	return m.launch(kind, r.source, r.dest, task, old, true)
}

// shardPassword returns the password of a configured shard on the same
// server with the same user as rs, or "" (the task's credentials apply).
func shardPassword(cfg *config.Config, rs recordedShard) string {
	if rs.User == "" {
		return ""
	}
	for i := range cfg.Databases {
		for _, sh := range cfg.Databases[i].Shards {
			if sh.Host == rs.Host && sh.Port == rs.Port && sh.User == rs.User && sh.Password != "" {
				return sh.Password
			}
		}
	}
	return ""
}

type taskRecord struct {
	name, kind, source, dest, state string
	sourceShards                    []recordedShard // nil until the cutover recorded them
	names                           Names
}

// slotPattern describes the slots of task r in a message.
func slotPattern(r taskRecord) string {
	if r.names.Slot != "" {
		return r.names.Slot + " or " + r.names.Slot + "_<n>"
	}
	return r.name + "_<n>"
}

// checkRecordedNames refuses names that differ from those of the task's
// record on destination shard 0 while it is recorded as running: another
// proxy may run it, or this one failed to resume it, and its slots and
// copies belong to the recorded names. A destination without the record
// (or unreachable: the task then fails on its own) passes.
func (t *Task) checkRecordedNames(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, t.dsn(t.dst, 0, false))
	if err != nil {
		return nil
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('shardgate_reshard.tasks') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err
	}
	if _, err := conn.Exec(ctx, recordColumns); err != nil {
		return err
	}
	var rec Names
	err = conn.QueryRow(ctx, `SELECT coalesce(publication, ''), coalesce(slot, '') FROM shardgate_reshard.tasks
		WHERE task = $1 AND state = 'running'`, t.Name).Scan(&rec.Publication, &rec.Slot)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: read the task's record: %w", shardDesc("destination", t.dst, 0), err)
	}
	if rec != t.names {
		return fmt.Errorf("task %s is recorded as running with %s, not %s: use the same names, or stop it first", t.Name, rec, t.names)
	}
	return nil
}

// recordColumns adds the columns of shardgate_reshard.tasks that an older
// version did not create; it runs where the table is read or written.
const recordColumns = `ALTER TABLE shardgate_reshard.tasks ADD COLUMN IF NOT EXISTS source_shards jsonb;
ALTER TABLE shardgate_reshard.tasks ADD COLUMN IF NOT EXISTS publication text;
ALTER TABLE shardgate_reshard.tasks ADD COLUMN IF NOT EXISTS slot text`

// recordedTasks returns the tasks recorded as running, and those recorded
// with source shards in any state (a drop that failed after the cutover is
// tried again).
func recordedTasks(ctx context.Context, dsn string) ([]taskRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('shardgate_reshard.tasks') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	// A table an older version created lacks some columns.
	if _, err := conn.Exec(ctx, recordColumns); err != nil {
		return nil, err
	}
	rows, _ := conn.Query(ctx, `SELECT task, kind, source, destination, state, source_shards::text,
		coalesce(publication, ''), coalesce(slot, '') FROM shardgate_reshard.tasks
		WHERE state = 'running' OR source_shards IS NOT NULL ORDER BY started`)
	var out []taskRecord
	var r taskRecord
	var shards *string
	_, err = pgx.ForEachRow(rows, []any{&r.name, &r.kind, &r.source, &r.dest, &r.state, &shards,
		&r.names.Publication, &r.names.Slot}, func() error {
		rec := r
		if shards != nil {
			if err := json.Unmarshal([]byte(*shards), &rec.sourceShards); err != nil {
				return fmt.Errorf("task %s: source_shards: %w", r.name, err)
			}
			if len(rec.sourceShards) == 0 {
				return fmt.Errorf("task %s: source_shards is empty", r.name)
			}
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

func sameShards(a, b *config.Database) bool {
	if len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		x, y := a.Shards[i], b.Shards[i]
		if x.Host != y.Host || x.Port != y.Port || x.Database != y.Database {
			return false
		}
	}
	return true
}
