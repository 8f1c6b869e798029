package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// claimRows are the source rows of the claim tests: enough of them in
// each table that a copy is still under way when another run claims it.
const claimRows = `
INSERT INTO kv SELECT g, g % 7, repeat('x', g % 50) FROM generate_series(1, 3000) g;
INSERT INTO mail SELECT g, 'u' || g || '@example.com', g FROM generate_series(1, 500) g;
INSERT INTO comp SELECT g % 40, 'b' || g, g FROM generate_series(1, 400) g;
INSERT INTO conf VALUES ('a', 1), ('b', 2);`

// TestClaimFencesAStaleRunner: run A of a task copies; run B of the same
// task (another proxy that took it over) claims it. A's table copy under
// way is ended, A's next attempt neither advances the slot nor copies, and
// B's copy then completes: every row once, on the shard its rule names,
// and the table copies recorded are B's. Without the claim, A's copy and
// B's collide (23505 on table_copies, the task failed for good) or A moves
// the slot past B's snapshot.
func TestClaimFencesAStaleRunner(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, claimRows, batchRules)
	a := f.task
	if err := a.SchemaSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	// A's copies stall with their destination transactions open, holding
	// the copy claim lock.
	a.knobs.StallCopy = func(string) bool { return true }
	actx, acancel := context.WithTimeout(ctx, 2*time.Minute)
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Copy(actx) }()
	copyLockHolders := func() int {
		var n int
		if err := f.dstConns[0].QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE `+claimLockHeld, copyClaimLock, a.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for copyLockHolders() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A's copy never took the copy claim lock")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// B takes the task over: its claim ends A's copy.
	b := f.newTask(t, a.log)
	if err := b.Claim(ctx); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	select {
	case err := <-aDone:
		if err == nil {
			t.Fatal("A's stalled copy succeeded after B's claim")
		}
		t.Logf("A's copy after B's claim: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("A's copy still runs a minute after B's claim")
	}
	if n := copyLockHolders(); n != 0 {
		t.Fatalf("%d sessions hold the copy claim lock after A's copy ended", n)
	}

	// A tries again, as its retry would: its slot exists and no copy is
	// recorded, so it would advance the slot to a new snapshot, then copy.
	a.knobs.StallCopy = nil
	err := a.Copy(actx)
	if !errors.Is(err, errClaimLost) {
		t.Fatalf("A's copy after B's claim: %v, want errClaimLost", err)
	}
	// A destination load of A's, had it got that far, is refused too.
	src, err := a.connectSource(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := a.ownedTables(ctx, src, 0)
	src.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	if err := a.loadDest(ctx, 1, 0, tables[0], "id", strings.NewReader(""), 0, &rows); !errors.Is(err, errClaimLost) {
		t.Fatalf("A's load into destination shard 1 after B's claim: %v, want errClaimLost", err)
	}
	var recorded int
	for _, conn := range f.dstConns {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM shardgate_reshard.table_copies`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		recorded += n
	}
	if recorded != 0 {
		t.Fatalf("%d table copies recorded by the stale runner A", recorded)
	}

	// B copies everything; what the destinations hold is the source's.
	if err := b.Copy(ctx); err != nil {
		t.Fatalf("B's copy: %v", err)
	}
	if err := b.SchemaSyncPost(ctx); err != nil {
		t.Fatal(err)
	}
	compareBatchTables(t, f)
	for d, conn := range f.dstConns {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM shardgate_reshard.table_copies`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Errorf("destination shard %d: %d table copies recorded, want 4", d, n)
		}
	}
	// A copies nothing more, B's stream takes the slot from B's snapshot.
	if err := a.Copy(ctx); err != nil {
		t.Fatalf("A's copy once B's are recorded (nothing left to copy): %v", err)
	}
	f.task = b
	f.exec(t, f.srcConn, `UPDATE kv SET v = v + 100 WHERE id % 10 = 0; DELETE FROM mail WHERE id > 450`)
	f.stream(t)
	compareBatchTables(t, f)
}
