package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// Tasks that copy or stream are recorded in shardgate_reshard.tasks on
// destination shard 0 (see bookkeeping): state "running" while they run,
// "failed" with the error when they fail. Drop deletes the row with the
// rest of the task's bookkeeping, so a finished or stopped task leaves
// nothing. Manager.Resume, at the proxy's start, restarts every task
// recorded as running; the engine's own records (steps, table_copies,
// replication origins) make it continue where it stopped.

// persist records the task's state on destination shard 0. Failures are
// logged: the record only matters for a restart.
func (t *Managed) persist(ctx context.Context, state TaskState, taskErr error) {
	if t.Kind == KindSchemaSync {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	conn, err := t.Task.connectDest(ctx, 0)
	if err == nil {
		var why *string
		if taskErr != nil {
			s := taskErr.Error()
			why = &s
		}
		_, err = conn.Exec(ctx, `INSERT INTO shardgate_reshard.tasks (task, kind, source, destination, state, error)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (task) DO UPDATE SET kind = $2, source = $3, destination = $4, state = $5, error = $6, updated = now()`,
			t.Task.Name, t.Kind.String(), t.Source, t.Dest, state.String(), why)
		conn.Close(ctx)
	}
	if err != nil {
		t.Task.log.Warn("could not record the task's state; a restart will not resume it", "id", t.ID, "err", err)
	}
}

// Resume restarts the tasks recorded as running on shard 0 of any database
// of the running configuration (at the proxy's start). It returns the tasks
// it started and every problem it met.
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
			src, dst := cfg.Database(r.source), cfg.Database(r.dest)
			if src == nil || dst == nil {
				errs = append(errs, fmt.Errorf("task %s (%s → %s): a database is no longer configured", r.name, r.source, r.dest))
				continue
			}
			if sameShards(src, dst) {
				errs = append(errs, fmt.Errorf("task %s: %q already points at %q's shards (the proxy stopped during the cutover): "+
					"drop the slots %s_<n> and publications on the old source shards by hand", r.name, r.source, r.dest, r.name))
				continue
			}
			kind := KindReshard
			if r.kind == KindCopyData.String() {
				kind = KindCopyData
			}
			t, err := m.Start(kind, r.source, r.dest)
			if err != nil {
				errs = append(errs, fmt.Errorf("task %s: %w", r.name, err))
				continue
			}
			m.log.Info("task resumed", "id", t.ID, "kind", kind.String(), "source", r.source, "destination", r.dest)
			started = append(started, t)
		}
	}
	return started, errors.Join(errs...)
}

type taskRecord struct {
	name, kind, source, dest string
}

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
	rows, _ := conn.Query(ctx, `SELECT task, kind, source, destination FROM shardgate_reshard.tasks WHERE state = 'running' ORDER BY started`)
	var out []taskRecord
	var r taskRecord
	_, err = pgx.ForEachRow(rows, []any{&r.name, &r.kind, &r.source, &r.dest}, func() error {
		out = append(out, r)
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
