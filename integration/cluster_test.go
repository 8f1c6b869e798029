package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// Several proxies as one cluster (docs/cluster.md): a cutover on one
// pauses and switches all of them through the control database.

// clusterProxy is one proxy process of a cluster test.
type clusterProxy struct {
	name, addr, path string
	metricsAddr      string // host:port of its /metrics
	p                *proxyProcess
}

func (cp *clusterProxy) appURL() string {
	return fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, cp.addr)
}

func (cp *clusterProxy) admin(t *testing.T) *pgx.Conn {
	return connect(t, fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", cp.addr))
}

// startClusterEnv starts PostgreSQL with app_0 (filled, the source) and
// app_new_0/1 (empty), and proxy processes named names, each with its own
// file: cutoverYAML plus a cluster section whose control database is
// control ("" for the default: shard 0 of the first database, app_0).
func startClusterEnv(t *testing.T, ctx context.Context, control string, names ...string) (*pgtest.Cluster, []*clusterProxy) {
	return startClusterEnvControl(t, ctx, func(*pgtest.Cluster) string { return control }, names...)
}

// startClusterEnvControl is startClusterEnv with the control database's
// connection string made from the PostgreSQL it starts.
func startClusterEnvControl(t *testing.T, ctx context.Context, control func(*pgtest.Cluster) string, names ...string) (*pgtest.Cluster, []*clusterProxy) {
	bin := buildProxy(t)
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	for _, db := range []string{"app_0", "app_new_0", "app_new_1", "sg_control"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	reshardExec(t, ctx, reshardConnect(t, ctx, c.DSN("app_0")), `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO accounts SELECT i, 0, 'initial' FROM generate_series(1, 2000) i;
INSERT INTO countries SELECT 'c'||i, 'country '||i FROM generate_series(1, 10) i`)
	var out []*clusterProxy
	for _, name := range names {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		yml := strings.Replace(cutoverYAML(c), "listen: 127.0.0.1:0", "listen: "+addr, 1) +
			fmt.Sprintf("cluster: { name: %s, ack_timeout: 2s, control: '%s' }\nmetrics: { listen: %s }\n", name, control(c), metricsAddr)
		path := filepath.Join(t.TempDir(), "shardgate.yaml")
		if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		cp := &clusterProxy{name: name, addr: addr, path: path, metricsAddr: metricsAddr, p: startProxyProcess(t, bin, path, addr)}
		out = append(out, cp)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("proxy %s:\n%s", cp.name, cp.p.log.String())
			}
		})
	}
	adm := out[0].admin(t)
	eventually(t, 20*time.Second, "every proxy to join the cluster", func() bool {
		tb, err := adminPgx(adm, "SHOW CLUSTER")
		if err != nil {
			return false
		}
		live := 0
		for _, r := range tb.rows {
			if r[tb.col(t, "live")] == "t" {
				live++
			}
		}
		return live == len(names)
	})
	return c, out
}

// idWriter inserts accounts rows with increasing ids through one proxy,
// one statement per transaction, reconnecting after errors, at most one
// every idWriterPace: unpaced, two writers on this 2-core machine wrote
// faster than the resharding stream applied (issue 12's apply lag), and
// a RESHARD waited longer than its test for the stream to catch up.
type idWriter struct {
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ok   []int64
	errs []string
}

// idWriterPace is the least time between two writes of an idWriter.
const idWriterPace = time.Millisecond

func startIDWriter(ctx context.Context, url string, first int64) *idWriter {
	w := &idWriter{quit: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		pace := time.NewTicker(idWriterPace)
		defer pace.Stop()
		for id := first; ; id++ {
			select {
			case <-w.quit:
				return
			case <-ctx.Done():
				return
			case <-pace.C:
			}
			var err error
			if conn == nil || conn.IsClosed() {
				conn, err = pgx.Connect(ctx, url)
			}
			if err == nil {
				_, err = conn.Exec(ctx, "INSERT INTO accounts (id, balance) VALUES ($1, 0)", pgx.QueryExecModeSimpleProtocol, id)
			}
			w.mu.Lock()
			if err == nil {
				w.ok = append(w.ok, id)
			} else {
				w.errs = append(w.errs, err.Error())
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // a refused write: do not spin
			}
		}
	}()
	return w
}

func (w *idWriter) counts() (ok, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ok), len(w.errs)
}

func (w *idWriter) lastError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) == 0 {
		return ""
	}
	return w.errs[len(w.errs)-1]
}

func (w *idWriter) stop() ([]int64, []string) {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok, w.errs
}

// checkIDPlacement fails unless every id of acked is on the new shards and
// nothing written from first on committed on the old shard only.
func checkIDPlacement(t *testing.T, ctx context.Context, c *pgtest.Cluster, acked []int64, first int64) {
	t.Helper()
	onNew := map[int64]bool{}
	for _, db := range []string{"app_new_0", "app_new_1"} {
		for _, id := range idsFrom(t, ctx, c.DSN(db), first) {
			onNew[id] = true
		}
	}
	for _, id := range acked {
		if !onNew[id] {
			t.Fatalf("write %d was acknowledged but is not on the new shards", id)
		}
	}
	for _, id := range idsFrom(t, ctx, c.DSN("app_0"), first) {
		if !onNew[id] {
			t.Fatalf("write %d committed on the old shard only", id)
		}
	}
}

// idsFrom lists the ids of accounts from first on in the database at dsn.
func idsFrom(t *testing.T, ctx context.Context, dsn string, first int64) []int64 {
	t.Helper()
	rows, err := reshardConnect(t, ctx, dsn).Query(ctx, "SELECT id FROM accounts WHERE id >= $1", first)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// runningGeneration returns the generation of app that proxy cp's SHOW
// TOPOLOGY says it runs (0: none).
func runningGeneration(t *testing.T, adm *pgx.Conn) int {
	gen, err := runningGenerationOf(t, adm)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// runningGenerationOf is runningGeneration with SHOW TOPOLOGY's error
// returned (a proxy that may be restarting).
func runningGenerationOf(t *testing.T, adm *pgx.Conn) (int, error) {
	tb, err := adminPgx(adm, "SHOW TOPOLOGY")
	if err != nil {
		return 0, err
	}
	gen := 0
	for _, r := range tb.rows {
		if r[tb.col(t, "database")] == "app" && r[tb.col(t, "running")] == "t" {
			fmt.Sscan(r[tb.col(t, "generation")], &gen)
		}
	}
	return gen, nil
}

// TestClusterCutover: two proxies with writers on each; RESHARD on A
// pauses and switches both. Neither proxy's writer sees an error, every
// acknowledged write is on the new shards, B's file is rewritten, and a
// RELOAD of the old file on B does not undo the cutover. The control
// database is the default one (shard 0 of the first database: the source
// itself), so it is fenced by the cutover and moves with it.
func TestClusterCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, ps := startClusterEnv(t, ctx, "", "a", "b")
	a, b := ps[0], ps[1]
	oldFile, err := os.ReadFile(b.path)
	if err != nil {
		t.Fatal(err)
	}
	wa := startIDWriter(ctx, a.appURL(), 1_000_000)
	wb := startIDWriter(ctx, b.appURL(), 5_000_000)
	defer wa.stop()
	defer wb.stop()
	eventually(t, 10*time.Second, "both writers to write", func() bool {
		na, _ := wa.counts()
		nb, _ := wb.counts()
		return na > 20 && nb > 20
	})
	admA, admB := a.admin(t), b.admin(t)
	if _, err := adminPgx(admA, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitOnlyTaskDone(t, admA, 90*time.Second, "the task to cut over")
	eventually(t, 10*time.Second, "B to run generation 1", func() bool { return runningGeneration(t, admB) == 1 })
	checkClusterCutoverPauses(t, a, b, admA, admB)
	na, _ := wa.counts()
	nb, _ := wb.counts()
	eventually(t, 10*time.Second, "both writers to go on after the cutover", func() bool {
		ma, _ := wa.counts()
		mb, _ := wb.counts()
		return ma > na+20 && mb > nb+20
	})
	okA, errsA := wa.stop()
	okB, errsB := wb.stop()
	if len(errsA)+len(errsB) > 0 {
		t.Fatalf("clients saw errors across the cutover: A %d %q, B %d %q", len(errsA), first(errsA), len(errsB), first(errsB))
	}
	checkIDPlacement(t, ctx, c, append(okA, okB...), 1_000_000)
	// The control schema belongs to the server it is on: it is not
	// resharded. The new shard 0 has it as the cluster moved it there
	// (the topology, nothing of the cutover), the other new shard not at
	// all.
	var controlTables []string
	for _, db := range []string{"app_new_0", "app_new_1"} {
		var n int
		d := reshardConnect(t, ctx, c.DSN(db))
		if err := d.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'shardgate_cluster'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		controlTables = append(controlTables, fmt.Sprint(n))
		if db == "app_new_0" && n > 0 {
			var cutovers, tasks int
			if err := d.QueryRow(ctx, "SELECT (SELECT count(*) FROM shardgate_cluster.cutovers WHERE state = 'pausing'), (SELECT count(*) FROM shardgate_cluster.task_ids)").Scan(&cutovers, &tasks); err != nil {
				t.Fatal(err)
			}
			if cutovers+tasks > 0 {
				t.Fatalf("the source's control rows were resharded to app_new_0: %d open cutovers, %d task ids", cutovers, tasks)
			}
		}
	}
	if controlTables[1] != "0" {
		t.Fatalf("app_new_1 has %s tables of shardgate_cluster: the control schema was resharded", controlTables[1])
	}
	for _, l := range strings.Split(a.p.log.String(), "\n") {
		if strings.Contains(l, "cutover: done") {
			t.Logf("A: %s", l) // the pause and its steps
		}
	}
	if strings.Contains(a.p.log.String(), "leaving them out") {
		t.Fatalf("A left B out of the cutover although B runs:\n%s", a.p.log.String())
	}
	onDisk, err := config.Load(b.path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(onDisk.Database("app").Shards); n != 2 {
		t.Fatalf("B's file names %d shards for app after the cutover, want 2", n)
	}
	// An older file on B (as a config management tool would put back):
	// the reload keeps the cluster's topology.
	if err := os.WriteFile(b.path, oldFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPgx(admB, "RELOAD"); err != nil {
		t.Fatal(err)
	}
	if g := runningGeneration(t, admB); g != 1 {
		t.Fatalf("after a RELOAD of the old file B runs generation %d, want 1", g)
	}
	wb = startIDWriter(ctx, b.appURL(), 9_000_000)
	eventually(t, 10*time.Second, "B's writes after the reload", func() bool { n, _ := wb.counts(); return n > 10 })
	okReload, errsReload := wb.stop()
	if len(errsReload) > 0 {
		t.Fatalf("B's writes after the reload failed: %q", first(errsReload))
	}
	checkIDPlacement(t, ctx, c, okReload, 9_000_000)
	// B restarts from the old file: it reads the topology where the old
	// file's control database is (the old shard 0, where the switch
	// recorded it) and serves the new shards.
	b.p.cmd.Process.Kill()
	<-b.p.done
	b.p = startProxyProcess(t, buildProxy(t), b.path, b.addr)
	admB = b.admin(t)
	eventually(t, 20*time.Second, "the restarted B to run generation 1", func() bool { return runningGeneration(t, admB) == 1 })
	wb = startIDWriter(ctx, b.appURL(), 11_000_000)
	eventually(t, 10*time.Second, "the restarted B's writes", func() bool { n, _ := wb.counts(); return n > 10 })
	okR, errsR := wb.stop()
	if len(errsR) > 0 {
		t.Fatalf("the restarted B's writes failed: %q", first(errsR))
	}
	checkIDPlacement(t, ctx, c, okR, 11_000_000)
	t.Logf("A %d and B %d writes acknowledged across the cutover, none failed", len(okA), len(okB))
}

// checkClusterCutoverPauses checks how the one cutover of TestClusterCutover
// (coordinated by a, b paused for it) reports its pause: the task's pause
// in SHOW TASKS on both proxies, each proxy's own pause in SHOW CUTOVERS on
// both, and shardgate_reshard_cutover_pause_seconds on each (one done
// cutover, as long as SHOW CUTOVERS says, under the cutover timeout). An
// aborted attempt before it (a loaded machine) is not an error here.
func checkClusterCutoverPauses(t *testing.T, a, b *clusterProxy, admA, admB *pgx.Conn) {
	t.Helper()
	tb, err := adminPgx(admA, "SHOW TASKS")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	pause := taskPause(t, admA, id)
	if pause <= 0 || pause >= 10*time.Second {
		t.Fatalf("SHOW TASKS on A: task %s paused %v, want 0 < pause < the cutover timeout (10s)", id, pause)
	}
	// B lists A's task as A last published it (at A's next poll).
	eventually(t, 10*time.Second, "B's SHOW TASKS to show A's pause", func() bool { return taskPause(t, admB, id) == pause })
	var pauses map[string]cutoverPause
	for _, adm := range []*pgx.Conn{admA, admB} {
		eventually(t, 10*time.Second, "SHOW CUTOVERS to list both proxies' pauses", func() bool {
			pauses = cutoverPauses(t, adm, "app")
			return len(pauses) == 2
		})
		want := map[string]cutoverPause{"a": {task: id, role: "coordinator", outcome: "done", pause: pause},
			"b": {task: id, role: "member", outcome: "done", pause: pauses["b"].pause}}
		// B's pause starts at A's notification and ends when B resumed
		// on the new shards, which may be after A resumed.
		if pauses["a"] != want["a"] || pauses["b"] != want["b"] || pauses["b"].pause <= 0 || pauses["b"].pause >= 10*time.Second {
			t.Fatalf("SHOW CUTOVERS: %+v, want %+v with 0 < B's pause < the cutover timeout", pauses, want)
		}
	}
	for _, p := range []*clusterProxy{a, b} {
		sum := checkCutoverPauseMetric(t, p.metricsAddr, "app", "done", 1, 10*time.Second)
		if d := sum - pauses[p.name].pause; d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("proxy %s: the metric's pause %v differs from SHOW CUTOVERS's %v", p.name, sum, pauses[p.name].pause)
		}
	}
	t.Logf("pauses: A %v (coordinator), B %v (member)", pauses["a"].pause, pauses["b"].pause)
}

// TestClusterStoppedProxy: B is stopped (SIGSTOP) through a cutover on A.
// A leaves B out after cluster.ack_timeout and cuts over; when B runs
// again, its writes fail (the fence) or go to the new shards, never to
// the old shard only, and B follows the new generation by itself.
func TestClusterStoppedProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, ps := startClusterEnv(t, ctx, "", "a", "b")
	a, b := ps[0], ps[1]
	admA := a.admin(t)
	wb := startIDWriter(ctx, b.appURL(), 5_000_000)
	defer wb.stop()
	eventually(t, 10*time.Second, "B's writer to write", func() bool { n, _ := wb.counts(); return n > 20 })
	if err := b.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			b.p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	if _, err := adminPgx(admA, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitOnlyTaskDone(t, admA, 90*time.Second, "the task to cut over without B")
	b.p.cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	n0, _ := wb.counts()
	eventually(t, 30*time.Second, "B's writes to succeed again after it follows the cutover", func() bool {
		n, _ := wb.counts()
		return n > n0+20
	})
	if g := runningGeneration(t, b.admin(t)); g != 1 {
		t.Fatalf("B runs generation %d after it ran again, want 1", g)
	}
	ok, errs := wb.stop()
	checkIDPlacement(t, ctx, c, ok, 5_000_000)
	if !strings.Contains(a.p.log.String(), "leaving them out") {
		t.Fatalf("A did not leave B out:\n%s", a.p.log.String())
	}
	t.Logf("B: %d writes acknowledged, all on the new shards; %d refused (%q)", len(ok), len(errs), first(errs))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestClusterTasksEverywhere: a task started on A has the same row in
// SHOW TASKS on B (id, proxy a), CUTOVER on B is run by A, and after it B
// follows the new generation.
func TestClusterTasksEverywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// The control database is a database of its own this time.
	c, ps := startClusterEnvControl(t, ctx, func(c *pgtest.Cluster) string { return c.DSN("sg_control") }, "a", "b")
	a, b := ps[0], ps[1]
	admA, admB := a.admin(t), b.admin(t)
	started, err := adminPgx(admA, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := started.rows[0][started.col(t, "id")]
	eventually(t, 60*time.Second, "B to list A's task streaming", func() bool {
		tb, err := adminPgx(admB, "SHOW TASKS")
		if err != nil || len(tb.rows) != 1 {
			return false
		}
		r := tb.rows[0]
		return r[tb.col(t, "id")] == id && r[tb.col(t, "proxy")] == "a" && r[tb.col(t, "phase")] == "stream"
	})
	if _, err := adminPgx(admB, "CUTOVER "+id); err != nil {
		t.Fatalf("CUTOVER on B of A's task: %v", err)
	}
	waitOnlyTaskDone(t, admA, 30*time.Second, "A's task to be done")
	eventually(t, 10*time.Second, "B to run generation 1", func() bool { return runningGeneration(t, admB) == 1 })
	w := startIDWriter(ctx, b.appURL(), 7_000_000)
	eventually(t, 10*time.Second, "B's writes", func() bool { n, _ := w.counts(); return n > 10 })
	ok, errs := w.stop()
	if len(errs) > 0 {
		t.Fatalf("B's writes after the cutover failed: %q", first(errs))
	}
	checkIDPlacement(t, ctx, c, ok, 7_000_000)
	eventually(t, 10*time.Second, "B to show the task done", func() bool {
		tb, err := adminPgx(admB, "SHOW TASKS")
		return err == nil && len(tb.rows) == 1 && tb.rows[0][tb.col(t, "state")] == "done"
	})
}

// TestClusterCoordinatorDies: A is killed during its cutover, after the
// fence and before the switch. B, paused for it, sees A gone and resumes;
// B takes the task over (its lease is free), lifts the fence, streams and
// cuts over itself. B's acknowledged writes all end on the new shards.
func TestClusterCoordinatorDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, ps := startClusterEnvControl(t, ctx, func(c *pgtest.Cluster) string { return c.DSN("sg_control") }, "a", "b")
	a, b := ps[0], ps[1]
	// A again, as the crashing binary on the same file and port.
	a.p.cmd.Process.Kill()
	<-a.p.done
	a.p = startProxyProcess(t, buildCrashProxy(t), a.path, a.addr, "-crash-cutover", "before-config-write")
	admB := b.admin(t)
	eventually(t, 20*time.Second, "A to join again", func() bool {
		tb, err := adminPgx(admB, "SHOW CLUSTER")
		return err == nil && len(tb.rows) == 2 && tb.rows[0][tb.col(t, "live")] == "t" && tb.rows[1][tb.col(t, "live")] == "t"
	})
	wb := startIDWriter(ctx, b.appURL(), 5_000_000)
	defer wb.stop()
	eventually(t, 10*time.Second, "B's writer to write", func() bool { n, _ := wb.counts(); return n > 20 })
	if _, err := adminPgx(a.admin(t), "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.p.done:
	case <-time.After(90 * time.Second):
		t.Fatal("A did not reach its cutover")
	}
	waitOnlyTaskDone(t, admB, 90*time.Second, "B to take the task over and cut over")
	eventually(t, 10*time.Second, "B to run generation 1", func() bool { return runningGeneration(t, admB) == 1 })
	n0, _ := wb.counts()
	eventually(t, 10*time.Second, "B's writes after its cutover", func() bool { n, _ := wb.counts(); return n > n0+20 })
	ok, errs := wb.stop()
	checkIDPlacement(t, ctx, c, ok, 5_000_000)
	t.Logf("B: %d writes acknowledged, all on the new shards; %d refused (%q)", len(ok), len(errs), first(errs))
}

// TestClusterTaskKeepsItsID: a task changes runner twice — A loses its
// lease while stopped (B takes the task over), then B is killed and
// restarted — and stays one task with one id: SHOW TASKS on both proxies
// lists it once, running, under the id it started with, and CUTOVER
// without an id finds it. (A runner that lost its lease used to retire
// the id, so the next runner numbered the task anew, while the killed
// runner's row still said "running": CUTOVER found two tasks.)
func TestClusterTaskKeepsItsID(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, ps := startClusterEnvControl(t, ctx, func(c *pgtest.Cluster) string { return c.DSN("sg_control") }, "a", "b")
	a, b := ps[0], ps[1]
	admA := a.admin(t)
	started, err := adminPgx(admA, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := started.rows[0][started.col(t, "id")]
	// runningRows lists SHOW TASKS' running rows on adm as "id proxy".
	runningRows := func(adm *pgx.Conn) []string {
		tb, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, r := range tb.rows {
			if r[tb.col(t, "state")] == "running" {
				out = append(out, r[tb.col(t, "id")]+" "+r[tb.col(t, "proxy")])
			}
		}
		return out
	}
	admB := b.admin(t)
	eventually(t, 60*time.Second, "B to list A's task", func() bool {
		return fmt.Sprint(runningRows(admB)) == fmt.Sprintf("[%s a]", id)
	})
	// A stops; its lease's session is ended, so B takes the task over.
	dest := reshardConnect(t, ctx, c.DSN("app_new_0"))
	if err := a.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer a.p.cmd.Process.Signal(syscall.SIGCONT)
	reshardExec(t, ctx, dest, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid <> pg_backend_pid()`)
	eventually(t, 30*time.Second, "B to take the task over", func() bool {
		return fmt.Sprint(runningRows(admB)) == fmt.Sprintf("[%s b]", id)
	})
	a.p.cmd.Process.Signal(syscall.SIGCONT)
	eventually(t, 30*time.Second, "A to stop its run of the task", func() bool {
		return strings.Contains(a.p.log.String(), "another proxy") && fmt.Sprint(runningRows(admA)) == fmt.Sprintf("[%s b]", id)
	})
	// B dies and comes back: A or the new B resumes the task, same id.
	b.p.cmd.Process.Kill()
	<-b.p.done
	b.p = startProxyProcess(t, buildProxy(t), b.path, b.addr)
	admB = b.admin(t)
	// idRows counts SHOW TASKS' rows with the task's id on adm, whatever
	// their state: a proxy that resumes the task after it had stopped its
	// own run lists the new run only (it listed both, the stopped one
	// first, and CUTOVER and SHOW TASKS by id meant the old one).
	idRows := func(adm *pgx.Conn) int {
		tb, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			return -1
		}
		n := 0
		for _, r := range tb.rows {
			if r[tb.col(t, "id")] == id {
				n++
			}
		}
		return n
	}
	for _, adm := range []*pgx.Conn{admA, admB} {
		eventually(t, 60*time.Second, "one running task, with its first id and one row, after B's restart", func() bool {
			rows := runningRows(adm)
			return len(rows) == 1 && strings.HasPrefix(rows[0], id+" ") && idRows(adm) == 1
		})
	}
	// The task streams again before CUTOVER is asked (a runner that has
	// just resumed it may still be copying).
	waitTaskStreams(t, admA, 60*time.Second, "the task to stream")
	if _, err := adminPgx(admA, "CUTOVER"); err != nil {
		t.Fatalf("CUTOVER without an id on A: %v (running: %v)", err, runningRows(admA))
	}
	eventually(t, 30*time.Second, "A and B to run generation 1", func() bool {
		return runningGeneration(t, admA) == 1 && runningGeneration(t, admB) == 1
	})
}
