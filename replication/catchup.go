package replication

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// Catching up at cutover. The cutover's pause waits until the destinations
// applied the source's WAL up to its position once writes stopped
// (WaitCaughtUp). Polling the slots for that costs a session per source
// shard every poll and the poll's granularity, and a reader that waits in
// its socket for the source's next message notices its appliers'
// progress only at the end of its poll interval: together up to a tenth
// of a second of the pause. So each running reader publishes the flush
// LSN it confirms (flushes), a waiter is woken at each change, and while
// someone waits the readers poll their appliers every catchUpPoll.

// catchUpPoll is how often a reader looks at its appliers' progress while
// WaitCaughtUp waits.
const catchUpPoll = 2 * time.Millisecond

// flushes holds the flush LSN confirmed by each source shard's reader
// running in this process.
type flushes struct {
	mu        sync.Mutex
	confirmed map[int]pglogrepl.LSN
	wake      map[int]func()
	changed   chan struct{} // closed and replaced at every change
	waiters   atomic.Int32
}

// start registers source shard s's reader, which has confirmed at, with
// wake interrupting its wait for the source; the returned stop removes it.
func (f *flushes) start(s int, at pglogrepl.LSN, wake func()) (stop func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.confirmed == nil {
		f.confirmed, f.wake = map[int]pglogrepl.LSN{}, map[int]func(){}
	}
	f.confirmed[s], f.wake[s] = at, wake
	f.signal()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.confirmed, s)
		delete(f.wake, s)
		f.signal()
	}
}

// set records that source shard s's reader confirmed lsn.
func (f *flushes) set(s int, lsn pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.confirmed[s]; ok {
		f.confirmed[s] = lsn
		f.signal()
	}
}

func (f *flushes) signal() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// waiting reports whether WaitCaughtUp waits on the readers.
func (f *flushes) waiting() bool { return f.waiters.Load() > 0 }

// wait waits until the reader of every source shard s confirmed target[s].
// in is false, at once or later, when some source shard has no reader in
// this process (the caller polls the slots then).
func (f *flushes) wait(ctx context.Context, target []pglogrepl.LSN) (in bool, err error) {
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	f.mu.Lock()
	for _, wake := range f.wake {
		wake()
	}
	f.mu.Unlock()
	for {
		f.mu.Lock()
		caught := true
		for s, lsn := range target {
			got, ok := f.confirmed[s]
			if !ok {
				f.mu.Unlock()
				return false, nil
			}
			caught = caught && got >= lsn
		}
		if caught {
			f.mu.Unlock()
			return true, nil
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		changed := f.changed
		confirmed := fmt.Sprint(f.confirmed)
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return true, fmt.Errorf("replication: wait caught up: %w (confirmed %s, target %v)", ctx.Err(), confirmed, target)
		}
	}
}
