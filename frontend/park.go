package frontend

import (
	"bufio"
	"errors"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/wire"
)

// Parking.
//
// A client waiting for its next message between transactions needs no
// goroutine. When it parks, its goroutine gives its read and write buffers
// back to the Listener's pools, registers the socket in the evloop's epoll
// set (evloop.go) and returns, freeing its stack; everything the client is
// (session state, prepared statements, counters) lives in the client
// struct. When the socket is readable or hung up, the evloop starts a new
// goroutine that takes buffers again and goes on with the client loop,
// whose first read finds the data (or the EOF, cleaned up as always).
//
// What a parked client keeps is what it costs while idle, in thousands:
// its client struct (the 704-byte size class, TestClientSizeClass: the
// sharded-only state is behind a pointer, the logger adds the client's
// attributes at log time), its socket as a bare descriptor (parkedConn,
// parkconn.go; a client of the event loop keeps its fdConn) and the
// evloop's entry; shed drops the rest (TestXParkMemory in integration
// measures it).
//
// Which clients park: those of a transaction-mode database that is not
// sharded, over plain TCP or a Unix socket, at the top of the client loop
// while they hold nothing — no server (so not pinned, not in a
// transaction), no extended-protocol batch open or answered in part,
// nothing buffered from or for the client, not in COPY (mayPark). Session
// mode, admin connections and sharded databases keep their goroutine.
//
// A TLS client parks when it runs on the event loop (its session over the
// loop's raw socket, tlsconn.go) and its session holds nothing of the
// client's that the socket no longer has (tlsDrained): crypto/tls may
// have decrypted or read ahead bytes that would wait there unseen, since a
// parked client wakes only when its socket is readable. It keeps its
// session (keys, sequence numbers, crypto/tls's buffers) while parked. A
// TLS client off the loop keeps its goroutine.
//
// When: limits.client_park_after (config). 0 parks at every idle point;
// a positive duration parks only clients that stayed idle that long: a
// sweep of the Listener's clients every such period interrupts the read of
// each client that is idle and ran no statement since the previous sweep
// (a read deadline in the past, as Shutdown's nudge), and the client parks
// instead of reading; during a login burst the sweep runs every
// burstSweep (see burstClients). Nothing is done per round trip. A
// negative value never parks.
//
// Wake-ups: Shutdown and KILL nudge a client (nudge), which also resumes
// it when parked; it then finds the reason at the top of its loop. A
// client that parks after such a nudge sees the flag once parked and
// unparks itself (park). Cancel requests and the gate never need the
// client's goroutine: a parked client holds no server and is not admitted.

// errParked ends a client goroutine whose client parked: serve does not
// close it.
var errParked = errors.New("client parked")

// resumer is what a parked socket runs when it wakes: resume, on a new
// goroutine. An interface rather than a func, so that a parked client
// (which is one) needs no closure.
type resumer interface{ resume() }

// resumeFunc makes a func a resumer.
type resumeFunc func()

func (f resumeFunc) resume() { f() }

// parker is the Listener's evloop, made at the first park, and the sweep
// that parks clients idle for limits.client_park_after.
type parker struct {
	mu     sync.Mutex // guards the following
	loop   *evloop
	failed bool // the evloop could not be made: clients do not park
	closed bool
	stop   chan struct{}
	swept  chan struct{} // closed when the sweep goroutine returns

	// Buffers parked clients gave back, for the next clients to resume: a
	// few only (parkedBuffers), so that the memory of many parked clients
	// is freed, not kept for them; and none once no client took one for a
	// whole sweep period (see sweep).
	readers chan *wire.Reader
	writers chan *bufio.Writer
	taken   atomic.Uint64 // buffers resuming clients took from readers

	// A login burst (see burstClients): logins counts the clients that
	// became able to park since the sweep's last pass, and the one that
	// makes them burstClients kicks the sweep into a pass at once.
	logins atomic.Int64
	kick   chan struct{}
}

// Login bursts. A client that logged in keeps its goroutine until the
// sweep finds it idle for a whole period (client_park_after, 1 s by
// default), so a burst of logins holds as many goroutines and 48 KiB
// buffer pairs at once as clients arrived in one or two periods: 4 000
// for 10 000 clients logging in over 8 s (bench/idle.sh). What they leave
// stays after they parked: the runtime keeps the g of every goroutine
// that ran at once (about 480 bytes, reused but never freed), the heap
// grown for their buffers leaves its small-object spans half empty, and
// the runtime's span structures and poll descriptors stay allocated.
// So while more than burstClients parkable clients hold a goroutine (a
// pass counts them), or once burstClients clients logged in since the
// last pass (the kick), the sweep runs every burstSweep instead: a client
// then parks after burstSweep to 2×burstSweep of idleness, which a client
// cannot tell from the longer delay, and a client active in the last
// burstSweep is left alone as always.
const (
	burstClients = 128
	burstSweep   = 100 * time.Millisecond
)

// loggedIn counts a client that became able to park, and kicks the sweep
// when it makes burstClients since its last pass.
func (p *parker) loggedIn() {
	if p.logins.Add(1) != burstClients {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// parkedBuffers is how many read and write buffers the Listener keeps for
// resuming clients: enough for the clients that park at every idle point
// between their transactions to find one.
const parkedBuffers = 64

// evloop returns the Listener's evloop, starting it and the sweep on first
// use; nil when clients cannot park (shutdown, or no epoll).
func (l *Listener) evloop() *evloop {
	p := &l.parking
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop != nil || p.closed || p.failed {
		return p.loop
	}
	e, err := newEvloop()
	if err != nil {
		l.log.Warn("idle clients keep their goroutines", "err", err)
		p.failed = true
		return nil
	}
	p.loop = e
	p.readers = make(chan *wire.Reader, parkedBuffers)
	p.writers = make(chan *bufio.Writer, parkedBuffers)
	p.stop = make(chan struct{})
	p.swept = make(chan struct{})
	p.kick = make(chan struct{}, 1)
	go l.sweep(p.stop, p.swept)
	return e
}

// Parked reports how many clients are parked now.
func (l *Listener) Parked() int {
	p := &l.parking
	p.mu.Lock()
	e := p.loop
	p.mu.Unlock()
	if e == nil {
		return 0
	}
	return e.parked()
}

// KeptBuffers reports how many read buffers the Listener keeps for
// resuming clients now (at most parkedBuffers; none after a sweep period
// in which no client took one).
func (l *Listener) KeptBuffers() int {
	p := &l.parking
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.readers)
}

// parks reports how many times clients parked so far.
func (l *Listener) parks() uint64 {
	p := &l.parking
	p.mu.Lock()
	e := p.loop
	p.mu.Unlock()
	if e == nil {
		return 0
	}
	return e.parks()
}

// closeParking resumes every parked client, and from then on no client
// parks (Shutdown).
func (l *Listener) closeParking() {
	p := &l.parking
	p.mu.Lock()
	p.closed = true
	e, stop, swept := p.loop, p.stop, p.swept
	p.loop = nil
	p.mu.Unlock()
	if e == nil {
		return
	}
	close(stop)
	<-swept
	e.close()
}

// freeAfterParks is how many parks must have happened since the last time
// the sweep gave memory back to the OS for it to do so again, and
// freeEvery how long it waits at least between two such times (each is a
// full collection: clients that park and wake by thousands every second
// must not cost one per second). Parks, not the number of parked clients:
// with a count that had to grow by a thousand, the buffers of up to a
// thousand clients that parked last (48 KiB each, 48 MiB) could stay
// resident until the runtime's own scavenger got to them. 64 parks free
// about 3 MiB of buffers beyond the ones the Listener keeps
// (parkedBuffers).
const (
	freeAfterParks = 64
	freeEvery      = 10 * time.Second
)

// sweep nudges clients idle for limits.client_park_after into parking,
// until stop is closed; during a login burst it does so every burstSweep
// (see burstClients). Once a period, when no resuming client took a kept
// buffer since the previous time, it drops the kept buffers (they wait
// for wake-ups that do not come). When clients parked or buffers were
// dropped since it last did so it also returns the memory they freed to
// the OS: an idle proxy allocates nothing, so without this the Go runtime
// would keep their stacks and buffers until its forced collection every
// two minutes, and scavenge them only after that.
func (l *Listener) sweep(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	p := &l.parking
	t := time.NewTimer(time.Second)
	defer t.Stop()
	var freedAt uint64 // parks at the last FreeOSMemory
	var freed time.Time
	var taken uint64     // buffers taken at the previous look
	var looked time.Time // the last look at the kept buffers
	dropped := false     // buffers were dropped since the last FreeOSMemory
	burst := false       // the last pass found a login burst
	for {
		after := l.State().Config.Limits.ClientParkAfter
		period := after
		if period <= 0 {
			period = time.Second // only to notice a reload that changes it
		}
		if time.Since(looked) >= period {
			looked = time.Now()
			if n := p.taken.Load(); n == taken {
				dropped = p.dropBuffers() > 0 || dropped
			} else {
				taken = n
			}
		}
		if n := l.parks(); (n >= freedAt+freeAfterParks || dropped) && time.Since(freed) >= freeEvery {
			debug.FreeOSMemory()
			freedAt, freed, dropped = n, time.Now(), false
		}
		wait := period
		if burst && after > burstSweep {
			wait = burstSweep
		}
		t.Reset(wait)
		select {
		case <-stop:
			return
		case <-t.C:
		case <-p.kick:
		}
		p.logins.Store(0)
		if l.State().Config.Limits.ClientParkAfter <= 0 {
			burst = false
			continue
		}
		awake := 0
		l.mu.Lock()
		for _, c := range l.clients {
			if c.sweepPark() {
				awake++
			}
		}
		l.mu.Unlock()
		burst = awake > burstClients
	}
}

// DropKeptBuffers frees the buffers the Listener keeps for resuming
// clients now, as the sweep does when none was taken for a period, and
// returns how many it freed. Memory measurements call it so that the
// buffers do not count as the clients'.
func (l *Listener) DropKeptBuffers() int { return l.parking.dropBuffers() }

// dropBuffers frees the buffers kept for resuming clients (the sweep's,
// when none was taken for a whole period: 48 KiB each that idle clients
// would otherwise pay for, 3 MiB for a full pool); it returns how many.
func (p *parker) dropBuffers() int {
	n := 0
	for {
		select {
		case <-p.readers:
		case <-p.writers:
		default:
			return n
		}
		n++
	}
}

// sweepPark nudges the client into parking if it stayed idle since the
// previous sweep; it reports whether the client may park and is not
// parked (it holds a goroutine, nudged or not). Only the sweep goroutine
// calls it.
func (c *client) sweepPark() bool {
	q := c.queries.Load()
	seen := c.sweepSeen
	c.sweepSeen = q
	if !c.canPark.Load() || c.parked.Load() {
		return false
	}
	if q != seen {
		return true
	}
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	if ClientState(c.state.Load()) == ClientIdle && !c.parkNudge.Load() {
		c.parkNudge.Store(true)
		c.conn.SetReadDeadline(time.Now())
	}
	return true
}

// parkEligible says whether the client may ever park (see the top of this
// file); it is decided once, after login.
func (c *client) parkEligible() bool {
	if c.admin || c.mode != config.PoolTransaction || c.xs != nil || c.tls && fdOf(c.conn) == nil {
		return false
	}
	_, err := c.syscallConn()
	return err == nil
}

// syscallConn returns the client's socket, to park it (under its TLS
// session if it has one). It is not kept in the client: a park, after an
// idle second, can afford the allocation, and a parked client the bytes
// no longer.
func (c *client) syscallConn() (syscall.RawConn, error) {
	sc, ok := swapsock.Under(c.conn).(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}

// tlsDrained reports whether the client's TLS session, if it has one,
// holds nothing of the client's that its socket no longer has: no
// decrypted bytes, no whole record read ahead. It reads through the
// session with a read deadline in the past, so that the socket itself is
// not read (fdConn.Read fails before it tries): whatever comes is what
// crypto/tls held, and it lands in c.r, which the client loop reads next.
// A record read ahead in part needs the rest from the socket, whose
// readability wakes a parked client; crypto/tls does not keep a timeout
// as the session's error. A KILL's or Shutdown's nudge (a read deadline
// in the past too) that came meanwhile is set again: such a client that
// does not park must not block in its next read.
func (c *client) tlsDrained() bool {
	if !c.tls {
		return true
	}
	c.conn.SetReadDeadline(time.Unix(0, 1))
	_, _, err := c.r.PeekHeader()
	c.conn.SetReadDeadline(time.Time{})
	if c.killed.Load() || c.l.shutting.Load() { // set before their nudge: see kill
		c.conn.SetReadDeadline(time.Unix(0, 1))
	}
	var ne net.Error
	return c.r.Buffered() == 0 && errors.As(err, &ne) && ne.Timeout()
}

// mayPark reports whether the client holds nothing that needs its
// goroutine: it is between transactions with nothing buffered either way.
func (c *client) mayPark() bool {
	return c.canPark.Load() && c.mode == config.PoolTransaction && c.server == nil && c.xs == nil && !c.pinned && c.tx == 'I' &&
		c.pipe == 0 && len(c.q) == 0 && len(c.out) == 0 && !c.inCopy && (c.shardedState == nil || len(c.batch) == 0 && c.stream == nil) &&
		c.lost == nil && c.clientErr == nil &&
		c.r.Buffered() == 0 && c.w.Buffered() == 0
}

// parkNow reports whether the loop should try to park the client before
// it reads: it was nudged by the sweep, or parking happens at every idle
// point.
func (c *client) parkNow() bool {
	if c.resumed {
		c.resumed = false // woken for data: read it first
		return false
	}
	if c.wantPark {
		c.wantPark = false
		return true
	}
	return c.canPark.Load() && c.l.State().Config.Limits.ClientParkAfter == 0
}

// park parks the client; true means it did, and the goroutine must return
// without touching the client again (it may already run elsewhere).
func (c *client) park() bool {
	e := c.l.evloop()
	if e == nil || !c.mayPark() {
		return false
	}
	if !c.tlsDrained() {
		return false // the loop reads what the session held (now in c.r)
	}
	c.parkConn() // the descriptor alone, see parkconn.go
	rc, err := c.syscallConn()
	if err != nil {
		c.unparkConn()
		return false
	}
	p := &c.l.parking
	select {
	case p.readers <- c.r:
	default:
	}
	select {
	case p.writers <- c.w:
	default:
	}
	c.r, c.w, c.qBuf, c.q = nil, nil, nil, nil
	c.shed()
	// A client of the event loop parks by ending its coroutine (the
	// caller returns errParked up through it); resume starts another.
	co := c.coro()
	c.dropCoro()
	c.parked.Store(true)
	key, err := e.park(rc, &c.parkArmed, &c.parkKey, c, true)
	if err != nil {
		if !errors.Is(err, errEvloopClosed) {
			c.log.Warn("client cannot park", "err", err)
		}
		c.unparked()
		c.setCoro(co)
		return false
	}
	// A KILL or Shutdown that came before the park was stored saw nothing
	// to wake: the client takes itself back (see nudge). If it already
	// woke, whoever serves it now sees the flag.
	if c.killed.Load() || c.l.shutting.Load() {
		if e.unpark(key) {
			c.unparked()
			c.setCoro(co)
			return false
		}
	}
	return true
}

// shed drops what a parked client can do without and the next round trip
// makes again (see unparked): its per-round-trip slices, its statement
// maps while they are empty, and the unnamed statement's effect while it
// has none.
// A parked client costs its memory for as long as it stays idle; once
// resumed the allocations come back once, after an idle second at least.
func (c *client) shed() {
	c.out, c.lastTag, c.batchOps = nil, nil, nil
	if c.shardedState != nil {
		c.execOut, c.execTag = nil, nil
		c.batchBuf, c.sparePortal = nil, nil // kept for the next batch (sharded_ext.go)
	}
	if len(c.stmts) == 0 {
		c.stmts = nil
	}
	if len(c.sqlStmts) == 0 {
		c.sqlStmts = nil
	}
	if c.unnamedEff != nil && c.unnamedEff.isZero() {
		c.unnamedEff = nil
	}
}

// unparked gives the client buffers again: its goroutine goes on.
func (c *client) unparked() {
	c.unparkConn()
	c.parked.Store(false)
	if c.stmts == nil {
		c.stmts = map[string]*stmt{}
	}
	if c.sqlStmts == nil {
		c.sqlStmts = map[string]*sqlStmt{}
	}
	c.buffers(c.maxMessage)
	c.qBuf = make([]req, 0, clientQueue)
}

// buffers gives the client its socket's reader (accepting bodies up to
// max bytes) and writer, those parked clients left if any are kept.
func (c *client) buffers(max int) {
	p := &c.l.parking
	var r *wire.Reader
	var w *bufio.Writer
	select {
	case r = <-p.readers:
		p.taken.Add(1)
		r.Reset(c.conn)
		r.SetMax(max)
	default:
		r = wire.NewReader(c.conn, clientReadBuffer, max)
	}
	select {
	case w = <-p.writers:
		w.Reset(c.conn)
	default:
		w = bufio.NewWriterSize(c.conn, clientWriteBuffer)
	}
	c.r, c.w = r, w
}

// resume serves a parked client whose socket woke, on the evloop's new
// goroutine (the client is its own resumer: a method value made at each
// park would be one more allocation kept by every parked client).
func (c *client) resume() {
	c.unparked()
	c.resumed = true
	if fdOf(c.conn) != nil {
		// A client of the event loop parked by ending its coroutine: a
		// new one goes on with its loop there (hot.go).
		c.setCoro(&coro{})
		if c.startHot() {
			return
		}
	}
	c.serve(func() error { return c.loop(c.ctx) })
}

// wakeParked resumes the client if it is parked (nudge).
func (c *client) wakeParked() {
	if !c.parked.Load() {
		return
	}
	p := &c.l.parking
	p.mu.Lock()
	e := p.loop
	p.mu.Unlock()
	if e == nil {
		return // closeParking resumed it
	}
	e.wake(unpackParkKey(c.parkKey.Load()))
}
