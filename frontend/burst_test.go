//go:build linux

package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/pool"
)

// TestLoginBurstParks: clients that log in together and go idle park
// during the burst although limits.client_park_after is 3 s away (longer
// than the burst), so that the burst holds few goroutines at once. The runtime keeps the g of
// every goroutine that ran at once (about 480 bytes, never freed), and the
// buffers of the clients not yet parked grow the heap, whose spans stay
// half empty afterwards: bench/idle.sh measured 3 400-4 200 goroutines at
// once for 10 000 clients logging in over 8 s with the 1 s delay, and
// 2.8-3.0 kB of RSS per idle client, against 236 and 1.6 kB with the burst
// sweep (park.go, burstClients). The test fails if the goroutines at once
// or the heap per parked client regress: n clients log in from 16
// workers, as bench/idle_clients.py does. Measured on 2026-12-05 (load
// 5-11): 273-296 goroutines more at once, 0.96-1.02 kB live and 1.0-1.2
// kB of heap in use per parked client; without the burst sweep 1 501
// (every client) and 1.37 kB in use; with a startup parameter set per
// client instead of a shared one (startupSet) 1.38-1.42 kB live. The
// bounds leave a margin over the former.
func TestLoginBurstParks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	cl := pgtest.New(t, pgtest.Options{})
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("event_loop=%v", loop), func(t *testing.T) {
			const (
				warm    = 2 * burstClients
				n       = 1500
				workers = 16
			)
			l, port := startBurstListener(t, cl, loop)
			conns := make([]int, 0, warm+n)
			var mu sync.Mutex
			t.Cleanup(func() {
				for _, fd := range conns {
					syscall.Close(fd)
				}
			})
			// Warm-up: the first login attaches a server (the pool's
			// parameters), the evloop and the event loop start, and the
			// warm-up clients park (more than burstClients: the burst
			// sweep parks most of them). The buffers the Listener keeps
			// for resuming clients (parkedBuffers, which the sweep may
			// drop at any pass) are dropped before each measurement, so
			// that they are not counted as the burst's.
			for range warm {
				fd, err := burstLogin(port)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, fd)
			}
			waitParked(t, l, warm)
			var m0, m1 runtime.MemStats
			l.parking.dropBuffers()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&m0)
			g0 := runtime.NumGoroutine()

			stop := make(chan struct{})
			peak := make(chan int)
			go func() {
				most := 0
				for {
					most = max(most, runtime.NumGoroutine())
					select {
					case <-stop:
						peak <- most
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for i := w; i < n; i += workers {
						fd, err := burstLogin(port)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						conns = append(conns, fd)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(stop)
			most := <-peak - g0
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			waitParked(t, l, warm+n)
			l.parking.dropBuffers()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&m1)
			inUse := (float64(m1.HeapInuse) - float64(m0.HeapInuse)) / n
			live := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / n
			t.Logf("%d clients: %d goroutines more at most during the burst; per parked client %.0f live bytes, %.0f bytes of heap in use",
				n, most, live, inUse)
			if most > burstMostGoroutines {
				t.Errorf("%d goroutines more at once during a burst of %d logins, want at most %d", most, n, burstMostGoroutines)
			}
			if live > burstLivePerClient {
				t.Errorf("%.0f live bytes per client parked after a burst, want at most %d", live, burstLivePerClient)
			}
			if inUse > burstHeapPerClient {
				t.Errorf("%.0f bytes of heap in use per client parked after a burst, want at most %d", inUse, burstHeapPerClient)
			}
		})
	}
}

// The bounds of TestLoginBurstParks.
const (
	burstMostGoroutines = 700
	burstLivePerClient  = 1250
	burstHeapPerClient  = 1600
)

// waitParked waits until n clients are parked: the burst sweep parks most
// of them, the sweep after client_park_after the last ones (fewer than
// burstClients, which the burst sweep leaves to it).
func waitParked(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for l.Parked() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients parked after 20 s, want %d", l.Parked(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startBurstListener serves a trust user "idle" on the cluster's postgres
// database, parking after 3 s, with the event loop on or off; it
// returns the Listener and its TCP port.
func startBurstListener(t *testing.T, cl *pgtest.Cluster, loop bool) (*Listener, int) {
	t.Helper()
	return serveTestListener(t, fmt.Appendf(nil, `listen: 127.0.0.1:0
pool: { mode: transaction, size: 2, checkout_timeout: 5s }
limits: { client_login_timeout: 5s, client_park_after: 3s, event_loop: %v, max_client_conn: 5000 }
users:
  - { name: idle, auth_type: trust, server_user: %s, server_password: "%s" }
databases:
  - name: postgres
    shards: [{ host: %s, port: %d, database: postgres }]
`, loop, cl.User, cl.Password, cl.Host, cl.Port))
}

// serveTestListener serves a Listener of the configuration text yaml on
// a loopback port until the test or benchmark ends, when it shuts it down
// and closes its pools.
func serveTestListener(t testing.TB, yaml []byte) (*Listener, int) {
	t.Helper()
	cfg, err := config.Parse(yaml, "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st, err := NewState(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(st, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
		st.Pools.Close()
	})
	return l, ln.Addr().(*net.TCPAddr).Port
}

// burstLogin logs in as "idle" with an application_name (as most clients
// do, and bench/idle_clients.py) over a bare socket (pgtest.SysLogin), and
// returns it.
func burstLogin(port int) (int, error) {
	return pgtest.SysLogin(port, "user", "idle", "database", "postgres", "application_name", "burst")
}

// TestStartupSetShares: clients that sent the same startup parameters
// share one set (its map), and the kept sets are bounded.
func TestStartupSetShares(t *testing.T) {
	var s startupSet
	a := s.intern(pool.NewStartup(map[string]string{"application_name": "app", "datestyle": "ISO"}))
	b := s.intern(pool.NewStartup(map[string]string{"DateStyle": "ISO", "application_name": "app"}))
	if reflect.ValueOf(a.Params()).UnsafePointer() != reflect.ValueOf(b.Params()).UnsafePointer() {
		t.Error("two clients with the same startup parameters hold two sets")
	}
	if z := s.intern(pool.Startup{}); !z.IsZero() || len(s.sets) != 1 {
		t.Errorf("the empty set: %q, %d sets kept", z.Key(), len(s.sets))
	}
	for i := range maxStartupSets + 10 {
		st := s.intern(pool.NewStartup(map[string]string{"application_name": fmt.Sprint(i)}))
		if st.Params()["application_name"] != fmt.Sprint(i) {
			t.Fatalf("set %d: %v", i, st.Params())
		}
	}
	if len(s.sets) != maxStartupSets {
		t.Errorf("%d sets kept, want at most %d", len(s.sets), maxStartupSets)
	}
}
