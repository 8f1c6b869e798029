package sockio

import (
	"bytes"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// socketPair returns the two ends of a non-blocking Unix stream socket
// pair, closed when the test ends.
func socketPair(t *testing.T) (a, b uintptr) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatalf("set non-blocking: %v", err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
	}
	return uintptr(fds[0]), uintptr(fds[1])
}

// TestReadWrite: small and large (above MaxRaw, through the runtime) writes
// arrive whole and in order, an empty buffer makes no call, an empty
// socket answers EAGAIN, and a closed peer reads as 0 bytes.
func TestReadWrite(t *testing.T) {
	a, b := socketPair(t)
	if err := syscall.SetsockoptInt(int(a), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<20); err != nil {
		t.Fatalf("SO_SNDBUF: %v", err)
	}
	if n, e := Write(a, nil); n != 0 || e != 0 {
		t.Fatalf("empty write = %d, %v; want 0, no errno", n, e)
	}
	buf := make([]byte, 16)
	if n, e := Read(b, buf); e != syscall.EAGAIN {
		t.Fatalf("read of an empty socket = %d, %v; want EAGAIN", n, e)
	}

	small := []byte("hello")
	large := bytes.Repeat([]byte{0xa5, 0x5a, 0x01}, MaxRaw) // 3 × MaxRaw: not raw
	var want []byte
	for _, p := range [][]byte{small, large} {
		for len(p) > 0 {
			n, e := Write(a, p)
			if e != 0 {
				t.Fatalf("write: %v", e)
			}
			want = append(want, p[:n]...)
			p = p[n:]
			// Drain as we go, so that a full buffer never blocks us.
			got := drain(t, b)
			if !bytes.HasPrefix(want, got) {
				t.Fatalf("read bytes differ from the written ones")
			}
			want = want[len(got):]
		}
	}
	if len(want) != 0 {
		if got := drain(t, b); !bytes.Equal(got, want) {
			t.Fatalf("last read %d bytes; want %d", len(got), len(want))
		}
	}

	syscall.Close(int(a))
	if n, e := Read(b, buf); n != 0 || e != 0 {
		t.Fatalf("read after the peer closed = %d, %v; want 0 (end of stream)", n, e)
	}
}

// drain reads what b holds until EAGAIN.
func drain(t *testing.T, b uintptr) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 2*MaxRaw)
	for {
		n, e := Read(b, buf)
		switch {
		case e == syscall.EAGAIN:
			return out
		case e != 0:
			t.Fatalf("read: %v", e)
		case n == 0:
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// TestReadWriteAllocateNothing: the hot path's read and write make no
// allocation.
func TestReadWriteAllocateNothing(t *testing.T) {
	a, b := socketPair(t)
	msg := []byte("ping")
	buf := make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		if _, e := Write(a, msg); e != 0 {
			t.Fatalf("write: %v", e)
		}
		if _, e := Read(b, buf); e != 0 {
			t.Fatalf("read: %v", e)
		}
	})
	if allocs != 0 {
		t.Fatalf("Read and Write allocated %.1f times per read and write; want 0", allocs)
	}
}

// TestWriteToClosedPeer: a write to a socket whose peer closed fails with
// EPIPE and raises no SIGPIPE.
func TestWriteToClosedPeer(t *testing.T) {
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	a, b := socketPair(t)
	syscall.Close(int(b))
	if _, e := Write(a, []byte("x")); e != syscall.EPIPE {
		t.Fatalf("write to a closed peer: %v; want EPIPE", e)
	}
	signal.Stop(pipe)
	if len(pipe) > 0 {
		t.Fatal("the write raised SIGPIPE")
	}
}
