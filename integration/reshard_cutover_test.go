package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// TestReshardCutover moves database app (one shard) to app_new's two
// shards through the admin database while a client keeps writing through
// the proxy, and checks that after the automatic cutover every acknowledged
// write is on the new shards exactly once, new writes go there, the slots
// are gone and the config file maps app to the new shards.
func TestReshardCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	adm := connect(t, o.AdminURL())

	w := startCutoverWriter(t, o.AppURL("app"))
	eventually(t, 10*time.Second, "the writer's first acknowledged write", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.acked) > 0
	})

	start := time.Now()
	tb, err := adminPgx(adm, "RESHARD app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	var final []string
	sawStream := false
	for final == nil {
		if ctx.Err() != nil {
			t.Fatalf("task %s did not finish: %v", id, ctx.Err())
		}
		tasks, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			t.Fatal(err)
		}
		row := tasks.find(t, map[string]string{"id": id})
		if row == nil {
			t.Fatalf("task %s not in SHOW TASKS: %v", id, tasks.rows)
		}
		state, phase := row[tasks.col(t, "state")], row[tasks.col(t, "phase")]
		switch state {
		case "done":
			w.cutOver.Store(true)
			final = row
			continue
		case "failed", "stopped":
			t.Fatalf("task %s %s: %v", id, state, row)
		}
		if phase == "stream" && !sawStream {
			sawStream = true
			repl, err := adminPgx(adm, "SHOW REPLICATION")
			if err != nil {
				t.Fatalf("SHOW REPLICATION: %v", err)
			}
			t.Logf("SHOW REPLICATION: %v %v", repl.cols, repl.rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("task %s done in %v: %v", id, time.Since(start), final)
	// The pause in SHOW TASKS is the one the metric observed.
	pause := taskPause(t, adm, id)
	if sum := checkCutoverPauseMetric(t, o.MetricsAddr, "app", "done", 1, 10*time.Second); sum.Microseconds() != pause.Microseconds() {
		t.Errorf("shardgate_reshard_cutover_pause_seconds sums to %v, SHOW TASKS says the pause was %v", sum, pause)
	}
	copies, err := adminPgx(adm, "SHOW TABLE_COPIES")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SHOW TABLE_COPIES: %v", copies.rows)
	if n := copies.num(t, map[string]string{"table": "public.accounts"}, "rows"); n < 2000 {
		t.Errorf("SHOW TABLE_COPIES: accounts copied %d rows, want at least 2000", n)
	}

	// Writes keep going on the new shards after the cutover.
	time.Sleep(500 * time.Millisecond)
	w.stop()
	acked, uncertain, updates := w.results()
	t.Logf("writer: %d inserts acknowledged, %d in doubt, %d updates acknowledged, %d errors",
		len(acked), len(uncertain), updates, w.errors)
	if w.afterCutover == 0 {
		t.Errorf("the writer made no acknowledged write after the cutover")
	}

	dsts := []*pgx.Conn{reshardConnect(t, ctx, c.DSN("app_new_0")), reshardConnect(t, ctx, c.DSN("app_new_1"))}
	type placed struct {
		shard, balance int
	}
	rows := map[int64][]placed{}
	total := 0
	for d, conn := range dsts {
		rs, _ := conn.Query(ctx, "SELECT id, balance FROM accounts")
		var id int64
		var balance int
		_, err := pgx.ForEachRow(rs, []any{&id, &balance}, func() error {
			rows[id] = append(rows[id], placed{d, balance})
			total++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var countries int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM countries").Scan(&countries); err != nil || countries != 10 {
			t.Errorf("destination shard %d: %d countries (%v), want 10", d, countries, err)
		}
	}
	bad := 0
	for id, ps := range rows {
		if len(ps) != 1 {
			t.Errorf("id %d is on %d shards", id, len(ps))
			continue
		}
		if want := shardOf(t, id, 2); ps[0].shard != want {
			bad++
			if bad < 5 {
				t.Errorf("id %d is on shard %d, its hash names shard %d", id, ps[0].shard, want)
			}
		}
	}
	for id := int64(1); id <= 2000; id++ {
		if len(rows[id]) != 1 {
			t.Errorf("initial id %d: on %d shards", id, len(rows[id]))
		}
	}
	for id, n := range acked {
		ps := rows[id]
		if len(ps) != 1 {
			t.Errorf("acknowledged insert %d: on %d shards", id, len(ps))
			continue
		}
		if b := ps[0].balance; b < n || b > n+uncertain[id] {
			t.Errorf("id %d: balance %d, want %d acknowledged updates (+%d in doubt)", id, b, n, uncertain[id])
		}
	}
	// Through the proxy, app is the new shards.
	app := connect(t, o.AppURL("app"))
	var viaProxy int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM accounts", pgx.QueryExecModeSimpleProtocol).Scan(&viaProxy); err != nil {
		t.Fatal(err)
	}
	if viaProxy != total {
		t.Errorf("through the proxy: %d accounts, directly on the new shards: %d", viaProxy, total)
	}
	for id := int64(5_000_001); id <= 5_000_020; id++ {
		if _, err := app.Exec(ctx, "INSERT INTO accounts VALUES ($1, 0, 'after')", pgx.QueryExecModeSimpleProtocol, id); err != nil {
			t.Fatal(err)
		}
		want := shardOf(t, id, 2)
		var n int
		if err := dsts[want].QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = $1", id).Scan(&n); err != nil || n != 1 {
			t.Errorf("new insert %d: %d rows on shard %d (%v)", id, n, want, err)
		}
	}

	src = reconnected(t, ctx, src) // the cutover fenced the source
	var slots int
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("%d replication slots left on the source", slots)
	}
	cfg, err := config.Load(o.File)
	if err != nil {
		t.Fatalf("the rewritten config file does not load: %v", err)
	}
	db := cfg.Database("app")
	if len(db.Shards) != 2 || db.Shards[0].Database != "app_new_0" || db.Shards[1].Database != "app_new_1" {
		t.Errorf("config file: app has shards %+v", db.Shards)
	}
	if got := o.Listener.State().Config.Database("app"); len(got.Shards) != 2 {
		t.Errorf("running config: app has %d shards", len(got.Shards))
	}
	backups, _ := filepath.Glob(o.File + ".bak-*")
	if len(backups) != 1 {
		t.Errorf("backups: %v", backups)
	} else if old, err := config.Load(backups[0]); err != nil || len(old.Database("app").Shards) != 1 {
		t.Errorf("backup %s: %v", backups[0], err)
	}
}

// startCutoverEnv starts PostgreSQL with databases app_0 (the source's one
// shard, with accounts and countries filled) and app_new_0/1 (empty), and
// an operated proxy whose config file has app (one shard) and app_new (two).
func startCutoverEnv(t *testing.T, ctx context.Context) (*pgtest.Cluster, *operated, *pgx.Conn) {
	return startCutoverEnvMode(t, ctx, "transaction")
}

// startCutoverEnvMode is startCutoverEnv with pool mode mode.
func startCutoverEnvMode(t *testing.T, ctx context.Context, mode string) (*pgtest.Cluster, *operated, *pgx.Conn) {
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	for _, db := range []string{"app_0", "app_new_0", "app_new_1"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	src := reshardConnect(t, ctx, c.DSN("app_0"))
	reshardExec(t, ctx, src, `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO accounts SELECT i, 0, 'initial' FROM generate_series(1, 2000) i;
INSERT INTO countries SELECT 'c'||i, 'country '||i FROM generate_series(1, 10) i`)

	o := startOperated(t, cutoverYAMLMode(c, mode))
	return c, o, src
}

// cutoverYAML is the configuration of startCutoverEnv's proxy: database
// app on app_0, app_new on app_new_0 and app_new_1, transaction pooling.
func cutoverYAML(c *pgtest.Cluster) string { return cutoverYAMLMode(c, "transaction") }

// cutoverYAMLMode is cutoverYAML in pool mode mode.
func cutoverYAMLMode(c *pgtest.Cluster, mode string) string {
	shard := func(name string) string {
		return fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, name)
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: 10, checkout_timeout: 5s }
limits: { client_login_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
    omni_tables: [countries]
  - name: app_new
    shards: [%s, %s]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
    omni_tables: [countries]
`, mode, appPassword, c.User, c.Password, shard("app_0"), shard("app_new_0"), shard("app_new_1"))
}

// cutoverWriter inserts and updates accounts through the proxy, one
// statement per transaction, reconnecting after errors.
type cutoverWriter struct {
	quit chan struct{}
	wg   sync.WaitGroup

	mu           sync.Mutex
	acked        map[int64]int // acknowledged insert → acknowledged updates
	uncertain    map[int64]int // insert or update in doubt (error)
	updates      int
	errors       int
	afterCutover int         // acknowledged writes that started after the task was done
	cutOver      atomic.Bool // set by the test once SHOW TASKS says done
}

func (w *cutoverWriter) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	w.wg.Wait()
}

func (w *cutoverWriter) results() (acked, uncertain map[int64]int, updates int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.uncertain, w.updates
}

func startCutoverWriter(t *testing.T, url string) *cutoverWriter {
	w := &cutoverWriter{quit: make(chan struct{}), acked: map[int64]int{}, uncertain: map[int64]int{}}
	ctx := context.WithoutCancel(t.Context())
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(ctx)
			}
		}()
		var ids []int64
		next := int64(1_000_000)
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			if conn == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				var err error
				conn, err = pgx.Connect(cctx, url)
				cancel()
				if err != nil {
					conn = nil
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			var err error
			sharded := w.cutOver.Load() // the task was done before this write
			if i%3 == 2 && len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				var tag interface{ RowsAffected() int64 }
				tag, err = conn.Exec(qctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", pgx.QueryExecModeSimpleProtocol, id)
				w.mu.Lock()
				if err == nil && tag.RowsAffected() == 1 {
					w.acked[id]++
					w.updates++
				} else {
					w.uncertain[id]++
				}
				w.mu.Unlock()
			} else {
				next++
				_, err = conn.Exec(qctx, "INSERT INTO accounts VALUES ($1, 0, 'w')", pgx.QueryExecModeSimpleProtocol, next)
				w.mu.Lock()
				if err == nil {
					w.acked[next] = 0
					ids = append(ids, next)
				} else {
					w.uncertain[next]++
				}
				w.mu.Unlock()
			}
			cancel()
			w.mu.Lock()
			if err != nil {
				w.errors++
			} else if sharded {
				w.afterCutover++
			}
			w.mu.Unlock()
			if err != nil {
				conn.Close(ctx)
				conn = nil
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// waitTask polls a managed task until cond holds, failing when it stops
// running first.
func waitTask(t *testing.T, ctx context.Context, task *replication.Managed, what string, cond func(replication.TaskInfo) bool) replication.TaskInfo {
	t.Helper()
	for {
		i := task.Info()
		if cond(i) {
			return i
		}
		if i.State != replication.TaskRunning {
			t.Fatalf("task %d %s (phase %s, err %v) while waiting for %s", i.ID, i.State, i.Phase, i.Err, what)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (task in phase %s)", what, ctx.Err(), i.Phase)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func countSlots(t *testing.T, ctx context.Context, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReshardResume streams with one manager (COPY_DATA), stops it as a
// proxy shutdown does, resumes the recorded task with a new manager, and
// cuts over by hand (CUTOVER).
func TestReshardResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	gate := o.Gate

	m1 := replication.NewManager(gate, log)
	t1, err := m1.Start(replication.KindCopyData, "app", "app_new")
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, ctx, t1, "streaming", func(i replication.TaskInfo) bool { return i.Phase == replication.PhaseStream })
	m1.Close()
	if n := countSlots(t, ctx, src); n != 1 {
		t.Fatalf("after the manager closed: %d slots on the source, want 1", n)
	}
	// Written while no proxy streams: the resumed stream applies it.
	reshardExec(t, ctx, src, "INSERT INTO accounts SELECT i, 7, 'while down' FROM generate_series(3001, 3100) i")

	m2 := replication.NewManager(gate, log)
	resumed, err := m2.Resume(ctx)
	if err != nil || len(resumed) != 1 {
		t.Fatalf("resume: %d tasks, %v", len(resumed), err)
	}
	t2 := resumed[0]
	if t2.Kind != replication.KindCopyData {
		t.Errorf("resumed task kind %s, want copy_data", t2.Kind)
	}
	waitTask(t, ctx, t2, "streaming", func(i replication.TaskInfo) bool { return i.Phase == replication.PhaseStream })
	if _, err := m2.Cutover(ctx, 0); err != nil {
		t.Fatalf("cutover: %v", err)
	}
	i := waitTask(t, ctx, t2, "done", func(i replication.TaskInfo) bool { return i.State == replication.TaskDone })
	t.Logf("cut over after %v, traffic paused %v", i.Elapsed, i.Pause)

	var n, sum int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		conn := reshardConnect(t, ctx, c.DSN(db))
		var dn, ds int64
		if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(balance), 0) FROM accounts").Scan(&dn, &ds); err != nil {
			t.Fatal(err)
		}
		n, sum = n+dn, sum+ds
	}
	if n != 2100 || sum != 700 {
		t.Errorf("new shards: %d accounts with balance sum %d, want 2100 and 700", n, sum)
	}
	src = reconnected(t, ctx, src) // the cutover fenced the source
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left on the source", n)
	}
	cfg, err := config.Load(o.File)
	if err != nil || len(cfg.Database("app").Shards) != 2 {
		t.Errorf("config file after cutover: %v", err)
	}
	// Nothing is left to resume.
	if again, err := replication.NewManager(gate, log).Resume(ctx); err != nil || len(again) != 0 {
		t.Errorf("second resume: %d tasks, %v", len(again), err)
	}
}

// TestReshardStopTask runs COPY_DATA through the admin database and stops
// it with STOP_TASK: no slot stays and the configuration is unchanged.
func TestReshardStopTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	_, o, src := startCutoverEnv(t, ctx)
	adm := connect(t, o.AdminURL())
	if _, err := adminPgx(adm, "SET reshard_cutover_timeout = '5s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPgx(adm, "SET reshard_max_lag_bytes = lots"); sqlstate(err) != wire.InvalidParameterValue {
		t.Errorf("SET reshard_max_lag_bytes = lots: %v", err)
	}
	for _, bad := range []string{"0", "65", "two"} {
		if _, err := adminPgx(adm, "SET reshard_copy_parallelism = "+bad); sqlstate(err) != wire.InvalidParameterValue {
			t.Errorf("SET reshard_copy_parallelism = %s: %v", bad, err)
		}
	}
	if _, err := adminPgx(adm, "SET reshard_copy_parallelism = 1"); err != nil {
		t.Errorf("SET reshard_copy_parallelism = 1: %v", err)
	}
	tb, err := adminPgx(adm, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	if _, err := adminPgx(adm, "COPY_DATA app app_new"); err == nil {
		t.Errorf("a second COPY_DATA of the same databases was accepted")
	}
	eventually(t, 30*time.Second, "task streaming", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	repl, err := adminPgx(adm, "SHOW REPLICATION")
	if err != nil || len(repl.rows) != 1 {
		t.Fatalf("SHOW REPLICATION: %v %v", repl, err)
	}
	stopped, err := adminPgx(adm, "STOP_TASK "+id)
	if err != nil {
		t.Fatal(err)
	}
	if st := stopped.get(t, map[string]string{"id": id}, "state"); st != "stopped" {
		t.Errorf("after STOP_TASK: state %s", st)
	}
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left after STOP_TASK", n)
	}
	if _, err := adminPgx(adm, "CUTOVER "+id); err == nil {
		t.Errorf("CUTOVER of a stopped task succeeded")
	}
	if _, err := adminPgx(adm, "STOP_TASK 99"); sqlstate(err) != wire.UndefinedObject {
		t.Errorf("STOP_TASK of an unknown task: %v", err)
	}
	cfg, err := config.Load(o.File)
	if err != nil || len(cfg.Database("app").Shards) != 1 {
		t.Errorf("config file after STOP_TASK: %v", err)
	}
}

// TestReshardDataSyncCLI runs `proxy schema-sync` and `proxy data-sync`:
// the copy, then the stream applies a later insert, progress lines are
// printed, and Ctrl-C leaves the slot for a later run.
func TestReshardDataSyncCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	bin := buildProxy(t)
	if out, err := exec.CommandContext(ctx, bin, "schema-sync", "-config", o.File, "app", "app_new").CombinedOutput(); err != nil {
		t.Fatalf("schema-sync: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, bin, "data-sync", "-config", o.File, "-parallel", "0", "app", "app_new").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "-parallel must be from 1 to 64") {
		t.Errorf("data-sync -parallel 0: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, bin, "data-sync", "-config", o.File, "-slot", "Bad-Name", "app", "app_new").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "only lower-case letters, digits and underscores") {
		t.Errorf("data-sync -slot Bad-Name: %v\n%s", err, out)
	}
	reshardExec(t, ctx, src, "CREATE PUBLICATION cli_pub FOR ALL TABLES")
	cmd := exec.CommandContext(ctx, bin, "data-sync", "-config", o.File, "-progress", "200ms",
		"-parallel", "1", "-publication", "cli_pub", "-slot", "cli_slot", "app", "app_new")
	var stdout, stderr bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout = lockedWriter{&mu, &stdout}
	cmd.Stderr = lockedWriter{&mu, &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	dst := []*pgx.Conn{reshardConnect(t, ctx, c.DSN("app_new_0")), reshardConnect(t, ctx, c.DSN("app_new_1"))}
	count := func(where string) int {
		n := 0
		for _, conn := range dst {
			var k int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE "+where).Scan(&k); err != nil {
				return -1
			}
			n += k
		}
		return n
	}
	eventually(t, 30*time.Second, "the copy", func() bool { return count("true") == 2000 })
	reshardExec(t, ctx, src, "INSERT INTO accounts VALUES (424242, 1, 'streamed')")
	eventually(t, 30*time.Second, "the streamed insert", func() bool { return count("id = 424242") == 1 })
	eventually(t, 10*time.Second, "a progress line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(stdout.String(), "tables 2/2 done") && strings.Contains(stdout.String(), "lag")
	})
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		mu.Lock()
		t.Fatalf("data-sync: %v\n%s", err, stderr.String())
	}
	var slot string
	if err := src.QueryRow(ctx, "SELECT string_agg(slot_name, ',') FROM pg_replication_slots").Scan(&slot); err != nil || slot != "cli_slot" {
		t.Errorf("after Ctrl-C: slots %q (%v), want cli_slot, kept for a later run", slot, err)
	}
	var pubs string
	if err := src.QueryRow(ctx, "SELECT string_agg(pubname, ',') FROM pg_publication").Scan(&pubs); err != nil || pubs != "cli_pub" {
		t.Errorf("publications %q (%v), want only the named cli_pub", pubs, err)
	}
	mu.Lock()
	t.Logf("progress: %s", strings.SplitN(stdout.String(), "\n", 2)[0])
	mu.Unlock()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestReshardCutoverAbort: a transaction that stays open holds the
// cutover's pause past reshard_cutover_timeout, so CUTOVER aborts, traffic
// resumes on the source and the task keeps streaming; once it ends, CUTOVER
// succeeds.
func TestReshardCutoverAbort(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	_, o, src := startCutoverEnv(t, ctx)
	adm := connect(t, o.AdminURL())
	if _, err := adminPgx(adm, "SET reshard_cutover_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}
	tb, err := adminPgx(adm, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	eventually(t, 30*time.Second, "task streaming", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	app := connect(t, o.AppURL("app"))
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = 5 WHERE id = 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	_, err = adminPgx(adm, "CUTOVER "+id)
	if sqlstate(err) != wire.ObjectInUse {
		t.Fatalf("CUTOVER with an open transaction: %v", err)
	}
	t.Logf("aborted: %v", err)
	// The aborted pause lasted the cutover timeout (1s), and the metric
	// counts it as aborted.
	if sum := checkCutoverPauseMetric(t, o.MetricsAddr, "app", "aborted", 1, 10*time.Second); sum < time.Second {
		t.Errorf("the aborted cutover's pause: %v, want at least the cutover timeout (1s)", sum)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the open transaction after the abort: %v", err)
	}
	other := connect(t, o.AppURL("app"))
	if _, err := other.Exec(ctx, "UPDATE accounts SET balance = 6 WHERE id = 2", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("a new transaction after the abort: %v", err)
	}
	// Session state the one-shard session carries over the cutover: a
	// setting and a prepared statement (pgx's statement cache).
	mustExec(t, other, "SET statement_timeout = '12345ms'")
	var balance int
	if err := other.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", 2).Scan(&balance); err != nil || balance != 6 {
		t.Fatalf("prepared statement before the cutover: %d, %v", balance, err)
	}
	tasks, err := adminPgx(adm, "SHOW TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if st, why := tasks.get(t, map[string]string{"id": id}, "state"), tasks.get(t, map[string]string{"id": id}, "error"); st != "running" || !strings.Contains(why, "aborted") {
		t.Errorf("after the abort: state %s, error %q", st, why)
	}
	if n := countSlots(t, ctx, src); n != 1 {
		t.Errorf("after the abort: %d slots, want 1", n)
	}
	eventually(t, 30*time.Second, "streaming again", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	done, err := adminPgx(adm, "CUTOVER "+id)
	if err != nil {
		t.Fatalf("second CUTOVER: %v", err)
	}
	if st := done.get(t, map[string]string{"id": id}, "state"); st != "done" {
		t.Errorf("after CUTOVER: state %s", st)
	}
	checkCutoverPauseMetric(t, o.MetricsAddr, "app", "done", 1, 10*time.Second)
	checkCutoverPauseMetric(t, o.MetricsAddr, "app", "aborted", 1, 10*time.Second)
	// app had one shard: its transaction-pooled session goes on as a
	// sharded one, with its setting and its prepared statement.
	if err := other.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", 2).Scan(&balance); err != nil || balance != 6 {
		t.Errorf("the session's prepared statement after the cutover: %d, %v; want 6", balance, err)
	}
	var timeout string
	if err := other.QueryRow(ctx, "SHOW statement_timeout", pgx.QueryExecModeSimpleProtocol).Scan(&timeout); err != nil || timeout != "12345ms" {
		t.Errorf("the session's setting after the cutover: %q, %v", timeout, err)
	}
	var rows int
	if err := other.QueryRow(ctx, "SELECT count(*) FROM accounts", pgx.QueryExecModeSimpleProtocol).Scan(&rows); err != nil || rows != 2000 {
		t.Errorf("the session's count(*) over the new shards: %d, %v; want 2000", rows, err)
	}
	var sum int
	if err := connect(t, o.AppURL("app")).QueryRow(ctx, "SELECT sum(balance) FROM accounts WHERE id IN (1, 2)", pgx.QueryExecModeSimpleProtocol).Scan(&sum); err != nil || sum != 11 {
		t.Errorf("through the proxy after the cutover: sum %d, %v; want 11", sum, err)
	}
	src = reconnected(t, ctx, src) // the cutover fenced the source
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("after CUTOVER: %d slots", n)
	}
}
