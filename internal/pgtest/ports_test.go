package pgtest

import (
	"testing"
)

// TestReservePort checks that ports come from below the ephemeral range, are
// never handed out twice while held, nor soon after their release, and are
// locked against other processes
// (another open file description stands in for another process: flock locks
// belong to it).
func TestReservePort(t *testing.T) {
	lo, hi := portRange()
	dir, err := portLockDir()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 20 {
		port, err := reservePort()
		if err != nil {
			t.Fatal(err)
		}
		defer releasePort(port)
		if port < lo || port >= hi {
			t.Errorf("port %d outside [%d, %d)", port, lo, hi)
		}
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
		lock, err := lockPort(dir, port)
		if err != nil {
			t.Fatal(err)
		}
		if lock != nil {
			lock.Close()
			t.Errorf("port %d: another process could take its lock", port)
		}
	}
	for port := range seen {
		releasePort(port)
	}
	for range 20 {
		port, err := reservePort()
		if err != nil {
			t.Fatal(err)
		}
		releasePort(port)
		if seen[port] {
			t.Errorf("port %d handed out again right after its release", port)
		}
	}
	for port := range seen {
		lock, err := lockPort(dir, port)
		if err != nil {
			t.Fatal(err)
		}
		if lock == nil {
			t.Errorf("port %d still locked after releasePort", port)
			continue
		}
		lock.Close()
	}
}
