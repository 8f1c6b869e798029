package replication

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/shardgate/shardgate/config"
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

// TestStreamHandsOverBatches streams a backlog of single-row-pair source
// transactions (bench/reshard.sh's accounts load) into two destination
// shards: the reader must hand its appliers far fewer batches than there
// are transactions (one op per transaction and destination shard did),
// and the destination must end up with the source's rows.
func TestStreamHandsOverBatches(t *testing.T) {
	const rows, txns = 1000, 2000
	f := newStreamFixture(t, 2, benchSchema,
		fmt.Sprintf("INSERT INTO accounts SELECT g, g %% 1000, repeat('x', 160) FROM generate_series(1::bigint, %d) g", rows),
		func(db *config.Database) {
			db.ShardedTables = []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint"}}
		})
	var sql strings.Builder
	for i := range txns {
		fmt.Fprintf(&sql, "BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = %d; INSERT INTO accounts VALUES (nextval('bench_ins'), 0, repeat('y', 160)); COMMIT;\n",
			1+i*7%rows)
	}
	f.exec(t, f.srcConn, sql.String())
	f.streamUntilConfirmed(t, func(context.Context) {})
	if n := f.task.prog.handoffs.Load(); n == 0 || n > txns/2 {
		t.Errorf("%d hand-offs for %d source transactions, want fewer than %d", n, txns, txns/2)
	} else {
		t.Logf("%d hand-offs for %d source transactions", n, txns)
	}
	f.compare(t, "accounts", "id", "balance::text || filler")
}
