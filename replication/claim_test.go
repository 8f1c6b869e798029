package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestClaimAndTheCutoverFence: the protocol between a run's cutover and
// a run that takes the task over (claim.go), step by step.
//
//   - Run A claims the task, fences the source and records the source's
//     shards (the step before its switch).
//   - Run B takes the task over: its first record, as a resumed run
//     writes it, keeps A's source shards, and its claim leaves the fence
//     up (A's cutover may be switching: the source must refuse writes).
//     A copy of B's that finds the slot dropped knows that a cutover did
//     it (cutOverElsewhere).
//   - A, now stale, can neither record its cutover again nor undo it:
//     errClaimLost, and the fence and the record stay.
//   - B's own cutover, aborting, clears the record and lifts the fence.
//   - With the record cleared, a third run's claim lifts a fence left by
//     a run that died between its fence and its record.
func TestClaimAndTheCutoverFence(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, claimRows, batchRules)
	fenced := func() bool {
		t.Helper()
		var n int
		if err := f.dstConns[0].QueryRow(ctx, `SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
			WHERE d.datname = 'src_0' AND 'default_transaction_read_only=on' = ANY (s.setconfig)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	recorded := func() bool {
		t.Helper()
		var yes bool
		if err := f.dstConns[0].QueryRow(ctx, `SELECT source_shards IS NOT NULL FROM shardgate_reshard.tasks WHERE task = $1`,
			f.task.Name).Scan(&yes); err != nil {
			t.Fatal(err)
		}
		return yes
	}
	run := func(task *Task) *Managed {
		return &Managed{ID: 1, Kind: KindCopyData, Source: f.src.Name, Dest: f.dst.Name, Task: task}
	}
	noSpare := func(int) []uint32 { return nil }

	a := run(f.task)
	if err := a.persist(ctx, TaskRunning, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Task.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Task.underClaim(ctx, func(pgx.Tx) error { _, err := a.Task.Fence(ctx, noSpare); return err }); err != nil {
		t.Fatalf("A's fence: %v", err)
	}
	if err := a.recordSource(ctx, f.src); err != nil {
		t.Fatalf("A's record of the source's shards: %v", err)
	}
	if !fenced() || !recorded() {
		t.Fatalf("after A's fence and record: fenced %v, recorded %v", fenced(), recorded())
	}

	b := run(f.newTask(t, f.task.log))
	if err := b.persist(ctx, TaskRunning, nil); err != nil {
		t.Fatal(err)
	}
	if !recorded() {
		t.Fatal("B's first record erased the source's shards of A's cutover")
	}
	if err := b.Task.Claim(ctx); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	if !fenced() {
		t.Fatal("B's claim lifted the fence of A's cutover, which had recorded the source's shards")
	}
	if !b.Task.cutOverElsewhere(ctx) {
		t.Fatal("cutOverElsewhere is false with a cutover's source shards recorded")
	}

	if err := a.recordSource(ctx, f.src); !errors.Is(err, errClaimLost) {
		t.Fatalf("A's record after B's claim: %v, want errClaimLost", err)
	}
	if err := a.Task.underClaim(ctx, func(pgx.Tx) error { return nil }); !errors.Is(err, errClaimLost) {
		t.Fatalf("A's fence after B's claim: %v, want errClaimLost", err)
	}
	if err := a.undoFence(ctx, undoSteps{record: true, fence: true}); err != nil {
		t.Fatalf("A's undo after B's claim: %v, want nil (logged, left to B)", err)
	}
	if !fenced() || !recorded() {
		t.Fatalf("after A's undo with B's claim: fenced %v, recorded %v; want both left to B", fenced(), recorded())
	}

	if err := b.undoFence(ctx, undoSteps{record: true, fence: true}); err != nil {
		t.Fatalf("B's undo: %v", err)
	}
	if fenced() || recorded() {
		t.Fatalf("after B's aborted cutover: fenced %v, recorded %v; want neither", fenced(), recorded())
	}
	if b.Task.cutOverElsewhere(ctx) {
		t.Fatal("cutOverElsewhere is true with no cutover recorded")
	}

	// B fences again and dies before its record: the next run's claim
	// lifts the fence.
	if err := b.Task.underClaim(ctx, func(pgx.Tx) error { _, err := b.Task.Fence(ctx, noSpare); return err }); err != nil {
		t.Fatalf("B's second fence: %v", err)
	}
	if err := f.newTask(t, f.task.log).Claim(ctx); err != nil {
		t.Fatalf("the third run's claim: %v", err)
	}
	if fenced() {
		t.Fatal("the third run's claim left the fence of a cutover that recorded nothing")
	}
}
