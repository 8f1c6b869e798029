package replication

import (
	"context"
	"errors"
	"testing"
)

// TestTidyAfterOther: a runner that lost its lease for a moment restarts
// its stream after the proxy that took the task over finished and dropped
// it; the restart re-creates the bookkeeping schema (connectDest) and an
// origin (the applier). When the runner ends, tidyAfterOther removes both,
// but only once the task's record is gone: while the record asks for a
// runner (another proxy's, or the next process's), it leaves everything.
func TestTidyAfterOther(t *testing.T) {
	ctx := t.Context()
	f := newStreamFixture(t, 2, batchSchema, "", batchRules)
	m := &Managed{Task: f.task, lease: &lease{}, done: make(chan struct{})}
	leftovers := func() (schemas, origins int) {
		t.Helper()
		// Origins are cluster-wide (and the fixture's shards share one
		// cluster); schemas are per database.
		if err := f.dstConns[0].QueryRow(ctx, `SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'sg\_%'`).Scan(&origins); err != nil {
			t.Fatal(err)
		}
		for _, conn := range f.dstConns {
			var s int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'shardgate_reshard'`).Scan(&s); err != nil {
				t.Fatal(err)
			}
			schemas += s
		}
		return schemas, origins
	}
	staleRestart := func() {
		t.Helper()
		for d := range f.dst.Shards {
			conn, err := f.task.connectDest(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `SELECT pg_replication_origin_create($1)`, f.task.originName(0, d)); err != nil {
				t.Fatal(err)
			}
			conn.Close(context.Background())
		}
	}

	// The record asks for a runner: nothing is dropped.
	if err := m.persist(ctx, TaskRunning, nil); err != nil {
		t.Fatal(err)
	}
	staleRestart()
	if m.tidyAfterOther(ctx) {
		t.Fatal("tidyAfterOther: the record asks for a runner, it says it is gone")
	}
	if s, o := leftovers(); s != 2 || o != 2 {
		t.Fatalf("with the record kept: %d schemas, %d origins; want 2 and 2 (nothing dropped)", s, o)
	}

	// The other proxy finishes and drops the task; this runner's stream
	// restarts once more before it learns that.
	if err := f.task.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if s, o := leftovers(); s != 0 || o != 0 {
		t.Fatalf("after Drop: %d schemas, %d origins left", s, o)
	}
	// A stale runner's applier and Step create nothing now: the origin
	// only under a lock on the task's bookkeeping, which is gone.
	if a, err := f.task.newApplier(ctx, 0, 1, nil); !errors.Is(err, errFinishedElsewhere) {
		if a != nil {
			a.conn.Close(context.Background())
		}
		t.Fatalf("applier after the drop: %v, want errFinishedElsewhere", err)
	}
	if step, err := f.task.Step(ctx); err != nil || step != StepNone {
		t.Fatalf("Step after the drop: %v, %v; want StepNone", step, err)
	}
	if s, o := leftovers(); s != 0 || o != 0 {
		t.Fatalf("after a stale applier and Step: %d schemas, %d origins; want none", s, o)
	}
	// What a runner re-created all the same (an older proxy) goes when it
	// ends.
	staleRestart()
	if !m.tidyAfterOther(ctx) {
		t.Fatal("tidyAfterOther: the record is gone, it says it is not")
	}
	if s, o := leftovers(); s != 0 || o != 0 {
		t.Fatalf("after the stale runner ended: %d schemas, %d origins left; want none", s, o)
	}
	// Dropping again when nothing is left is not an error.
	if err := f.task.Drop(ctx); err != nil {
		t.Fatalf("Drop with nothing left: %v", err)
	}
}
