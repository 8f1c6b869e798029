// Command relayfloor measures the floor of what relaying PostgreSQL
// traffic costs in Go, for issue 13's design step: it relays each client
// connection to a server connection of its own (no pooling, no protocol
// awareness: bytes in, bytes out) in one of two ways.
//
//   - goroutine: two goroutines per connection pair, each a blocking
//     read/write loop on Go's net.Conn (the netpoller parks and wakes
//     them): the cheapest goroutine-per-connection relay there is.
//   - epoll: -loops OS threads (default GOMAXPROCS), each locked to its
//     goroutine and blocked in epoll_wait over the raw descriptors of its
//     connections (level-triggered); a readable socket is read once into
//     the loop's buffer (again only after a full buffer) and written to
//     its peer at once: one read and one write per message, as PgBouncer.
//   - coro: the epoll loop, with each connection pair served by
//     blocking-style code running as a coroutine on the loop's thread
//     (coro.go).
//
// bench/relayfloor.sh runs pgbench through both, PgBouncer and shardgate
// in one interleaved run and reports CPU per transaction. Whatever
// shardgate does beyond the goroutine floor is its own work; the gap
// between the two floors is what an event loop can win at best. It is a
// measuring tool, not a proxy: no authentication, no TLS, and a write
// that would block (a client not reading) blocks its loop.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to accept clients on")
	upstream := flag.String("upstream", "", "server address (host:port)")
	mode := flag.String("mode", "epoll", "goroutine, epoll or coro")
	loops := flag.Int("loops", runtime.GOMAXPROCS(0), "epoll: event loops (OS threads)")
	keepGo := flag.Bool("keep-go", false, "coro: leave the descriptors in Go's netpoller too")
	flag.Parse()
	if *upstream == "" {
		log.Fatal("relayfloor: -upstream is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("relayfloor: %v", err)
	}
	fmt.Println(ln.Addr())
	var relay func(c, s *net.TCPConn) error
	switch *mode {
	case "goroutine":
		relay = func(c, s *net.TCPConn) error { go pipe(c, s); go pipe(s, c); return nil }
	case "epoll":
		ls := make([]*loop, *loops)
		for i := range ls {
			if ls[i], err = newLoop(); err != nil {
				log.Fatalf("relayfloor: %v", err)
			}
			go ls[i].run()
		}
		var next atomic.Uint32
		relay = func(c, s *net.TCPConn) error {
			return ls[int(next.Add(1))%len(ls)].add(c, s)
		}
	case "coro":
		ls := make([]*coroLoop, *loops)
		for i := range ls {
			if ls[i], err = newCoroLoop(); err != nil {
				log.Fatalf("relayfloor: %v", err)
			}
			ls[i].keepGo = *keepGo
			go ls[i].run()
		}
		var next atomic.Uint32
		relay = func(c, s *net.TCPConn) error {
			return ls[int(next.Add(1))%len(ls)].add(c, s)
		}
	default:
		log.Fatalf("relayfloor: unknown -mode %q", *mode)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("relayfloor: accept: %v", err)
		}
		s, err := net.Dial("tcp", *upstream)
		if err != nil {
			log.Printf("relayfloor: dial %s: %v", *upstream, err)
			c.Close()
			continue
		}
		if err := relay(c.(*net.TCPConn), s.(*net.TCPConn)); err != nil {
			log.Printf("relayfloor: %v", err)
			c.Close()
			s.Close()
		}
	}
}

// pipe copies from src to dst until either fails, then closes both.
func pipe(dst, src *net.TCPConn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// loop is one event loop: an epoll set and the peer of each descriptor
// in it.
type loop struct {
	ep   int
	mu   sync.Mutex // guards peer
	peer map[int32]int32
}

func newLoop() (*loop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	return &loop{ep: ep, peer: map[int32]int32{}}, nil
}

// add hands a connection pair to the loop: their descriptors are
// duplicated out of Go's netpoller, and the net.Conns closed.
func (l *loop) add(c, s *net.TCPConn) error {
	cfd, err := detach(c)
	if err != nil {
		return err
	}
	sfd, err := detach(s)
	if err != nil {
		syscall.Close(cfd)
		return err
	}
	l.mu.Lock()
	l.peer[int32(cfd)], l.peer[int32(sfd)] = int32(sfd), int32(cfd)
	l.mu.Unlock()
	for _, fd := range []int{cfd, sfd} {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}
		if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	return nil
}

// detach returns a non-blocking duplicate of conn's descriptor and closes
// conn.
func detach(conn *net.TCPConn) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = syscall.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("dup: %w", derr)
	}
	conn.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (l *loop) run() {
	runtime.LockOSThread()
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(l.ep, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			log.Fatalf("relayfloor: epoll_wait: %v", err)
		}
		for _, ev := range events[:n] {
			l.ready(ev.Fd, buf)
		}
	}
}

// ready relays what fd has to its peer: one read, more only while a read
// fills the buffer.
func (l *loop) ready(fd int32, buf []byte) {
	l.mu.Lock()
	peer, ok := l.peer[fd]
	l.mu.Unlock()
	if !ok {
		return // closed by an earlier event of this batch
	}
	for {
		n, err := syscall.Read(int(fd), buf)
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
			return
		}
		if n <= 0 || writeAll(int(peer), buf[:n]) != nil {
			l.close(fd, peer)
			return
		}
		if n < len(buf) {
			return
		}
	}
}

// writeAll writes b to fd; a write that would block waits in poll (this
// tool's shortcut: it blocks the loop).
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if errors.Is(err, syscall.EAGAIN) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(pfd, -1); err != nil && !errors.Is(err, syscall.EINTR) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (l *loop) close(a, b int32) {
	l.mu.Lock()
	delete(l.peer, a)
	delete(l.peer, b)
	l.mu.Unlock()
	for _, fd := range []int32{a, b} {
		syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, int(fd), nil)
		syscall.Close(int(fd))
	}
}
