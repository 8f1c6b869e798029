package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// Tests of idle clients parked in the evloop (frontend/park.go): a parked
// client has no goroutine, and must behave exactly as one that has.

// parkConfig is poolConfig for database app in transaction mode with
// limits.client_park_after set to after.
func parkConfig(cl *pgtest.Cluster, size int, after string) string {
	c := poolConfig(cl, "transaction", size, "app")
	old := "limits: { client_login_timeout: 5s }"
	if !strings.Contains(c, old) {
		panic("poolConfig changed: update parkConfig")
	}
	return strings.Replace(c, old, "limits: { client_login_timeout: 5s, client_park_after: "+after+" }", 1)
}

// parkModes are the two ways clients park: at every idle point, and after
// a short idle time (through the sweep).
var parkModes = []struct{ name, after string }{
	{"every-idle-point", "0s"},
	{"after-idle", "50ms"},
}

func waitParked(t testing.TB, p *proxy, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d parked clients", n), func() bool { return p.Listener.Parked() == n })
}

// TestXParkManyIdle: many clients make session state (SETs, a prepared
// statement), park, and are all used again at once: each sees its own
// settings and answers, and while they are parked they hold no goroutine.
func TestXParkManyIdle(t *testing.T) {
	for _, m := range parkModes {
		t.Run(m.name, func(t *testing.T) {
			checkGoroutines(t)
			cl := cluster(t, "app")
			p := startProxy(t, parkConfig(cl, 4, m.after))
			ctx := context.Background()
			const n = 100
			g0 := runtime.NumGoroutine()
			conns := make([]*pgx.Conn, n)
			for i := range conns {
				conns[i] = connect(t, p.AppURL("app"))
				mustExec(t, conns[i], fmt.Sprintf("SET work_mem = '%dkB'", 64+i))
				mustExec(t, conns[i], fmt.Sprintf("SET application_name = 'park%d'", i))
			}
			waitParked(t, p, n)
			// The n parked clients have no goroutine (the proxy keeps a few
			// of its own: sweep, evloop, pools).
			if g := runtime.NumGoroutine() - g0; g > n/2 {
				t.Errorf("%d more goroutines with %d clients parked than before they connected, want fewer than %d", g, n, n/2)
			}
			for round := range 3 {
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for i, c := range conns {
					wg.Go(func() {
						var wm, app string
						var k int
						err := c.QueryRow(ctx, "SELECT current_setting('work_mem'), current_setting('application_name'), $1::int",
							i*10+round).Scan(&wm, &app, &k)
						if err != nil {
							errs <- fmt.Errorf("client %d: %w", i, err)
						} else if wm != fmt.Sprintf("%dkB", 64+i) || app != fmt.Sprintf("park%d", i) || k != i*10+round {
							errs <- fmt.Errorf("client %d round %d: work_mem %s, application_name %s, $1 %d", i, round, wm, app, k)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				waitParked(t, p, n)
			}
		})
	}
}

// TestXParkDisconnect: clients that hang up or send Terminate while parked
// are cleaned up as unparked ones: they leave SHOW CLIENTS, and no server
// stays checked out.
func TestXParkDisconnect(t *testing.T) {
	for _, m := range parkModes {
		t.Run(m.name, func(t *testing.T) {
			checkGoroutines(t)
			cl := cluster(t, "app")
			o := startOperated(t, parkConfig(cl, 2, m.after))
			p := o.proxy
			ctx := context.Background()
			admin := connect(t, o.AdminURL())
			conns := make([]*pgx.Conn, 6)
			for i := range conns {
				conns[i] = connect(t, p.AppURL("app"))
				mustExec(t, conns[i], "SELECT 1")
			}
			waitParked(t, p, 6)
			for _, c := range conns[:3] {
				c.PgConn().Conn().Close() // a hang-up, no Terminate
			}
			conns[3].Close(ctx) // Terminate
			waitParked(t, p, 2)
			appPool := map[string]string{"database": "app", "user": "app", "shard": "0"}
			eventually(t, 10*time.Second, "two app clients in SHOW CLIENTS", func() bool {
				tb, err := adminPgx(admin, "SHOW CLIENTS")
				if err != nil {
					t.Fatal(err)
				}
				app := 0
				for _, r := range tb.rows {
					if r[tb.col(t, "database")] == "app" {
						app++
					}
				}
				return app == 2
			})
			tb, err := adminPgx(admin, "SHOW POOLS")
			if err != nil {
				t.Fatal(err)
			}
			if a, w, sa := tb.num(t, appPool, "cl_active"), tb.num(t, appPool, "cl_waiting"), tb.num(t, appPool, "sv_active"); a != 0 || w != 0 || sa != 0 {
				t.Fatalf("SHOW POOLS: cl_active %d cl_waiting %d sv_active %d, want 0 (%v)", a, w, sa, tb.rows)
			}
			if tot := tb.num(t, appPool, "sv_total"); tot > 2 {
				t.Fatalf("SHOW POOLS: sv_total %d, pool size 2", tot)
			}
			for _, c := range conns[4:] {
				mustExec(t, c, "SELECT 1")
			}
		})
	}
}

// TestXParkCancel: a CancelRequest carrying a parked client's key finds no
// server to cancel: it has no effect, neither on that client's next
// statements nor on another client's running one.
func TestXParkCancel(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, parkConfig(cl, 2, "0s"))
	ctx := context.Background()
	a := connect(t, p.AppURL("app"))
	b := connect(t, p.AppURL("app"))
	mustExec(t, a, "SELECT 1")
	mustExec(t, b, "SELECT 1")
	waitParked(t, p, 2)
	running := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "SELECT pg_sleep(0.5)")
		running <- err
	}()
	waitParked(t, p, 1) // b is running
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("cancel request: %v", err)
	}
	if err := <-running; err != nil {
		t.Fatalf("the other client's statement: %v", err)
	}
	if _, err := a.Exec(ctx, "SELECT pg_sleep(0.2)"); err != nil {
		t.Fatalf("the parked client's next statement: %v", err)
	}
}

// hijacked logs in to the proxy with pgconn and takes over the connection,
// to write frames as the test chooses.
func hijacked(t *testing.T, url string) *pgconn.HijackedConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return hc
}

// receiveUntilReady reads messages up to ReadyForQuery and returns them as
// short strings: the type and, for DataRow, its first column.
func receiveUntilReady(t *testing.T, hc *pgconn.HijackedConn) []string {
	t.Helper()
	hc.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []string
	for {
		msg, err := hc.Frontend.Receive()
		if err != nil {
			t.Fatalf("receive after %v: %v", got, err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			got = append(got, "D"+string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			got = append(got, "E"+m.Code)
		case *pgproto3.ReadyForQuery:
			return append(got, "Z"+string(m.TxStatus))
		default:
			got = append(got, fmt.Sprintf("%T", msg)[len("*pgproto3."):])
		}
	}
}

func encode(t *testing.T, msgs ...pgproto3.FrontendMessage) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestXParkSlowFrames: a parked client's next messages come a byte at a
// time, so that the frame is split across many reads (the first of them by
// the resumed goroutine); then an extended batch split at odd places.
func TestXParkSlowFrames(t *testing.T) {
	for _, m := range parkModes {
		t.Run(m.name, func(t *testing.T) {
			checkGoroutines(t)
			cl := cluster(t, "app")
			p := startProxy(t, parkConfig(cl, 2, m.after))
			hc := hijacked(t, p.AppURL("app"))
			waitParked(t, p, 1)
			for _, b := range encode(t, &pgproto3.Query{String: "SELECT 42"}) {
				if _, err := hc.Conn.Write([]byte{b}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond) // pacing the bytes, not synchronisation
			}
			want := "RowDescription D42 CommandComplete ZI"
			if got := strings.Join(receiveUntilReady(t, hc), " "); got != want {
				t.Fatalf("slow Query: %s, want %s", got, want)
			}
			waitParked(t, p, 1)
			batch := encode(t, &pgproto3.Parse{Query: "SELECT $1::int + 1"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("6")}},
				&pgproto3.Execute{}, &pgproto3.Sync{})
			for _, part := range [][]byte{batch[:3], batch[3:11], batch[11 : len(batch)-2], batch[len(batch)-2:]} {
				if _, err := hc.Conn.Write(part); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // pacing, as above
			}
			want = "ParseComplete BindComplete D7 CommandComplete ZI"
			if got := strings.Join(receiveUntilReady(t, hc), " "); got != want {
				t.Fatalf("split batch: %s, want %s", got, want)
			}
		})
	}
}

// TestXParkPipelineAfterWake: the first thing a parked client sends is a
// pipelined extended-protocol batch of several Syncs in one write; every
// answer comes back in order, and the client parks again after it.
func TestXParkPipelineAfterWake(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, parkConfig(cl, 2, "0s"))
	hc := hijacked(t, p.AppURL("app"))
	waitParked(t, p, 1)
	var msgs []pgproto3.FrontendMessage
	for i := range 5 {
		msgs = append(msgs, &pgproto3.Parse{Name: fmt.Sprintf("s%d", i), Query: fmt.Sprintf("SELECT $1::int * %d", i)},
			&pgproto3.Bind{PreparedStatement: fmt.Sprintf("s%d", i), Parameters: [][]byte{[]byte("10")}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	msgs = append(msgs, &pgproto3.Query{String: "SELECT 1/0"}, &pgproto3.Query{String: "SELECT 'after'"})
	if _, err := hc.Conn.Write(encode(t, msgs...)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want := fmt.Sprintf("ParseComplete BindComplete RowDescription D%d CommandComplete ZI", 10*i)
		if got := strings.Join(receiveUntilReady(t, hc), " "); got != want {
			t.Fatalf("batch %d: %s, want %s", i, got, want)
		}
	}
	if got := strings.Join(receiveUntilReady(t, hc), " "); got != "E"+wire.DivisionByZero+" ZI" {
		t.Fatalf("SELECT 1/0: %s", got)
	}
	if got := strings.Join(receiveUntilReady(t, hc), " "); got != "RowDescription Dafter CommandComplete ZI" {
		t.Fatalf("SELECT 'after': %s", got)
	}
	waitParked(t, p, 1)
}

// TestXParkShutdownAndKill: KILL ends a parked client with 57P01, and
// Shutdown ends every parked client with 57P01, as it ends idle clients
// that were not parked, and returns; over plain TCP and over TLS.
func TestXParkShutdownAndKill(t *testing.T) {
	for _, tlsClients := range []bool{false, true} {
		for _, m := range parkModes {
			name := m.name
			if tlsClients {
				name += "/tls"
			}
			t.Run(name, func(t *testing.T) { testParkShutdownAndKill(t, m.after, tlsClients) })
		}
	}
}

// testParkShutdownAndKill is TestXParkShutdownAndKill with
// limits.client_park_after set to after, over TLS (on the event loop) if
// tlsClients.
func testParkShutdownAndKill(t *testing.T, after string, tlsClients bool) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	cfg := parkConfig(cl, 2, after)
	if tlsClients {
		t.Setenv("SHARDGATE_TEST_EVENT_LOOP", "1")
		fields, _ := clientCert(t)
		cfg = withTLS(t, cfg, fields)
	}
	p := startProxy(t, cfg)
	url := p.AppURL("app")
	if tlsClients {
		url = tlsURL(p, "sslmode=require")
	}
	ctx := context.Background()
	conns := make([]*pgx.Conn, 4)
	for i := range conns {
		conns[i] = connect(t, url)
		mustExec(t, conns[i], "SELECT 1")
	}
	waitParked(t, p, 4)
	var victim uint64
	for _, ci := range p.Listener.Clients() {
		if ci.Database == "app" {
			victim = ci.ID
		}
	}
	if !p.Listener.Kill(victim) {
		t.Fatal("KILL found no client")
	}
	waitParked(t, p, 3)
	killed := 0
	for _, c := range conns {
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			if sqlstate(err) != wire.AdminShutdown {
				t.Fatalf("killed client: %v, want 57P01", err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("%d clients killed, want 1", killed)
	}
	waitParked(t, p, 3)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Listener.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	ended := 0
	for _, c := range conns {
		_, err := c.Exec(ctx, "SELECT 1")
		if got := sqlstate(err); got == wire.AdminShutdown {
			ended++
		} else if err == nil {
			t.Fatal("a client ran a statement after Shutdown")
		}
	}
	if ended != 3 {
		t.Fatalf("%d clients saw 57P01 at shutdown, want 3", ended)
	}
}

// sysClient is a client connection made with bare syscalls: it holds a
// descriptor and nothing on the Go heap, so that the heap of an
// in-process proxy measures the proxy's side only (parkedHeap).
type sysClient int

// dialSys logs in as user (trust) to db with an application_name, as most
// drivers send (the clients' startup parameters count in what an idle
// client costs), and runs SELECT 1, over a blocking socket
// (pgtest.SysLogin).
func dialSys(t testing.TB, port int, user, db string) sysClient {
	t.Helper()
	fd, err := pgtest.SysLogin(port, "user", user, "database", db, "application_name", "park-test")
	if err != nil {
		t.Fatalf("log in over a bare socket: %v", err)
	}
	return sysClient(fd)
}

func (c sysClient) close() { syscall.Close(int(c)) }

// idleConfig is parkConfig (clients park at every idle point) with a
// trust user "idle", for sysClient.
func idleConfig(cl *pgtest.Cluster) string {
	after := "0s"
	if a := os.Getenv("PARK_AFTER"); a != "" {
		after = a
	}
	c := parkConfig(cl, 2, after)
	old := "users:\n"
	return strings.Replace(c, old, fmt.Sprintf("%s  - { name: idle, auth_type: trust, server_user: %s, server_password: %s }\n", old, cl.User, cl.Password), 1)
}

// parkedHeap is what one parked client costs the proxy's Go heap: n
// clients log in, run SELECT 1 and park; the heap after a collection is
// compared with the heap before they connected. Live is the bytes of
// reachable objects (HeapAlloc), inUse the heap spans holding them
// (HeapInuse: live objects plus the free slots of their spans, what RSS
// sees of the heap), objects the number of objects, and rss the process's
// resident memory (VmRSS, after the runtime returned what it could to the
// OS, as the sweep does: everything the Go runtime keeps, heap, stacks,
// goroutine descriptors and its own structures, as bench/idle.sh measures
// a proxy).
func parkedHeap(t testing.TB, p *proxy, n int) (live, inUse, objects, rss float64) {
	t.Helper()
	_, ps, _ := net.SplitHostPort(p.Addr)
	port, _ := strconv.Atoi(ps)
	// Warm-up clients stay parked through the measurement.
	const warm = 100
	conns := make([]sysClient, warm, warm+n)
	defer func() {
		for _, c := range conns {
			c.close()
		}
		waitParked(t, p, 0)
	}()
	for i := range conns {
		conns[i] = dialSys(t, port, "idle", "app")
	}
	waitParked(t, p, warm)
	var m0, m1 runtime.MemStats
	// The buffers kept for resuming clients go before each reading: the
	// sweep may drop them in between (3 MiB, a few kB per client).
	p.Listener.DropKeptBuffers()
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m0)
	rss0 := vmRSS(t)
	par := 1
	if v, _ := strconv.Atoi(os.Getenv("PARK_PAR")); v > 0 {
		par = v
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range par {
		wg.Go(func() {
			for i := w; i < n; i += par {
				c := dialSys(t, port, "idle", "app")
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitParked(t, p, warm+n)
	p.Listener.DropKeptBuffers()
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m1)
	rss1 := vmRSS(t)
	if path := os.Getenv("PARK_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	d := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	if os.Getenv("PARK_MEMSTATS") != "" {
		t.Logf("per client: sys %.0f, heap sys-released %.0f, heap in use %.0f, stacks %.0f, mspan %.0f, gc %.0f, other %.0f; rss %.0f bytes",
			d(m0.Sys, m1.Sys), d(m0.HeapSys-m0.HeapReleased, m1.HeapSys-m1.HeapReleased), d(m0.HeapInuse, m1.HeapInuse),
			d(m0.StackSys, m1.StackSys), d(m0.MSpanSys, m1.MSpanSys), d(m0.GCSys, m1.GCSys), d(m0.OtherSys, m1.OtherSys), d(rss0, rss1))
	}
	return d(m0.HeapAlloc, m1.HeapAlloc), d(m0.HeapInuse, m1.HeapInuse), d(m0.HeapObjects, m1.HeapObjects), d(rss0, rss1)
}

// vmRSS is the test process's resident memory in bytes.
func vmRSS(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("vmRSS: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("vmRSS: %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("vmRSS: no VmRSS in /proc/self/status")
	return 0
}

// TestXParkMemory: a parked idle client costs the proxy's heap at most
// 1.25 kB (892 bytes with the option off and 1 002 with it on measured on
// 2026-12-05, 1 310 and 1 333 before the socket was parked as a bare
// descriptor and the client struct moved to the 704-byte class; PgBouncer's
// whole RSS per idle client is 822 bytes, see docs/benchmarks.md).
func TestXParkMemory(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, idleConfig(cl))
	live, inUse, objects, rss := parkedHeap(t, p, 1000)
	t.Logf("per parked client: %.0f live bytes, %.0f bytes of heap in use, %.1f objects, %.0f bytes of RSS", live, inUse, objects, rss)
	if live > 1280 {
		t.Errorf("a parked client holds %.0f bytes of heap, want at most 1280", live)
	}
}

// BenchmarkParkedClientMemory reports the proxy's heap per parked idle
// client (parkedHeap) for 2 000 clients. Run it once; with
// PARK_HEAP_PROFILE set, parkedHeap writes there the heap profile taken
// while the clients are parked, by allocation site:
//
// PARK_AFTER sets limits.client_park_after (default 0s: each client parks
// after its SELECT 1; with 1s the clients keep their goroutines until the
// sweep parks them, and the runtime keeps the g of every goroutine that
// ran at once, about 450 bytes each, for good) and PARK_PAR how many
// clients log in at once (default 1), PARK_N how many clients park
// (default 2000).
//
//	PARK_HEAP_PROFILE=/tmp/park.mem go test -run '^$' -bench ParkedClientMemory -benchtime 1x -memprofilerate 1 -o /tmp/integration.test ./integration
//	go tool pprof -sample_index inuse_space -top /tmp/integration.test /tmp/park.mem
func BenchmarkParkedClientMemory(b *testing.B) {
	cl := cluster(b, "app")
	p := startProxy(b, idleConfig(cl))
	n := 2000
	if v, _ := strconv.Atoi(os.Getenv("PARK_N")); v > 0 {
		n = v
	}
	var live, inUse, objects, rss float64
	runs := 0
	for b.Loop() {
		l, u, o, r := parkedHeap(b, p, n)
		live, inUse, objects, rss = live+l, inUse+u, objects+o, rss+r
		runs++
	}
	b.ReportMetric(live/float64(runs), "live-B/client")
	b.ReportMetric(inUse/float64(runs), "heap-inuse-B/client")
	b.ReportMetric(objects/float64(runs), "objects/client")
	b.ReportMetric(rss/float64(runs), "rss-B/client")
}

// TestXParkDropsKeptBuffers: the buffers parked clients give back are
// kept for clients that resume, but dropped once no client took one for a
// sweep period: idle clients do not pay for them. Clients that resume
// after that get new buffers and see their answers.
func TestXParkDropsKeptBuffers(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, parkConfig(cl, 2, "50ms"))
	ctx := context.Background()
	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conns[i] = connect(t, p.AppURL("app"))
		mustExec(t, conns[i], "SELECT 1")
	}
	for round := range 2 {
		waitParked(t, p, n)
		eventually(t, 10*time.Second, "no kept buffers", func() bool { return p.Listener.KeptBuffers() == 0 })
		for i, c := range conns {
			var k int
			if err := c.QueryRow(ctx, "SELECT $1::int", i*10+round).Scan(&k); err != nil || k != i*10+round {
				t.Fatalf("client %d round %d: %d, %v", i, round, k, err)
			}
		}
	}
}

// TestXParkTLS: a TLS client of the event loop parks as a plain one does,
// keeping its session, in every protocol mode; and a Query that crypto/tls
// read ahead (a record of its own, in the same TCP segment as the one
// before it) is answered rather than left in the session while the client
// parks, where nothing would wake it.
func TestXParkTLS(t *testing.T) {
	for _, m := range parkModes {
		t.Run(m.name, func(t *testing.T) {
			checkGoroutines(t)
			t.Setenv("SHARDGATE_TEST_EVENT_LOOP", "1")
			cl := cluster(t, "app")
			fields, _ := clientCert(t)
			p := startProxy(t, withTLS(t, trustUser(parkConfig(cl, 2, m.after), cl), fields))
			ctx := context.Background()

			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
				pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheStatement} {
				cfg, err := pgx.ParseConfig(tlsURL(p, "sslmode=require"))
				if err != nil {
					t.Fatal(err)
				}
				cfg.DefaultQueryExecMode = mode
				c, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					t.Fatalf("%v: %v", mode, err)
				}
				mustExec(t, c, "SET work_mem = '77kB'")
				for i := range 3 {
					// Parked before the statement, and again after it: the
					// statement resumed the client.
					waitParked(t, p, 1)
					var wm string
					var k int
					if err := c.QueryRow(ctx, "SELECT current_setting('work_mem'), $1::int", i).Scan(&wm, &k); err != nil {
						t.Fatalf("%v, after a park: %v", mode, err)
					}
					if wm != "77kB" || k != i {
						t.Fatalf("%v, after a park: work_mem %s, $1 %d", mode, wm, k)
					}
				}
				waitParked(t, p, 1)
				for _, ci := range p.Listener.Clients() {
					if !ci.TLS {
						t.Errorf("%v: client %d without TLS", mode, ci.ID)
					}
				}
				c.Close(ctx)
				waitParked(t, p, 0)
			}

			// Two Queries, a TLS record each, in one write to a parked
			// client: crypto/tls reads both records from the socket and
			// hands the client loop the first; the second must not stay
			// in the session when the client parks again.
			tc, held := dialTLSHeld(t, p.Addr, 20*time.Second)
			c := &rawConn{t: t, conn: tc, r: bufio.NewReader(tc)}
			c.write(startupPacket(3, 0, "user", "trusty", "database", "app"))
			c.login()
			for round := range 3 {
				waitParked(t, p, 1)
				held.hold = true
				for _, q := range []string{"SELECT 'first'", "SELECT 'second'"} {
					m, _ := (&pgproto3.Query{String: q}).Encode(nil)
					if _, err := tc.Write(m); err != nil { // a record each
						t.Fatal(err)
					}
				}
				held.hold = false
				if err := held.flush(); err != nil { // both records in one write
					t.Fatal(err)
				}
				var got []string
				for len(got) == 0 || got[len(got)-1] != "Z" || len(got) < 8 {
					typ, body, err := c.next()
					if err != nil {
						t.Fatalf("round %d: the Queries were not both answered: after %q: %v", round, got, err)
					}
					got = append(got, string(typ))
					if typ == 'D' {
						got[len(got)-1] += "[" + string(body[6:]) + "]"
					}
				}
				if s := strings.Join(got, " "); s != "T D[first] C Z T D[second] C Z" {
					t.Fatalf("round %d: answered %q", round, s)
				}
			}
			c.write([]byte{'X', 0, 0, 0, 4})
		})
	}
}

// TestXParkTLSProtocolPaths: a parked TLS client gets, for each protocol
// path a driver takes, what PostgreSQL itself answers the same bytes: a
// multi-statement Query with an error in it, a pipeline of named and
// unnamed statements with one Sync, a row-limited Execute, describe-only
// Parses and a pipeline with a Flush. Each step is one write (one TLS
// record) to a parked client, and the client parks again after it.
func TestXParkTLSProtocolPaths(t *testing.T) {
	cl := cluster(t, "app")
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT 1; SELECT 'two'::text; SELECT 3/0; SELECT 4")}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("n", "SELECT $1::int * 2"),
			&pgproto3.Bind{PreparedStatement: "n", Parameters: [][]byte{[]byte("21")}}, &pgproto3.Describe{ObjectType: 'P'}, execMsg(0),
			parseMsg("", "SELECT 'unnamed'::text"), bindMsg(""), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("", "SELECT g FROM generate_series(1, 5) g"), bindMsg(""),
			execMsg(2), execMsg(2), execMsg(2), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("d", "SELECT $1::text AS t, $2::int AS i"), &pgproto3.Describe{ObjectType: 'S', Name: "d"},
			parseMsg("", "SELECT now()"), &pgproto3.Describe{ObjectType: 'S'}, syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "n", Parameters: [][]byte{[]byte("5")}}, execMsg(0), flushMsg}, n: 3},
		{send: []pgproto3.FrontendMessage{syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN; SELECT 1"), queryMsg("SELECT 1/0"), queryMsg("ROLLBACK")}, zs: 3},
	}
	want := wireDirect(t, cl, steps)
	for _, m := range parkModes {
		t.Run(m.name, func(t *testing.T) {
			checkGoroutines(t)
			t.Setenv("SHARDGATE_TEST_EVENT_LOOP", "1")
			fields, _ := clientCert(t)
			p := startProxy(t, withTLS(t, parkConfig(cl, 2, m.after), fields))
			w := dialWire(t, tlsURL(p, "sslmode=require"))
			defer w.close()
			for i, st := range steps {
				if i != 5 { // step 4's Flush left its batch open: the client did not park
					waitParked(t, p, 1)
				}
				sameWire(t, fmt.Sprintf("step %d through a parked TLS client", i), steps[i:i+1], w.run([]wireStep{st}, nil), want[i:i+1])
			}
			waitParked(t, p, 1)
			if ci := p.Listener.Clients(); len(ci) != 1 || !ci[0].TLS {
				t.Fatalf("clients %+v, want one over TLS", ci)
			}
		})
	}
}
