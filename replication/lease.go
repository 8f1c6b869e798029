package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Task leases: one proxy runs a task at a time, and another takes it over
// when that proxy dies.
//
// Proxies in front of the same databases all see a task's record
// (shardgate_reshard.tasks on destination shard 0: persist.go). The proxy
// that runs a task holds its lease: a session-level advisory lock, keyed
// by the task's name, on a connection of its own to destination shard 0,
// for as long as the task runs. PostgreSQL releases the lock when that
// session ends — the proxy stopped, crashed or lost the shard — and every
// proxy's Manager tries, every leaseRetry, to take the lease of each
// recorded running task it does not run (Watch): the first to get it
// resumes the task where its record says. A proxy that loses its lease's
// session takes it again as soon as it can (keep) — the task itself retries
// through a destination restart — and stops the task if another proxy got
// it first, so that two proxies do not run one task for longer than that;
// the stream's slot and the destinations' replication origins refuse a
// second runner anyway.

// leaseRetry is how often Watch looks for tasks without a runner, and
// how often a runner checks that it still holds its lease.
const leaseRetry = 2 * time.Second

// errLeaseHeld is Start's error for a task another proxy runs.
var errLeaseHeld = errors.New("another proxy runs this task")

// lease is a held task lease.
type lease struct {
	once sync.Once
	mu   sync.Mutex // guards conn and pid, replaced when keep takes the lease again
	conn *pgx.Conn
	pid  uint32 // the backend of conn's session
}

// acquireLease takes the lease of task, or returns errLeaseHeld.
func (t *Task) acquireLease(ctx context.Context) (*lease, error) {
	// A plain session (not connectDest): a lease taken again while the
	// task drops its bookkeeping must not create the schema anew.
	conn, err := t.connect(ctx, t.dst, 0)
	if err != nil {
		return nil, err
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1)::bigint)", leaseKey(t)).Scan(&got); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("task lease: %w", err)
	}
	if !got {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("task %s: %w", t.Name, errLeaseHeld)
	}
	return &lease{conn: conn, pid: conn.PgConn().PID()}, nil
}

// recordState is what the task's row (shardgate_reshard.tasks on
// destination shard 0) says about who has the task.
type recordState struct {
	found   bool // the row exists (the drop after a cutover deletes it last)
	running bool // its state is "running"
	cutOver bool // a cutover recorded the source's shards (source_shards)
}

// wanted reports whether the record asks for a runner: the task runs, or
// a cutover's drop is to be finished.
func (r recordState) wanted() bool { return r.found && (r.running || r.cutOver) }

// rowQuerier is a session or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readRecord reads task name's row through q; a bookkeeping schema that
// is gone (dropped after a cutover) is a row that is gone.
func readRecord(ctx context.Context, q rowQuerier, name string) (recordState, error) {
	var r recordState
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('shardgate_reshard.tasks') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return r, err
	}
	err := q.QueryRow(ctx, `SELECT state = 'running', source_shards IS NOT NULL FROM shardgate_reshard.tasks WHERE task = $1`,
		name).Scan(&r.running, &r.cutOver)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	r.found = err == nil
	return r, err
}

// recordNow reads the task's row in a plain session of its own (not
// connectDest, which would create the bookkeeping schema that another
// runner's drop removed), within 5 s.
func (t *Task) recordNow(ctx context.Context) (recordState, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := t.connect(cctx, t.dst, 0)
	if err != nil {
		return recordState{}, err
	}
	defer conn.Close(context.WithoutCancel(cctx))
	return readRecord(cctx, conn, t.Name)
}

// stillRecorded fails with errLeaseHeld when task t's record no longer asks
// for a runner (it finished, or was stopped, meanwhile): Resume then
// leaves it alone, as for a task another proxy runs.
func stillRecorded(ctx context.Context, conn *pgx.Conn, t *Task) error {
	r, err := readRecord(ctx, conn, t.Name)
	switch {
	case err != nil:
		return fmt.Errorf("task lease: read the record: %w", err)
	case !r.wanted():
		return fmt.Errorf("task %s finished meanwhile: %w", t.Name, errLeaseHeld)
	}
	return nil
}

// cutOverElsewhere reports whether another run of the task cut over: the
// task's record names the source's shards of a cutover, or is gone. A run
// that took the task over while the earlier one was cutting over finds
// the slots dropped then (claim.go).
func (t *Task) cutOverElsewhere(ctx context.Context) bool {
	r, err := t.recordNow(ctx)
	return err == nil && (!r.found || r.cutOver)
}

// leaseKey is the text whose hash keys the advisory lock of t's lease.
func leaseKey(t *Task) string { return "shardgate-task:" + t.Name }

// reacquire takes the lease again after its session was lost. The old
// session may outlive its connection for a moment on the server (the
// server has not noticed the connection is gone): it is ended first, and
// the lock is tried a few times, so that only another proxy's session
// makes the lease lost.
func (l *lease) reacquire(ctx context.Context, t *Task, old uint32) (*lease, error) {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		var again *lease
		if again, err = t.acquireLease(ctx); err == nil || !errors.Is(err, errLeaseHeld) {
			return again, err
		}
		if conn, cerr := t.connect(ctx, t.dst, 0); cerr == nil {
			conn.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(old))
			conn.Close(context.WithoutCancel(ctx))
		}
	}
	return nil, err
}

// keep checks the lease of t every leaseRetry until ctx ends. When its
// session is gone it takes the lease again; lost is called (once) when
// another proxy holds it by then.
func (l *lease) keep(ctx context.Context, t *Task, lost func(error)) {
	tick := time.NewTicker(leaseRetry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		conn, pid := l.conn, l.pid
		l.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 3*leaseRetry)
		err := conn.Ping(pctx)
		if err != nil && ctx.Err() == nil {
			conn.Close(context.WithoutCancel(pctx))
			var again *lease
			if again, err = l.reacquire(pctx, t, pid); err == nil {
				l.mu.Lock()
				l.conn, l.pid = again.conn, again.pid
				l.mu.Unlock()
			}
		}
		cancel()
		if errors.Is(err, errLeaseHeld) {
			lost(err)
			return
		}
	}
}

// release gives the lease up (closing its session releases the lock).
func (l *lease) release() {
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.conn.Close(ctx)
	})
}

// Watch resumes, every leaseRetry until ctx ends, the recorded running
// tasks whose lease is free: tasks of a proxy that died. It returns when
// ctx ends.
func (m *Manager) Watch(ctx context.Context) {
	tick := time.NewTicker(leaseRetry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		started, err := m.Resume(ctx)
		for _, t := range started {
			m.log.Info("took over a task whose proxy stopped", "id", t.ID, "task", t.Task.Name)
		}
		if err != nil && ctx.Err() == nil {
			m.log.Debug("looking for tasks to take over", "err", err)
		}
	}
}
