package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// transfers moves 1 from account a to account b in cross-shard
// transactions through url, on workers connections, until stop is
// closed; it counts the transfers acknowledged and the errors seen.
type transfers struct {
	acked, failed atomic.Int64
	lastErr       atomic.Value
	wg            sync.WaitGroup
}

func startTransfers(t *testing.T, url string, a, b int64, workers int, stop <-chan struct{}) *transfers {
	t.Helper()
	tr := &transfers{}
	for range workers {
		conn := connect(t, url)
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := transfer(conn, a, b); err != nil {
					tr.failed.Add(1)
					tr.lastErr.Store(err.Error())
					if conn.IsClosed() {
						return
					}
					continue
				}
				tr.acked.Add(1)
			}
		}()
	}
	return tr
}

func transfer(conn *pgx.Conn, a, b int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 1 WHERE id = $1", a); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", b)
		return err
	})
}

// balances reads both accounts directly from their shards.
func balances(t *testing.T, e *shardedEnv, a, b int64) (int64, int64) {
	t.Helper()
	var x, y int64
	if err := e.direct[shardOf(t, a, 2)].QueryRow(context.Background(), "SELECT balance FROM accounts WHERE id = $1", a).Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := e.direct[shardOf(t, b, 2)].QueryRow(context.Background(), "SELECT balance FROM accounts WHERE id = $1", b).Scan(&y); err != nil {
		t.Fatal(err)
	}
	return x, y
}

// newTransferEnv is two shards holding accounts a and b with 100000 each.
func newTransferEnv(t *testing.T) (e *shardedEnv, a, b int64) {
	e = newShardedEnv(t, 2)
	a, b = twoShardKeys(t)
	for _, id := range []int64{a, b} {
		if _, err := e.direct[shardOf(t, id, 2)].Exec(context.Background(), "INSERT INTO accounts (id, email, balance) VALUES ($1, 'w', 100000)", id); err != nil {
			t.Fatal(err)
		}
	}
	return e, a, b
}

// checkTransfers checks that every transfer committed on both shards or
// on neither, and that none is left prepared.
func checkTransfers(t *testing.T, e *shardedEnv, a, b int64) (moved int64) {
	t.Helper()
	eventually(t, 20*time.Second, "every prepared transaction to be resolved", func() bool { return preparedCount(e) == 0 })
	x, y := balances(t, e, a, b)
	if x+y != 200000 || 100000-x != y-100000 {
		t.Fatalf("balances %d and %d: a transfer committed on one shard only (sum %d, want 200000)", x, y, x+y)
	}
	return y - 100000
}

// TestTwoPhaseSurvivor: proxy A is killed in the middle of a two-phase
// commit — after every shard prepared, or after its coordinating shard
// committed — while proxy B keeps running transfers over the same rows.
// B's resolver finishes A's transaction (the rows' locks are released),
// B's clients go on without an error, and no transfer is half committed.
func TestTwoPhaseSurvivor(t *testing.T) {
	crash, plain := buildCrashProxy(t), buildProxy(t)
	for _, stage := range []string{"prepared", "decided"} {
		t.Run(stage, func(t *testing.T) {
			e, a, b := newTransferEnv(t)
			addrA := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			pa := startProxyProcess(t, crash, twoPhaseConfig(t, e, addrA, "1s"), addrA, "-crash-2pc", stage)
			startProxyProcess(t, plain, twoPhaseConfig(t, e, addrB, "1s"), addrB)
			urlA := fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addrA)
			urlB := fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addrB)
			stop := make(chan struct{})
			onB := startTransfers(t, urlB, a, b, 3, stop)
			ca := connect(t, urlA)
			if err := transfer(ca, a, b); err == nil {
				t.Fatal("a transfer through A committed although A was to die in it")
			}
			select {
			case <-pa.done:
			case <-time.After(10 * time.Second):
				t.Fatal("proxy A did not die")
			}
			// B goes on past A's death: its clients need the locks A's
			// prepared transactions hold.
			before := onB.acked.Load()
			eventually(t, 20*time.Second, "B's transfers to continue after A died", func() bool { return onB.acked.Load() > before+20 })
			close(stop)
			onB.wg.Wait()
			moved := checkTransfers(t, e, a, b)
			if n := onB.failed.Load(); n != 0 {
				t.Errorf("B's clients saw %d errors, the last %v", n, onB.lastErr.Load())
			}
			fromA := moved - onB.acked.Load()
			if want := map[string]int64{"prepared": 0, "decided": 1}[stage]; fromA != want {
				t.Errorf("A's transfer moved %d, want %d (committed iff its coordinator committed)", fromA, want)
			}
		})
	}
}

// TestTwoPhaseRestartsOfAnotherProxy: proxy B is SIGKILLed and restarted
// again and again while proxy A runs cross-shard transfers. Each start of
// B resolves in-doubt transactions, which must never touch A's
// transactions in flight: A's clients see no error and the totals stay
// exact.
func TestTwoPhaseRestartsOfAnotherProxy(t *testing.T) {
	plain := buildProxy(t)
	e, a, b := newTransferEnv(t)
	addrA := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProxyProcess(t, plain, twoPhaseConfig(t, e, addrA, "10s"), addrA)
	pathB := twoPhaseConfig(t, e, addrB, "10s")
	stop := make(chan struct{})
	onA := startTransfers(t, fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addrA), a, b, 4, stop)
	for range 5 {
		pb := startProxyProcess(t, plain, pathB, addrB)
		before := onA.acked.Load()
		eventually(t, 20*time.Second, "A's transfers to go on", func() bool { return onA.acked.Load() > before+10 })
		pb.cmd.Process.Kill()
		<-pb.done
	}
	close(stop)
	onA.wg.Wait()
	moved := checkTransfers(t, e, a, b)
	if n := onA.failed.Load(); n != 0 {
		t.Errorf("A's clients saw %d errors, the last %v", n, onA.lastErr.Load())
	}
	if moved != onA.acked.Load() {
		t.Errorf("%d transfers moved money, %d were acknowledged", moved, onA.acked.Load())
	}
}

// TestTwoPhaseShowTransactions: a transaction its proxy left prepared on
// both shards (killed before the coordinator committed) is listed by
// another proxy's SHOW TRANSACTIONS while the in-doubt timeout keeps it
// undecided.
func TestTwoPhaseShowTransactions(t *testing.T) {
	crash, plain := buildCrashProxy(t), buildProxy(t)
	e, a, b := newTransferEnv(t)
	addrA := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	pa := startProxyProcess(t, crash, twoPhaseConfig(t, e, addrA, "1h"), addrA, "-crash-2pc", "prepared")
	startProxyProcess(t, plain, twoPhaseConfig(t, e, addrB, "1h"), addrB)
	if err := transfer(connect(t, fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addrA)), a, b); err == nil {
		t.Fatal("the transfer through A committed although A was to die in it")
	}
	<-pa.done
	adm := connect(t, fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", addrB))
	var got []string
	eventually(t, 20*time.Second, "SHOW TRANSACTIONS to list A's transaction", func() bool {
		rows, err := adm.Query(context.Background(), "SHOW TRANSACTIONS", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for rows.Next() {
			v, _ := rows.Values()
			got = append(got, fmt.Sprintf("%v shard %v coordinator %v: %v", v[0], v[1], v[4], v[6]))
		}
		return len(got) == 2
	})
	want := []string{"app shard 0 coordinator 0: undecided (in progress)", "app shard 1 coordinator 0: undecided (coordinator prepared)"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("SHOW TRANSACTIONS:\n%q\nwant\n%q", got, want)
	}
	// Finish it here: the timeout keeps every proxy from doing so.
	for _, d := range e.direct {
		var gids []string
		rows, _ := d.Query(context.Background(), "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
		for rows.Next() {
			var g string
			rows.Scan(&g)
			gids = append(gids, g)
		}
		for _, g := range gids {
			mustExec(t, d, "ROLLBACK PREPARED '"+g+"'")
		}
	}
	if n := preparedCount(e); n != 0 {
		t.Fatalf("%d prepared transactions left", n)
	}
}
