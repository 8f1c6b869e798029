package integration

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shardgate/shardgate/wire"
)

// TestIsoCancelNeverReachesTheNextClient: a client whose statement times
// out sends a cancel request just as the statement ends. PostgreSQL keeps a
// cancel that lands between statements for the backend's next one, so a
// server handed on too early would cancel the next client's statement. The
// next client (pool size 1, so surely on the same server) must never see
// 57014. The timing is random, seeded (ISOLATION_SEED replays a run).
func TestIsoCancelNeverReachesTheNextClient(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ISOLATION_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, mode, 1, "app"))
			direct := simpleConn(t, cl.DSN("app"))
			cancels := 0
			for i := range 40 {
				x := simpleConn(t, p.AppURL("app"))
				y := simpleConn(t, p.AppURL("app"))
				// x's statement takes 30 ms; y waits for the server
				// meanwhile and gets it the moment x is done; x's cancel
				// request goes out 15–30 ms after x's statement started
				// running, racing the hand-over.
				xdone := make(chan error, 1)
				go func() {
					_, err := x.Exec(context.Background(), "SELECT pg_sleep(0.03)")
					xdone <- err
				}()
				// Under load the 30 ms can pass between two polls: such a
				// round has no race to run and is skipped.
				var xerr error
				finished := false
				eventually(t, 5*time.Second, "x's statement to run", func() bool {
					select {
					case xerr = <-xdone:
						finished = true
						return true
					default:
					}
					return value(t, direct, simple, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(0.03)' AND state = 'active'") == "1"
				})
				if finished {
					if xerr != nil {
						t.Fatalf("seed %d, round %d: x's statement: %s", seed, i, errText(xerr))
					}
					x.Close(context.Background())
					y.Close(context.Background())
					continue
				}
				ydone := make(chan error, 1)
				go func() {
					_, err := queryRow(y, simple, "SELECT pg_sleep(0.02)::text")
					ydone <- err
				}()
				time.Sleep(time.Duration(15000+rng.IntN(15000)) * time.Microsecond) // the race itself, not synchronisation
				if err := x.PgConn().CancelRequest(context.Background()); err != nil {
					t.Fatalf("cancel request: %v", err)
				}
				if err := <-xdone; sqlstate(err) == wire.QueryCanceled {
					cancels++
				}
				if mode == "session" {
					x.Close(context.Background()) // y gets the server now
				}
				if err := <-ydone; err != nil {
					t.Fatalf("seed %d, round %d: the next client's statement: %s", seed, i, errText(err))
				}
				x.Close(context.Background())
				y.Close(context.Background())
			}
			t.Logf("seed %d: %d of 40 statements were canceled", seed, cancels)
		})
	}
}
