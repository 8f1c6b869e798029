//go:build linux

package frontend

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// socketPair returns the two ends of a loopback TCP connection, the first
// moved to an fdConn of l.
func socketPair(t testing.TB, l *hotLoop) (*fdConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFDConn(l, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); peer.Close() })
	return f, peer
}

func newTestLoop(t testing.TB) *hotLoop {
	t.Helper()
	before := runtime.NumGoroutine()
	l, err := newHotLoop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.close()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return l
}

// inMode runs fn on f's side either on a goroutine (blocking waits) or as a
// coroutine of l (waits yield to the loop), and returns its error.
func inMode(t *testing.T, l *hotLoop, f *fdConn, onLoop bool, fn func() error) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	if !onLoop {
		go func() { res <- fn() }()
		return res
	}
	co := &coro{}
	f.co.Store(co)
	if err := l.start(co, func() { res <- fn() }); err != nil {
		t.Fatal(err)
	}
	return res
}

func wait(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
		return nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
}

var modes = []struct {
	name   string
	onLoop bool
}{{"goroutine", false}, {"loop", true}}

func TestFDConnReadWrite(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newTestLoop(t)
			f, peer := socketPair(t, l)
			res := inMode(t, l, f, m.onLoop, func() error {
				// Echo until EOF, in small reads.
				buf := make([]byte, 7)
				for {
					n, err := f.Read(buf)
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					if _, err := f.Write(buf[:n]); err != nil {
						return err
					}
				}
			})
			for i := range 50 {
				msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*13)
				if _, err := peer.Write(msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("echo %d: %v", i, err)
				}
			}
			peer.(*net.TCPConn).CloseWrite()
			if err := wait(t, res); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFDConnPartialWrites: a write larger than the socket buffers
// completes as the peer reads, and a write deadline ends a write the
// peer does not read, with the count written so far.
func TestFDConnPartialWrites(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newTestLoop(t)
			f, peer := socketPair(t, l)
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
			res := inMode(t, l, f, m.onLoop, func() error {
				n, err := f.Write(big)
				if err == nil && n != len(big) {
					return io.ErrShortWrite
				}
				return err
			})
			got, err := io.ReadAll(io.LimitReader(peer, int64(len(big))))
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("read %d bytes: %v", len(got), err)
			}
			if err := wait(t, res); err != nil {
				t.Fatal(err)
			}
			// More than loopback's socket buffers can take, however the
			// kernel tunes them.
			huge := bytes.Repeat(big, 8)
			res = inMode(t, l, f, m.onLoop, func() error {
				f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				n, err := f.Write(huge)
				if !isTimeout(err) || n == 0 || n == len(huge) {
					return errors.Join(errors.New("want a timeout after a partial write"), err)
				}
				return nil
			})
			if err := wait(t, res); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFDConnDeadlines: a deadline in the past fails a read at once; a
// deadline that passes, or one set in the past by another goroutine (a
// nudge), wakes a waiting read with a timeout error; nothing is lost and
// the conn reads again once the deadline is lifted.
func TestFDConnDeadlines(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newTestLoop(t)
			f, peer := socketPair(t, l)
			peer.Write([]byte("x"))
			nudged := make(chan struct{})
			res := inMode(t, l, f, m.onLoop, func() error {
				buf := make([]byte, 4)
				f.SetReadDeadline(time.Now().Add(-time.Second))
				if _, err := f.Read(buf); !isTimeout(err) {
					return errors.Join(errors.New("past deadline: want a timeout"), err)
				}
				f.SetReadDeadline(time.Time{})
				if n, err := f.Read(buf); err != nil || string(buf[:n]) != "x" {
					return errors.Join(errors.New("the byte was lost"), err)
				}
				start := time.Now()
				f.SetReadDeadline(start.Add(50 * time.Millisecond))
				if _, err := f.Read(buf); !isTimeout(err) || time.Since(start) < 50*time.Millisecond {
					return errors.Join(errors.New("deadline: want a timeout after 50ms"), err)
				}
				f.SetReadDeadline(time.Time{})
				close(nudged)
				if _, err := f.Read(buf); !isTimeout(err) {
					return errors.Join(errors.New("nudge: want a timeout"), err)
				}
				f.SetReadDeadline(time.Time{})
				if n, err := f.Read(buf); err != nil || string(buf[:n]) != "y" {
					return errors.Join(errors.New("after the nudge"), err)
				}
				if _, err := f.Read(buf); err != io.EOF {
					return errors.Join(errors.New("want EOF"), err)
				}
				return nil
			})
			<-nudged
			time.Sleep(20 * time.Millisecond) // let the read wait
			f.SetReadDeadline(time.Now())
			time.Sleep(20 * time.Millisecond)
			peer.Write([]byte("y"))
			peer.Close()
			if err := wait(t, res); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFDConnClose: Close from another goroutine ends a waiting read with
// net.ErrClosed, and the descriptor is closed once no call uses it.
func TestFDConnClose(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newTestLoop(t)
			f, _ := socketPair(t, l)
			started := make(chan struct{})
			res := inMode(t, l, f, m.onLoop, func() error {
				close(started)
				_, err := f.Read(make([]byte, 1))
				if !errors.Is(err, net.ErrClosed) {
					return errors.Join(errors.New("want net.ErrClosed"), err)
				}
				return nil
			})
			<-started
			time.Sleep(20 * time.Millisecond)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, res); err != nil {
				t.Fatal(err)
			}
			if f.Close() == nil {
				t.Error("second Close: want an error")
			}
			if f.ref.Load() != fdClosing {
				t.Errorf("ref = %#x after the last call, want closed", f.ref.Load())
			}
		})
	}
}

// TestCoroOffAndOn: a coroutine handed to a goroutine may block on
// anything, its socket waits block, and it comes back to the loop.
func TestCoroOffAndOn(t *testing.T) {
	l := newTestLoop(t)
	f, peer := socketPair(t, l)
	co := &coro{}
	f.co.Store(co)
	gate := make(chan struct{})
	res := make(chan error, 1)
	var onLoop []bool
	err := l.start(co, func() {
		buf := make([]byte, 1)
		onLoop = append(onLoop, co.onLoop.Load())
		co.off()
		onLoop = append(onLoop, co.onLoop.Load())
		<-gate // blocks a goroutine, not the loop
		if _, err := f.Read(buf); err != nil {
			res <- err
			return
		}
		co.on()
		onLoop = append(onLoop, co.onLoop.Load())
		_, err := f.Read(buf)
		res <- err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The loop serves other conns meanwhile.
	g, gpeer := socketPair(t, l)
	echo := inMode(t, l, g, true, func() error {
		buf := make([]byte, 1)
		if _, err := g.Read(buf); err != nil {
			return err
		}
		_, err := g.Write(buf)
		return err
	})
	gpeer.Write([]byte("e"))
	if err := wait(t, echo); err != nil {
		t.Fatal(err)
	}
	close(gate)
	peer.Write([]byte("1"))
	time.Sleep(20 * time.Millisecond)
	peer.Write([]byte("2"))
	if err := wait(t, res); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true}; len(onLoop) != 3 || onLoop[0] != want[0] || onLoop[1] != want[1] || onLoop[2] != want[2] {
		t.Errorf("onLoop = %v, want %v", onLoop, want)
	}
	// The coroutine sent its result before it returned: poll for its end.
	deadline := time.Now().Add(5 * time.Second)
	for l.running() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := l.running(); n != 0 {
		t.Errorf("%d coroutines left", n)
	}
}

// startEcho runs a coroutine of l that writes back to f what it reads
// from it, until a read or write fails; the channel is closed when it
// returns.
func startEcho(tb testing.TB, l *hotLoop, f *fdConn) <-chan struct{} {
	tb.Helper()
	return startEchoSeen(tb, l, f, nil)
}

// startEchoSeen is startEcho calling seen (if not nil) with the coroutine
// after each read, on the loop.
func startEchoSeen(tb testing.TB, l *hotLoop, f *fdConn, seen func(*coro)) <-chan struct{} {
	tb.Helper()
	co := &coro{}
	f.co.Store(co)
	done := make(chan struct{})
	if err := l.start(co, func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			if seen != nil {
				seen(co)
			}
			if _, err := f.Write(buf[:n]); err != nil {
				return
			}
		}
	}); err != nil {
		tb.Fatal(err)
	}
	return done
}

// BenchmarkHotRoundTrip is one round trip through a coroutine of the loop:
// the peer writes a message, the coroutine reads it and writes it back.
func BenchmarkHotRoundTrip(b *testing.B) {
	l, err := newHotLoop()
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	f, peer := socketPair(b, l)
	done := startEcho(b, l, f)
	msg := []byte("Q\x00\x00\x00\x0dSELECT 1\x00")
	buf := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		peer.Write(msg)
		if _, err := io.ReadFull(peer, buf[:len(msg)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	peer.Close()
	<-done
}

// BenchmarkLoopTurnBookkeeping is the loop's own work around the
// coroutines of one turn with one event: finding the event's conn
// (lookup) and looking for wakes before the next wait (runWakes,
// hasWakes), with no wake queued, as in most turns.
func BenchmarkLoopTurnBookkeeping(b *testing.B) {
	l, err := newHotLoop()
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	f, peer := socketPair(b, l)
	defer peer.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if l.lookup(f.fd, f.token) != f {
			b.Fatal("lookup lost the conn")
		}
		if l.runWakes() || l.hasWakes() {
			b.Fatal("a wake with none queued")
		}
	}
}
