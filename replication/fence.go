package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// Fencing the source of a cutover.
//
// Another proxy in front of the same source database may not learn of a
// cutover in time (it was down, partitioned, or stopped), and would go on
// writing to the source shards, where nobody reads any more: lost writes.
// So, once this proxy has paused the source and before the final
// catch-up, the cutover fences every source shard that is not also a
// destination: new sessions of the source database are read-only
// (ALTER DATABASE … SET default_transaction_read_only = on) and every
// client session open on it is terminated — and waited for until it has
// exited (endSessions) — except the task's own
// (application_name shardgate-reshard), the cluster's control sessions
// (shardgate-cluster…: the default control database is shard 0 of the
// first database, which may be this source) and this proxy's server
// connections (paused at its gate; after the switch they move their
// sessions to the new shards or close). From then on a write there fails
// (25006) or its connection is gone (57P01) — it never commits — and
// every write that committed before is caught up before the switch. An
// aborted cutover lifts the fence; after a completed one the source stays
// fenced (docs/resharding.md says how to lift it).
//
// The fence stops applications and proxies that do not work against it:
// a session may still SET default_transaction_read_only = off or BEGIN
// READ WRITE, and a superuser's sessions are not refused.

// taskAppName is the application_name of the task's own connections.
const taskAppName = "shardgate-reshard"

// fencedSources returns the source shards a cutover fences: those whose
// database is not also a destination shard's.
func (t *Task) fencedSources() []int {
	var out []int
	for s := range t.src.Shards {
		if !sameDatabase(t.src, s, t.dst) {
			out = append(out, s)
		}
	}
	return out
}

// sameDatabase reports whether shard s of db is the database of a shard of
// other.
func sameDatabase(db *config.Database, s int, other *config.Database) bool {
	a := shardTarget(db, s)
	for d := range other.Shards {
		if shardTarget(other, d) == a {
			return true
		}
	}
	return false
}

// shardTarget is the server and database of shard i of db.
func shardTarget(db *config.Database, i int) string {
	sh := &db.Shards[i]
	port := sh.Port
	if port == 0 {
		port = 5432
	}
	return fmt.Sprintf("%s:%d/%s", sh.Host, port, shardDatabase(db, i))
}

// Fence makes the source shards refuse writes (see above); spare(s) are
// the backend pids on source shard s that keep their sessions. It returns
// the last catch-up's target per source shard: on a fenced shard, the
// WAL's flush position after the fence (see fenceShard); on a source shard
// that is also a destination, which is not fenced, 0 (the caller takes
// CurrentLSN).
func (t *Task) Fence(ctx context.Context, spare func(s int) []uint32) ([]pglogrepl.LSN, error) {
	var errs []error
	target := make([]pglogrepl.LSN, len(t.src.Shards))
	for _, s := range t.fencedSources() {
		lsn, err := t.fenceShard(ctx, s, true, spare(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("fence %s: %w", shardDesc("source", t.src, s), err))
		}
		target[s] = lsn
	}
	return target, errors.Join(errs...)
}

// Unfence lifts Fence: after an aborted cutover, and when a task that has
// not cut over resumes (in its claim: the proxy may have died between the
// fence and the switch; claim.go says who may lift a fence) or stops.
func (t *Task) Unfence(ctx context.Context) error {
	var errs []error
	for _, s := range t.fencedSources() {
		if _, err := t.fenceShard(ctx, s, false, nil); err != nil {
			errs = append(errs, fmt.Errorf("unfence %s: %w", shardDesc("source", t.src, s), err))
		}
	}
	return errors.Join(errs...)
}

// fenceShard fences (on) or unfences source shard s. Fencing returns the
// WAL's flush position once the fence is up: every source transaction
// that committed before it ends there or earlier, and the walsender can
// send all of it at once, so the last catch-up waits for the stream only.
func (t *Task) fenceShard(ctx context.Context, s int, on bool, spare []uint32) (pglogrepl.LSN, error) {
	conn, err := t.connectSource(ctx, s)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	db := pgx.Identifier{shardDatabase(t.src, s)}.Sanitize()
	if !on {
		// Only a fenced database is touched (ALTER needs its owner).
		var fenced bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
			WHERE d.datname = current_database() AND s.setrole = 0 AND 'default_transaction_read_only=on' = ANY (s.setconfig))`).Scan(&fenced); err != nil || !fenced {
			return 0, err
		}
		_, err := conn.Exec(ctx, "ALTER DATABASE "+db+" RESET default_transaction_read_only")
		return 0, err
	}
	// The fence's commits flush the WAL (synchronous_commit = local
	// whatever the server's, role's or database's setting): every source
	// transaction that committed before them, asynchronously too, is then
	// on disk, where the walsender reads. The target is the flush position
	// after the second commit, not the write position
	// (pg_current_wal_lsn()): that may be short of a commit that a client
	// had been told of (with synchronous_commit = off the cutover lost it,
	// TestReshardCutoverAsyncCommit), or ahead of the flush position by
	// other sessions' asynchronous WAL, which the walsender sends only
	// after the WAL writer's next cycles (up to 0.5 s of the pause at 200
	// writes/s in bench/reshard.sh).
	if _, err := conn.Exec(ctx, "SET synchronous_commit = local"); err != nil {
		return 0, err
	}
	alter := "ALTER DATABASE " + db + " SET default_transaction_read_only = on"
	if _, err := conn.Exec(ctx, alter); err != nil {
		return 0, err
	}
	// Sessions opened before the ALTER keep their setting: end them, and
	// wait until they are gone (endSessions).
	if err := endSessions(ctx, conn, spare); err != nil {
		return 0, err
	}
	// Again, synchronously: what an ended session committed before it
	// ended is flushed too.
	if _, err := conn.Exec(ctx, alter); err != nil {
		return 0, err
	}
	var flushed string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(flushed)
}

// endSessions terminates every client session of the connection's
// database except conn's own, the task's, the cluster's control sessions
// and the backends spare, and returns once all of them have exited.
// pg_terminate_backend only signals: a backend that is committing, or is
// stopped, ends later, and what it committed after the fence's flush
// position would not be caught up — a write lost at the switch. So the
// fence waits; a session that outlives ctx (the cutover's timeout) fails
// the fence, which aborts the cutover and lifts it. A backend is known by
// its pid and start time, so that a pid reused by a new (read-only)
// session is not waited for. (pg_terminate_backend's own timeout polls
// every 100 ms, which would add as much to every cutover's pause.)
func endSessions(ctx context.Context, conn *pgx.Conn, spare []uint32) error {
	pids := make([]int64, len(spare))
	for k, p := range spare {
		pids[k] = int64(p)
	}
	var ended []int64
	var started []time.Time
	if err := conn.QueryRow(ctx, `WITH s AS MATERIALIZED (SELECT pid, backend_start FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
		AND application_name <> $1 AND application_name NOT LIKE 'shardgate-cluster%' AND pid <> ALL ($2::int8[]))
		SELECT coalesce(array_agg(pid), '{}'), coalesce(array_agg(backend_start), '{}') FROM s WHERE pg_terminate_backend(pid)`,
		taskAppName, pids).Scan(&ended, &started); err != nil {
		return fmt.Errorf("ending the sessions: %w", err)
	}
	left := ended
	gone := func() error {
		return fmt.Errorf("%d terminated sessions (pids %v) did not exit: %w", len(left), left, context.Cause(ctx))
	}
	for wait := time.Millisecond; len(left) > 0; wait = min(2*wait, 50*time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(a.pid), '{}') FROM pg_stat_activity a
			JOIN unnest($1::int8[], $2::timestamptz[]) e(pid, started) ON a.pid = e.pid AND a.backend_start = e.started`,
			ended, started).Scan(&left); err != nil {
			if ctx.Err() != nil {
				return gone()
			}
			return fmt.Errorf("waiting for the ended sessions to exit: %w", err)
		}
		if len(left) == 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return gone()
		case <-t.C:
		}
	}
	return nil
}

// shardDatabase is the database name of shard i of db.
func shardDatabase(db *config.Database, i int) string {
	if name := db.Shards[i].Database; name != "" {
		return name
	}
	return db.Name
}
