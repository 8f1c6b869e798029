package replication

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestStreamAppliesQuietSource: the appliers' round trips go out from the
// read that finds the source's socket empty (reader.idle), so a lone
// source transaction with nothing after it is applied at once (after the
// group's linger of groupLinger), not when the reader's wait for the
// source ends every pollInterval. Each of a dozen single-row transactions,
// on a source quiet before and after it, must be on its destination shard
// in well under pollInterval (median).
func TestStreamAppliesQuietSource(t *testing.T) {
	f := newStreamFixture(t, 2, batchSchema, "", batchRules)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.task.Stream(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stream: %v", err)
		}
	}()
	// applied waits until row id is on one of the destination shards and
	// returns when it was first seen there.
	applied := func(id int) time.Time {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			for _, conn := range f.dstConns {
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM kv WHERE id = $1", id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n == 1 {
					return time.Now()
				}
			}
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the stream ended: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		t.Fatalf("row %d was not applied within a minute", id)
		return time.Time{}
	}
	// The first row waits for the stream to start.
	f.exec(t, f.srcConn, "INSERT INTO kv VALUES (1, 1)")
	applied(1)
	var lags []time.Duration
	for id := 2; id <= 13; id++ {
		start := time.Now()
		if _, err := f.srcConn.Exec(ctx, "INSERT INTO kv VALUES ($1, $2)", id, id); err != nil {
			t.Fatal(err)
		}
		lags = append(lags, applied(id).Sub(start))
	}
	slices.Sort(lags)
	if median := lags[len(lags)/2]; median >= pollInterval*6/10 {
		t.Errorf("median time from a lone source commit to its destination: %v (all: %v), want well under the reader's poll interval %v",
			median, lags, pollInterval)
	}
	t.Logf("time from a lone source commit to its destination: %v", lags)
}
