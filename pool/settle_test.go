package pool

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// pendingReader stands for pgconn's background reader after a slow login
// write: one read of conn in progress on a goroutine of its own, whose
// bytes (or error, not a timeout) Read returns first; Status is 0 once
// that read ended.
type pendingReader struct {
	conn   net.Conn
	mu     sync.Mutex
	cond   *sync.Cond
	status int32
	got    []byte
	err    error
}

func newPendingReader(conn net.Conn) *pendingReader {
	r := &pendingReader{conn: conn, status: 2}
	r.cond = sync.NewCond(&r.mu)
	go func() {
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		r.mu.Lock()
		r.got = buf[:n]
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			r.err = err
		}
		r.status = 0
		r.mu.Unlock()
		r.cond.Broadcast()
	}()
	return r
}

func (r *pendingReader) Status() int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *pendingReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	for r.status != 0 && len(r.got) == 0 {
		r.cond.Wait()
	}
	if len(r.got) > 0 {
		n := copy(p, r.got)
		r.got = r.got[n:]
		r.mu.Unlock()
		return n, nil
	}
	if err := r.err; err != nil {
		r.err = nil
		r.mu.Unlock()
		return 0, err
	}
	r.mu.Unlock()
	return r.conn.Read(p)
}

// TestSettleReader: a read left in progress by the background reader is
// ended, and what the server sends next is read from the connection by
// its owner, not swallowed; the end of a server gone is never lost; a
// reader without Status is left alone, with no deadline behind.
func TestSettleReader(t *testing.T) {
	t.Run("pending read ended", func(t *testing.T) {
		srv, conn := pgtest.TCPPair(t)
		r := newPendingReader(conn)
		if err := settleReader(r, conn); err != nil {
			t.Fatal(err)
		}
		if r.Status() != 0 {
			t.Fatal("the background read is still in progress")
		}
		srv.Write([]byte("Z"))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4)
		if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "Z" {
			t.Fatalf("read after settling: %q, %v", buf[:n], err)
		}
	})
	t.Run("server gone", func(t *testing.T) {
		srv, conn := pgtest.TCPPair(t)
		r := newPendingReader(conn)
		srv.Close()
		// The EOF comes from settleReader, or, when the read had ended
		// before, from the reader's next Read: never lost.
		err := settleReader(r, conn)
		if err == nil {
			_, err = r.Read(make([]byte, 4))
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("got %v, want EOF", err)
		}
	})
	t.Run("nothing in progress", func(t *testing.T) {
		srv, conn := pgtest.TCPPair(t)
		if err := settleReader(conn, conn); err != nil { // no Status method
			t.Fatal(err)
		}
		srv.Write([]byte("Z"))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4)
		if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "Z" {
			t.Fatalf("read: %q, %v (a deadline left behind?)", buf[:n], err)
		}
	})
}
