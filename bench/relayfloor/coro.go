package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log"
	"net"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The coro mode: the epoll loop of the epoll mode, but each connection
// pair is served by code written as if its reads blocked — read the
// client's message, write it to the server, read the server's answer up
// to ReadyForQuery, write it to the client — running as a coroutine
// (iter.Pull) on the loop's thread. A read that finds no data yields to
// the loop, which resumes the coroutine when epoll reports the socket
// readable: no scheduler, no netpoller, no failing read. This is how a
// proxy's blocking-style protocol code could run on an event loop
// unchanged; the question it answers is what the coroutine switches
// cost. It understands just enough of the protocol for pgbench: an
// SSLRequest is answered with one byte, everything else the server
// answers ends with ReadyForQuery.

// coroLoop is one coroutine event loop.
type coroLoop struct {
	keepGo   bool
	ep, wake int
	mu       sync.Mutex // guards pending
	pending  []*coroPair
}

// coroPair is a client and its server connection, served by one
// coroutine.
type coroPair struct {
	c, s    coroFD
	resume  func() (struct{}, bool)
	stop    func()
	waiting int // the descriptor the coroutine waits for
}

// coroFD is a non-blocking descriptor whose reads yield while it has no
// data (edge-triggered: ready until a read comes back short).
type coroFD struct {
	fd    int
	ready bool
	yield func()
	wait  *int
}

func (f *coroFD) Read(p []byte) (int, error) {
	for !f.ready {
		*f.wait = f.fd
		f.yield()
	}
	n, err := syscall.Read(f.fd, p)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		f.ready = false
		return f.Read(p)
	case err != nil:
		return 0, err
	case n == 0:
		return 0, errors.New("closed")
	}
	if n < len(p) {
		f.ready = false
	}
	return n, nil
}

// kept holds the net.Conns whose descriptors a keepGo loop borrowed.
var kept sync.Map

// borrow returns conn's own descriptor, leaving conn open (kept).
func borrow(conn *net.TCPConn) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	kept.Store(fd, conn)
	return fd, nil
}

func newCoroLoop() (*coroLoop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(wake)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, wake, &ev); err != nil {
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return &coroLoop{ep: ep, wake: wake}, nil
}

// add hands a connection pair to the loop, which starts its coroutine.
// With keepGo the descriptors stay Go's (and in its netpoller, which
// then hears of every message too).
func (l *coroLoop) add(c, s *net.TCPConn) error {
	take := detach
	if l.keepGo {
		take = borrow
	}
	cfd, err := take(c)
	if err != nil {
		return err
	}
	sfd, err := take(s)
	if err != nil {
		syscall.Close(cfd)
		return err
	}
	l.mu.Lock()
	l.pending = append(l.pending, &coroPair{c: coroFD{fd: cfd}, s: coroFD{fd: sfd}})
	l.mu.Unlock()
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, err = syscall.Write(l.wake, one[:])
	return err
}

func (l *coroLoop) run() {
	runtime.LockOSThread()
	pairs := map[int32]*coroPair{}
	events := make([]syscall.EpollEvent, 256)
	var drain [8]byte
	for {
		n, err := syscall.EpollWait(l.ep, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			log.Fatalf("relayfloor: epoll_wait: %v", err)
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.wake {
				syscall.Read(l.wake, drain[:])
				l.start(pairs)
				continue
			}
			p, ok := pairs[ev.Fd]
			if !ok {
				continue
			}
			if int(ev.Fd) == p.c.fd {
				p.c.ready = true
			} else {
				p.s.ready = true
			}
			if p.waiting == int(ev.Fd) {
				if _, alive := p.resume(); !alive {
					l.end(pairs, p)
				}
			}
		}
	}
}

// start registers the pending pairs and runs each coroutine until it
// first waits.
func (l *coroLoop) start(pairs map[int32]*coroPair) {
	l.mu.Lock()
	ps := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, p := range ps {
		for _, fd := range []int{p.c.fd, p.s.fd} {
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
			if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
				log.Printf("relayfloor: epoll_ctl: %v", err)
			}
			pairs[int32(fd)] = p
		}
		p.c.ready, p.s.ready = true, true // nothing read yet
		p.c.wait, p.s.wait = &p.waiting, &p.waiting
		p.resume, p.stop = iter.Pull(func(yield func(struct{}) bool) {
			p.c.yield = func() { yield(struct{}{}) }
			p.s.yield = p.c.yield
			serve(p)
		})
		if _, alive := p.resume(); !alive {
			l.end(pairs, p)
		}
	}
}

func (l *coroLoop) end(pairs map[int32]*coroPair, p *coroPair) {
	p.stop()
	for _, fd := range []int{p.c.fd, p.s.fd} {
		delete(pairs, int32(fd))
		syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, fd, nil)
		if c, ok := kept.LoadAndDelete(fd); ok {
			c.(*net.TCPConn).Close()
		} else {
			syscall.Close(fd)
		}
	}
}

// serve is the pair's protocol loop, written with blocking reads.
func serve(p *coroPair) {
	in := make([]byte, 0, 16<<10)
	out := make([]byte, 0, 16<<10)
	for {
		var err error
		if in, err = readFrames(&p.c, in[:0], false); err != nil {
			return
		}
		if writeAll(p.s.fd, in) != nil {
			return
		}
		ssl := len(in) == 8 && binary.BigEndian.Uint32(in[4:]) == 80877103
		if ssl {
			out = out[:1]
			if _, err := p.s.Read(out); err != nil {
				return
			}
		} else if out, err = readFrames(&p.s, out[:0], true); err != nil {
			return
		}
		if writeAll(p.c.fd, out) != nil {
			return
		}
	}
}

// readFrames reads into buf until it holds whole messages and the last
// one ends a batch: from a client, a Query, Sync, Terminate or an untyped
// first message (startup, SSLRequest); from a server (untilReady), a
// ReadyForQuery.
func readFrames(f *coroFD, buf []byte, untilReady bool) ([]byte, error) {
	for {
		if whole, last := frames(buf); whole && len(buf) > 0 && ends(last, untilReady) {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return buf, err
		}
		buf = buf[:len(buf)+n]
	}
}

func ends(last byte, server bool) bool {
	if server {
		return last == 'Z'
	}
	return last == 'Q' || last == 'S' || last == 'X' || last == 0
}

// frames reports whether buf ends at a message boundary and the type of
// its last message (0 for an untyped one: only a client's first message
// has no type, and its length's first byte is 0 where a type is a
// letter).
func frames(buf []byte) (bool, byte) {
	last := byte(0xff)
	for len(buf) > 0 {
		typed := buf[0] != 0
		hdr := 4
		if typed {
			hdr = 5
		}
		if len(buf) < hdr {
			return false, 0
		}
		n := int(binary.BigEndian.Uint32(buf[hdr-4:])) + hdr - 4
		if n < hdr-1 || len(buf) < n {
			return false, 0
		}
		last = 0
		if typed {
			last = buf[0]
		}
		buf = buf[n:]
	}
	return true, last
}
