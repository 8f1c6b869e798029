package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestShutdownUnderLoad: writers run transactions through the proxy when
// it shuts down gracefully; every transaction whose COMMIT was
// acknowledged is in the database, and no acknowledged work is lost.
func TestShutdownUnderLoad(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 4, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE acked (id bigint PRIMARY KEY, note text)")
	setup.Close(ctx)

	var next atomic.Int64
	var mu sync.Mutex
	var acked []int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, p.AppURL("app"))
			if err != nil {
				return
			}
			defer conn.Close(ctx)
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := next.Add(1)
				tx, err := conn.Begin(ctx)
				if err != nil {
					return
				}
				if _, err := tx.Exec(ctx, "INSERT INTO acked VALUES ($1, 'a')", id); err != nil {
					tx.Rollback(ctx)
					return
				}
				if _, err := tx.Exec(ctx, "UPDATE acked SET note = 'b' WHERE id = $1", id); err != nil {
					tx.Rollback(ctx)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					return // not acknowledged: may or may not be there
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	eventually(t, 10*time.Second, "writers to commit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200
	})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.Listener.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	close(stop)
	wg.Wait()

	direct := connect(t, cl.DSN("app"))
	mu.Lock()
	defer mu.Unlock()
	var missing, wrong int
	for _, id := range acked {
		var note string
		err := direct.QueryRow(ctx, "SELECT note FROM acked WHERE id = $1", id).Scan(&note)
		switch {
		case err != nil:
			missing++
		case note != "b":
			wrong++
		}
	}
	if missing+wrong > 0 {
		t.Fatalf("%d of %d acknowledged transactions missing, %d half-applied", missing, len(acked), wrong)
	}
	var inTx int
	direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'app' AND state LIKE 'idle in transaction%'").Scan(&inTx)
	if inTx != 0 {
		t.Fatalf("%d server sessions left inside a transaction", inTx)
	}
	t.Logf("%d acknowledged transactions, all present", len(acked))
}
