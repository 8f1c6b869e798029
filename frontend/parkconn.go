//go:build linux

package frontend

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// parkedConn is the socket of a parked client that has a net.Conn (not an
// fdConn): the descriptor alone, duplicated before the net.Conn was
// closed. A net.TCPConn is six heap objects (the conn, its netFD, two
// addresses and the sockaddrs they point into) and a runtime poll
// descriptor outside the heap, about 550 bytes that every parked client
// kept; parkedConn is one object of 64 bytes. The client's wake makes a
// net.Conn of it again (reopen), about ten system calls after an idle
// period of limits.client_park_after.
//
// c.conn changes at the park and at the wake, by the client's owner and
// under the Listener's mu: the other goroutines that read c.conn (SHOW
// CLIENTS' address, KILL's and Shutdown's nudges, the sweep, Shutdown's
// forced Close) hold that mutex. While parked the client reads and writes
// nothing; deadlines are dropped (a nudge also wakes the client, which
// then sees why at the top of its loop).
type parkedConn struct {
	mu        sync.Mutex // guards fd
	fd        int        // -1 once reopened or closed
	connAddrs            // LocalAddr, RemoteAddr and opErr
}

// newParkedConn duplicates the descriptor of c; the caller closes c.
func newParkedConn(c net.Conn) (*parkedConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errNotSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("park: %w", err)
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(u uintptr) { fd, derr = unix.FcntlInt(u, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("park: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("park: %w", os.NewSyscallError("fcntl", derr))
	}
	p := &parkedConn{fd: fd}
	p.set(c.LocalAddr(), c.RemoteAddr())
	return p, nil
}

// reopen makes a net.Conn of the descriptor again and closes it, after
// taking it out of the evloop e's epoll set (nil: e is closed, and the set
// with it). After an error the conn is closed: the client is lost.
func (p *parkedConn) reopen(e *evloop) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil, net.ErrClosed
	}
	f := os.NewFile(uintptr(p.fd), "client")
	nc, err := net.FileConn(f) // a duplicate, in Go's netpoller
	if e != nil {
		e.forget(p.fd)
	}
	f.Close()
	p.fd = -1
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	return nc, nil
}

var errParkedConn = errors.New("parked connection")

func (p *parkedConn) Read([]byte) (int, error)  { return 0, p.opErr("read", errParkedConn) }
func (p *parkedConn) Write([]byte) (int, error) { return 0, p.opErr("write", errParkedConn) }

// Close closes the descriptor, which also takes it out of the evloop's
// epoll set (it is the socket's only descriptor).
func (p *parkedConn) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil
	}
	err := syscall.Close(p.fd)
	p.fd = -1
	return err
}

func (p *parkedConn) SetDeadline(time.Time) error      { return nil }
func (p *parkedConn) SetReadDeadline(time.Time) error  { return nil }
func (p *parkedConn) SetWriteDeadline(time.Time) error { return nil }

// SyscallConn gives the evloop the descriptor to park.
func (p *parkedConn) SyscallConn() (syscall.RawConn, error) { return parkedRaw{p}, nil }

type parkedRaw struct{ p *parkedConn }

func (r parkedRaw) Control(fn func(fd uintptr)) error {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if r.p.fd < 0 {
		return net.ErrClosed
	}
	fn(uintptr(r.p.fd))
	return nil
}

func (r parkedRaw) Read(func(fd uintptr) bool) error  { return errParkedConn }
func (r parkedRaw) Write(func(fd uintptr) bool) error { return errParkedConn }

// parkConn replaces the client's net.Conn by a parkedConn (see there). A
// client of the event loop keeps its fdConn, which is one already (under
// its TLS session too).
func (c *client) parkConn() {
	if fdOf(c.conn) != nil {
		return
	}
	p, err := newParkedConn(c.conn)
	if err != nil {
		c.log.Debug("client parks with its net.Conn", "err", err)
		return
	}
	old := c.conn
	c.l.mu.Lock()
	c.conn = p
	c.l.mu.Unlock()
	old.Close()
	c.parkArmed = false // a new descriptor
}

// unparkConn makes the client's parkedConn a net.Conn again. After an
// error the client keeps the parkedConn, whose reads fail: the loop ends
// it.
func (c *client) unparkConn() {
	p, ok := c.conn.(*parkedConn)
	if !ok {
		return
	}
	pk := &c.l.parking
	pk.mu.Lock()
	e := pk.loop
	pk.mu.Unlock()
	nc, err := p.reopen(e)
	if err != nil {
		c.log.Warn("parked client cannot resume", "err", err)
		return
	}
	c.l.mu.Lock()
	c.conn = nc
	c.l.mu.Unlock()
}
