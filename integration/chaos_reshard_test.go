package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/faultnet"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestChaosReshard runs COPY_DATA app app_new (one source shard, two
// destination shards, each behind its own faultnet relay) in one proxy
// process, and CUTOVER at 60 % of the run, while a writer inserts and
// updates rows on the source directly and a seeded schedule cuts,
// blackholes, delays and refuses the relays' connections (the task's
// copy, replication and cutover connections among them) and stops, kills
// and restarts the proxy. With the faults lifted and the writer stopped,
// CUTOVER is asked until it succeeds; the task must finish, and then:
//
//   - the destination holds the source's rows: equal counts and checksums;
//   - every row is on the destination shard the sharding rule names;
//   - every insert the source acknowledged is there exactly once;
//   - no replication slot or publication is left on the source, and no
//     subscription, replication origin, prepared transaction or
//     bookkeeping schema anywhere.
//
// The environment variables are TestChaosTwoPhase's.
func TestChaosReshard(t *testing.T) {
	chaosReshardSeeds(t, "TestChaosReshard", []int{0})
}

// TestChaosReshardCluster is TestChaosReshard with two proxy processes in
// one cluster (control database of its own, outside the relays), both
// stopped and killed by the schedule, and a writer through each proxy
// besides the one on the source. On top of TestChaosReshard's checks:
// every insert a proxy acknowledged is on the destination exactly once,
// and none committed on the old shard only.
func TestChaosReshardCluster(t *testing.T) {
	chaosReshardSeeds(t, "TestChaosReshardCluster", []int{0, 1})
}

// chaosReshardSeeds runs chaosReshardRun for every seed, with one proxy
// process per entry of proxies (each may be stopped or killed).
func chaosReshardSeeds(t *testing.T, test string, proxies []int) {
	bin := buildProxy(t)
	run := time.Duration(chaosEnvInt(t, "CHAOS_SECONDS", 8)) * time.Second
	restarts := chaosEnvInt(t, "CHAOS_PG_RESTARTS", 1)
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			opts := faultnet.Options{Run: run, Shards: 3, Proxies: proxies, PostgresRestarts: restarts}
			chaosReplay(t, test, seed, opts)
			t.Logf("CHAOS_SEED=%d", seed)
			chaosReshardRun(t, bin, seed, opts, len(proxies))
		})
	}
}

// chaosProxyIDs is where the ids of the writers through the proxies
// start (proxy i: chaosProxyIDs * (i+1)); the source writer's stay below.
const chaosProxyIDs = 10_000_000

// chaosReshardDBs are the source shard and the two destination shards, in
// the order of their relays.
var chaosReshardDBs = [3]string{"app_0", "app_new_0", "app_new_1"}

func chaosReshardRun(t *testing.T, bin string, seed uint64, opts faultnet.Options, nproxies int) {
	ctx := context.Background()
	// Each shard on a PostgreSQL server of its own, so that the schedule
	// restarts a source or a destination while the other runs; the
	// control database is on the source's.
	rig := &chaosRig{}
	rig.startServers(t, len(chaosReshardDBs), pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10", "max_prepared_transactions": "20",
	}})
	dsn := rig.dsn(t, chaosReshardDBs[:])
	for i, db := range chaosReshardDBs {
		if err := rig.pgs[i].CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := rig.pgs[0].CreateDatabase(ctx, "sg_control"); err != nil {
		t.Fatal(err)
	}
	if err := rig.pgs[0].Exec(ctx, "app_0", `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 100000) i`); err != nil {
		t.Fatal(err)
	}
	var shards []string
	for i, db := range chaosReshardDBs {
		shards = append(shards, fmt.Sprintf("{ host: 127.0.0.1, port: %d, database: %s }", rig.relays[i].Port(), db))
	}
	for i := range nproxies {
		dir := t.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		path := filepath.Join(dir, "shardgate.yaml")
		cfg := reshardYAML(processHead(addr, dir), rig.pgs[0], accountsRule, shards[:1], shards[1:])
		if nproxies > 1 {
			cfg += fmt.Sprintf("cluster: { name: p%d, ack_timeout: 1s, control: '%s' }\n", i, rig.pgs[0].DSN("sg_control"))
		}
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p := &chaosProxyProc{bin: bin, addr: addr, config: path}
		p.start(t)
		rig.proxies = append(rig.proxies, p)
	}
	p := rig.proxies[0]
	path := p.config
	adminURL := fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", p.addr)
	var writers []*idWriter // through the proxies, in a cluster
	if nproxies > 1 {
		for i, q := range rig.proxies {
			writers = append(writers, startIDWriter(ctx, q.url(), int64(chaosProxyIDs*(i+1))))
		}
	}
	if _, err := adminPgx(connect(t, adminURL), "COPY_DATA app app_new"); err != nil {
		t.Fatal(err)
	}

	w := &chaosSourceWriter{dsn: dsn("app_0"), rng: rand.New(rand.NewPCG(seed, 1))}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.run(stop) }()
	s := faultnet.Plan(seed, opts)
	t.Logf("chaos: %d events over %v", len(s), opts.Run)
	// CUTOVER comes at 60 % of the run, under the faults still to come;
	// it may abort (the task streams on), and is asked again after them.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(opts.Run * 6 / 10):
		case <-stop:
			return
		}
		_, err := chaosCutover(adminURL)
		t.Logf("CUTOVER during the faults: %v", err)
	}()
	rig.play(t, s, opts.Run)
	close(stop)
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, err := chaosCutover(adminURL)
		if done || chaosCutOver(t, path) || (nproxies > 1 && chaosCutOver(t, rig.proxies[1].config)) {
			break
		}
		if time.Now().After(deadline) {
			log := p.logWithoutAdminFailures()
			d := connect(t, dsn("app_new_0"))
			t.Logf("tasks: %v", chaosQueryText(d, "SELECT t::text FROM shardgate_reshard.tasks t"))
			t.Logf("advisory locks: %v", chaosQueryText(d, "SELECT l.pid::text || ' ' || coalesce(a.application_name, '') || ' ' || coalesce(a.state, '') || ' ' || coalesce(a.client_addr::text, '') || ':' || coalesce(a.client_port::text, '') FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'"))
			t.Fatalf("no CUTOVER succeeded within 60s after the faults, the last: %v\nproxy log, admin failures left out (end):\n%s", err, log[max(0, len(log)-8000):])
		}
		time.Sleep(100 * time.Millisecond) // polling the admin database
	}
	t.Logf("source writer: %d inserts acknowledged, %d writes failed, the last with %v", len(w.acked), w.failed, w.lastErr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shardgate_reshard.tasks on app_new_0: %v", chaosQueryText(connect(t, dsn("app_new_0")), "SELECT t::text FROM shardgate_reshard.tasks t"))
			// What each proxy's current process logged of the task and the
			// cutover: which runner held the task when, and what it did.
			for i, q := range rig.proxies {
				log := q.logWithoutAdminFailures()
				t.Logf("proxy %d log, admin failures left out (end):\n%s", i, log[max(0, len(log)-6000):])
			}
		}
	})
	chaosWaitTask(t, p, adminURL, 90*time.Second)
	for _, q := range rig.proxies {
		if q.exited() {
			t.Fatalf("a proxy exited on its own:\n%s", q.current().log.String())
		}
	}
	if nproxies > 1 {
		// The writers go on until every proxy serves the new shards.
		for i, q := range rig.proxies {
			eventually(t, 30*time.Second, fmt.Sprintf("proxy %d to follow the cutover", i), func() bool { return chaosFollows(t, q) })
			n0, _ := writers[i].counts()
			deadline := time.Now().Add(30 * time.Second)
			for n, _ := writers[i].counts(); n <= n0+5; n, _ = writers[i].counts() {
				if time.Now().After(deadline) {
					log := q.current().log.String()
					t.Fatalf("proxy %d's writer wrote %d rows in 30 s after the cutover; its last error %q\nproxy log (end):\n%s",
						i, n-n0, writers[i].lastError(), log[max(0, len(log)-6000):])
				}
				time.Sleep(50 * time.Millisecond) // polling the writer's count
			}
		}
	}
	var proxyAcked []int64
	for _, wr := range writers {
		ok, errs := wr.stop()
		t.Logf("writer through a proxy: %d inserts acknowledged, %d failed (%q)", len(ok), len(errs), first(errs))
		proxyAcked = append(proxyAcked, ok...)
	}
	chaosCheckReshard(t, dsn, w.acked, proxyAcked)
}

// chaosSourceWriter writes on the source shard directly, as an
// application that bypasses the proxy during the copy would: new rows
// (recording the acknowledged ones) and updates of existing ones. Writes
// fail once the cutover fences the source.
type chaosSourceWriter struct {
	dsn string
	rng *rand.Rand

	acked   []int64 // owned by run until it returns
	failed  int
	lastErr error
}

func (w *chaosSourceWriter) run(stop <-chan struct{}) {
	ctx := context.Background()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(ctx)
		}
	}()
	for id := int64(100001); ; id++ {
		select {
		case <-stop:
			return
		default:
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, w.dsn)
			if err != nil {
				w.failed++
				time.Sleep(20 * time.Millisecond) // a back-off between attempts, not a synchronisation
				continue
			}
			conn = c
		}
		_, err := conn.Exec(ctx, "INSERT INTO accounts VALUES ($1, 1)", id)
		if err == nil {
			w.acked = append(w.acked, id)
			_, err = conn.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", 1+w.rng.Int64N(100000))
		}
		if err != nil {
			w.failed++
			w.lastErr = err
			conn.Close(ctx)
			conn = nil
		}
		time.Sleep(2 * time.Millisecond) // pace the writer; not synchronisation
	}
}

// chaosWaitTask polls SHOW TASKS through a new admin connection each time
// (the proxy may have been restarted) until the task is done; a failed
// task, or one not done in time, fails the test with the proxy's log.
func chaosWaitTask(t *testing.T, p *chaosProxyProc, adminURL string, timeout time.Duration) {
	t.Helper()
	var last []string
	deadline := time.Now().Add(timeout)
	for {
		state, row := chaosTaskState(t, adminURL)
		if row != nil {
			last = row
		}
		switch {
		case state == "done", state == "" && row == nil && chaosCutOver(t, p.config):
			t.Logf("task: %v", last)
			return
		case state == "failed", time.Now().After(deadline):
			log := p.current().log.String()
			t.Fatalf("the task is not done after %v: %v\nproxy log (end):\n%s", timeout, last, log[max(0, len(log)-6000):])
		}
		time.Sleep(50 * time.Millisecond) // polling SHOW TASKS
	}
}

// chaosCutover runs CUTOVER through a new admin connection; done is
// false if it could not run it (the proxy restarting, say) or the cutover
// aborted.
func chaosCutover(adminURL string) (done bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return false, err
	}
	defer adm.Close(ctx)
	if _, err := adm.Exec(ctx, "CUTOVER", pgx.QueryExecModeSimpleProtocol); err != nil {
		return false, err
	}
	return true, nil
}

// chaosCutOver reports whether the config file gives app the destination
// shards: a proxy process killed after its task finished leaves no task
// for SHOW TASKS to list in the next one.
func chaosCutOver(t *testing.T, path string) bool {
	return len(loadConfig(t, path).Database("app").Shards) == 2
}

// chaosFollows reports whether proxy q runs the cluster's generation of
// app after the cutover (SHOW TOPOLOGY through a new admin connection: the
// process may have been restarted). Its file may still name the old
// shards: a proxy that was down at the switch starts from it and uses the
// cluster's topology instead, without rewriting it (docs/cluster.md).
func chaosFollows(t *testing.T, q *chaosProxyProc) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm, err := pgx.Connect(ctx, fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", q.addr))
	if err != nil {
		return false
	}
	defer adm.Close(ctx)
	gen, err := runningGenerationOf(t, adm)
	return err == nil && gen != 0
}

// chaosTaskState is the state and SHOW TASKS row of the first task, or ""
// if the proxy does not answer.
func chaosTaskState(t *testing.T, adminURL string) (string, []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil
	}
	defer adm.Close(ctx)
	tb, err := adminPgx(adm, "SHOW TASKS")
	if err != nil || len(tb.rows) == 0 {
		return "", nil
	}
	return tb.rows[0][tb.col(t, "state")], tb.rows[0]
}

// chaosCheckReshard compares the destination with the source and looks
// for anything the task left behind (TestChaosReshard).
func chaosCheckReshard(t *testing.T, dsn func(db string) string, acked, proxyAcked []int64) {
	t.Helper()
	ctx := context.Background()
	// The writers through the proxies write past the cutover, on the
	// destination only: the comparison with the source leaves them out.
	sum := fmt.Sprintf("SELECT count(*), coalesce(sum(balance), 0), coalesce(sum(hashtext(id || ':' || balance)), 0) FROM accounts WHERE id < %d", chaosProxyIDs)
	var want, got [3]int64
	src := connect(t, dsn("app_0"))
	if err := src.QueryRow(ctx, sum).Scan(&want[0], &want[1], &want[2]); err != nil {
		t.Fatal(err)
	}
	copies := map[int64]int{}
	for k, db := range chaosReshardDBs[1:] {
		d := connect(t, dsn(db))
		var n [3]int64
		if err := d.QueryRow(ctx, sum).Scan(&n[0], &n[1], &n[2]); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i] += n[i]
		}
		r, err := d.Query(ctx, "SELECT id FROM accounts")
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(r, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		misplaced := 0
		for _, id := range ids {
			copies[id]++
			if hashShard(id, 2) != k {
				misplaced++
			}
		}
		if misplaced > 0 {
			t.Errorf("%s holds %d rows that the rule puts on the other shard", db, misplaced)
		}
	}
	if got != want {
		t.Errorf("destination count, balance sum and checksum %v; the source's %v", got, want)
	}
	for _, id := range append(acked, proxyAcked...) {
		if copies[id] != 1 {
			t.Errorf("acknowledged insert %d has %d copies on the destination, want 1", id, copies[id])
		}
	}
	for _, id := range idsFrom(t, ctx, dsn("app_0"), chaosProxyIDs) {
		if copies[id] != 1 {
			t.Errorf("insert %d through a proxy committed on the old shard and is not on the destination", id)
		}
	}
	chaosCheckLeftovers(t, dsn)
}

// chaosCheckLeftovers fails t for every replication slot, publication,
// subscription, replication origin or prepared transaction left on the
// databases of chaosReshardDBs (dsn gives their connection strings).
func chaosCheckLeftovers(t *testing.T, dsn func(db string) string) {
	t.Helper()
	for _, db := range chaosReshardDBs {
		d := connect(t, dsn(db))
		for _, q := range []string{
			"SELECT 'slot ' || slot_name FROM pg_replication_slots",
			"SELECT 'publication ' || pubname FROM pg_publication",
			"SELECT 'subscription ' || subname FROM pg_subscription",
			"SELECT 'origin ' || roname FROM pg_replication_origin",
			"SELECT 'prepared transaction ' || gid FROM pg_prepared_xacts",
			"SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname = 'shardgate_reshard'",
		} {
			for _, left := range chaosQueryStrings(t, d, q) {
				t.Errorf("%s: %s left behind", db, left)
			}
		}
	}
}

// logWithoutAdminFailures is the log of the proxy's current process without
// the failures of the admin commands the test polls with (CUTOVER, SHOW).
func (c *chaosProxyProc) logWithoutAdminFailures() string {
	var kept []string
	for _, l := range strings.Split(c.current().log.String(), "\n") {
		if !strings.Contains(l, "admin command failed") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
