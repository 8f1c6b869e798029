package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// TestPool checks checkout and checkin against one PostgreSQL server.
func TestPool(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	for _, tc := range []struct {
		name string
		test func(*testing.T, *pgtest.Cluster)
	}{
		{"order", testCheckoutOrder},
		{"timeout", testCheckoutTimeout},
		{"context", testCheckoutContext},
		{"close", testCloseWakesWaiters},
		{"broken", testBrokenServerReplaced},
		{"stale plans", testStalePlans},
		{"queue", testQueueStartup},
		{"no timeout", testCheckoutNoTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, cl) })
	}
}

// newTestPool returns a pool of size servers of cl.
func newTestPool(t testing.TB, cl *pgtest.Cluster, size int, checkoutTimeout time.Duration) *Pool {
	t.Helper()
	var ids atomic.Uint64
	p := New(Key{Database: "postgres", User: cl.User, Role: "primary"},
		Target{Host: cl.Host, Port: cl.Port, Database: "postgres", User: cl.User, SSLMode: config.SSLDisable},
		config.Pool{Mode: config.PoolTransaction, Size: size, CheckoutTimeout: checkoutTimeout, ConnectTimeout: 5 * time.Second},
		slog.New(slog.DiscardHandler), &ids)
	t.Cleanup(p.Close)
	return p
}

// checkoutQueued starts a checkout that must wait, and returns once it is
// queued; the server it gets comes on the channel.
func checkoutQueued(t *testing.T, p *Pool) <-chan *Server {
	t.Helper()
	waiting := p.Snapshot().Waiting
	got := make(chan *Server, 1)
	go func() {
		s, err := p.Checkout(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == waiting+1 })
	return got
}

func checkout(t testing.TB, p *Pool) *Server {
	t.Helper()
	s, err := p.Checkout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testCheckoutOrder: idle servers are lent last-in first-out (the warmest
// first), and waiting clients are served first-in first-out.
func testCheckoutOrder(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 2, 10*time.Second)
	a, b := checkout(t, p), checkout(t, p)
	p.Checkin(a)
	p.Checkin(b)
	if s := checkout(t, p); s != b {
		t.Fatalf("got server %d, want the last one checked in (%d)", s.ID, b.ID)
	}
	if s := checkout(t, p); s != a {
		t.Fatalf("got server %d, want %d", s.ID, a.ID)
	}

	// Both servers are out: three waiters queue up and are served in
	// the order they came, one per checkin.
	type served struct {
		i int
		s *Server
	}
	got := make(chan served, 3)
	for i := range 3 {
		go func() {
			s, err := p.Checkout(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- served{i, s}
		}()
		waitFor(t, func() bool { return p.Snapshot().Waiting == i+1 })
	}
	back := []*Server{a, b}
	for want := range 3 {
		p.Checkin(back[0])
		back = back[1:]
		r := <-got
		if r.i != want || r.s == nil {
			t.Fatalf("waiter %d served in position %d", r.i, want)
		}
		back = append(back, r.s)
	}
	for _, s := range back {
		p.Checkin(s)
	}
}

// testCheckoutTimeout: a checkout that waits longer than checkout_timeout
// fails with SQLSTATE 53300 and leaves the pool consistent.
func testCheckoutTimeout(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 100*time.Millisecond)
	s := checkout(t, p)
	start := time.Now()
	_, err := p.Checkout(context.Background())
	e, ok := wire.AsError(err)
	if !ok || e.Code != wire.TooManyConnections {
		t.Fatalf("got %v, want a 53300 error", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("gave up after %s, before checkout_timeout", took)
	}
	if snap := p.Snapshot(); snap.Waiting != 0 || snap.Active != 1 {
		t.Fatalf("after the timeout: %+v", snap)
	}
	if p.Stats.Timeouts.Load() != 1 {
		t.Fatalf("timeouts counted: %d", p.Stats.Timeouts.Load())
	}
	p.Checkin(s)
	if s2 := checkout(t, p); s2 != s {
		t.Fatal("the idle server was not reused")
	}
}

// testCheckoutNoTimeout: checkout_timeout 0 waits until a server comes
// back, however long (here past the other tests' timeouts), on both paths.
func testCheckoutNoTimeout(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 0)
	s := checkout(t, p)
	got := checkoutQueued(t, p)
	_, q, err := p.QueueStartup(Startup{}, func() {})
	if q == nil || err != nil || !q.Deadline().IsZero() {
		t.Fatalf("queued %v, %v; want a checkout without deadline", q, err)
	}
	time.Sleep(200 * time.Millisecond) // longer than the 100 ms that time out elsewhere
	select {
	case s := <-got:
		t.Fatalf("checkout returned %v without a checkin", s)
	default:
	}
	p.Checkin(s)
	s = <-got
	p.Checkin(s)
	if !q.Ready() {
		t.Fatal("the queued checkout was not handed the second checkin")
	}
	s, err = q.Take(context.Background())
	if err != nil || p.Stats.Timeouts.Load() != 0 {
		t.Fatalf("take: %v; %d timeouts", err, p.Stats.Timeouts.Load())
	}
	p.Checkin(s)
}

// testCheckoutContext: a waiter whose context ends gives up.
func testCheckoutContext(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, time.Minute)
	checkout(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Checkout(ctx)
		errc <- err
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("checkout succeeded after its context ended")
	}
	if w := p.Snapshot().Waiting; w != 0 {
		t.Fatalf("%d waiters left", w)
	}
}

// testCloseWakesWaiters: closing the pool fails its waiters with ErrClosed
// and closes servers as they come back.
func testCloseWakesWaiters(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, time.Minute)
	s := checkout(t, p)
	errc := make(chan error, 1)
	go func() {
		_, err := p.Checkout(context.Background())
		errc <- err
	}()
	waitFor(t, func() bool { return p.Snapshot().Waiting == 1 })
	p.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter got %v, want ErrClosed", err)
	}
	p.Checkin(s)
	if s.State() != ServerClosed {
		t.Fatalf("server checked in to a closed pool is %s", s.State())
	}
	if _, err := p.Checkout(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("checkout from a closed pool: %v", err)
	}
}

// testBrokenServerReplaced: a server checked in as broken is closed, and a
// client waiting for it gets a new connection.
func testBrokenServerReplaced(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 10*time.Second)
	s := checkout(t, p)
	got := checkoutQueued(t, p)
	s.Broken = true
	p.Checkin(s)
	s2 := <-got
	if s2 == nil || s2 == s || s.State() != ServerClosed {
		t.Fatalf("waiter got %v; the broken server is %s", s2, s.State())
	}
	if opened := p.Stats.Opened.Load(); opened != 2 {
		t.Fatalf("%d connections opened, want 2", opened)
	}
}

// testQueueStartup: QueueStartup takes an idle server at once, leaves a
// checkout that would connect to the caller, and otherwise queues it: a
// checkin hands the server over and runs notify; a broken server's
// checkin hands a slot (Connects); Cancel at the deadline fails with 53300
// and leaves no waiter; Close hands ErrClosed.
func testQueueStartup(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 50*time.Millisecond)
	var notified atomic.Int32
	notify := func() { notified.Add(1) }
	ctx := context.Background()

	// Empty pool with room: the caller connects.
	if s, q, err := p.QueueStartup(Startup{}, notify); s != nil || q != nil || err != nil {
		t.Fatalf("empty pool: %v, %v, %v; want all nil", s, q, err)
	}
	a := checkout(t, p)
	p.Checkin(a)
	if s, q, err := p.QueueStartup(Startup{}, notify); s != a || q != nil || err != nil {
		t.Fatalf("idle server: %v, %v, %v; want server %d", s, q, err, a.ID)
	}

	// Full: queued; the checkin hands the server and notifies.
	_, q, err := p.QueueStartup(Startup{}, notify)
	if q == nil || err != nil {
		t.Fatalf("full pool: queued %v, err %v", q, err)
	}
	if q.Ready() || p.Snapshot().Waiting != 1 {
		t.Fatalf("ready before a checkin, or not waiting: %+v", p.Snapshot())
	}
	p.Checkin(a)
	if notified.Load() != 1 || !q.Ready() || q.Connects() {
		t.Fatalf("after checkin: notified %d, ready %v, connects %v", notified.Load(), q.Ready(), q.Connects())
	}
	if s, err := q.Take(ctx); s != a || err != nil {
		t.Fatalf("take: %v, %v", s, err)
	}

	// A broken server's checkin hands a slot to connect in.
	_, q, _ = p.QueueStartup(Startup{}, notify)
	a.Broken = true
	p.Checkin(a)
	if !q.Ready() || !q.Connects() || notified.Load() != 2 {
		t.Fatalf("after a broken checkin: ready %v, connects %v, notified %d", q.Ready(), q.Connects(), notified.Load())
	}
	b, err := q.Take(ctx)
	if err != nil || b == nil || b == a {
		t.Fatalf("take of a slot: %v, %v", b, err)
	}

	// Given up at the deadline: 53300, no waiter left, counted.
	_, q, _ = p.QueueStartup(Startup{}, notify)
	if d := time.Until(q.Deadline()); d <= 0 || d > 50*time.Millisecond {
		t.Fatalf("deadline in %s, want within checkout_timeout", d)
	}
	if _, err := q.Cancel(ctx); err == nil {
		t.Fatal("cancel returned no error")
	} else if e, ok := wire.AsError(err); !ok || e.Code != wire.TooManyConnections {
		t.Fatalf("cancel: %v, want 53300", err)
	}
	if w := p.Snapshot().Waiting; w != 0 || p.Stats.Timeouts.Load() != 1 {
		t.Fatalf("after cancel: %d waiters, %d timeouts", w, p.Stats.Timeouts.Load())
	}

	// Handed a server and then cancelled: the server is the checkout's.
	_, q, _ = p.QueueStartup(Startup{}, notify)
	p.Checkin(b)
	if s, err := q.Cancel(ctx); s != b || err != nil {
		t.Fatalf("cancel after the hand-over: %v, %v; want server %d", s, err, b.ID)
	}

	// Close fails the queued checkout.
	_, q, _ = p.QueueStartup(Startup{}, notify)
	p.Close()
	if !q.Ready() {
		t.Fatal("not ready after Close")
	}
	if _, err := q.Take(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("take after Close: %v", err)
	}
	p.Checkin(b)
}

// testStalePlans: the server's "cached plan must not change result type"
// marks it StalePlans, told by SQLSTATE and routine rather than by message;
// another 0A000 does not; and checkin deallocates its statements.
func testStalePlans(t *testing.T, cl *pgtest.Cluster) {
	p := newTestPool(t, cl, 1, 10*time.Second)
	s := checkout(t, p)
	for _, sql := range []string{
		"CREATE TEMP TABLE stale (x int)",
		"PREPARE stale_s AS SELECT * FROM stale",
		"EXECUTE stale_s",
	} {
		if errs := noteErrors(t, s, sql); len(errs) != 0 {
			t.Fatalf("%s: %v", sql, errs[0])
		}
	}
	// Another 0A000, raised by CheckSelectLocking.
	errs := noteErrors(t, s, "SELECT count(*) FROM stale FOR UPDATE")
	if len(errs) != 1 || errs[0].Code != wire.FeatureNotSupported || s.StalePlans {
		t.Fatalf("FOR UPDATE with an aggregate: errors %+v, StalePlans %v", errs, s.StalePlans)
	}
	noteErrors(t, s, "ALTER TABLE stale ADD COLUMN y int")
	errs = noteErrors(t, s, "EXECUTE stale_s")
	if len(errs) != 1 || errs[0].Code != wire.FeatureNotSupported || !s.StalePlans {
		t.Fatalf("EXECUTE after ALTER TABLE: errors %+v, StalePlans %v", errs, s.StalePlans)
	}
	s.Prepared["stale_s"] = struct{}{}
	p.Checkin(s)
	if s.Broken || s.StalePlans || len(s.Prepared) != 0 {
		t.Fatalf("after checkin: broken %v, StalePlans %v, prepared %v", s.Broken, s.StalePlans, s.Prepared)
	}
}

// TestStaleCachedPlan tells the stale-plan error by SQLSTATE and routine
// only: a translated message still counts, an English one from another
// routine does not.
func TestStaleCachedPlan(t *testing.T) {
	tests := []struct {
		name string
		e    wire.Error
		want bool
	}{
		{"PostgreSQL's", wire.Error{Code: wire.FeatureNotSupported, Message: "cached plan must not change result type", Routine: "RevalidateCachedQuery"}, true},
		{"translated", wire.Error{Code: wire.FeatureNotSupported, Message: "le plan en cache ne doit pas modifier le type de résultat", Routine: "RevalidateCachedQuery"}, true},
		{"no routine", wire.Error{Code: wire.FeatureNotSupported, Message: "cached plan must not change result type"}, false},
		{"other 0A000", wire.Error{Code: wire.FeatureNotSupported, Message: "FOR UPDATE is not allowed with aggregate functions", Routine: "CheckSelectLocking"}, false},
		{"other code", wire.Error{Code: wire.InternalError, Routine: "RevalidateCachedQuery"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := staleCachedPlan(&tc.e); got != tc.want {
				t.Errorf("staleCachedPlan(%+v) = %v, want %v", tc.e, got, tc.want)
			}
		})
	}
}

// noteErrors runs sql on s as a simple Query and passes each ErrorResponse
// to NoteError, as the frontend's relay does.
func noteErrors(t *testing.T, s *Server, sql string) []*wire.Error {
	t.Helper()
	s.W.Write(wire.AppendQuery(nil, sql))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var errs []*wire.Error
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		switch typ {
		case 'E':
			e := wire.ParseError(body)
			s.NoteError(e)
			errs = append(errs, e)
		case 'Z':
			return errs
		}
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
