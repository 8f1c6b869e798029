package replication

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Read coalescing of the WAL stream. A walsender writes every message to
// its socket as soon as it is decoded, and a reader that keeps up receives
// them one read (and one wake-up) at a time: under a write load that was
// half of the reader's CPU. After a read that brought less than
// coalesceBytes, the reader waits coalesceWait before it reads again, so
// that the messages sent meanwhile arrive in one read. The wait adds at
// most coalesceWait to the apply's latency (more on a machine short of
// CPU, where the wait oversleeps), and nothing when the reader is behind:
// its reads then come back full.
//
// While the reader waits, the socket's receive low-water mark
// (SO_RCVLOWAT) is coalesceLowat. Go's runtime polls every socket of the
// process, whether a goroutine reads it or not, so without the mark each
// message the walsender sent during the wait woke an idle thread of the
// proxy, and on a machine short of cores that wake-up preempted the
// walsender in its send: in BenchmarkStreamApply 11–30 thousand times per
// 40 000 changes, where native replication's walsender (whose apply worker
// is busy, not waiting) was preempted some hundreds to a few thousand
// times. The mark took a sixth to a quarter off the walsender's CPU per
// change, and two thirds off the proxy's. It is lowered to one byte only
// when a read finds nothing and must wait, so that a lone message is
// received at once; while the stream flows it stays up, so that it costs
// no system call per read.
//
// The messages are read through a buffer of streamReadBuffer bytes, so that
// a reader that is behind takes that much per read rather than the 8 KiB of
// pgproto3's own buffer.
const (
	coalesceBytes    = 4096
	coalesceWait     = 500 * time.Microsecond
	coalesceLowat    = 64 << 10
	streamReadBuffer = 256 << 10
)

// coalescingConn is a connection whose reads wait a moment after a short
// read, one that neither brought coalesceBytes nor filled its buffer (see
// coalesceWait). Its reads and writes are raw (rawConn) when it has a
// file descriptor.
type coalescingConn struct {
	net.Conn
	rc    *rawConn // of a TCP connection: its low-water mark is managed; nil otherwise
	lowat int      // the socket's SO_RCVLOWAT as last set; 0 is the default, 1
	short bool     // the last read brought less than coalesceBytes
	// idle, when set, is called in place of the wait after a short read
	// (empty false) and when a read finds the socket empty, before it
	// waits (empty true), which it makes read again at once instead when
	// it returns true: the stream's reader sends its appliers' round trips
	// there (reader.idle).
	idle func(empty bool) (again bool)
}

func newCoalescingConn(conn net.Conn) *coalescingConn {
	conn = newRawConn(conn)
	c := &coalescingConn{Conn: conn}
	if rc, ok := conn.(*rawConn); ok {
		if _, tcp := rc.Conn.(*net.TCPConn); tcp {
			c.rc = rc
		}
	}
	return c
}

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.short && len(p) >= coalesceBytes {
		if c.rc != nil && c.lowat < coalesceLowat {
			c.setLowat(coalesceLowat)
		}
		if c.idle != nil {
			c.idle(false)
		} else {
			time.Sleep(coalesceWait)
		}
	}
	var n int
	var err error
	raw, _ := c.Conn.(*rawConn)
	switch {
	case c.rc != nil && c.lowat > 1:
		n, err = c.readLowat(p)
	case raw != nil && c.idle != nil:
		n, err = raw.read(p, func(uintptr) bool { return c.idle(true) })
	default:
		n, err = c.Conn.Read(p)
	}
	// A read that filled p found more waiting, whatever its size.
	c.short = n < coalesceBytes && n < len(p)
	return n, err
}

// readLowat reads what the socket holds; when it holds nothing, it lowers
// the low-water mark to one byte and waits for that, within the
// connection's read deadline.
func (c *coalescingConn) readLowat(p []byte) (int, error) {
	return c.rc.read(p, func(fd uintptr) bool {
		if c.idle != nil && c.idle(true) {
			return true
		}
		// Setting the mark reports the socket readable at once when a
		// byte arrived meanwhile (tcp_set_rcvlowat).
		if c.lowat != 1 {
			c.setLowatFD(fd, 1)
		}
		return false
	})
}

// setLowat sets the socket's SO_RCVLOWAT.
func (c *coalescingConn) setLowat(v int) {
	c.rc.raw.Control(func(fd uintptr) { c.setLowatFD(fd, v) })
}

func (c *coalescingConn) setLowatFD(fd uintptr, v int) {
	if err := setsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v); err != nil {
		// The mark only saves wake-ups: stop managing it. (Should
		// lowering it ever fail, reads wait for the mark or for the
		// reader's poll deadline.)
		c.rc = nil
		return
	}
	c.lowat = v
}

// connectReplication opens a replication connection to source shard s
// whose reads are coalesced.
func (t *Task) connectReplication(ctx context.Context, s int) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(t.dsn(t.src, s, true))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err)
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newCoalescingConn(conn), nil
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, streamReadBuffer), w)
	}
	return pgconn.ConnectConfig(ctx, cfg)
}
