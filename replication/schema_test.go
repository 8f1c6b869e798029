package replication

import (
	"testing"
	"time"
)

// TestSchemaSyncWaitsForAnotherRun checks the schema step against a run of
// the same step whose transaction is still open on a destination shard (a
// run whose connection broke, or whose proxy died with its Query still on
// the way): SchemaSync waits for it and, once it committed, takes the step
// as done instead of failing on the tables it created. The chaos rig found
// a takeover proxy failing with "relation "accounts" already exists" there.
func TestSchemaSyncWaitsForAnotherRun(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, "", batchRules)
	other := f.newTask(t, f.task.log)
	conn, err := other.connectDest(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	script, err := other.dump(ctx, "pre-data")
	if err != nil {
		t.Fatal(err)
	}
	// The other run's Query has run up to its COMMIT on destination shard 1.
	if _, err := conn.PgConn().Exec(ctx, "BEGIN;\n"+other.schemaScript(script, StepSchema)).ReadAll(); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- f.task.SchemaSync(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		if err := f.dstConns[1].QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, conn.PgConn().PID()).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("SchemaSync returned %v without waiting for the other run's transaction", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("SchemaSync never waited for the other run's transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("SchemaSync after the other run committed: %v", err)
	}
	for d, c := range f.dstConns {
		var tables, markers int
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = 'public'),
			(SELECT count(*) FROM shardgate_reshard.steps WHERE task = $1 AND step = $2)`, f.task.Name, StepSchema.String()).Scan(&tables, &markers); err != nil {
			t.Fatal(err)
		}
		if tables != 4 || markers != 1 {
			t.Errorf("destination %d: %d tables and %d step markers, want 4 and 1", d, tables, markers)
		}
	}
}
