package replication

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestCoalescingConnShort: a read is short, so that the next one waits,
// only when it brought less than coalesceBytes and did not fill its
// buffer.
func TestCoalescingConnShort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sent, buf int
		short     bool
	}{
		{name: "one small message", sent: 100, buf: 8192, short: true},
		{name: "a full small buffer", sent: 100, buf: 100, short: false},
		{name: "a large read", sent: 5000, buf: 8192, short: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go server.Write(make([]byte, tc.sent))
			c := &coalescingConn{Conn: client}
			n, err := c.Read(make([]byte, tc.buf))
			if err != nil || n != min(tc.sent, tc.buf) {
				t.Fatalf("read %d, %v", n, err)
			}
			if c.short != tc.short {
				t.Errorf("short = %v, want %v", c.short, tc.short)
			}
		})
	}
}

// TestCoalescingConnLowat: while a TCP reader coalesces, its socket's
// receive low-water mark is coalesceLowat, so that the messages arriving
// during the wait do not wake the process one by one; a read that finds
// nothing lowers it to one byte, so that a lone message is received at
// once rather than at the read deadline.
func TestCoalescingConnLowat(t *testing.T) {
	server, client := pgtest.TCPPair(t)
	c := newCoalescingConn(client)
	buf := make([]byte, streamReadBuffer)
	// send writes n bytes and waits until they are in the client's socket.
	send := func(n int) {
		t.Helper()
		if _, err := server.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); queued(t, c) < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d bytes sent, %d arrived", n, queued(t, c))
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, want := range []int{1, coalesceLowat} {
		send(100)
		if n, err := c.Read(buf); err != nil || n != 100 {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
		if got := lowat(t, c); got != want {
			t.Errorf("after short read %d the low-water mark is %d, want %d", i, got, want)
		}
	}
	// Nothing is waiting: the next read must wake for one byte.
	time.AfterFunc(20*time.Millisecond, func() { server.Write([]byte{1}) })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if n, err := c.Read(buf); err != nil || n != 1 {
		t.Fatalf("read of a lone byte: %d, %v", n, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a lone byte took %v to read", d)
	}
	if got := lowat(t, c); got != 1 {
		t.Errorf("after a read that waited the low-water mark is %d, want 1", got)
	}
	// The deadline and the end of the stream still end a read.
	c.SetReadDeadline(time.Now().Add(-time.Second))
	c.short, c.lowat = false, coalesceLowat
	c.setLowat(coalesceLowat)
	var netErr net.Error
	if _, err := c.Read(buf); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	server.Close()
	if _, err := c.Read(buf); err != io.EOF {
		t.Errorf("read after the server closed: %v, want EOF", err)
	}
}

// lowat returns the SO_RCVLOWAT of c's socket.
func lowat(t *testing.T, c *coalescingConn) int {
	t.Helper()
	var v int
	var err error
	raw := c.rc.raw
	raw.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// queued returns the bytes waiting in c's socket (FIONREAD).
func queued(t *testing.T, c *coalescingConn) int {
	t.Helper()
	var v int32
	var errno syscall.Errno
	raw := c.rc.raw
	raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v)))
	})
	if errno != 0 {
		t.Fatal(errno)
	}
	return int(v)
}
