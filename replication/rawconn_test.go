package replication

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestRawConn: a rawConn's writes larger than sockio.MaxRaw and larger than
// the sockets' buffers arrive whole and in order, its reads stop at the
// read deadline with a timeout error, its writes at the write deadline,
// and a closed peer ends its reads with io.EOF.
func TestRawConn(t *testing.T) {
	c, peer := rawPair(t)

	// A write of 8 MiB waits for the peer to read, in pieces.
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(want))))
		got <- b
	}()
	if n, err := c.Write(want); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(want))
	}

	// Reads: what the peer sent, then a timeout at the deadline, then
	// the end of the stream.
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	if n, err := io.ReadFull(c, buf[:5]); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var netErr net.Error
	if _, err := c.Read(buf); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if n, err := c.Read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %d, %v, want io.EOF", n, err)
	}

	// A write the peer does not read stops at the write deadline.
	c, _ = rawPair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write(want); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("write past the deadline: %v, want a timeout", err)
	}
}

// rawPair returns a rawConn on a loopback TCP connection and its peer,
// closed when t ends.
func rawPair(t *testing.T) (*rawConn, net.Conn) {
	t.Helper()
	peer, dialed := pgtest.TCPPair(t)
	c, ok := newRawConn(dialed).(*rawConn)
	if !ok {
		t.Fatal("a TCP connection did not become a rawConn")
	}
	return c, peer
}

// TestRawConnReadAgain: a read that finds the socket empty calls its
// callback before it waits; a callback that returns true makes it read
// again at once, so that what arrived meanwhile is read even though the
// read deadline has passed by then, and one that returns false makes it
// wait in the poller, here until the deadline.
func TestRawConnReadAgain(t *testing.T) {
	c, peer := rawPair(t)
	buf := make([]byte, 64)
	calls := 0
	n, err := c.read(buf, func(fd uintptr) bool {
		calls++
		if calls == 1 {
			// The wait would end at once; reading again does not wait.
			c.SetReadDeadline(time.Now())
			if _, err := peer.Write([]byte("late")); err != nil {
				t.Error(err)
			}
			// The bytes crossed loopback when the socket holds them.
			for deadline := time.Now().Add(5 * time.Second); unreadBytes(t, fd) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return true
		}
		return false
	})
	if err != nil || string(buf[:n]) != "late" || calls != 1 {
		t.Fatalf("read again: %q, %v after %d calls, want \"late\" after 1", buf[:n], err, calls)
	}

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	calls = 0
	_, err = c.read(buf, func(uintptr) bool { calls++; return false })
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() || calls != 1 {
		t.Fatalf("read that waits: %v after %d calls, want a timeout after 1", err, calls)
	}
}

// unreadBytes is what socket fd holds for a read (FIONREAD).
func unreadBytes(t *testing.T, fd uintptr) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("FIONREAD: %v", e)
	}
	return int(n)
}

// TestWaitReadable: waitReadable returns at once for a readable socket,
// at its bound for one that stays empty, and as soon as a byte comes to
// one it waits for.
func TestWaitReadable(t *testing.T) {
	a, peerA := rawPair(t)
	b, peerB := rawPair(t)
	if a.fd < 0 || b.fd < 0 {
		t.Fatalf("descriptors %d and %d", a.fd, b.fd)
	}
	if _, err := peerA.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); unreadBytes(t, uintptr(a.fd)) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	waitReadable(a.fd, time.Minute)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("readable socket: waited %v, want no wait", took)
	}

	start = time.Now()
	waitReadable(b.fd, 50*time.Millisecond)
	if took := time.Since(start); took < 50*time.Millisecond || unreadBytes(t, uintptr(b.fd)) != 0 {
		t.Fatalf("empty socket: returned after %v, want the 50ms bound", took)
	}

	// B's byte comes while the wait is under way, or before it: either
	// way the wait ends with B readable, long before its bound.
	go peerB.Write([]byte("b"))
	start = time.Now()
	waitReadable(b.fd, time.Minute)
	if took := time.Since(start); took > 30*time.Second || unreadBytes(t, uintptr(b.fd)) == 0 {
		t.Fatalf("socket written to: returned after %v with %d bytes, want B's byte long before the bound", took, unreadBytes(t, uintptr(b.fd)))
	}
}
