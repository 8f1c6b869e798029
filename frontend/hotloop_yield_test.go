//go:build linux

package frontend

import (
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"testing"
	"time"
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
	if n > 8 {
		t.Fatalf("%d preemption signals in %d round trips over a second; want at most 8", n, trips)
	}
	t.Logf("%d round trips, %d preemption signals", trips, n)
}
