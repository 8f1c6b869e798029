package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/router/sharding"
)

// TestReshardSurvivesProxyKillDuringCopy: the proxy running RESHARD is
// SIGKILLed in the copy phase, when two tables' copies have committed on
// the destination shards and the third's (held by crashproxy -stall-copy)
// has sent its rows but not committed. The half-copied table must not
// remain. A restarted proxy resumes the task by itself, lists the earlier
// copies in SHOW TABLE_COPIES and copies only the missing table, from a
// temporary slot's snapshot; it is killed there as well. A third proxy,
// without the knob, finishes the copy and cuts over.
// Every table then holds exactly the source's rows (written directly to the
// source throughout), each on its shard. The stalled table is a sharded
// one, then an omni one.
func TestReshardSurvivesProxyKillDuringCopy(t *testing.T) {
	bin := buildCrashProxy(t)
	for _, tc := range []struct{ name, stalled string }{
		{name: "sharded", stalled: "orders"},
		{name: "omni", stalled: "countries"},
	} {
		t.Run(tc.name, func(t *testing.T) { testReshardKillDuringCopy(t, bin, tc.stalled) })
	}
}

// copyKillTables are the tables of TestReshardSurvivesProxyKillDuringCopy
// and the rows each starts with; the writer only adds rows to the sharded
// ones, and deletes fewer than it adds, so a copy reads at least as many.
var copyKillTables = []struct {
	name string
	omni bool
	rows int64
}{
	{name: "accounts", rows: 4000},
	{name: "orders", rows: 5000},
	{name: "countries", omni: true, rows: 2000},
}

// copyKill is the setup of one TestReshardSurvivesProxyKillDuringCopy run.
type copyKill struct {
	c               *pgtest.Cluster
	path, adminURL  string
	addr            string
	src             *pgx.Conn
	dst             []*pgx.Conn
	dests           []string
	stopW, writerOK chan struct{}
}

func testReshardKillDuringCopy(t *testing.T, bin, stalledName string) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	k := setupCopyKill(t, ctx)
	stalled := "public." + stalledName
	var minRows int64
	for _, tb := range copyKillTables {
		if tb.name == stalledName {
			minRows = tb.rows
		}
	}
	go k.write(ctx)
	defer func() {
		select {
		case <-k.stopW:
		default:
			close(k.stopW)
		}
		<-k.writerOK
	}()

	stall := []string{"-stall-copy", stalled}
	p := startProxyProcess(t, bin, k.path, k.addr, stall...)
	adm := connect(t, k.adminURL)
	if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, adm, stalled, minRows)
	// SHOW TABLE_COPIES says done once every destination committed; the
	// destinations agree, and nothing else is recorded.
	before := recordedCopies(t, ctx, k.dst)
	resumedCopies := map[string]int64{}
	for _, tb := range copyKillTables {
		name := "public." + tb.name
		if name == stalled {
			continue
		}
		for d := range k.dst {
			if n, ok := before[d][name]; !ok || n == 0 || tb.omni && n != tb.rows {
				t.Fatalf("table_copies before the kill: %v; want every table but %s", before, stalled)
			}
			if !tb.omni || d == 0 {
				resumedCopies[name] += before[d][name]
			}
		}
	}
	if len(before[0])+len(before[1]) != 4 {
		t.Fatalf("table_copies before the kill: %v; want every table but %s", before, stalled)
	}
	k.kill(t, ctx, p, stalledName, before)

	// The restarted proxy resumes the task, which lists the copies
	// committed before the restart as done, with the rows they recorded,
	// and copies the stalled table again from a temporary slot's
	// snapshot. The seam holds it there too, and the proxy is killed once
	// more.
	p = startProxyProcess(t, bin, k.path, k.addr, stall...)
	adm = connect(t, k.adminURL)
	checkCopiesListed(t, waitStalled(t, adm, stalled, minRows), resumedCopies)
	var temporary int
	if err := k.src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE temporary").Scan(&temporary); err != nil || temporary != 1 {
		t.Errorf("%d temporary slots on the source while the resumed copy runs, want 1 (%v)", temporary, err)
	}
	k.kill(t, ctx, p, stalledName, before)

	// Without the seam, the next proxy copies the table and streams.
	startProxyProcess(t, bin, k.path, k.addr)
	adm = connect(t, k.adminURL)
	var copies *table
	var after []map[string]int64
	eventually(t, 60*time.Second, "the resumed task to copy "+stalled, func() bool {
		copies = tableCopies(t, adm)
		for _, r := range copies.rows {
			if r[copies.col(t, "table")] == stalled && r[copies.col(t, "state")] == "done" {
				// Read table_copies now, long before the cutover drops it.
				after = recordedCopies(t, ctx, k.dst)
				return true
			}
		}
		return false
	})
	// The writer stops before the task can cut over by itself: it writes
	// to the source directly, so writes after the cutover would be lost.
	close(k.stopW)
	<-k.writerOK
	checkCopiesListed(t, copies, resumedCopies)
	if n := copies.num(t, map[string]string{"table": stalled}, "rows"); n < minRows {
		t.Errorf("SHOW TABLE_COPIES: %s copied %d rows, want at least %d", stalled, n, minRows)
	}
	for d := range k.dst {
		for name, n := range before[d] {
			if after[d][name] != n {
				t.Errorf("%s: %s was copied again: table_copies rows %d, was %d", k.dests[d], name, after[d][name], n)
			}
		}
		if _, ok := after[d][stalled]; !ok {
			t.Errorf("%s: table_copies has no row for %s after the resumed copy: %v", k.dests[d], stalled, after[d])
		}
	}

	waitOnlyTaskDone(t, adm, 60*time.Second, "the task to cut over")
	k.src = reconnected(t, ctx, k.src)
	k.checkResult(t, ctx)
}

func setupCopyKill(t *testing.T, ctx context.Context) *copyKill {
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	k := &copyKill{c: c, dests: []string{"app_new_0", "app_new_1"}, stopW: make(chan struct{}), writerOK: make(chan struct{})}
	for _, db := range append([]string{"app_0"}, k.dests...) {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	k.src = connect(t, c.DSN("app_0"))
	mustExec(t, k.src, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, account bigint NOT NULL, amount int NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL, visits bigint NOT NULL);
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 4000) i;
INSERT INTO orders SELECT i, i % 4000 + 1, i, 'order ' || i FROM generate_series(1, 5000) i;
INSERT INTO countries SELECT 'c' || i, 'country ' || i, 0 FROM generate_series(1, 2000) i`)
	for _, db := range k.dests {
		k.dst = append(k.dst, connect(t, c.DSN(db)))
	}

	dir := t.TempDir()
	k.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	k.adminURL = fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", k.addr)
	rules := `
    sharded_tables: [{ table: accounts, column: id, type: bigint }, { table: orders, column: id, type: bigint }]
    omni_tables: [countries]`
	cfg := reshardYAML(processHead(k.addr, dir), c, rules,
		[]string{shardYAML(c, "app_0")}, []string{shardYAML(c, k.dests[0]), shardYAML(c, k.dests[1])})
	k.path = filepath.Join(dir, "shardgate.yaml")
	if err := os.WriteFile(k.path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// write changes every table of the source directly until stopW closes.
func (k *copyKill) write(ctx context.Context) {
	defer close(k.writerOK)
	w, err := pgx.Connect(ctx, k.c.DSN("app_0"))
	if err != nil {
		return
	}
	defer w.Close(ctx)
	for i := int64(1); ; i++ {
		select {
		case <-k.stopW:
			return
		default:
		}
		w.Exec(ctx, "INSERT INTO accounts VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 1", 4000+i)
		w.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%4000+1)
		w.Exec(ctx, "INSERT INTO orders VALUES ($1, $2, 1, 'new') ON CONFLICT (id) DO UPDATE SET amount = orders.amount + 1", 5000+i, i%4000+1)
		w.Exec(ctx, "UPDATE orders SET amount = amount + 1, note = note || '+' WHERE id = $1", i%5000+1)
		if i%7 == 0 {
			w.Exec(ctx, "DELETE FROM orders WHERE id = $1", (i*13)%5000+1)
		}
		w.Exec(ctx, "UPDATE countries SET visits = visits + 1 WHERE code = $1", "c"+strconv.FormatInt(i%2000+1, 10))
		time.Sleep(2 * time.Millisecond) // pace the writer; not synchronisation
	}
}

// kill SIGKILLs the proxy p and waits until the sessions of its copies are
// gone. The destinations must then hold no row of the stalled table, the
// source no temporary slot, and table_copies what it held before.
func (k *copyKill) kill(t *testing.T, ctx context.Context, p *proxyProcess, stalled string, before []map[string]int64) {
	t.Helper()
	p.cmd.Process.Kill() // SIGKILL
	<-p.done
	for _, conn := range append([]*pgx.Conn{k.src}, k.dst...) {
		eventually(t, 30*time.Second, "the killed proxy's sessions to end", func() bool {
			var busy bool
			err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'shardgate-reshard')
				OR EXISTS (SELECT 1 FROM pg_replication_slots WHERE temporary OR active)`).Scan(&busy)
			return err == nil && !busy
		})
	}
	for d, conn := range k.dst {
		if n := count(t, ctx, conn, stalled); n != 0 {
			t.Fatalf("%s: %s holds %d rows of the killed copy", k.dests[d], stalled, n)
		}
	}
	if got := recordedCopies(t, ctx, k.dst); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("table_copies changed by the kill: %v, was %v", got, before)
	}
}

// checkResult compares every table of the destination with the source's,
// and checks that the task left no slot and no bookkeeping.
func (k *copyKill) checkResult(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, tb := range copyKillTables {
		wantN, wantSum := checksum(t, ctx, k.src, tb.name)
		var gotN, gotSum int64
		for d, conn := range k.dst {
			n, sum := checksum(t, ctx, conn, tb.name)
			if tb.omni {
				if n != wantN || sum != wantSum {
					t.Errorf("%s: %s has %d rows, checksum %d; the source has %d, %d", k.dests[d], tb.name, n, sum, wantN, wantSum)
				}
				continue
			}
			gotN, gotSum = gotN+n, gotSum+sum
			checkPlacement(t, ctx, conn, tb.name, d, len(k.dst))
		}
		if !tb.omni && (gotN != wantN || gotSum != wantSum) {
			t.Errorf("%s: the destination has %d rows, checksum %d; the source has %d, %d", tb.name, gotN, gotSum, wantN, wantSum)
		}
	}
	var slots int
	if err := k.src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 0 {
		t.Errorf("%d replication slots left on the source (%v)", slots, err)
	}
	for d, conn := range k.dst {
		var left bool
		if err := conn.QueryRow(ctx, "SELECT to_regnamespace('shardgate_reshard') IS NOT NULL").Scan(&left); err != nil || left {
			t.Errorf("%s: the task's bookkeeping is left after it finished (%v)", k.dests[d], err)
		}
	}
}

// tableCopies runs SHOW TABLE_COPIES, failing the test when the task or a
// copy failed.
func tableCopies(t testing.TB, adm *pgx.Conn) *table {
	t.Helper()
	tasks, err := adminPgx(adm, "SHOW TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks.rows) > 0 && tasks.rows[0][tasks.col(t, "state")] == "failed" {
		t.Fatalf("task failed: %v", tasks.rows[0])
	}
	copies, err := adminPgx(adm, "SHOW TABLE_COPIES")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range copies.rows {
		if r[copies.col(t, "state")] == "failed" {
			t.Fatalf("a copy failed: %v", copies.rows)
		}
	}
	return copies
}

// waitStalled waits until every table but stalled is copied and stalled,
// held by crashproxy -stall-copy, has read its rows (at least
// minRows) from the source and sent them to the destinations, and returns
// SHOW TABLE_COPIES.
func waitStalled(t testing.TB, adm *pgx.Conn, stalled string, minRows int64) *table {
	t.Helper()
	var copies *table
	eventually(t, 60*time.Second, "every table copied but "+stalled+", which stalls", func() bool {
		copies = tableCopies(t, adm)
		held, others := false, 0
		for _, r := range copies.rows {
			state := r[copies.col(t, "state")]
			if r[copies.col(t, "table")] != stalled {
				if state == "done" {
					others++
				}
				continue
			}
			n, _ := strconv.ParseInt(r[copies.col(t, "rows")], 10, 64)
			held = state == "copying" && n >= minRows
		}
		return held && others == 2
	})
	return copies
}

// checkCopiesListed checks that SHOW TABLE_COPIES lists each table in want
// as done with the rows want gives.
func checkCopiesListed(t testing.TB, copies *table, want map[string]int64) {
	t.Helper()
	t.Logf("SHOW TABLE_COPIES: %v", copies.rows)
	if len(copies.rows) != 3 {
		t.Errorf("SHOW TABLE_COPIES lists %d copies, want 3: %v", len(copies.rows), copies.rows)
	}
	for table, n := range want {
		m := map[string]string{"table": table}
		if s := copies.get(t, m, "state"); s != "done" {
			t.Errorf("SHOW TABLE_COPIES: %s is %s, want done", table, s)
		}
		if got := copies.num(t, m, "rows"); got != n {
			t.Errorf("SHOW TABLE_COPIES: %s has %d rows, want %d as recorded", table, got, n)
		}
	}
}

// recordedCopies returns, per destination shard, the rows each table copy
// recorded in shardgate_reshard.table_copies.
func recordedCopies(t testing.TB, ctx context.Context, dst []*pgx.Conn) []map[string]int64 {
	t.Helper()
	out := make([]map[string]int64, len(dst))
	for d, conn := range dst {
		out[d] = map[string]int64{}
		rows, _ := conn.Query(ctx, `SELECT table_name, rows FROM shardgate_reshard.table_copies`)
		var name string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
			out[d][name] = n
			return nil
		}); err != nil {
			t.Fatalf("destination shard %d: table_copies: %v", d, err)
		}
	}
	return out
}

func count(t testing.TB, ctx context.Context, conn *pgx.Conn, table string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checksum returns the number of rows of table and an order-independent
// sum of their hashes.
func checksum(t testing.TB, ctx context.Context, conn *pgx.Conn, table string) (n, sum int64) {
	t.Helper()
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(hashtext(x::text)::bigint), 0) FROM "+table+" x").
		Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	return n, sum
}

// checkPlacement fails unless every row of table (sharded by a bigint id)
// on destination shard d belongs there, once.
func checkPlacement(t testing.TB, ctx context.Context, conn *pgx.Conn, table string, d, shards int) {
	t.Helper()
	rows, _ := conn.Query(ctx, "SELECT id FROM "+table)
	seen := map[int64]bool{}
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		if seen[id] {
			return fmt.Errorf("id %d twice", id)
		}
		seen[id] = true
		if want := sharding.Partition(sharding.Combine(0, sharding.HashInt64(id)), shards); want != d {
			return fmt.Errorf("id %d belongs on shard %d", id, want)
		}
		return nil
	}); err != nil {
		t.Errorf("destination shard %d: %s: %v", d, table, err)
	}
}
