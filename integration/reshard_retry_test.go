package integration

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// retryEnv is a source cluster (app: one shard) and a destination cluster
// (app_new: two shards) with a COPY_DATA task streaming between them.
type retryEnv struct {
	sc, dc *pgtest.Cluster
	src    *pgx.Conn
	adm    *pgx.Conn
	id     string
}

// startRetryEnv starts the clusters and the proxy and, with stream, the
// task, returning once it streams.
func startRetryEnv(t *testing.T, ctx context.Context, stream bool, setup ...func(*operated)) *retryEnv {
	opts := pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret"}
	srcOpts := opts
	srcOpts.Settings = map[string]string{"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10"}
	e := &retryEnv{sc: pgtest.New(t, srcOpts), dc: pgtest.New(t, opts)}
	if err := e.sc.CreateDatabase(ctx, "app_0"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"app_new_0", "app_new_1"} {
		if err := e.dc.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	e.src = reshardConnect(t, ctx, e.sc.DSN("app_0"))
	reshardExec(t, ctx, e.src, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, i % 7 FROM generate_series(1, 2000) i`)
	o := startOperated(t, reshardYAML("listen: 127.0.0.1:0\nadmin: { user: admin, password: admin-secret }", e.sc, accountsRule,
		[]string{shardYAML(e.sc, "app_0")}, []string{shardYAML(e.dc, "app_new_0"), shardYAML(e.dc, "app_new_1")}), setup...)
	e.adm = connect(t, o.AdminURL())
	if stream {
		e.start(t)
		e.waitPhase(t, "stream")
	}
	return e
}

// start runs COPY_DATA app app_new.
func (e *retryEnv) start(t *testing.T) {
	t.Helper()
	tb, err := adminPgx(e.adm, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	e.id = tb.get(t, map[string]string{"source": "app"}, "id")
}

func (e *retryEnv) waitPhase(t *testing.T, phase string) {
	t.Helper()
	eventually(t, 60*time.Second, "task in phase "+phase, func() bool {
		state, p, errText := e.task(t)
		if state != "running" {
			t.Fatalf("task %s in phase %s: %s", state, p, errText)
		}
		return p == phase
	})
}

// task returns the task's state, phase and error from SHOW TASKS.
func (e *retryEnv) task(t *testing.T) (state, phase, errText string) {
	tasks, err := adminPgx(e.adm, "SHOW TASKS")
	if err != nil {
		t.Fatalf("SHOW TASKS: %v", err)
	}
	m := map[string]string{"id": e.id}
	return tasks.get(t, m, "state"), tasks.get(t, m, "phase"), tasks.get(t, m, "error")
}

// caughtUp waits until the destination shards hold the source's rows
// (count and sum).
func (e *retryEnv) caughtUp(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	dest := func() (n, sum int64, ok bool) {
		for _, db := range []string{"app_new_0", "app_new_1"} {
			conn, err := pgx.Connect(ctx, e.dc.DSN(db))
			if err != nil {
				return 0, 0, false
			}
			var c, s int64
			err = conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(id + balance), 0) FROM accounts").Scan(&c, &s)
			conn.Close(ctx)
			if err != nil {
				return 0, 0, false
			}
			n, sum = n+c, sum+s
		}
		return n, sum, true
	}
	eventually(t, 60*time.Second, what, func() bool {
		var wn, ws int64
		if err := e.src.QueryRow(ctx, "SELECT count(*), sum(id + balance) FROM accounts").Scan(&wn, &ws); err != nil {
			t.Fatal(err)
		}
		n, s, ok := dest()
		return ok && n == wn && s == ws
	})
}

// stop ends the task and checks it left no slot.
func (e *retryEnv) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := adminPgx(e.adm, "STOP_TASK "+e.id); err != nil {
		t.Fatal(err)
	}
	if n := countSlots(t, ctx, e.src); n != 0 {
		t.Errorf("%d slots left after STOP_TASK", n)
	}
}

// waitRetrying waits until SHOW TASKS reports a failed stream being
// retried whose error contains want, the task still running.
func (e *retryEnv) waitRetrying(t *testing.T, want string) {
	t.Helper()
	eventually(t, 30*time.Second, "SHOW TASKS reporting the retries", func() bool {
		state, _, errText := e.task(t)
		if state != "running" {
			t.Fatalf("task %s while its stream fails (error %q)", state, errText)
		}
		return strings.Contains(errText, "retrying") && strings.Contains(errText, want)
	})
}

// TestReshardStreamSurvivesDestinationCrash: the destination's PostgreSQL
// crashes while a task streams and writes go on at the source; the task
// keeps running, says in SHOW TASKS that it retries, and once the
// destination is back it applies every write exactly once.
func TestReshardStreamSurvivesDestinationCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	e := startRetryEnv(t, ctx, true)
	reshardExec(t, ctx, e.src, `INSERT INTO accounts SELECT i, 1 FROM generate_series(2001, 2100) i`)
	e.caughtUp(t, ctx, "the destination has the rows written before the crash")

	if err := e.dc.Kill(); err != nil {
		t.Fatal(err)
	}
	reshardExec(t, ctx, e.src, `INSERT INTO accounts SELECT i, 2 FROM generate_series(2101, 2300) i;
UPDATE accounts SET balance = balance + 10 WHERE id % 10 = 0;
DELETE FROM accounts WHERE id % 50 = 1`)
	e.waitRetrying(t, "")
	if err := e.dc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	reshardExec(t, ctx, e.src, `INSERT INTO accounts SELECT i, 3 FROM generate_series(2301, 2400) i`)
	e.caughtUp(t, ctx, "the destination catching up after its restart")
	if state, phase, errText := e.task(t); state != "running" || phase != "stream" {
		t.Errorf("after the restart: state %s phase %s error %q", state, phase, errText)
	}
	e.stop(t, ctx)
}

// TestReshardStreamAfterSourceDDL: a column added on the source while the
// task streams makes the apply fail with an error that says what to do;
// once the operator adds the column on the destination shards, the
// retried stream applies the held-up rows.
func TestReshardStreamAfterSourceDDL(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	e := startRetryEnv(t, ctx, true)
	reshardExec(t, ctx, e.src, `ALTER TABLE accounts ADD COLUMN note text;
INSERT INTO accounts SELECT i, 1, 'n' || i FROM generate_series(2001, 2100) i`)
	e.waitRetrying(t, "run the same DDL on every destination shard")
	for _, db := range []string{"app_new_0", "app_new_1"} {
		if err := e.dc.Exec(ctx, db, "ALTER TABLE accounts ADD COLUMN note text"); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp(t, ctx, "the rows with the new column")
	var notes int
	for _, db := range []string{"app_new_0", "app_new_1"} {
		conn := reshardConnect(t, ctx, e.dc.DSN(db))
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = 'n' || id").Scan(&n); err != nil {
			t.Fatal(err)
		}
		notes += n
	}
	if notes != 100 {
		t.Errorf("%d rows carry their note on the destination, want 100", notes)
	}
	e.stop(t, ctx)
}

// TestReshardStreamLargeTransaction: source transactions far larger than
// the applier's chunk (1000 changes per destination shard) arrive in
// several pieces applied into one open destination transaction, while
// small transactions commit between them on another connection; a large
// transaction rolled back on the source leaves nothing.
func TestReshardStreamLargeTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	e := startRetryEnv(t, ctx, true)
	other := reshardConnect(t, ctx, e.sc.DSN("app_0"))
	done := make(chan error, 1)
	go func() { // small transactions the whole time
		for i := 0; i < 300; i++ {
			if _, err := other.Exec(ctx, "INSERT INTO accounts VALUES ($1, 1)", 900000+i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reshardExec(t, ctx, e.src, `BEGIN;
INSERT INTO accounts SELECT i, 3 FROM generate_series(10001, 16000) i;
UPDATE accounts SET balance = balance + 100 WHERE id <= 3000;
DELETE FROM accounts WHERE id BETWEEN 14001 AND 15000;
UPDATE accounts SET balance = -1 WHERE id BETWEEN 15001 AND 16000;
COMMIT`)
	reshardExec(t, ctx, e.src, `BEGIN;
INSERT INTO accounts SELECT i, 4 FROM generate_series(20001, 25000) i;
UPDATE accounts SET balance = 0;
ROLLBACK`)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t, ctx, "the large transactions")
	if state, _, errText := e.task(t); state != "running" || errText != "" {
		t.Errorf("task %s, error %q", state, errText)
	}
	e.stop(t, ctx)
}

// TestReshardCopySurvivesDestinationCrash: the destination's PostgreSQL
// crashes while a table is being copied (held there by the test knob
// replication.Knobs.StallCopy); the task keeps running, retries the copy
// once the destination is back, and streams with every row exactly once.
func TestReshardCopySurvivesDestinationCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	var stall atomic.Bool
	stall.Store(true)
	e := startRetryEnv(t, ctx, false, func(o *operated) {
		o.Tasks.KnobsForTest.StallCopy = func(table string) bool { return stall.Load() && table == "public.accounts" }
	})
	e.start(t)
	eventually(t, 30*time.Second, "accounts being copied", func() bool {
		tb, err := adminPgx(e.adm, "SHOW TABLE_COPIES")
		if err != nil {
			t.Fatal(err)
		}
		r := tb.find(t, map[string]string{"table": "public.accounts"})
		return r != nil && r[tb.col(t, "state")] == "copying" && r[tb.col(t, "rows")] == "2000"
	})
	if err := e.dc.Kill(); err != nil {
		t.Fatal(err)
	}
	stall.Store(false) // the retried copy goes through
	reshardExec(t, ctx, e.src, `INSERT INTO accounts SELECT i, 2 FROM generate_series(2001, 2100) i`)
	e.waitRetrying(t, "copy")
	if err := e.dc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(t, "stream")
	reshardExec(t, ctx, e.src, `UPDATE accounts SET balance = balance + 1 WHERE id % 3 = 0`)
	e.caughtUp(t, ctx, "the destination after the retried copy")
	e.stop(t, ctx)
}

// TestReshardDropRetriedAfterCutover: the source's PostgreSQL goes down
// right after the switch, before the task drops its slot there. CUTOVER
// answers that it cut over (the proxy serves the new shards), the task
// keeps dropping, saying so in SHOW TASKS, and once the source is back
// the slot and publication are gone and the task is done.
func TestReshardDropRetriedAfterCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var sc *pgtest.Cluster
	var down atomic.Bool
	e := startRetryEnv(t, ctx, false, func(o *operated) {
		o.Tasks.KnobsForTest.AtCutoverStage = func(stage string) {
			if stage == "before-drop" && down.CompareAndSwap(false, true) {
				if err := sc.Kill(); err != nil {
					t.Errorf("kill the source: %v", err)
				}
			}
		}
	})
	sc = e.sc
	e.start(t)
	e.waitPhase(t, "stream")
	done, err := adminPgx(e.adm, "CUTOVER "+e.id)
	if err != nil {
		t.Fatalf("CUTOVER with the source gone after the switch: %v", err)
	}
	if st := done.get(t, map[string]string{"id": e.id}, "state"); st != "running" {
		t.Fatalf("after CUTOVER: task %s, want running (dropping)", st)
	}
	eventually(t, 30*time.Second, "SHOW TASKS reporting the drop's retries", func() bool {
		state, phase, errText := e.task(t)
		if state != "running" {
			t.Fatalf("task %s in phase %s while the source is down: %s", state, phase, errText)
		}
		return phase == "drop" && strings.Contains(errText, "drop failed") && strings.Contains(errText, "retrying")
	})
	if err := sc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the task to be done", func() bool {
		state, _, errText := e.task(t)
		if state == "failed" {
			t.Fatalf("task failed: %s", errText)
		}
		return state == "done"
	})
	src := reshardConnect(t, ctx, sc.DSN("app_0"))
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left on the source", n)
	}
	var pubs, schemas int
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_publication").Scan(&pubs); err != nil {
		t.Fatal(err)
	}
	if err := reshardConnect(t, ctx, e.dc.DSN("app_new_0")).QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'shardgate_reshard'").Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	if pubs+schemas != 0 {
		t.Errorf("left behind: %d publications on the source, %d bookkeeping schemas on the destination", pubs, schemas)
	}
}
