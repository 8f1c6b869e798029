package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/faultnet"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestChaosTwoPhase runs cross-shard transfers through two proxy
// processes while a seeded schedule cuts, blackholes, delays and refuses
// the connections between the proxies and both shards (each shard behind
// its own faultnet relay), stops proxy 1 (SIGSTOP … SIGCONT) and kills and
// restarts it. Each transfer moves 1 between accounts on different shards, either way,
// and writes a ledger row on each, under a transfer id. With the faults
// lifted, once no prepared transaction is left on any shard:
//
//   - every transfer id in the ledger has exactly one row on each shard
//     (no transfer half committed, none applied twice);
//   - every acknowledged transfer is in it; none that failed before COMMIT
//     or whose COMMIT got an error other than 08007 is (docs/two-phase-
//     commit.md: such a transaction was rolled back); the rest are those
//     whose COMMIT lost its connection, whose outcome is unknown;
//   - every balance is its start plus its ledger rows, and the total is
//     exact.
//
// CHAOS_SEED replays a seed, CHAOS_SEEDS=N runs N random ones,
// CHAOS_SECONDS is each run's length (default 8) and CHAOS_PG_RESTARTS the
// most restarts of a shard's PostgreSQL server in a run (default 1).
func TestChaosTwoPhase(t *testing.T) {
	bin := buildProxy(t)
	run := time.Duration(chaosEnvInt(t, "CHAOS_SECONDS", 8)) * time.Second
	restarts := chaosEnvInt(t, "CHAOS_PG_RESTARTS", 1)
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			opts := faultnet.Options{Run: run, Shards: 2, Proxies: []int{1}, PostgresRestarts: restarts}
			chaosReplay(t, "TestChaosTwoPhase", seed, opts)
			t.Logf("CHAOS_SEED=%d", seed)
			chaosTwoPhaseRun(t, bin, seed, opts)
		})
	}
}

// chaosAccounts is the number of accounts on each shard, each starting
// with chaosBalance.
const (
	chaosAccounts = 2
	chaosBalance  = 100000
)

func chaosTwoPhaseRun(t *testing.T, bin string, seed uint64, opts faultnet.Options) {
	rig := &chaosRig{}
	rig.startServers(t, 2, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "50"}})
	accounts := chaosSetup(t, rig.pgs)
	for range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		p := &chaosProxyProc{bin: bin, addr: addr, config: chaosTwoPhaseConfig(t, rig.pgs[0], addr, rig.relays)}
		p.start(t)
		rig.proxies = append(rig.proxies, p)
	}
	s := faultnet.Plan(seed, opts)
	t.Logf("chaos: %d events over %v", len(s), opts.Run)

	stop := make(chan struct{})
	var workers []*chaosTransferer
	var wg sync.WaitGroup
	for w := range 6 {
		tr := &chaosTransferer{id: w, url: rig.proxies[w%2].url(), accounts: accounts, rng: rand.New(rand.NewPCG(seed, uint64(w)))}
		workers = append(workers, tr)
		wg.Add(1)
		go func() { defer wg.Done(); tr.run(stop) }()
	}
	rig.play(t, s, opts.Run)
	close(stop)
	wg.Wait()
	for i, p := range rig.proxies {
		if p.exited() {
			t.Fatalf("proxy %d exited on its own:\n%s", i, p.current().log.String())
		}
	}
	chaosCheckTwoPhase(t, rig.pgs, accounts, workers)
}

// chaosSetup creates the schema on shard0 and shard1 (on pgs[0] and
// pgs[1]) and the accounts; it returns the accounts of each shard.
func chaosSetup(t *testing.T, pgs []*pgtest.Cluster) [2][]int64 {
	t.Helper()
	ctx := context.Background()
	var accounts [2][]int64
	for id := int64(1); len(accounts[0]) < chaosAccounts || len(accounts[1]) < chaosAccounts; id++ {
		if s := hashShard(id, 2); len(accounts[s]) < chaosAccounts {
			accounts[s] = append(accounts[s], id)
		}
	}
	for s := range 2 {
		db, cl := fmt.Sprintf("shard%d", s), pgs[s]
		if err := cl.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		schema := `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE ledger (account bigint NOT NULL, tid bigint NOT NULL, delta bigint NOT NULL);`
		for _, id := range accounts[s] {
			schema += fmt.Sprintf("\nINSERT INTO accounts VALUES (%d, %d);", id, chaosBalance)
		}
		if err := cl.Exec(ctx, db, schema); err != nil {
			t.Fatal(err)
		}
	}
	return accounts
}

// chaosTwoPhaseConfig is the config of a proxy process on addr whose
// shards are reached through relays.
func chaosTwoPhaseConfig(t *testing.T, cl *pgtest.Cluster, addr string, relays []*faultnet.Relay) string {
	t.Helper()
	cfg := fmt.Sprintf(`listen: %s
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 8, checkout_timeout: 3s, connect_timeout: 2s }
limits: { in_doubt_timeout: 1s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
      - { host: 127.0.0.1, port: %d, database: shard0 }
      - { host: 127.0.0.1, port: %d, database: shard1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { table: ledger, column: account, type: bigint }
`, addr, appPassword, cl.User, cl.Password, relays[0].Port(), relays[1].Port())
	path := filepath.Join(t.TempDir(), "shardgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chaosOutcome is what a client knows of a transfer's fate.
type chaosOutcome int

const (
	// chaosAcked: COMMIT succeeded; the transfer must be applied.
	chaosAcked chaosOutcome = iota
	// chaosAborted: it failed before COMMIT, or COMMIT got an error that
	// says it was rolled back; it must not be applied.
	chaosAborted
	// chaosUnknown: COMMIT lost its connection, or got 08007; either way.
	chaosUnknown
)

func (o chaosOutcome) String() string {
	return [...]string{"acknowledged", "aborted", "unknown"}[o]
}

// chaosTransferer is one client of the workload; it records the outcome
// of each of its transfers, by transfer id.
type chaosTransferer struct {
	id       int
	url      string
	accounts [2][]int64
	rng      *rand.Rand

	outcomes map[int64]chaosOutcome // owned by run until it returns
	notes    map[int64]string       // when each transfer ended, and its error
	errs     map[string]int         // the errors seen, by kind
}

func (w *chaosTransferer) run(stop <-chan struct{}) {
	w.outcomes, w.errs, w.notes = map[int64]chaosOutcome{}, map[string]int{}, map[int64]string{}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for seq := int64(1); ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		if conn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := pgx.Connect(ctx, w.url)
			cancel()
			if err != nil {
				w.errs["connect"]++
				time.Sleep(20 * time.Millisecond) // a back-off between attempts, not a synchronisation
				continue
			}
			conn = c
		}
		tid := int64(w.id)<<40 | seq
		x, y := w.accounts[0][w.rng.IntN(chaosAccounts)], w.accounts[1][w.rng.IntN(chaosAccounts)]
		delta := int64(1 - 2*w.rng.IntN(2))
		o, err := chaosTransfer(conn, tid, x, y, delta)
		w.outcomes[tid] = o
		w.notes[tid] = fmt.Sprintf("%v at %s, error %v", o, time.Now().UTC().Format("15:04:05.000"), err)
		if err != nil {
			w.errs[fmt.Sprintf("%v: %s", o, chaosErrKind(err))]++
			if conn.IsClosed() || sqlstate(err) == "" {
				conn.Close(context.Background())
				conn = nil
			}
		}
	}
}

// chaosErrKind is a short class of err for the counts in the log.
func chaosErrKind(err error) string {
	if code := sqlstate(err); code != "" {
		return code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "connection"
}

// chaosTransfer moves delta (1 or -1) from x, on shard 0, to y, on shard
// 1, under transfer id tid, and says what the client can know of its
// outcome. Every transfer locks shard 0's row first, so that two never
// wait for each other across shards, a deadlock that PostgreSQL cannot
// see.
func chaosTransfer(conn *pgx.Conn, tid, x, y, delta int64) (chaosOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return chaosAborted, err
	}
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE accounts SET balance = balance - $2 WHERE id = $1", []any{x, delta}},
		{"UPDATE accounts SET balance = balance + $2 WHERE id = $1", []any{y, delta}},
		{"INSERT INTO ledger (account, tid, delta) VALUES ($1, $2, $3)", []any{x, tid, -delta}},
		{"INSERT INTO ledger (account, tid, delta) VALUES ($1, $2, $3)", []any{y, tid, delta}},
	} {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			tx.Rollback(ctx)
			return chaosAborted, err
		}
	}
	err = tx.Commit(ctx)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return chaosAcked, nil
	case errors.As(err, &pe) && pe.Code != "08007", errors.Is(err, pgx.ErrTxCommitRollback):
		return chaosAborted, err
	}
	return chaosUnknown, err
}

// chaosCheckTwoPhase waits until no prepared transaction is left on
// either shard and checks the ledger and balances against what the
// workers were told (TestChaosTwoPhase).
func chaosCheckTwoPhase(t *testing.T, pgs []*pgtest.Cluster, accounts [2][]int64, workers []*chaosTransferer) {
	t.Helper()
	var direct [2]*pgx.Conn
	for s := range direct {
		direct[s] = connect(t, pgs[s].DSN(fmt.Sprintf("shard%d", s)))
	}
	var left []string
	eventually(t, 30*time.Second, "every prepared transaction to be resolved", func() bool {
		left = left[:0]
		for _, d := range direct {
			left = append(left, chaosQueryStrings(t, d, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")...)
		}
		return len(left) == 0
	})
	outcomes, counts, notes := map[int64]chaosOutcome{}, map[chaosOutcome]int{}, map[int64]string{}
	for _, w := range workers {
		for tid, o := range w.outcomes {
			outcomes[tid] = o
			notes[tid] = w.notes[tid]
			counts[o]++
		}
		t.Logf("client %d errors: %v", w.id, w.errs)
	}
	rows := chaosLedger(t, direct)
	applied := 0
	for tid, n := range rows {
		applied++
		if n != [2]int{1, 1} {
			t.Errorf("transfer %d has %d ledger rows on shard 0 and %d on shard 1, want one on each; its client: %s", tid, n[0], n[1], notes[tid])
		}
		switch o, ok := outcomes[tid]; {
		case !ok:
			t.Errorf("transfer %d is in the ledger but no client ran it", tid)
		case o == chaosAborted:
			t.Errorf("transfer %d was applied although its client was told it failed before or at COMMIT", tid)
		}
	}
	for tid, o := range outcomes {
		if _, ok := rows[tid]; o == chaosAcked && !ok {
			t.Errorf("transfer %d was acknowledged but is not in the ledger", tid)
		}
	}
	t.Logf("transfers: %d acknowledged, %d aborted, %d unknown; %d applied", counts[chaosAcked], counts[chaosAborted], counts[chaosUnknown], applied)
	if counts[chaosAcked] == 0 {
		t.Errorf("no transfer was acknowledged: the run tested nothing")
	}
}

// chaosLedger reads both shards' ledgers, checks every balance against
// its ledger rows and the total, and returns each transfer's number of
// rows on each shard.
func chaosLedger(t *testing.T, direct [2]*pgx.Conn) map[int64][2]int {
	t.Helper()
	ctx := context.Background()
	rows := map[int64][2]int{}
	total := int64(0)
	for s, d := range direct {
		r, err := d.Query(ctx, "SELECT tid FROM ledger")
		if err != nil {
			t.Fatal(err)
		}
		tids, err := pgx.CollectRows(r, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, tid := range tids {
			n := rows[tid]
			n[s]++
			rows[tid] = n
		}
		var bad []string
		r, err = d.Query(ctx, `SELECT format('account %s: balance %s, ledger says %s', a.id, a.balance, $1 + coalesce(sum(l.delta), 0))
FROM accounts a LEFT JOIN ledger l ON l.account = a.id GROUP BY a.id, a.balance
HAVING a.balance <> $1 + coalesce(sum(l.delta), 0)`, chaosBalance)
		if err == nil {
			bad, err = pgx.CollectRows(r, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("shard %d: %s", s, b)
		}
		var sum int64
		if err := d.QueryRow(ctx, "SELECT sum(balance) FROM accounts").Scan(&sum); err != nil {
			t.Fatal(err)
		}
		total += sum
	}
	if want := int64(2 * chaosAccounts * chaosBalance); total != want {
		t.Errorf("total balance %d, want %d", total, want)
	}
	return rows
}

// chaosQueryText is chaosQueryStrings for a failure's diagnostics: an
// error is part of the answer, so that the failure's own report follows.
func chaosQueryText(c *pgx.Conn, sql string) string {
	out, err := chaosQuery(c, sql)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(out)
}

// chaosQueryStrings runs sql on c and returns its one text column.
func chaosQueryStrings(t *testing.T, c *pgx.Conn, sql string) []string {
	t.Helper()
	out, err := chaosQuery(c, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chaosQuery returns the text values of sql's one column.
func chaosQuery(c *pgx.Conn, sql string) ([]string, error) {
	r, _ := c.Query(context.Background(), sql) // CollectRows returns its error
	return pgx.CollectRows(r, pgx.RowTo[string])
}
