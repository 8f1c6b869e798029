package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/clock"
	"github.com/shardgate/shardgate/metrics"
	"github.com/shardgate/shardgate/wire"
)

// The roles of a pool's servers (Key.Role, ShardHealth.Role), as the
// admin database and the metrics name them.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

// Key names one pool.
type Key struct {
	Database string
	User     string
	Shard    int
	Role     string // RolePrimary or RoleReplica
	Replica  int    // index in the shard's replicas; 0 for the primary
}

func (k Key) String() string {
	if k.Role == RoleReplica {
		return fmt.Sprintf("%s/%s/shard%d/%s%d", k.Database, k.User, k.Shard, k.Role, k.Replica)
	}
	return fmt.Sprintf("%s/%s/shard%d/%s", k.Database, k.User, k.Shard, k.Role)
}

// aliveCheckAfter is how long a server must have been idle before
// checkout probes its socket (Server.Alive, one MSG_PEEK recv). Under load
// servers are reused within milliseconds and the probe would be one failing
// syscall per transaction, pure cost: PgBouncer does not probe either. A
// server that died less than aliveCheckAfter ago is lent as if alive; the
// client's first round trip then meets its FATAL or a failed write before
// anything of the client's ran, and the frontend runs the round trip again
// on another server (frontend/retry.go), after CloseDeadIdle.
const aliveCheckAfter = time.Second

// ErrClosed is returned by Checkout on a pool that was closed (reload or
// shutdown).
var ErrClosed = errors.New("pool closed")

// Stats are a pool's counters, read by the admin database and metrics.
// Every update is an atomic add. When a reload replaces a pool by one with
// the same Key, the new pool shares the old one's Stats, so counters keep
// growing across reloads.
type Stats struct {
	Checkouts   atomic.Uint64
	WaitNanos   atomic.Uint64 // total time clients waited for a server
	Timeouts    atomic.Uint64
	ConnectErrs atomic.Uint64
	Opened      atomic.Uint64
	Closed      atomic.Uint64
	// Evicted counts servers closed to open one with another Startup in
	// their place, because the pool was full.
	Evicted atomic.Uint64

	// The counters below are kept by the clients of the pool (package
	// frontend). A query is one round trip: a simple Query, or an
	// extended-protocol batch up to Sync or Flush. A transaction ends when
	// the server reports ReadyForQuery idle.
	Transactions atomic.Uint64
	Queries      atomic.Uint64
	// BytesIn and BytesOut count bytes received from and sent to the
	// pool's servers (one add per socket read or write).
	BytesIn    atomic.Uint64
	BytesOut   atomic.Uint64
	XactNanos  atomic.Uint64
	QueryNanos atomic.Uint64
	Errors     metrics.ErrorCounts // ErrorResponses sent to clients, by SQLSTATE class
	XactTime   metrics.Histogram
	QueryTime  metrics.Histogram
	WaitTime   metrics.Histogram // checkout wait, including immediate checkouts
}

// Pool lends server connections of one Key.
type Pool struct {
	Key    Key
	Target Target
	Config config.Pool
	Stats  *Stats

	log    *slog.Logger
	nextID *atomic.Uint64

	mu       sync.Mutex // guards the following
	idle     []*Server  // LIFO stack
	waiters  []*waiter  // FIFO queue
	open     int        // servers open or being opened
	active   int
	closed   bool
	params   paramCache           // ParameterStatus of the first connection of each Startup
	maxWait  time.Time            // oldest waiter's start, for SHOW POOLS
	servers  map[*Server]struct{} // every open server, idle or checked out
	connErr  error                // the last failed connection attempt, nil after a success
	connAt   time.Time            // when connErr was set
	stopReap chan struct{}
	reapDone chan struct{}
}

// waiter is a checkout waiting for a server.
type waiter struct {
	ch     chan result
	start  time.Time
	st     Startup
	passed int    // how often a later waiter was served first; see nextWaiter
	notify func() // run after ch is sent to, if not nil (QueueStartup)
}

// hand gives the waiter its result (p.mu not held).
func (w *waiter) hand(r result) {
	w.ch <- r
	if w.notify != nil {
		w.notify()
	}
}

// result is what a waiter is handed: an error, or a server (which may be of
// another Startup), or neither: a slot, counted in open and active, to
// connect in.
type result struct {
	s   *Server
	err error
}

// New creates a pool and starts its maintenance goroutine.
func New(key Key, t Target, cfg config.Pool, log *slog.Logger, ids *atomic.Uint64) *Pool {
	return newPool(key, t, cfg, log, ids, &Stats{})
}

// newPool is New with the Stats to count into (shared with the pool this
// one replaces on reload).
func newPool(key Key, t Target, cfg config.Pool, log *slog.Logger, ids *atomic.Uint64, stats *Stats) *Pool {
	p := &Pool{Key: key, Target: t, Config: cfg, Stats: stats, log: log.With("pool", key.String()), nextID: ids,
		servers: map[*Server]struct{}{}, stopReap: make(chan struct{}), reapDone: make(chan struct{})}
	go p.maintain()
	return p
}

// Checkout returns a server connection opened with the zero Startup,
// waiting up to checkout_timeout (or ctx) for one.
func (p *Pool) Checkout(ctx context.Context) (*Server, error) {
	return p.CheckoutStartup(ctx, Startup{})
}

// CheckoutStartup returns a server connection opened with the startup
// parameters of st, waiting up to checkout_timeout (or ctx) for one.
//
// Servers of every Startup share the pool's size. A checkout takes the
// most recently used idle server of st's Key; else it opens one while
// fewer than size are open; else it closes the least recently used idle
// server, of another Key, and opens one in its place; else it waits. When
// the server refuses st's parameters the error is a *StartupRejectedError
// (see IsStartupRejected).
func (p *Pool) CheckoutStartup(ctx context.Context, st Startup) (*Server, error) {
	now := clock.Mono()
	p.mu.Lock()
	if s, err := p.checkoutIdle(st.key, now); s != nil || err != nil {
		return s, err
	}
	var evict *Server
	switch {
	case p.open < p.Config.Size:
		p.open++
	case len(p.idle) > 0:
		// The slot of the idle server is reused: open does not change.
		evict = p.idle[0]
		p.idle = slices.Delete(p.idle, 0, 1)
	default:
		return p.wait(ctx, st, clock.At(now)) // unlocks p.mu
	}
	p.active++
	p.mu.Unlock()
	if evict != nil {
		p.Stats.Evicted.Add(1)
		p.discard(evict)
	}
	return p.connectSlot(ctx, st)
}

// QueueStartup is CheckoutStartup for a caller that must not block (the
// frontend's event loop): it neither waits nor connects. It returns an idle
// server of st's Key at once (s), or ErrClosed; when the pool is full and
// has no idle server to take or replace, it queues the checkout and
// returns its place in the queue (q), and notify runs once q is Ready — on
// the goroutine that hands it something, without the pool's lock held, so
// notify must not block. When the checkout would open a connection instead,
// everything is nil: the caller then checks out with CheckoutStartup, where
// it may block.
func (p *Pool) QueueStartup(st Startup, notify func()) (s *Server, q *Queued, err error) {
	return p.QueueStartupAt(st, notify, clock.Mono())
}

// QueueStartupAt is QueueStartup at now, a clock.Mono time the caller read
// (the frontend's event loop reads the clock once per turn, not once per
// checkout).
func (p *Pool) QueueStartupAt(st Startup, notify func(), now time.Duration) (s *Server, q *Queued, err error) {
	p.mu.Lock()
	if s, err := p.checkoutIdle(st.key, now); s != nil || err != nil {
		return s, nil, err
	}
	if p.open < p.Config.Size || len(p.idle) > 0 {
		p.mu.Unlock()
		return nil, nil, nil
	}
	return nil, p.queue(st, clock.At(now), notify), nil // unlocks p.mu
}

// checkoutIdle checks out the most recently used idle server of key that
// is neither expired nor dead (discarding those on the way), p.mu held.
// It returns with p.mu released when it found one, or when the pool is
// closed (ErrClosed); with p.mu still held when there is none.
func (p *Pool) checkoutIdle(key string, now time.Duration) (*Server, error) {
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		s := p.takeIdle(key)
		if s == nil {
			return nil, nil
		}
		if p.expired(s, now) || now-s.lastUsed > aliveCheckAfter && !s.Alive() {
			p.open--
			p.mu.Unlock()
			p.discard(s)
			p.mu.Lock()
			continue
		}
		s.state = ServerActive
		p.active++
		p.mu.Unlock()
		p.Stats.Checkouts.Add(1)
		return s, nil
	}
}

// takeIdle removes and returns the most recently checked-in idle server
// opened with the Startup of key, or returns nil; p.mu is held. Idle
// servers are a stack: the top one matches unless clients with different
// startup parameters share the pool, so the common case is one pop, done
// without slices.Delete (whose calls cost 2 ns of the 120 ns a checkout
// and checkin take).
func (p *Pool) takeIdle(key string) *Server {
	if n := len(p.idle); n > 0 && p.idle[n-1].startup.key == key {
		s := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		return s
	}
	for i := len(p.idle) - 2; i >= 0; i-- {
		if s := p.idle[i]; s.startup.key == key {
			p.idle = slices.Delete(p.idle, i, i+1)
			return s
		}
	}
	return nil
}

// CloseDeadIdle probes every idle server now and closes those that are
// gone; it returns how many it closed. A client that met a dead server
// calls it: servers die together more often than alone (a restart,
// pg_terminate_backend of a user's sessions), and the probe, one syscall
// per idle server, costs only on that failure path.
func (p *Pool) CloseDeadIdle() int {
	p.mu.Lock()
	var dead []*Server
	keep := p.idle[:0]
	for _, s := range p.idle {
		if s.Alive() {
			keep = append(keep, s)
		} else {
			dead = append(dead, s)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.open -= len(dead)
	p.mu.Unlock()
	for _, s := range dead {
		s.Broken = true
		p.discard(s)
	}
	return len(dead)
}

// wait queues a checkout for st and waits for a server or a slot to
// connect in; p.mu is held and wait unlocks it.
func (p *Pool) wait(ctx context.Context, st Startup, start time.Time) (*Server, error) {
	q := p.queue(st, start, nil)
	var expire <-chan time.Time // checkout_timeout 0: none
	if d := p.Config.CheckoutTimeout; d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		expire = timer.C
	}
	select {
	case q.r = <-q.w.ch:
		q.got = true
		return q.Take(ctx)
	case <-expire:
	case <-ctx.Done():
	}
	return q.Cancel(ctx)
}

// Queued is a checkout waiting in its pool's queue (QueueStartup). Its
// owner looks at it with Ready when notified, or gives up with Cancel at
// its Deadline or when its context ends; one goroutine at a time uses it.
type Queued struct {
	p   *Pool
	w   *waiter
	r   result
	got bool // r was received
}

// queue appends a waiter for st; p.mu is held and queue unlocks it.
func (p *Pool) queue(st Startup, start time.Time, notify func()) *Queued {
	w := &waiter{ch: make(chan result, 1), start: start, st: st, notify: notify}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	return &Queued{p: p, w: w}
}

// Deadline is when the checkout times out (checkout_timeout after it
// began); zero for none (checkout_timeout 0: wait indefinitely).
func (q *Queued) Deadline() time.Time {
	if d := q.p.Config.CheckoutTimeout; d > 0 {
		return q.w.start.Add(d)
	}
	return time.Time{}
}

// Ready reports whether the pool handed the checkout its result.
func (q *Queued) Ready() bool {
	if !q.got {
		select {
		case q.r = <-q.w.ch:
			q.got = true
		default:
		}
	}
	return q.got
}

// Connects reports whether Take, once Ready, opens a connection (and may
// block on the network): the checkout was handed a slot, or a server of
// another Startup to replace.
func (q *Queued) Connects() bool {
	return q.got && q.r.err == nil && (q.r.s == nil || q.r.s.startup.key != q.w.st.key)
}

// Take returns the checkout's server once Ready.
func (q *Queued) Take(ctx context.Context) (*Server, error) {
	q.p.Stats.WaitNanos.Add(uint64(time.Since(q.w.start)))
	return q.p.take(ctx, q.w.st, q.r)
}

// Cancel gives the checkout up, at its Deadline or because ctx ended, and
// returns the error for it: ctx's, or the pool's exhaustion. A server of
// the checkout's Key handed in the meantime is taken all the same. Cancel
// may return a server to the pool, which can block.
func (q *Queued) Cancel(ctx context.Context) (*Server, error) {
	p, w := q.p, q.w
	cause := ctx.Err()
	if cause == nil {
		cause = fmt.Errorf("no server connection became free within checkout_timeout (%s)", p.Config.CheckoutTimeout)
	}
	p.mu.Lock()
	removed := p.removeWaiter(w)
	p.mu.Unlock()
	if !removed {
		// Something was handed to us while we gave up. A server of our
		// Key we take anyway; a server to replace or a slot to connect in
		// would cost a connection we no longer want: pass it on.
		r := q.r
		if !q.got {
			r = <-w.ch
		}
		switch {
		case r.err != nil:
			return nil, r.err
		case r.s != nil && r.s.startup.key == w.st.key:
			r.s.state = ServerActive
			p.Stats.Checkouts.Add(1)
			return r.s, nil
		case r.s != nil:
			p.Checkin(r.s)
		default:
			p.releaseSlot()
		}
	}
	p.Stats.WaitNanos.Add(uint64(time.Since(w.start)))
	p.Stats.Timeouts.Add(1)
	return nil, &wire.Error{Severity: "ERROR", Code: wire.TooManyConnections,
		Message: fmt.Sprintf("pool %s is exhausted: all %d server connections are busy", p.Key, p.Config.Size),
		Detail:  cause.Error(),
		Hint:    "raise pool size or checkout_timeout, or shorten transactions"}
}

// take turns what a waiter for st was handed into its checkout's result: a
// server of st's Key is the answer; a server of another Key is closed and
// one of st's opened in its slot; with neither, the waiter was handed a
// slot and opens its server in it.
func (p *Pool) take(ctx context.Context, st Startup, r result) (*Server, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.s != nil {
		if r.s.startup.key == st.key {
			r.s.state = ServerActive
			p.Stats.Checkouts.Add(1)
			return r.s, nil
		}
		p.Stats.Evicted.Add(1)
		p.discard(r.s)
	}
	return p.connectSlot(ctx, st)
}

// connectSlot opens a server with st in a slot the caller counted in open
// and active, and gives the slot up when that fails.
func (p *Pool) connectSlot(ctx context.Context, st Startup) (*Server, error) {
	s, err := p.connect(ctx, st)
	if err != nil {
		p.releaseSlot()
		return nil, err
	}
	s.state = ServerActive
	p.Stats.Checkouts.Add(1)
	return s, nil
}

// releaseSlot gives up a slot counted in open and active that holds no
// server: to the first waiter, which connects in it, or back to the
// pool's budget. Handing it on matters when the connection failed for the
// checkout's own reasons (its startup parameters): the waiters behind it
// would otherwise wait for a checkin that may never come.
func (p *Pool) releaseSlot() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		w := p.popWaiter(0)
		p.mu.Unlock()
		w.hand(result{})
		return
	}
	p.open--
	p.active--
	p.mu.Unlock()
}

func (p *Pool) removeWaiter(w *waiter) bool {
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// popWaiter removes and returns waiter i; p.mu is held.
func (p *Pool) popWaiter(i int) *waiter {
	w := p.waiters[i]
	if i == 0 {
		p.waiters = p.waiters[1:]
	} else {
		p.waiters = slices.Delete(p.waiters, i, i+1)
	}
	return w
}

// maxPassOver bounds how often a waiter sees a later one served first.
const maxPassOver = 4

// nextWaiter returns the index of the waiter to hand an idle server of
// Startup key to; p.mu is held and there is a waiter. Waiters are served
// first come, first served, except that a server goes to the first waiter
// of its Key, when there is one, so that it is not closed and replaced by
// one of the first waiter's Key. The waiters passed over count it, and one
// passed over maxPassOver times is served next whatever the server's Key:
// a waiter waits at most maxPassOver checkins longer than in strict FIFO
// order, and with a single Key the order is strict FIFO.
func (p *Pool) nextWaiter(key string) int {
	for i, w := range p.waiters {
		if w.st.key == key || w.passed >= maxPassOver {
			for _, e := range p.waiters[:i] {
				e.passed++
			}
			return i
		}
	}
	return 0
}

// Checkin returns a server to the pool (or closes it when it is broken,
// expired, or the pool is closed).
func (p *Pool) Checkin(s *Server) { p.CheckinAt(s, clock.Mono()) }

// CheckinAt is Checkin at now, a clock.Mono time the caller read (see
// QueueStartupAt).
func (p *Pool) CheckinAt(s *Server, now time.Duration) {
	s.AbsorbCancels()
	if s.StalePlans && !s.Broken {
		s.deallocateAll()
	}
	s.flushCounts(p.Stats)
	s.lastUsed = now
	p.mu.Lock()
	p.active--
	if s.Broken || p.closed || p.expired(s, now) {
		// A closed pool has no waiters.
		if len(p.waiters) > 0 {
			// The slot goes to the first waiter, which connects in it.
			w := p.popWaiter(0)
			p.active++
			p.mu.Unlock()
			p.discard(s)
			w.hand(result{})
			return
		}
		p.open--
		p.mu.Unlock()
		p.discard(s)
		return
	}
	if len(p.waiters) > 0 {
		w := p.popWaiter(p.nextWaiter(s.startup.key))
		p.active++
		p.mu.Unlock()
		w.hand(result{s: s})
		return
	}
	s.state = ServerIdle
	p.idle = append(p.idle, s)
	p.mu.Unlock()
}

func (p *Pool) expired(s *Server, now time.Duration) bool {
	return p.Config.ServerLifetime > 0 && now-s.createdAt > p.Config.ServerLifetime
}

func (p *Pool) discard(s *Server) {
	p.mu.Lock()
	delete(p.servers, s)
	p.mu.Unlock()
	s.Close()
	p.Stats.Closed.Add(1)
}

// connect opens a server with st. A refusal of st's parameters is returned
// as a *StartupRejectedError and, unlike other failures, is neither counted
// in ConnectErrs nor kept as the pool's connErr (which makes its shard
// unhealthy): the server is fine, and a client must not be able to make it
// look otherwise by sending a bad setting. Neither is an attempt that ended
// because ctx did (the client went away).
func (p *Pool) connect(ctx context.Context, st Startup) (*Server, error) {
	s, err := Dial(ctx, p.Target, st, p.Config.ConnectTimeout)
	if err != nil {
		if startupRejected(st, err) {
			p.log.Debug("server refused startup parameters", "err", err)
			return nil, &StartupRejectedError{Startup: st, Err: err}
		}
		if ctx.Err() != nil {
			return nil, err
		}
		p.Stats.ConnectErrs.Add(1)
		p.log.Warn("server connection failed", "err", err)
		p.mu.Lock()
		p.connErr, p.connAt = err, time.Now()
		p.mu.Unlock()
		return nil, err
	}
	s.ID = p.nextID.Add(1)
	s.pool = p
	p.Stats.Opened.Add(1)
	p.mu.Lock()
	p.servers[s] = struct{}{}
	p.connErr = nil
	p.params.add(st.key, s.Params)
	p.mu.Unlock()
	return s, nil
}

// Close closes idle connections, fails waiters, and makes checked-out
// servers close at checkin.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	waiters := p.waiters
	p.waiters = nil
	p.mu.Unlock()
	close(p.stopReap)
	<-p.reapDone
	for _, s := range idle {
		p.discard(s)
	}
	for _, w := range waiters {
		w.hand(result{err: ErrClosed})
	}
}

// Snapshot is a point-in-time view of a pool for SHOW POOLS and metrics.
type Snapshot struct {
	Key          Key
	Target       Target
	Mode         config.PoolMode
	Size         int
	Idle, Active int
	Waiting      int
	MaxWait      time.Duration
	Closed       bool
	// ConnectErr is the error of the last connection attempt when it
	// failed and no attempt succeeded since; ConnectErrAt is when.
	ConnectErr   error
	ConnectErrAt time.Time
}

// Snapshot returns the pool's current numbers.
func (p *Pool) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{Key: p.Key, Target: p.Target, Mode: p.Config.Mode, Size: p.Config.Size,
		Idle: len(p.idle), Active: p.active, Waiting: len(p.waiters), Closed: p.closed,
		ConnectErr: p.connErr, ConnectErrAt: p.connAt}
	if len(p.waiters) > 0 {
		s.MaxWait = time.Since(p.waiters[0].start)
	}
	return s
}

// maintain closes idle connections past idle_timeout or server_lifetime and
// keeps min_size connections open.
func (p *Pool) maintain() {
	defer close(p.reapDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stopReap:
			return
		case <-t.C:
		}
		now := clock.Mono()
		var drop []*Server
		p.mu.Lock()
		keep := p.idle[:0]
		for i, s := range p.idle {
			tooIdle := p.Config.IdleTimeout > 0 && now-s.lastUsed > p.Config.IdleTimeout && p.open-len(drop) > p.Config.MinSize
			// The oldest idle servers sit at the bottom of the stack.
			_ = i
			if tooIdle || p.expired(s, now) {
				drop = append(drop, s)
				continue
			}
			keep = append(keep, s)
		}
		p.idle = keep
		p.open -= len(drop)
		need := p.Config.MinSize - p.open
		if need > 0 {
			p.open += need
		}
		p.mu.Unlock()
		for _, s := range drop {
			p.discard(s)
		}
		for range max(need, 0) {
			s, err := p.connect(context.Background(), Startup{})
			if err != nil {
				p.mu.Lock()
				p.open--
				p.mu.Unlock()
				continue
			}
			p.mu.Lock()
			if len(p.waiters) > 0 || p.closed {
				// Checkin hands it to a waiter, or closes it.
				p.active++
				p.mu.Unlock()
				p.Checkin(s)
				continue
			}
			s.state = ServerIdle
			p.idle = slices.Insert(p.idle, 0, s) // cold end of the stack
			p.mu.Unlock()
		}
	}
}

// ServerInfo is a snapshot of one server connection for SHOW SERVERS.
type ServerInfo struct {
	ID          uint64
	State       ServerState
	Addr        string
	PID         uint32
	ConnectedAt time.Time
}

// Servers returns the pool's open server connections, idle and checked
// out, in connection order.
func (p *Pool) Servers() []ServerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	idle := make(map[*Server]bool, len(p.idle))
	for _, s := range p.idle {
		idle[s] = true
	}
	out := make([]ServerInfo, 0, len(p.servers))
	for s := range p.servers {
		st := ServerActive
		if idle[s] {
			st = ServerIdle
		}
		out = append(out, ServerInfo{ID: s.ID, State: st, Addr: s.Addr, PID: s.PID, ConnectedAt: s.created})
	}
	slices.SortFunc(out, func(a, b ServerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
