package replication

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/shardgate/shardgate/internal/sockio"
)

// rawConn is a stream's connection (the reader's replication connection,
// an applier's destination session) whose reads and writes call the kernel
// without telling Go's runtime that the thread enters a system call
// (syscall.RawSyscall), as the frontend's fdConn does. The socket is
// non-blocking (Go's poller made it so), so the call never waits: a read
// or write that would block returns EAGAIN and waits in the poller as
// usual (syscall.RawConn).
//
// The runtime's entersyscall is not only the cost of its bookkeeping.
// When every P of the process was idle, the runtime's monitor thread
// (sysmon) sleeps until woken, and entersyscall wakes it; woken so, it
// polls every 20 µs for at least the next millisecond, as a bet that the
// system call will block and its P must be taken back. The apply makes
// the proxy idle and busy again hundreds of times a second (each round
// trip of an applier, each wait of the reader), so sysmon spent about a
// third of the proxy's CPU in bench/reshard.sh's accounts load waking up
// every 20 µs (perf record -g of the proxy; docs/benchmarks.md, issue 12
// §5, sixth session), on a machine where each wake-up is a context
// switch of a virtual CPU.
type rawConn struct {
	net.Conn
	raw syscall.RawConn
	fd  int32 // the socket's descriptor, for waitReadable
}

// newRawConn returns conn with raw reads and writes, or conn itself when
// it has no file descriptor (a test's pipe, say).
func newRawConn(conn net.Conn) net.Conn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	c := &rawConn{Conn: conn, raw: raw, fd: -1}
	raw.Control(func(fd uintptr) { c.fd = int32(fd) })
	return c
}

func (c *rawConn) Read(p []byte) (int, error) {
	return c.read(p, nil)
}

// read reads into p what the socket holds. When it holds nothing, empty
// (if not nil) is called with the socket's descriptor before the read
// waits for the poller; when it returns true, the read tries again at once
// instead of waiting.
func (c *rawConn) read(p []byte, empty func(fd uintptr) (again bool)) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), sockio.MaxRaw)] // every read raw
	var n int
	var rerr syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = retryEINTR(sockio.Read, fd, p)
			if rerr != syscall.EAGAIN {
				return true
			}
			if empty == nil || !empty(fd) {
				return false
			}
		}
	})
	switch {
	case err != nil:
		return 0, err // a *net.OpError already
	case rerr != 0:
		return 0, c.opErr("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, in pieces of at most sockio.MaxRaw so that every
// call is raw.
func (c *rawConn) Write(p []byte) (int, error) {
	var n int
	var werr syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			w, e := retryEINTR(sockio.Write, fd, p[n:min(len(p), n+sockio.MaxRaw)])
			switch e {
			case 0:
				n += w
			case syscall.EAGAIN:
				return false
			default:
				werr = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case werr != 0:
		return n, c.opErr("write", werr)
	}
	return n, nil
}

func (c *rawConn) opErr(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(),
		Err: os.NewSyscallError(op, errno)}
}

// retryEINTR is op (sockio.Read or sockio.Write) of p (at most
// sockio.MaxRaw, so raw) on fd, retried when a signal interrupted it.
func retryEINTR(op func(fd uintptr, p []byte) (int, syscall.Errno), fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, e := op(fd, p)
		if e != syscall.EINTR {
			return n, e
		}
	}
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// pollIn is poll(2)'s POLLIN, which package syscall does not name.
const pollIn = 0x1

// waitReadable waits until socket fd is readable (or hung up), for at
// most d, in ppoll(2) by RawSyscall6: the goroutine keeps its P and its
// thread meanwhile, as if it ran, and neither parks nor wakes another
// thread, nor sysmon (see rawConn). d must stay short.
func waitReadable(fd int32, d time.Duration) {
	pfd := pollFd{fd: fd, events: pollIn}
	deadline := time.Now().Add(d)
	for {
		rest := time.Until(deadline)
		if rest <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(rest))
		_, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != syscall.EINTR {
			return // readable, timed out, or failed: the read tells
		}
	}
}

// setsockoptInt is setsockopt(2) of an int option, raw (see rawConn).
func setsockoptInt(fd uintptr, level, opt, v int) error {
	v32 := int32(v)
	_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v32)), unsafe.Sizeof(v32), 0)
	if e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}
