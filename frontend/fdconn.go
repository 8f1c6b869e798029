//go:build linux

package frontend

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shardgate/shardgate/internal/sockio"
)

// fdConn is a net.Conn on a raw non-blocking socket that is not in Go's
// netpoller: the hot loop's epoll set (hotloop.go) is the only one that
// hears of it. A read or write that would block waits in one of two ways:
//
//   - on the loop: when the conn belongs to a coroutine (co) that the loop
//     drives, the coroutine yields to the loop, which resumes it when epoll
//     reports the socket ready, a deadline passes, or another goroutine
//     sets a deadline or closes the conn (nudges);
//   - blocking: otherwise (the coroutine was handed to a goroutine, a pool
//     goroutine probes or closes an idle server, a helper goroutine reads
//     beside the coroutine), the caller waits on a channel the loop
//     signals for the same events, with a timer for its deadline.
//
// Readiness is edge-triggered: the loop sets rready/wready when epoll
// reports the socket, and a read that finds less than it asked for, or
// EAGAIN, clears it, so that the next read on the loop yields without a
// failing syscall. Deadlines follow net.Conn: one in the past makes
// reads (writes) fail at once with a timeout error, including a read
// already waiting, without losing data.
type fdConn struct {
	fd    int32
	token int32 // names this conn in the loop's epoll events (fd numbers are reused)
	loop  *hotLoop
	// The conn's addresses, kept in the struct (see connAddrs): a
	// net.TCPAddr is two heap objects, four for the pair, 160 bytes that
	// every idle client of the loop would keep for its log lines. Its
	// LocalAddr, RemoteAddr and opErr are the conn's.
	connAddrs

	// ref counts the calls using fd, plus one for the conn itself until
	// Close; fdClosing is set by Close. The descriptor is closed when the
	// count drops to zero with fdClosing set, so that no call uses a
	// number that a new socket may have taken.
	ref      atomic.Int64
	rdl, wdl atomic.Int64 // deadlines, as UnixNano; 0: none

	rready, wready atomic.Bool // the loop's view of readiness, see above
	// rclosed: epoll reported the peer's end of writing (EPOLLRDHUP,
	// EPOLLHUP). No edge follows it, so a short read does not drain the
	// socket: the next read finds EOF (or the rest) without waiting.
	rclosed atomic.Bool
	// server: a server's conn, whose waits are a round trip's
	// (hotLoop.serverWaits). Set before the conn is used, never changed.
	server     bool
	rseq, wseq atomic.Uint32
	co         atomic.Pointer[coro] // the coroutine this conn waits for, if any

	rblock, wblock blockWait
}

const fdClosing = 1 << 40

// blockWait is a goroutine blocked on one direction of an fdConn.
type blockWait struct {
	waiting atomic.Bool
	// ch is made by the first blocking wait (most conns of the loop never
	// block: a parked client keeps the conn, and each channel is 96 bytes),
	// before it sets waiting, which notify checks before it looks at ch.
	ch chan struct{}
}

func (b *blockWait) notify() {
	if b.waiting.Load() {
		select {
		case b.ch <- struct{}{}:
		default:
		}
	}
}

// newFDConn takes the socket of c out of Go's netpoller: it duplicates the
// descriptor and closes c (which removes the original from the runtime's
// epoll set), and registers the duplicate with the loop.
func newFDConn(l *hotLoop, c net.Conn) (*fdConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errNotSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(u uintptr) { fd, derr = unix.FcntlInt(u, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	f := &fdConn{fd: int32(fd), loop: l}
	f.set(c.LocalAddr(), c.RemoteAddr())
	c.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	f.init()
	if err := l.add(f); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return f, nil
}

func (f *fdConn) init() {
	f.ref.Store(1)
	f.rready.Store(true)
	f.wready.Store(true)
}

func (f *fdConn) incref() bool {
	for {
		old := f.ref.Load()
		if old&fdClosing != 0 {
			return false
		}
		if f.ref.CompareAndSwap(old, old+1) {
			return true
		}
	}
}

func (f *fdConn) decref() {
	if f.ref.Add(-1) == fdClosing {
		syscall.Close(int(f.fd))
	}
}

func (f *fdConn) closing() bool { return f.ref.Load()&fdClosing != 0 }

// Close closes the conn; calls waiting on it return net.ErrClosed. Any
// goroutine may call it.
func (f *fdConn) Close() error {
	for {
		old := f.ref.Load()
		if old&fdClosing != 0 {
			return f.opErr("close", net.ErrClosed)
		}
		if f.ref.CompareAndSwap(old, old|fdClosing) {
			break
		}
	}
	if f.loop != nil {
		f.loop.remove(f)
	}
	f.nudge()
	f.decref() // the conn's own reference
	return nil
}

// nudge wakes whoever waits on the conn, to look at its deadlines and
// state again.
func (f *fdConn) nudge() {
	f.rblock.notify()
	f.wblock.notify()
	if co := f.co.Load(); co != nil && co.waiting.Load() == f {
		co.loop.wake(co)
	}
}

// ready is the loop's: epoll reported the socket with events ev.
func (f *fdConn) ready(ev uint32) {
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		f.rclosed.Store(true)
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		f.rready.Store(true)
		f.rseq.Add(1)
		f.rblock.notify()
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		f.wready.Store(true)
		f.wseq.Add(1)
		f.wblock.notify()
	}
}

// onLoop reports whether the caller waits by yielding to the loop: the
// conn belongs to a coroutine the loop drives. Only that coroutine uses
// such a conn (helpers beside it run while it is off the loop).
func (f *fdConn) onLoop() (*coro, bool) {
	co := f.co.Load()
	return co, co != nil && co.onLoop.Load()
}

func (f *fdConn) Read(p []byte) (int, error) {
	if !f.incref() {
		return 0, f.opErr("read", net.ErrClosed)
	}
	defer f.decref()
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if expired(&f.rdl) {
			return 0, f.opErr("read", os.ErrDeadlineExceeded)
		}
		co, loop := f.onLoop()
		seq := f.rseq.Load()
		if !loop || f.rready.Load() {
			n, err := sockRead(f.fd, p)
			switch {
			case err == nil && n == 0:
				return 0, io.EOF
			case err == nil:
				if n < len(p) && loop && !f.rclosed.Load() {
					f.rready.Store(false) // drained: the next read waits for an edge
				}
				return n, nil
			case err == syscall.EINTR:
				continue
			case err != syscall.EAGAIN:
				return 0, f.opErr("read", os.NewSyscallError("read", err))
			}
			if loop {
				f.rready.Store(false)
			}
		}
		if err := f.wait(co, loop, false, seq); err != nil {
			return 0, f.opErr("read", err)
		}
	}
}

func (f *fdConn) Write(p []byte) (int, error) {
	if !f.incref() {
		return 0, f.opErr("write", net.ErrClosed)
	}
	defer f.decref()
	done := 0
	for done < len(p) {
		if expired(&f.wdl) {
			return done, f.opErr("write", os.ErrDeadlineExceeded)
		}
		co, loop := f.onLoop()
		seq := f.wseq.Load()
		if !loop || f.wready.Load() {
			n, err := sockWrite(f.fd, p[done:])
			if n > 0 {
				done += n
			}
			switch {
			case err == nil:
				continue
			case err == syscall.EINTR:
				continue
			case err != syscall.EAGAIN:
				return done, f.opErr("write", os.NewSyscallError("write", err))
			}
			if loop {
				f.wready.Store(false)
			}
		}
		if err := f.wait(co, loop, true, seq); err != nil {
			return done, f.opErr("write", err)
		}
	}
	return done, nil
}

// sockRead is sockio.Read of p on the non-blocking socket fd, its errno
// as an error (nil for none; the callers retry EINTR). An empty p reads
// nothing (and is no EOF).
func sockRead(fd int32, p []byte) (int, error) { return errnoErr(sockio.Read(uintptr(fd), p)) }

// sockWrite is sockio.Write of p on the non-blocking socket fd, as
// sockRead.
func sockWrite(fd int32, p []byte) (int, error) { return errnoErr(sockio.Write(uintptr(fd), p)) }

func errnoErr(n int, e syscall.Errno) (int, error) {
	if e != 0 {
		return 0, e
	}
	return n, nil
}

// wait waits until the socket may be ready for a read (write), a deadline
// changes or passes, or the conn is closed; the caller looks again. seq is
// the readiness count seen before the failed attempt: an edge since then
// returns at once.
func (f *fdConn) wait(co *coro, loop, write bool, seq uint32) error {
	dl, sq, b := &f.rdl, &f.rseq, &f.rblock
	if write {
		dl, sq, b = &f.wdl, &f.wseq, &f.wblock
	}
	if loop {
		return co.waitFor(f, dl)
	}
	if b.ch == nil {
		b.ch = make(chan struct{}, 1)
	}
	b.waiting.Store(true)
	defer b.waiting.Store(false)
	d := dl.Load()
	// Checked after waiting is set: an edge, a Close or a deadline set
	// from now on notifies b.
	if sq.Load() != seq || f.closing() || expired(dl) {
		return f.closedErr()
	}
	// The backstop bounds a wait whose edge the loop cannot report (a
	// closed loop): the caller then tries the socket again.
	wait := blockBackstop
	if d != 0 {
		wait = min(wait, time.Until(time.Unix(0, d)))
	}
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-b.ch:
	case <-t.C:
	}
	return f.closedErr()
}

// blockBackstop is how long a blocking wait lasts at most before the
// caller tries its socket again.
const blockBackstop = 50 * time.Millisecond

func (f *fdConn) closedErr() error {
	if f.closing() {
		return net.ErrClosed
	}
	return nil
}

// expired reports whether the deadline in dl has passed. Small enough to
// inline in Read, Write and wait, which call it at every turn of their
// loops, where a deadline is rarely set: the clock is read, in passed,
// only when one is.
func expired(dl *atomic.Int64) bool {
	d := dl.Load()
	return d != 0 && passed(d)
}

// passed reports whether the deadline d (Unix nanoseconds) has passed.
func passed(d int64) bool { return time.Now().UnixNano() >= d }

func (f *fdConn) SetDeadline(t time.Time) error {
	setDeadline(&f.rdl, t)
	setDeadline(&f.wdl, t)
	f.nudge()
	return nil
}

func (f *fdConn) SetReadDeadline(t time.Time) error {
	setDeadline(&f.rdl, t)
	f.nudge()
	return nil
}

func (f *fdConn) SetWriteDeadline(t time.Time) error {
	setDeadline(&f.wdl, t)
	f.nudge()
	return nil
}

func setDeadline(dl *atomic.Int64, t time.Time) {
	if t.IsZero() {
		dl.Store(0)
		return
	}
	dl.Store(max(t.UnixNano(), 1))
}

// SyscallConn gives pool.Server.Alive and the park code the descriptor.
func (f *fdConn) SyscallConn() (syscall.RawConn, error) { return fdRaw{f}, nil }

// fdRaw is an fdConn's syscall.RawConn. Its Read and Write wait as the
// conn's own do.
type fdRaw struct{ f *fdConn }

func (r fdRaw) Control(fn func(fd uintptr)) error {
	if !r.f.incref() {
		return net.ErrClosed
	}
	defer r.f.decref()
	fn(uintptr(r.f.fd))
	return nil
}

func (r fdRaw) Read(fn func(fd uintptr) bool) error  { return r.io(fn, false) }
func (r fdRaw) Write(fn func(fd uintptr) bool) error { return r.io(fn, true) }

func (r fdRaw) io(fn func(fd uintptr) bool, write bool) error {
	f := r.f
	if !f.incref() {
		return net.ErrClosed
	}
	defer f.decref()
	for {
		seq := f.rseq.Load()
		if write {
			seq = f.wseq.Load()
		}
		if fn(uintptr(f.fd)) {
			return nil
		}
		co, loop := f.onLoop()
		if err := f.wait(co, loop, write, seq); err != nil {
			return err
		}
	}
}

// connAddrs are a conn's local and remote addresses: TCP ones in place (an
// IP and a port each, 40 bytes), anything else (a Unix socket's, an IPv6
// address with a zone) as the net.Addr values behind a pointer. Both are
// immutable once set, so any goroutine may read them.
type connAddrs struct {
	tcp   [2]tcpAddr
	other *[2]net.Addr // nil for TCP addresses
}

// tcpAddr is a TCP address without a zone.
type tcpAddr struct {
	ip   [16]byte
	port uint16
	v4   bool // ip is an IPv4 address (in IPv6 form)
}

func (a *connAddrs) set(local, remote net.Addr) {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if !lok || !rok || l.Zone != "" || r.Zone != "" || len(l.IP) != net.IPv6len && len(l.IP) != net.IPv4len ||
		len(r.IP) != net.IPv6len && len(r.IP) != net.IPv4len {
		a.other = &[2]net.Addr{local, remote}
		return
	}
	for i, t := range [2]*net.TCPAddr{l, r} {
		copy(a.tcp[i].ip[:], t.IP.To16())
		a.tcp[i].port = uint16(t.Port)
		a.tcp[i].v4 = t.IP.To4() != nil
	}
}

// LocalAddr returns the local address, made at each call.
func (a *connAddrs) LocalAddr() net.Addr { return a.addr(0) }

// RemoteAddr returns the peer's address, made at each call.
func (a *connAddrs) RemoteAddr() net.Addr { return a.addr(1) }

// opErr is the error of a conn's operation op that failed with err.
func (a *connAddrs) opErr(op string, err error) error {
	laddr := a.LocalAddr()
	return &net.OpError{Op: op, Net: laddr.Network(), Source: laddr, Addr: a.RemoteAddr(), Err: err}
}

// addr returns the local (0) or remote (1) address.
func (a *connAddrs) addr(i int) net.Addr {
	if a.other != nil {
		return a.other[i]
	}
	t := &a.tcp[i]
	ip := net.IP(t.ip[:])
	if t.v4 {
		ip = ip.To4()
	}
	return &net.TCPAddr{IP: append(net.IP(nil), ip...), Port: int(t.port)}
}
