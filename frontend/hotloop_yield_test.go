//go:build linux

package frontend

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/clock"
	"golang.org/x/sys/unix"
)

// TestHotLoopNotTakenForAHog: a loop kept busy with round trips for a
// second is not preempted by the runtime's monitor thread (sysmon) as a
// goroutine that hogs its P (loopYieldEvery). sysmon preempts with a
// SIGURG to the thread, which signal.Notify sees too; the garbage
// collector, whose stop-the-world preempts with the same signal, is off.
// Without the loop's yields sysmon sent 20–46 a second (one each time it
// found the loop on the same schedtick for 10 ms). With them a few may
// still come on a loaded machine: a thread the kernel leaves unscheduled
// for 10 ms, or a loop idle that long while the peer waits for a CPU,
// looks the same to sysmon.
func TestHotLoopNotTakenForAHog(t *testing.T) {
	// Notify first: its first call starts os/signal's goroutine for good,
	// which newTestLoop's leak check must count as there before.
	urg := make(chan os.Signal, 4096)
	signal.Notify(urg, syscall.SIGURG)
	defer signal.Stop(urg)
	l := newTestLoop(t)
	f, peer := socketPair(t, l)
	done := startEcho(t, l, f)
	defer func() { peer.Close(); <-done }()

	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for len(urg) > 0 { // the set-up's
		<-urg
	}

	msg := []byte("Q\x00\x00\x00\x0dSELECT 1\x00")
	buf := make([]byte, len(msg))
	trips := 0
	for start := time.Now(); time.Since(start) < time.Second; trips++ {
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
	}
	signal.Stop(urg)
	n := len(urg)
	if n > 12 {
		t.Fatalf("%d preemption signals in %d round trips over a second; want at most 12", n, trips)
	}
	t.Logf("%d round trips, %d preemption signals", trips, n)
}

// TestHotLoopIdleWaitsInNetpoller: a loop that sees a round trip every
// 15 ms waits in Go's netpoller between them (loopIdleAfter), which wakes
// no sysmon. Waiting in epoll_wait instead, every round trip set sysmon
// polling every 20 µs for a millisecond: 31–46 context switches of the
// test process per round trip, against 10–12 (the test's own goroutines'
// and threads' included) in the netpoller.
func TestHotLoopIdleWaitsInNetpoller(t *testing.T) {
	l := newTestLoop(t)
	f, peer := socketPair(t, l)
	done := startEcho(t, l, f)
	defer func() { peer.Close(); <-done }()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	trip := queryTrip(t, peer)
	trip()
	const sparse = 40
	before := l.idleWaits.Load()
	switches := contextSwitches(t)
	for range sparse {
		time.Sleep(15 * time.Millisecond) // the traffic's pace, not a synchronisation
		trip()
	}
	perTrip := float64(contextSwitches(t)-switches) / sparse
	parked := l.idleWaits.Load() - before
	if parked < sparse/2 {
		t.Errorf("%d of %d sparse round trips' waits were in the netpoller; want most", parked, sparse)
	}
	if perTrip > 22 {
		t.Errorf("%.1f context switches per sparse round trip; want at most 22", perTrip)
	}
	t.Logf("sparse: %d waits in the netpoller, %.1f context switches per round trip", parked, perTrip)
}

// TestHotLoopRoundTripWaitsInEpoll: on an idle loop, the wait for a
// server's answer (a round trip under way) is an epoll_wait, not a wait in
// the netpoller: only the wait for the client's next message goes there.
func TestHotLoopRoundTripWaitsInEpoll(t *testing.T) {
	l := newTestLoop(t)
	cpeer := startServerRelay(t, l, time.Millisecond)
	trip := queryTrip(t, cpeer)
	trip()
	const sparse = 40
	before := l.idleWaits.Load()
	for range sparse {
		time.Sleep(15 * time.Millisecond) // the traffic's pace, not a synchronisation
		trip()
	}
	parked := l.idleWaits.Load() - before
	t.Logf("%d sparse round trips through a server: %d waits in the netpoller", sparse, parked)
	if parked < sparse/2 {
		t.Errorf("%d of %d waits for the client were in the netpoller; want most", parked, sparse)
	}
	if parked > sparse*5/4 {
		t.Errorf("%d waits in the netpoller for %d round trips: the waits for the server went there too", parked, sparse)
	}
}

// startServerRelay starts a coroutine of l that relays each message of a
// client's socket to a server's and the answer back, the server a
// goroutine that answers each message after delay; it returns the
// client's peer, closed (and the coroutine waited for) when the test
// ends.
func startServerRelay(tb testing.TB, l *hotLoop, delay time.Duration) net.Conn {
	tb.Helper()
	cf, cpeer := socketPair(tb, l)
	sf, speer := socketPair(tb, l)
	sf.server = true
	co := &coro{}
	cf.co.Store(co)
	sf.co.Store(co)
	done := make(chan struct{})
	if err := l.start(co, func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, err := cf.Read(buf)
			if err == nil {
				_, err = sf.Write(buf[:n])
			}
			if err == nil {
				n, err = sf.Read(buf)
			}
			if err == nil {
				_, err = cf.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cpeer.Close(); <-done })
	go func() { // the server
		buf := make([]byte, 64)
		for {
			n, err := speer.Read(buf)
			if err != nil {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, err := speer.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	return cpeer
}

// BenchmarkHotLoopSparseRoundTrip is a round trip through a server on a
// loop idle between round trips (each waits loopIdleAfter and a
// millisecond first), with sockets=N other sockets registered with the
// loop, as idle clients' are: cpu-us/op is the process's CPU per round
// trip. Such a round trip takes epfd out of the netpoller's sight for the
// server's answer and back in for the client's next message; that must
// not cost a walk over every socket registered (hotLoop.outer): before
// the loop armed and disarmed epfd in outer with EPOLL_CTL_MOD, putting
// it back (EPOLL_CTL_ADD) cost the kernel's loop and wake-up path checks
// over all of them.
func BenchmarkHotLoopSparseRoundTrip(b *testing.B) {
	for _, n := range []int{0, 5000} {
		b.Run(fmt.Sprintf("sockets=%d", n), func(b *testing.B) {
			l := newTestLoop(b)
			for range n {
				fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
				ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fds[0])}
				if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fds[0], &ev); err != nil {
					b.Fatal(err)
				}
			}
			peer := startServerRelay(b, l, 0)
			msg := []byte("Q\x00\x00\x00\x0dSELECT 1\x00")
			buf := make([]byte, len(msg))
			before := processCPU()
			b.ResetTimer()
			for range b.N {
				time.Sleep(loopIdleAfter + time.Millisecond) // the traffic's pace, not a synchronisation
				if _, err := peer.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(peer, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPUPerOp(b, before)
		})
	}
}

// TestHotLoopTurnTime: the loop's time (hotLoop.now, what client.mono
// gives a client on the loop) is the clock's when its turn began: between
// the clock's before the peer's write and after its answer, moving from
// one round trip to the next.
func TestHotLoopTurnTime(t *testing.T) {
	l := newTestLoop(t)
	f, peer := socketPair(t, l)
	times := make(chan time.Duration, 16)
	done := startEchoSeen(t, l, f, func(co *coro) { times <- co.loop.now }) // on the loop: the coroutine's turn
	defer func() { peer.Close(); <-done }()
	buf := make([]byte, 1)
	var last time.Duration
	for i := range 5 {
		time.Sleep(2 * time.Millisecond) // apart in time, not a synchronisation
		before := clock.Mono()
		if _, err := peer.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		after := clock.Mono()
		now := <-times
		if now < before || now > after {
			t.Fatalf("round trip %d: the loop's time %v is not between %v and %v", i, now, before, after)
		}
		if now <= last {
			t.Fatalf("round trip %d: the loop's time %v did not move from %v", i, now, last)
		}
		last = now
	}
}

// TestLoopWaits: a wait of loopIdleAfter or more sends the loop's waits
// to the netpoller until loopIdleHold passes without another; a busy
// loop's waits (and the work between them) never do.
func TestLoopWaits(t *testing.T) {
	const ms = time.Millisecond
	w := newLoopWaits(1000 * ms)
	if w.idle() {
		t.Fatal("a new loop waits in the netpoller")
	}
	now := 1000 * ms
	step := func(d time.Duration, idle bool) {
		t.Helper()
		now += d
		w.returned(now)
		if w.idle() != idle {
			t.Fatalf("after a wait of %v at %v: idle %t, want %t", d, now, w.idle(), idle)
		}
	}
	for range 1000 {
		step(50*time.Microsecond, false) // busy: 50 µs between waits
	}
	step(loopIdleAfter-time.Microsecond, false)
	step(loopIdleAfter, true) // a long wait
	for range int(loopIdleHold/ms) - 1 {
		step(ms, true) // short waits within loopIdleHold of it
	}
	step(ms, false) // loopIdleHold since the long wait
	step(20*ms, true)
	step(20*ms, true) // sparse traffic stays in the netpoller
}

// queryTrip returns a round trip of a Query message over peer, answered
// by an echo.
func queryTrip(t *testing.T, peer net.Conn) func() {
	msg := []byte("Q\x00\x00\x00\x0dSELECT 1\x00")
	buf := make([]byte, len(msg))
	return func() {
		t.Helper()
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// contextSwitches is the process's context switches so far: the sum over
// its threads (/proc/self/task/*/status) of the voluntary and involuntary
// ones.
func contextSwitches(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				total += n
			}
		}
	}
	return total
}
