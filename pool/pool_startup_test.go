package pool

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// TestPoolStartup checks that servers are lent only to checkouts of the
// startup parameters they were opened with, within the pool's size.
func TestPoolStartup(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	for _, tc := range []struct {
		name string
		test func(*testing.T, *pgtest.Cluster)
	}{
		{"reuse", testStartupReuse},
		{"settings", testStartupSettings},
		{"evict", testStartupEvict},
		{"waiter", testStartupWaiter},
		{"pass over", testStartupPassOver},
		{"rejected", testStartupRejected},
		{"rejected waiter", testStartupRejectedWaiter},
		{"budget", testStartupBudget},
		{"params", testStartupParams},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, cl) })
	}
}

var (
	german  = NewStartup(map[string]string{"DateStyle": "German, DMY"})
	sqlDMY  = NewStartup(map[string]string{"DateStyle": "SQL, DMY"})
	workMem = NewStartup(map[string]string{"options": "-c work_mem=1234kB", "extra_float_digits": "3"})
	bogus   = NewStartup(map[string]string{"work_mem": "bogus"})
)

func checkoutStartup(t testing.TB, p *Pool, st Startup) *Server {
	t.Helper()
	s, err := p.CheckoutStartup(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if s.Startup().Key() != st.Key() {
		t.Fatalf("checkout for %q got a server opened with %q", st.Key(), s.Startup().Key())
	}
	return s
}

// testStartupReuse: a checkout takes an idle server of its Startup and
// opens another for a different one while the pool has room.
func testStartupReuse(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 3, 10*time.Second)
	a := checkoutStartup(t, p, german)
	p.Checkin(a)
	z := checkout(t, p)
	if z == a {
		t.Fatal("a checkout with no startup parameters got the German server")
	}
	p.Checkin(z)
	if s := checkoutStartup(t, p, NewStartup(map[string]string{"datestyle": "German, DMY"})); s != a {
		t.Fatalf("got server %d, want the idle German one (%d)", s.ID, a.ID)
	}
	if s := checkout(t, p); s != z {
		t.Fatalf("got server %d, want the idle plain one (%d)", s.ID, z.ID)
	}
	if n := p.Stats.Opened.Load(); n != 2 {
		t.Fatalf("%d connections opened, want 2", n)
	}
}

// testStartupSettings: a server opened with a Startup has the client's
// values as its session's reset values, as a direct connection has.
func testStartupSettings(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 2, 10*time.Second)
	s := checkoutStartup(t, p, german)
	defer p.Checkin(s)
	if got := s.Params["DateStyle"]; got != "German, DMY" {
		t.Fatalf("the server reported DateStyle %q", got)
	}
	for _, tc := range []struct{ sql, want string }{
		{"SHOW datestyle", "German, DMY"},
		{"SELECT source || ' ' || reset_val FROM pg_settings WHERE name = 'DateStyle'", "client German, DMY"},
		{"SET datestyle = 'ISO, MDY'; RESET datestyle; SHOW datestyle", "German, DMY"},
		{"SET datestyle = 'ISO, MDY'; RESET ALL; SHOW datestyle", "German, DMY"},
	} {
		if got := query(t, s, tc.sql); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.sql, got, tc.want)
		}
	}

	// options goes through as the startup packet's options parameter.
	w := checkoutStartup(t, p, workMem)
	defer p.Checkin(w)
	for _, tc := range []struct{ sql, want string }{
		{"SHOW work_mem", "1234kB"},
		{"SELECT source || ' ' || reset_val FROM pg_settings WHERE name = 'work_mem'", "client 1234"},
		{"SHOW extra_float_digits", "3"},
		{"SHOW datestyle", "ISO, MDY"},
	} {
		if got := query(t, w, tc.sql); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.sql, got, tc.want)
		}
	}
}

// testStartupEvict: a full pool closes its least recently used idle server
// of another Startup to open one for a checkout, within its size.
func testStartupEvict(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 2, 10*time.Second)
	a, b := checkoutStartup(t, p, german), checkout(t, p)
	p.Checkin(a)
	p.Checkin(b)
	start := time.Now()
	c := checkoutStartup(t, p, sqlDMY)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the checkout waited %s", took)
	}
	if a.State() != ServerClosed || b.State() != ServerIdle {
		t.Fatalf("German server %s, plain server %s: want the least recently used (German) closed", a.State(), b.State())
	}
	if got := p.Stats.Evicted.Load(); got != 1 {
		t.Fatalf("%d evicted, want 1", got)
	}
	if got := query(t, c, "SHOW datestyle"); got != "SQL, DMY" {
		t.Fatalf("datestyle %q", got)
	}
	p.Checkin(c)
	checkPool(t, p, 2, 0)
}

// testStartupWaiter: a waiter handed a server of another Startup closes it
// and opens its own in its place.
func testStartupWaiter(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 10*time.Second)
	s := checkout(t, p)
	got := make(chan *Server, 1)
	go func() {
		s, err := p.CheckoutStartup(context.Background(), german)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == 1 })
	p.Checkin(s)
	g := <-got
	if g == nil || g == s || s.State() != ServerClosed || g.Startup().Key() != german.Key() {
		t.Fatalf("waiter got %v; the plain server is %s", g, s.State())
	}
	if got := query(t, g, "SHOW datestyle"); got != "German, DMY" {
		t.Fatalf("datestyle %q", got)
	}
	p.Checkin(g)
	checkPool(t, p, 1, 0)
}

// testStartupPassOver: a checked-in server goes to the first waiter of its
// Startup, but a waiter is passed over at most maxPassOver times.
func testStartupPassOver(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 10*time.Second)
	s := checkout(t, p)
	type served struct {
		name string
		s    *Server
	}
	got := make(chan served, 2)
	wait := func(name string, st Startup) {
		n := p.Snapshot().Waiting
		go func() {
			s, err := p.CheckoutStartup(context.Background(), st)
			if err != nil {
				t.Error(err)
			}
			got <- served{name, s}
		}()
		waitFor(t, func() bool { return p.Snapshot().Waiting == n+1 })
	}
	wait("german", german)
	for range maxPassOver {
		wait("plain", Startup{})
		p.Checkin(s)
		r := <-got
		if r.name != "plain" || r.s != s {
			t.Fatalf("%s waiter got server %v, want the plain waiter to get the plain server", r.name, r.s)
		}
	}
	wait("plain", Startup{})
	p.Checkin(s)
	r := <-got
	if r.name != "german" || r.s == s || r.s.Startup().Key() != german.Key() {
		t.Fatalf("%s waiter served after %d passes; want the German waiter, with a new server", r.name, maxPassOver)
	}
	p.Checkin(r.s)
	r = <-got
	if r.name != "plain" || r.s.Startup().Key() != "" {
		t.Fatalf("%s waiter served last", r.name)
	}
	p.Checkin(r.s)
	checkPool(t, p, 1, 0)
}

// testStartupRejected: the server's refusal of a startup parameter reaches
// the caller as the server's error, frees the slot, and does not count
// against the pool's health.
func testStartupRejected(t *testing.T, cl *pgtest.Cluster) {
	const size = 2
	p := newTestPool(t, cl, size, 10*time.Second)
	for range 3 * size {
		_, err := p.CheckoutStartup(context.Background(), bogus)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Fatalf("got %v, want a *pgconn.PgError", err)
		}
		if pe.Severity != "FATAL" || pe.Code != wire.InvalidParameterValue || pe.Message != `invalid value for parameter "work_mem": "bogus"` {
			t.Fatalf("got %s %s %q", pe.Severity, pe.Code, pe.Message)
		}
		if !IsStartupRejected(err) {
			t.Fatalf("IsStartupRejected(%v) = false", err)
		}
		if _, ok := wire.AsError(err); ok {
			t.Fatalf("the rejection is a proxy error: %v", err)
		}
	}
	if snap := p.Snapshot(); snap.Active != 0 || snap.ConnectErr != nil {
		t.Fatalf("after the rejections: %+v", snap)
	}
	if n := p.Stats.ConnectErrs.Load(); n != 0 {
		t.Fatalf("%d connect errors counted", n)
	}
	checkPool(t, p, 0, 0)
	start := time.Now()
	var held []*Server
	for range size {
		held = append(held, checkout(t, p))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the checkouts took %s", took)
	}
	for _, s := range held {
		p.Checkin(s)
	}

	// A rejection with no startup parameters would be the server's
	// problem: an unknown setting in the zero Startup cannot happen, so
	// check the other side with a Target the server refuses.
	bad := newTestPool(t, cl, 1, 10*time.Second)
	bad.Target.Database = "nosuch"
	if _, err := bad.CheckoutStartup(context.Background(), german); err == nil || IsStartupRejected(err) {
		t.Fatalf("a missing database: %v (rejected: %v)", err, IsStartupRejected(err))
	}
	if bad.Snapshot().ConnectErr == nil {
		t.Fatal("a missing database was not kept as the pool's connect error")
	}
}

// testStartupRejectedWaiter: a waiter whose parameters are refused hands its
// slot on, so the waiters behind it do not wait for a checkin.
func testStartupRejectedWaiter(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, time.Minute)
	s := checkout(t, p)
	errc := make(chan error, 1)
	go func() {
		_, err := p.CheckoutStartup(context.Background(), bogus)
		errc <- err
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == 1 })
	got := make(chan *Server, 1)
	go func() {
		s, err := p.CheckoutStartup(context.Background(), german)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == 2 })
	p.Checkin(s) // to the first waiter, which closes it and is refused
	if err := <-errc; !IsStartupRejected(err) {
		t.Fatalf("the bogus waiter got %v", err)
	}
	select {
	case g := <-got:
		if g.Startup().Key() != german.Key() {
			t.Fatalf("the German waiter got a server of %q", g.Startup().Key())
		}
		p.Checkin(g)
	case <-time.After(10 * time.Second):
		t.Fatal("the German waiter is still waiting")
	}
	checkPool(t, p, 1, 0)
}

// testStartupBudget: concurrent checkouts of mixed Startups never have
// more servers open than the pool's size, and each gets a server of its
// own Startup.
func testStartupBudget(t *testing.T, cl *pgtest.Cluster) {
	const size = 3
	p := newTestPool(t, cl, size, time.Minute)
	sets := []Startup{{}, german, sqlDMY, workMem}
	dateStyles := []string{"ISO, MDY", "German, DMY", "SQL, DMY", "ISO, MDY"}
	stop := make(chan struct{})
	sampled := make(chan int)
	go func() {
		n := 0
		defer func() { sampled <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.mu.Lock()
			open, servers := p.open, len(p.servers)
			p.mu.Unlock()
			if open > size || servers > size {
				t.Errorf("%d slots taken, %d servers open: more than %d", open, servers, size)
				return
			}
			n++
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 * size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 25 {
				i := r.IntN(len(sets))
				s, err := p.CheckoutStartup(context.Background(), sets[i])
				if err != nil {
					t.Error(err)
					return
				}
				if s.Startup().Key() != sets[i].Key() || s.Params["DateStyle"] != dateStyles[i] {
					t.Errorf("checkout for %q got a server of %q with DateStyle %q", sets[i].Key(), s.Startup().Key(), s.Params["DateStyle"])
				}
				if r.IntN(4) == 0 {
					time.Sleep(time.Millisecond)
				}
				p.Checkin(s)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if n := <-sampled; n == 0 {
		t.Error("the pool was never sampled")
	}
	p.mu.Lock()
	open, idle, servers := p.open, len(p.idle), len(p.servers)
	p.mu.Unlock()
	if open > size || idle != open || servers != open || p.Snapshot().Active != 0 {
		t.Fatalf("at rest: %d slots, %d idle, %d servers, %+v", open, idle, servers, p.Snapshot())
	}
	t.Logf("%d opened, %d evicted for %d checkouts", p.Stats.Opened.Load(), p.Stats.Evicted.Load(), p.Stats.Checkouts.Load())
}

// testStartupParams: the parameter statuses of each Startup are kept apart.
func testStartupParams(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 2, 10*time.Second)
	if p.CachedParamsFor(german) != nil || p.CachedParams() != nil {
		t.Fatal("parameters cached before any connection")
	}
	p.Checkin(checkoutStartup(t, p, german))
	if got := p.CachedParamsFor(german)["DateStyle"]; got != "German, DMY" {
		t.Fatalf("German DateStyle %q", got)
	}
	if p.CachedParams() != nil {
		t.Fatal("the German server's parameters were cached for the zero Startup")
	}
	params, err := p.Params(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if params["DateStyle"] != "ISO, MDY" || p.CachedParams()["DateStyle"] != "ISO, MDY" {
		t.Fatalf("zero Startup DateStyle %q", params["DateStyle"])
	}
	if p.CachedParamsFor(sqlDMY) != nil {
		t.Fatal("parameters cached for a Startup never connected with")
	}
}

// checkPool checks the pool's bookkeeping at rest: open slots, all idle
// but active.
func checkPool(t *testing.T, p *Pool, open, active int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open != open || p.active != active || len(p.idle) != open-active || len(p.servers) != open {
		t.Fatalf("%d slots (want %d), %d active (want %d), %d idle, %d servers",
			p.open, open, p.active, active, len(p.idle), len(p.servers))
	}
}

// query runs sql on s with the simple protocol and returns the first
// column of its last row.
func query(t *testing.T, s *Server, sql string) string {
	t.Helper()
	s.W.Write(wire.AppendQuery(nil, sql))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var val string
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case 'D':
			// Int16 column count, then Int32 length and bytes.
			if n := int32(binary.BigEndian.Uint32(body[2:])); n >= 0 {
				val = string(body[6 : 6+n])
			}
		case 'E':
			s.Broken = true
			t.Fatalf("%s: %q", sql, body)
		case 'Z':
			return val
		}
	}
}
