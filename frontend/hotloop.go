//go:build linux

package frontend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shardgate/shardgate/internal/clock"
)

// hotLoop is the event loop of limits.event_loop: one goroutine blocked
// in epoll_wait over the raw sockets (fdConn) of the clients it serves and
// of the servers they use, running each client's loop as a coroutine
// (coro). A coroutine runs on the loop's goroutine until it waits for a
// socket; the loop resumes it when epoll reports that socket, or when
// another goroutine wakes it (a deadline set or passed, a Close). See the
// "Event loop" section of doc.go for how a client moves between the loop
// and a goroutine.
//
// Sockets are registered once, edge-triggered, for reading and writing;
// nothing is re-armed per message, so a pass-through transaction costs
// one epoll_wait at most and no failed read.
//
// The loop goroutine is not locked to its thread (runtime.LockOSThread):
// the runtime resumes a coroutine only on the thread, and with the lock
// state, of the goroutine that created it (runtime/coro.go throws
// otherwise), so a locked loop could neither run coroutines made by login
// goroutines nor hand its own to a goroutine (offLoop).
type hotLoop struct {
	epfd, evfd int
	// outer is an epoll instance in Go's netpoller that holds epfd, armed
	// (EPOLLIN) while the loop waits there rather than in epoll_wait
	// (idleWait), disarmed (no events) otherwise. epfd stays in outer from
	// newHotLoop on: adding an epoll instance to another (EPOLL_CTL_ADD)
	// makes the kernel check the whole graph for loops and for too many
	// wake-up paths, a walk over every socket registered in epfd, idle
	// clients' included. With 10 000 idle TLS clients parked that walk,
	// once per transition to an idle wait, was a quarter of the proxy's
	// CPU and doubled its CPU per transaction (docs/benchmarks.md, issue
	// 13, fourteenth step); EPOLL_CTL_MOD does no such check.
	outer    *os.File
	outerFd  int
	outerRaw syscall.RawConn
	inOuter  bool          // epfd is armed in outer (the loop goroutine's only)
	done     chan struct{} // closed when run returns
	pending  atomic.Bool   // an eventfd write is unread: wake need not write again
	// busy is set while the loop runs coroutines, and cleared before it
	// last looks at wakes ahead of epoll_wait: a wake that sees it set
	// (most often one made by a coroutine on the loop, a checkin handing
	// its server to a waiting client) need not write the eventfd.
	busy atomic.Bool
	// queued is len(wakes), changed under mu, so that the loop's looks at
	// wakes after each turn take no lock when there are none (most turns).
	queued atomic.Int32
	offs   atomic.Uint64 // coroutines handed to a goroutine (coroOff), for tests
	// idleWaits counts the waits parked in the netpoller (idleWait), for
	// tests.
	idleWaits atomic.Uint64
	// now is the clock.Mono time the loop's turn began (after its wait
	// returned): the time of every coroutine it resumes in the turn
	// (client.mono). The loop goroutine's only.
	now time.Duration
	// serverWaits counts the coroutines waiting on a server's conn: a
	// round trip under way, whose answer is usually a fraction of a
	// millisecond away. The loop goroutine's only.
	serverWaits int

	// conns holds the registered conns by descriptor. The loop reads it
	// for every event without a lock (lookup); add and remove change it
	// under mu, growing it into a new array that they publish whole.
	conns atomic.Pointer[[]atomic.Pointer[fdConn]]

	mu      sync.Mutex // guards the following
	token   int32
	wakes   []*coro // to resume (adopted or woken) at the loop's next turn; see queued
	spare   []*coro
	closed  bool
	clients int // coroutines started and not finished (for tests)
}

// coroReq is what a coroutine asks of its driver when it yields.
type coroReq uint8

const (
	coroWait coroReq = iota // waiting for waiting's socket (or a wake)
	coroOff                 // hand me to a goroutine: I am about to block
	coroOn                  // take me back to the loop
)

// coro is a client loop run as a coroutine. Its fields are the
// coroutine's and its driver's (one at a time), except the atomics.
type coro struct {
	loop   *hotLoop
	next   func() (coroReq, bool)
	yield  func(coroReq) bool
	onLoop atomic.Bool // driven by the loop (else by a goroutine of its own)
	// waiting is the conn the coroutine yielded for, nil while it runs;
	// nudgers compare it to theirs (fdConn.nudge).
	waiting atomic.Pointer[fdConn]
	adopted atomic.Bool // adopt queued it: the loop resumes it whatever it waits for
	timer   *time.Timer // for a wait's deadline, made at the first
	wakeFn  func()      // loop.wake(co), made once (pool.QueueStartup's notify)
}

var errHotClosed = errors.New("hot loop: closed")

func newHotLoop() (*hotLoop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("hot loop: epoll_create1: %w", err)
	}
	ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		syscall.Close(ep)
		return nil, fmt.Errorf("hot loop: eventfd: %w", err)
	}
	e := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(ev), Pad: -1}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, ev, &e); err != nil {
		syscall.Close(ep)
		syscall.Close(ev)
		return nil, fmt.Errorf("hot loop: epoll_ctl: %w", err)
	}
	outer, outerFd, err := newPolledEpoll("hot loop")
	if err != nil {
		syscall.Close(ep)
		syscall.Close(ev)
		return nil, err
	}
	l := &hotLoop{epfd: ep, evfd: ev, outer: outer, outerFd: outerFd, done: make(chan struct{})}
	if l.outerRaw, err = outer.SyscallConn(); err == nil {
		e := syscall.EpollEvent{Fd: int32(ep)} // disarmed: see outer
		err = rawEpollCtl(outerFd, syscall.EPOLL_CTL_ADD, ep, &e)
	}
	if err != nil {
		syscall.Close(ep)
		syscall.Close(ev)
		outer.Close()
		return nil, fmt.Errorf("hot loop: %w", err)
	}
	go l.run()
	return l, nil
}

// newPolledEpoll returns a new epoll instance as a file in Go's netpoller
// (an epoll descriptor is pollable: readable while its set has events),
// and its descriptor (the file's Fd method would make it blocking).
func newPolledEpoll(what string) (*os.File, int, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: epoll_create1: %w", what, err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, 0, fmt.Errorf("%s: set non-blocking: %w", what, err)
	}
	return os.NewFile(uintptr(fd), "epoll"), fd, nil
}

// add registers f's socket.
func (l *hotLoop) add(f *fdConn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errHotClosed
	}
	l.token++
	if l.token < 0 {
		l.token = 1
	}
	f.token = l.token
	slot := l.slot(f.fd)
	// Published before the socket is in the epoll set: its first event
	// may come at once, and lookup takes no lock.
	slot.Store(f)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | unix.EPOLLET,
		Fd: f.fd, Pad: f.token}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, int(f.fd), &ev); err != nil {
		slot.Store(nil)
		return fmt.Errorf("hot loop: epoll_ctl fd %d: %w", f.fd, err)
	}
	return nil
}

// slot returns the entry of conns for descriptor fd, growing conns to
// hold it; l.mu is held. A grown array replaces the old one whole: a
// lookup that loaded the old one finds what was there before, as it would
// have a moment earlier.
func (l *hotLoop) slot(fd int32) *atomic.Pointer[fdConn] {
	var conns []atomic.Pointer[fdConn]
	if p := l.conns.Load(); p != nil {
		conns = *p
	}
	if int(fd) >= len(conns) {
		grown := make([]atomic.Pointer[fdConn], max(int(fd)+1, 2*len(conns), 64))
		for i := range conns {
			grown[i].Store(conns[i].Load())
		}
		conns = grown
		l.conns.Store(&conns)
	}
	return &conns[fd]
}

// remove forgets f before its descriptor is closed (which takes it out of
// the epoll set).
func (l *hotLoop) remove(f *fdConn) {
	l.mu.Lock()
	if p := l.conns.Load(); p != nil && int(f.fd) < len(*p) && (*p)[f.fd].Load() == f {
		(*p)[f.fd].Store(nil)
		if !l.closed {
			syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, int(f.fd), nil)
		}
	}
	l.mu.Unlock()
}

// lookup returns the conn an event of descriptor fd with token names, nil
// when it is gone (removed, or its descriptor reused by another conn).
func (l *hotLoop) lookup(fd, token int32) *fdConn {
	p := l.conns.Load()
	if p == nil || fd < 0 || int(fd) >= len(*p) {
		return nil
	}
	if f := (*p)[fd].Load(); f != nil && f.token == token {
		return f
	}
	return nil
}

// start makes a coroutine of body and hands it to the loop, which runs it
// until it first waits. It fails only when the loop was closed.
func (l *hotLoop) start(co *coro, body func()) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errHotClosed
	}
	l.clients++
	l.mu.Unlock()
	co.loop = l
	co.wakeFn = func() { l.wake(co) }
	// iter.Pull's stop is not kept: a coroutine always runs to its end
	// (the client finishes), and Shutdown closes the loop only after that.
	co.next, _ = iter.Pull(func(yield func(coroReq) bool) {
		co.yield = yield
		defer func() {
			l.mu.Lock()
			l.clients--
			l.mu.Unlock()
		}()
		body()
	})
	l.adopt(co)
	return nil
}

// adopt takes a coroutine (back) onto the loop: it runs at the loop's next
// turn.
func (l *hotLoop) adopt(co *coro) {
	co.adopted.Store(true)
	co.onLoop.Store(true)
	l.wake(co)
}

// wake asks the loop to resume co if it is waiting on the loop. Any
// goroutine may call it; a wake that finds co running or off the loop is
// dropped, and a coroutine resumed for nothing looks at its socket and
// yields again.
func (l *hotLoop) wake(co *coro) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.wakes = append(l.wakes, co)
	l.queued.Store(int32(len(l.wakes)))
	l.mu.Unlock()
	// Read after the append: a loop that clears busy from now on finds
	// co in wakes before it waits (run).
	if !l.busy.Load() && !l.pending.Swap(true) {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		syscall.Write(l.evfd, one[:])
	}
}

// close stops the loop once no coroutine is left (Shutdown waited for the
// clients). Sockets still registered (idle servers in pools) keep working
// with blocking waits.
func (l *hotLoop) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return
	}
	l.closed = true
	l.mu.Unlock()
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	syscall.Write(l.evfd, one[:])
	<-l.done
}

// running is the number of coroutines started and not finished.
func (l *hotLoop) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clients
}

// loopYieldEvery is how often the loop goroutine yields its P
// (runtime.Gosched) between two waits in epoll_wait. To the runtime the
// loop is one goroutine that never stops running: its waits are system
// calls, after which it takes its P back, and the P's count of scheduled
// goroutines (schedtick) never moves. The runtime's monitor thread
// (sysmon) takes a goroutine that ran 10 ms on one schedtick for one that
// hogs its P: it preempts it (a signal to the loop's thread) and, the loop
// being in epoll_wait, takes the P away, which makes it poll again every
// 20 µs, as a bet that work has started again. Under load that was sysmon
// waking every 20 µs for a millisecond out of every ten, its nanosleeps
// and context switches 12% of the proxy's CPU samples (docs/benchmarks.md,
// issue 13, ninth step). A yield is not free either: Gosched wakes an idle
// thread to look for the work it queued (wakep), 3% of the samples when
// the loop yielded every 2 ms. Every 5 ms it is still twice per sysmon
// period at the least, so the loop is never taken for a hog.
const loopYieldEvery = 5 * time.Millisecond

// loopIdleAfter is how long a wait lasts for the loop to take itself for
// idle, and loopIdleHold how long it stays so after such a wait: its waits
// are in Go's netpoller (idleWait) rather than in epoll_wait, until
// loopIdleHold passed without a long wait.
//
// A blocking epoll_wait is a system call to the runtime. After 10 ms in
// one, sysmon preempts the loop (a signal) and takes its P; with every P
// idle, sysmon then sleeps until something wakes it, and the loop's
// return from the call, taking an idle P, does: sysmon starts again at
// 20 µs between polls, as a bet that work has started again, and backs
// off only after a millisecond. Under sparse traffic (a transaction every
// 20 ms, say) that was every transaction: 28–30 nanosleeps and 33–35
// context switches each, 700–800 µs of CPU per transaction where
// PgBouncer spent 130–170 µs (docs/benchmarks.md, issue 13, ninth step).
// A goroutine parked in the netpoller wakes no sysmon: the thread that
// waits for it does so in the scheduler, with its P given back.
//
// The netpoller is not the hot path's wait: it takes three calls where
// epoll_wait takes one (a look that finds nothing, the runtime's own
// epoll_pwait, the look that finds the events), and waking the parked
// goroutine is a scheduler's round. A loop that is busy never waits 5 ms.
// Nor does an idle loop wait there at once for a server's answer
// (serverWaits): a round trip under way is answered in a fraction of a
// millisecond as a rule, so the loop first waits for it in epoll_wait for
// up to loopAnswerWait, a raw system call that wakes no sysmon; only the
// wait for a client's next message, its think time (and an answer that
// takes longer), goes to the netpoller. Under sparse traffic that is one
// wait of each kind per statement, where both went to the netpoller. (A
// blocking epoll_wait through the runtime's system call path was worse
// than the netpoller there: entering it wakes a sleeping sysmon, which
// then polls every 20 µs for as long as the call lasts.)
const (
	loopIdleAfter = 5 * time.Millisecond
	loopIdleHold  = 100 * time.Millisecond
)

// loopAnswerWait is how long, in milliseconds, an idle loop waits in
// epoll_wait for a server's answer before it waits in the netpoller. The
// loop's goroutine keeps its P meanwhile (the wait is a raw system call),
// as a goroutine that runs would: well under sysmon's 10 ms, so that with
// one P the process's other goroutines wait no longer than they would for
// one that runs.
const loopAnswerWait = 2

// loopWaits decides where the loop waits (loopIdleAfter), from the
// times (clock.Mono) its waits returned.
type loopWaits struct {
	last     time.Duration // when the last wait returned
	longWait time.Duration // when the last wait of loopIdleAfter or more returned
}

func newLoopWaits(now time.Duration) loopWaits {
	return loopWaits{last: now, longWait: now - loopIdleHold}
}

// idle reports whether the next wait is in the netpoller.
func (w *loopWaits) idle() bool { return w.last-w.longWait < loopIdleHold }

// returned records that a wait returned at now. The time since the last
// one returned is this wait's and the work before it, which is never
// milliseconds when the loop is busy.
func (w *loopWaits) returned(now time.Duration) {
	if now-w.last >= loopIdleAfter {
		w.longWait = now
	}
	w.last = now
}

func (l *hotLoop) run() {
	defer close(l.done)
	events := make([]syscall.EpollEvent, 256)
	now := clock.Mono()
	l.now = now
	waits := newLoopWaits(now)
	yielded := now // when the loop last yielded its P
	for {
		var n int
		var err error
		parked := false
		if waits.idle() {
			n, parked, err = l.idleWait(events)
		} else {
			l.leaveOuter()
			// A blocking wait, as bench/relayfloor's coro mode measured
			// it.
			n, err = syscall.EpollWait(l.epfd, events, -1)
		}
		now = clock.Mono()
		l.now = now
		waits.returned(now)
		if parked {
			yielded = now // a wait in the netpoller reschedules the goroutine
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("hot loop: epoll_wait: %v", err)) // a bad epoll descriptor: a bug
		}
		// The loop goroutine yields its P now and then, so that the
		// runtime sees it scheduled anew (see loopYieldEvery).
		if now-yielded >= loopYieldEvery {
			runtime.Gosched()
			yielded = now
		}
		l.busy.Store(true)
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.evfd && ev.Pad == -1 {
				if l.woken() {
					syscall.Close(l.epfd)
					syscall.Close(l.evfd)
					l.outer.Close()
					return
				}
				continue
			}
			f := l.lookup(ev.Fd, ev.Pad)
			if f == nil {
				continue
			}
			f.ready(ev.Events)
			if co := f.co.Load(); co != nil && co.onLoop.Load() && co.waiting.Load() == f {
				l.resume(co)
			}
		}
		// Wakes made while busy wrote no eventfd: run them before the
		// next wait, and again until a look with busy cleared finds none.
		for {
			for l.runWakes() {
			}
			l.busy.Store(false)
			if !l.hasWakes() {
				break
			}
			l.busy.Store(true)
		}
	}
}

// idleWait waits for the loop's events in Go's netpoller (see
// loopIdleAfter): it looks at epfd without waiting, and when that finds
// nothing, parks the goroutine until outer, which the netpoller watches
// and which holds epfd while the loop is idle, is readable. parked
// reports whether it parked. No call here enters the runtime's system
// call path (RawSyscall6 only), which would wake sysmon.
func (l *hotLoop) idleWait(events []syscall.EpollEvent) (n int, parked bool, err error) {
	if l.serverWaits > 0 {
		// A round trip under way: its answer is near (see
		// loopIdleAfter). Wait for it a while in epoll_wait, out of the
		// netpoller's sight, by RawSyscall6: the runtime's system call
		// path would wake sysmon from its sleep.
		l.leaveOuter()
		if n, err = rawEpollWaitFor(l.epfd, events, loopAnswerWait); n > 0 || err != nil && err != syscall.EINTR {
			return n, false, err
		}
	} else if n, err = rawEpollWait(l.epfd, events); n > 0 || err != nil && err != syscall.EINTR {
		return n, false, err
	}
	if !l.inOuter {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.epfd)}
		if err := rawEpollCtl(l.outerFd, syscall.EPOLL_CTL_MOD, l.epfd, &ev); err != nil {
			// Cannot happen with two valid epoll instances; wait as
			// usual.
			n, err = syscall.EpollWait(l.epfd, events, -1)
			return n, false, err
		}
		l.inOuter = true
	}
	l.idleWaits.Add(1)
	rerr := l.outerRaw.Read(func(uintptr) bool {
		n, err = rawEpollWait(l.epfd, events)
		return n > 0 || err != nil && err != syscall.EINTR
	})
	if rerr != nil {
		return 0, true, fmt.Errorf("hot loop: wait in the netpoller: %w", rerr)
	}
	return n, true, err
}

// leaveOuter disarms epfd in outer if it is armed, before a wait in
// epoll_wait: out of the netpoller's sight, whose thread would otherwise
// wake at every event too.
func (l *hotLoop) leaveOuter() {
	if l.inOuter {
		ev := syscall.EpollEvent{Fd: int32(l.epfd)}
		rawEpollCtl(l.outerFd, syscall.EPOLL_CTL_MOD, l.epfd, &ev)
		l.inOuter = false
	}
}

// rawEpollWait is epoll_wait(2) of epfd without waiting, by
// RawSyscall6 (epoll_pwait with no signal mask, which every Linux
// architecture has).
func rawEpollWait(epfd int, events []syscall.EpollEvent) (int, error) {
	return rawEpollWaitFor(epfd, events, 0)
}

// rawEpollWaitFor is epoll_wait(2) of epfd for at most msec
// milliseconds, by RawSyscall6. The goroutine keeps its P meanwhile, as
// if it ran: msec must stay short.
func rawEpollWaitFor(epfd int, events []syscall.EpollEvent, msec int) (int, error) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// rawEpollCtl is epoll_ctl(2) by RawSyscall6.
func rawEpollCtl(epfd, op, fd int, ev *syscall.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// hasWakes reports whether wake queued a coroutine.
func (l *hotLoop) hasWakes() bool {
	return l.queued.Load() > 0
}

// woken reads the eventfd and resumes the coroutines queued by wake; it
// reports whether the loop was closed.
func (l *hotLoop) woken() bool {
	var buf [8]byte
	// The eventfd is read before pending is cleared, and pending is
	// cleared before the queue is taken: a wake that found pending set
	// queued its coroutine before that, and one that finds it clear
	// writes the eventfd again.
	syscall.Read(l.evfd, buf[:])
	l.pending.Store(false)
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	l.runWakes()
	return closed
}

// runWakes resumes the coroutines queued by wake; it reports whether
// there were any.
func (l *hotLoop) runWakes() bool {
	if l.queued.Load() == 0 {
		return false
	}
	l.mu.Lock()
	ws := l.wakes
	if len(ws) == 0 {
		l.mu.Unlock()
		return false
	}
	l.wakes = l.spare[:0]
	l.queued.Store(0)
	l.mu.Unlock()
	for i, co := range ws {
		ws[i] = nil
		// A coroutine adopted has waiting nil and is started here; one
		// woken must still be waiting, or the wake is stale.
		if co.onLoop.Load() && (co.adopted.Swap(false) || co.waiting.Load() != nil) {
			l.resume(co)
		}
	}
	l.mu.Lock()
	l.spare = ws[:0]
	l.mu.Unlock()
	return true
}

// resume runs co until it yields again, and does what it asked.
func (l *hotLoop) resume(co *coro) {
	if f := co.waiting.Swap(nil); f != nil && f.server {
		l.serverWaits--
	}
	if co.timer != nil {
		co.timer.Stop()
	}
	req, ok := co.next()
	if !ok {
		return // the client is finished
	}
	switch req {
	case coroWait:
	case coroOff:
		l.offs.Add(1)
		co.onLoop.Store(false)
		go co.drive()
	case coroOn:
		// Already on the loop: on() does not yield then.
	}
}

// drive runs a coroutine handed off the loop on the current goroutine
// until it asks for the loop again or finishes.
func (co *coro) drive() {
	req, ok := co.next()
	if ok && req == coroOn {
		co.loop.adopt(co)
	}
}

// waitFor yields to the loop until f may be ready, the deadline in dl
// passes or changes, or f is closed; the caller looks again. Only the
// coroutine calls it, on the loop.
func (co *coro) waitFor(f *fdConn, dl *atomic.Int64) error {
	co.waiting.Store(f)
	// Checked after waiting is set: a deadline set or a Close from now on
	// wakes the coroutine (fdConn.nudge).
	if f.closing() || expired(dl) {
		co.waiting.Store(nil)
		return f.closedErr()
	}
	if d := dl.Load(); d != 0 {
		co.armTimer(time.Unix(0, d))
	}
	if f.server {
		co.loop.serverWaits++ // resume counts it out
	}
	co.yield(coroWait)
	return f.closedErr()
}

// pause yields to the loop until co.wakeFn is called, f has an edge or
// is nudged, or the deadline (if not zero) passes; the caller looks again
// at what it waits for. Only the coroutine calls it, on the loop.
func (co *coro) pause(f *fdConn, deadline time.Time) {
	co.waiting.Store(f)
	if !deadline.IsZero() {
		co.armTimer(deadline)
	}
	if f != nil && f.server {
		co.loop.serverWaits++ // resume counts it out
	}
	co.yield(coroWait)
}

// armTimer wakes the coroutine at t (resume stops the timer).
func (co *coro) armTimer(t time.Time) {
	if co.timer == nil {
		co.timer = time.AfterFunc(time.Until(t), co.wakeFn)
	} else {
		co.timer.Reset(time.Until(t))
	}
}

// off hands the coroutine to a goroutine of its own if the loop drives it:
// the caller is about to block on something else than its sockets. The
// coroutine goes on where it was, on that goroutine; its sockets' waits
// block from then on.
func (co *coro) off() {
	if co.onLoop.Load() {
		co.yield(coroOff)
	}
}

// on takes the coroutine back to the loop if a goroutine drives it.
func (co *coro) on() {
	if !co.onLoop.Load() {
		co.yield(coroOn)
	}
}
