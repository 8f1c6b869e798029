package replication

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// TestReaderHandsOverBatches checks that the reader hands its appliers
// the ops of many source transactions at once, rather than one op per
// source transaction and destination, and that the appliers see every
// transaction's ops in stream order, each ending with its commit.
func TestReaderHandsOverBatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		txns int
		// reads splits the stream into reads of the source socket: the
		// reader hands over what it holds after each (read's handoffAll).
		reads int
		max   int // hand-offs at most
	}{
		{name: "one read", txns: 2000, reads: 1, max: 2 * (2000*2/chunkChanges + 1)},
		{name: "ten reads", txns: 2000, reads: 10, max: 2 * (2000*2/chunkChanges + 10)},
		{name: "a read per transaction", txns: 50, reads: 50, max: 2 * 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := newTestReader()
			msgs := accountsLoad(tc.txns)
			per := len(msgs) / tc.reads
			for i, data := range msgs {
				if err := r.copyData(ctx, nil, data); err != nil {
					t.Fatal(err)
				}
				if (i+1)%per == 0 {
					if err := r.handoffAll(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := r.handoffAll(ctx); err != nil {
				t.Fatal(err)
			}
			if r.handoffs > tc.max {
				t.Errorf("%d hand-offs for %d transactions, want at most %d", r.handoffs, tc.txns, tc.max)
			}
			changes, commits := 0, 0
			for d, a := range r.appliers {
				close(a.batches)
				var last pglogrepl.LSN
				for b := range a.batches {
					n := 0
					for _, o := range b.ops {
						n += len(o.changes)
						if o.final < last {
							t.Fatalf("destination %d: transaction %s after %s", d, o.final, last)
						}
						last = o.final
						if o.commit {
							commits++
						}
					}
					if n != b.changes {
						t.Errorf("destination %d: batch counts %d changes, holds %d", d, b.changes, n)
					}
					changes += n
					a.budget.Release(int64(b.size))
				}
			}
			if changes != 2*tc.txns {
				t.Errorf("%d changes handed over, want %d", changes, 2*tc.txns)
			}
			// Each transaction's UPDATE and INSERT go to one or two
			// destinations, each of which commits it.
			if commits < tc.txns || commits > 2*tc.txns {
				t.Errorf("%d commits handed over for %d transactions", commits, tc.txns)
			}
		})
	}
}
