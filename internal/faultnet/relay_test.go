package faultnet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo is a TCP server that writes back what it reads; ended counts the
// connections it saw end.
type echo struct {
	ln    net.Listener
	wg    sync.WaitGroup
	ended atomic.Int64
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	var mu sync.Mutex
	var conns []net.Conn
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				io.Copy(c, c)
				c.Close()
				e.ended.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// newRelay is a relay to a new echo server, closed when the test ends.
func newRelay(t *testing.T) (*Relay, *echo) {
	t.Helper()
	e := startEcho(t)
	r, err := Listen(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r, e
}

func dial(t *testing.T, r *Relay) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echoed bytes differ")
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// poll waits up to 5 s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRelayForwards(t *testing.T) {
	r, _ := newRelay(t)
	c := dial(t, r)
	msg := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range msg {
		msg[i] = byte(rng.Uint32())
	}
	if err := roundTrip(c, msg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := r.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}
	c.Close()
	poll(t, "the relayed connection to end", func() bool { return r.Conns() == 0 })
	if n := r.Accepted(); n != 1 {
		t.Fatalf("Accepted = %d, want 1", n)
	}
}

func TestRelayDelay(t *testing.T) {
	for _, dir := range []Direction{ToTarget, FromTarget, Both} {
		t.Run(dir.String(), func(t *testing.T) {
			r, _ := newRelay(t)
			c := dial(t, r)
			const d = 100 * time.Millisecond
			r.SetDelay(dir, d)
			want := d
			if dir == Both {
				want = 2 * d
			}
			start := time.Now()
			if err := roundTrip(c, []byte("ping"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < want {
				t.Fatalf("round trip took %v, want at least %v", el, want)
			}
			// Ten chunks sent in a row each arrive d late, not ten times d.
			start = time.Now()
			for range 10 {
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			got := make([]byte, 10)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < want || el > want+10*d/2 {
				t.Fatalf("ten pipelined chunks took %v, want about %v", el, want)
			}
			r.SetDelay(Both, 0)
			start = time.Now()
			if err := roundTrip(c, []byte("ping"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el >= d {
				t.Fatalf("round trip after the delay was lifted took %v", el)
			}
		})
	}
}

func TestRelayBlackhole(t *testing.T) {
	for _, dir := range []Direction{ToTarget, FromTarget, Both} {
		t.Run(dir.String(), func(t *testing.T) {
			r, _ := newRelay(t)
			hit, idle := dial(t, r), dial(t, r)
			if err := roundTrip(idle, []byte("hello"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			r.SetBlackhole(dir, true)
			err := roundTrip(hit, []byte("lost"), 200*time.Millisecond)
			if !isTimeout(err) {
				t.Fatalf("round trip through a blackhole: %v, want a timeout", err)
			}
			if n := r.Conns(); n != 2 {
				t.Fatalf("Conns = %d during the blackhole, want 2 (kept open)", n)
			}
			r.SetBlackhole(dir, false)
			// The connection that lost bytes is cut; the idle one goes on.
			hit.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := hit.Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Fatalf("read on a connection that lost bytes after the blackhole: %v, want it cut", err)
			}
			if err := roundTrip(idle, []byte("still here"), 5*time.Second); err != nil {
				t.Fatalf("a connection that lost nothing: %v", err)
			}
			poll(t, "one connection left", func() bool { return r.Conns() == 1 })
		})
	}
}

func TestRelayCut(t *testing.T) {
	r, e := newRelay(t)
	c1, c2 := dial(t, r), dial(t, r)
	for _, c := range []net.Conn{c1, c2} {
		if err := roundTrip(c, []byte("hi"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.Cut(); n != 2 {
		t.Fatalf("Cut = %d, want 2", n)
	}
	for _, c := range []net.Conn{c1, c2} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("read after Cut: %v, want a reset", err)
		}
	}
	poll(t, "the target to see both connections end", func() bool { return e.ended.Load() == 2 })
	if err := roundTrip(dial(t, r), []byte("again"), 5*time.Second); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
}

func TestRelayRefuse(t *testing.T) {
	r, _ := newRelay(t)
	old := dial(t, r)
	if err := roundTrip(old, []byte("a"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.SetRefuse(true)
	if err := dialReset(r.Addr()); err == nil || isTimeout(err) {
		t.Fatalf("a new connection while refusing: %v, want it reset", err)
	}
	if err := roundTrip(old, []byte("b"), 5*time.Second); err != nil {
		t.Fatalf("an open connection while refusing new ones: %v", err)
	}
	r.SetRefuse(false)
	if err := roundTrip(dial(t, r), []byte("c"), 5*time.Second); err != nil {
		t.Fatalf("a new connection after refusing: %v", err)
	}
	if n := r.Accepted(); n != 2 {
		t.Fatalf("Accepted = %d, want 2 (the refused one not counted)", n)
	}
}

func TestRelayTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := dialReset(r.Addr()); err == nil || isTimeout(err) {
		t.Fatalf("a connection with the target down: %v, want it reset", err)
	}
}

// dialReset connects to addr and reads; it returns the error that ended
// the connection, of the dial or of the read (a reset may come before the
// dial returns, or after), nil if a byte came, or a timeout after 5 s.
func dialReset(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

func TestRelayClose(t *testing.T) {
	e := startEcho(t)
	r, err := Listen(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, r)
	r.SetDelay(Both, time.Second) // a chunk waiting in a writer must not hold Close
	c.Write([]byte("pending"))
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("Close took %v", el)
	}
	if n := r.Conns(); n != 0 {
		t.Fatalf("Conns = %d after Close", n)
	}
	if c2, err := net.Dial("tcp", r.Addr()); err == nil {
		c2.Close()
		t.Fatal("the relay accepted a connection after Close")
	}
}

func TestRelayConcurrentFaults(t *testing.T) {
	r, _ := newRelay(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", r.Addr())
				if err != nil {
					continue
				}
				roundTrip(c, []byte("payload"), 200*time.Millisecond)
				c.Close()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 200 {
		switch rng.IntN(5) {
		case 0:
			r.Cut()
		case 1:
			r.SetBlackhole(Direction(1+rng.IntN(3)), rng.IntN(2) == 0)
		case 2:
			r.SetDelay(Both, time.Duration(rng.IntN(3))*time.Millisecond)
		case 3:
			r.SetRefuse(rng.IntN(2) == 0)
		case 4:
			r.Heal()
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	r.Heal()
	if err := roundTrip(dial(t, r), []byte("after"), 5*time.Second); err != nil {
		t.Fatalf("after the faults were healed: %v", err)
	}
}
