//go:build linux

package frontend

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

func rawConn(t testing.TB, c net.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func newTestEvloop(t testing.TB) *evloop {
	t.Helper()
	e, err := newEvloop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}

// TestEvloopCycles parks one socket many times, woken alternately by
// data, by wake without data (the resumed goroutine then blocks in Go's
// netpoller, whose registration of the socket stays valid beside the
// epoll set's) and finally by the peer closing.
func TestEvloopCycles(t *testing.T) {
	e := newTestEvloop(t)
	srv, cli := pgtest.TCPPair(t)
	rc := rawConn(t, srv)
	armed := false
	var last atomic.Uint64
	got := make(chan string, 1)
	read := func() {
		buf := make([]byte, 16)
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := srv.Read(buf)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(buf[:n])
	}
	for i := range 50 {
		key, err := e.park(rc, &armed, &last, resumeFunc(read), true)
		if err != nil {
			t.Fatal(err)
		}
		if e.parked() != 1 {
			t.Fatalf("cycle %d: %d parked, want 1", i, e.parked())
		}
		if i%2 == 0 {
			cli.Write([]byte("x"))
		} else {
			if !e.wake(key) {
				t.Fatalf("cycle %d: wake found nothing parked", i)
			}
			// The goroutine now reads through the netpoller; the data
			// comes after it started waiting, most of the time.
			time.Sleep(time.Millisecond) // pacing, not synchronisation
			cli.Write([]byte("y"))
		}
		want := map[bool]string{true: "x", false: "y"}[i%2 == 0]
		if s := <-got; s != want {
			t.Fatalf("cycle %d: read %q, want %q", i, s, want)
		}
		if e.wake(key) {
			t.Fatalf("cycle %d: a woken park woke again", i)
		}
	}
	if _, err := e.park(rc, &armed, &last, resumeFunc(read), true); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if s := <-got; s != "error: "+io.EOF.Error() {
		t.Fatalf("after the peer closed: %q, want EOF", s)
	}
	if e.parked() != 0 {
		t.Fatalf("%d parked after the hang-up", e.parked())
	}
}

// TestEvloopClose: close resumes every parked socket and refuses parks
// from then on; unpark takes a park back without running it.
func TestEvloopClose(t *testing.T) {
	e := newTestEvloop(t)
	ran := make(chan int, 3)
	var keys []parkKey
	for i := range 3 {
		srv, _ := pgtest.TCPPair(t)
		armed := false
		var last atomic.Uint64
		key, err := e.park(rawConn(t, srv), &armed, &last, resumeFunc(func() { ran <- i }), true)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	if !e.unpark(keys[2]) || e.unpark(keys[2]) {
		t.Fatal("unpark: want true once, then false")
	}
	e.close()
	seen := map[int]bool{<-ran: true, <-ran: true}
	if !seen[0] || !seen[1] {
		t.Fatalf("close resumed %v, want 0 and 1", seen)
	}
	select {
	case i := <-ran:
		t.Fatalf("unparked socket %d resumed", i)
	default:
	}
	srv, _ := pgtest.TCPPair(t)
	armed := false
	var last atomic.Uint64
	if _, err := e.park(rawConn(t, srv), &armed, &last, resumeFunc(func() {}), true); err != errEvloopClosed {
		t.Fatalf("park after close: %v, want errEvloopClosed", err)
	}
}

// TestEvloopCountsClients: parked and parks count clients' parks only, not
// a connection's wait for its first bytes; both kinds wake and unpark
// alike.
func TestEvloopCountsClients(t *testing.T) {
	e := newTestEvloop(t)
	park := func(client bool) parkKey {
		srv, _ := pgtest.TCPPair(t)
		armed := false
		var last atomic.Uint64
		key, err := e.park(rawConn(t, srv), &armed, &last, resumeFunc(func() {}), client)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	silent := park(false)
	client := park(true)
	park(false)
	if n, total := e.parked(), e.parks(); n != 1 || total != 1 {
		t.Fatalf("parked %d, parks %d with one client and two silent connections, want 1 and 1", n, total)
	}
	if !e.unpark(silent) {
		t.Fatal("unpark of a silent connection's park: false")
	}
	if n := e.parked(); n != 1 {
		t.Fatalf("parked %d after a silent connection's park ended, want 1", n)
	}
	if !e.unpark(client) {
		t.Fatal("unpark of a client's park: false")
	}
	if n, total := e.parked(), e.parks(); n != 0 || total != 1 {
		t.Fatalf("parked %d, parks %d after the client's park ended, want 0 and 1", n, total)
	}
}

// BenchmarkParkResume is one park/resume cycle: park the socket, the peer
// writes a byte, a new goroutine reads it (its read finds the data).
// BenchmarkNetpollWait is the same exchange with a goroutine blocked in
// Read, the goroutine-per-client way.
func BenchmarkParkResume(b *testing.B) {
	e := newTestEvloop(b)
	srv, cli := pgtest.TCPPair(b)
	rc := rawConn(b, srv)
	armed := false
	var last atomic.Uint64
	done := make(chan struct{})
	buf := make([]byte, 1)
	msg := []byte{1}
	read := func() {
		if _, err := srv.Read(buf); err != nil {
			b.Error(err)
		}
		done <- struct{}{}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.park(rc, &armed, &last, resumeFunc(read), true); err != nil {
			b.Fatal(err)
		}
		cli.Write(msg)
		<-done
	}
}

func BenchmarkNetpollWait(b *testing.B) {
	srv, cli := pgtest.TCPPair(b)
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		for range ready {
			if _, err := srv.Read(buf); err != nil {
				b.Error(err)
			}
			done <- struct{}{}
		}
	}()
	defer close(ready)
	msg := []byte{1}
	b.ReportAllocs()
	for b.Loop() {
		ready <- struct{}{}
		cli.Write(msg)
		<-done
	}
}
