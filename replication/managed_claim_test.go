package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
)

// fixedGate is a Gate over a fixed configuration, for tasks that do not
// cut over.
type fixedGate struct{ cfg *config.Config }

func (g fixedGate) Config() *config.Config            { return g.cfg }
func (fixedGate) Pause(context.Context, string) error { return nil }
func (fixedGate) Resume(string) error                 { return nil }
func (fixedGate) Install(*config.Config) error        { return nil }
func (fixedGate) ServerPIDs(string, int) []uint32     { return nil }

// TestManagedClaimLostStops: a managed run A copies; another run of the
// same task claims it (claim.go) and dies right after, leaving the lease
// A holds and nothing else. A's copy is ended by the claim, and its retry
// finds the task claimed by the other run: A must stop (TaskStopped, the
// record left running), not fail the task (TaskFailed, which ends it for
// good), and the task must then resume, under a Manager that takes its
// free lease, and finish its copy.
func TestManagedClaimLostStops(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, claimRows, batchRules)
	gate := fixedGate{&config.Config{
		Users:     []config.User{{Name: f.c.User, ServerUser: f.c.User, ServerPassword: f.c.Password}},
		Databases: []config.Database{*f.src, *f.dst},
	}}
	m1 := NewManager(gate, f.task.log)
	defer m1.Close()
	// A's copies stall with their destination transactions open, holding
	// the copy claim lock, until the claim ends them.
	m1.KnobsForTest.StallCopy = func(string) bool { return true }
	a, err := m1.Start(KindCopyData, "src", "dst")
	if err != nil {
		t.Fatal(err)
	}
	// A's own Claim holds the same lock for a moment, on each destination
	// in turn: a claim racing it would end A's claim transaction (and A's
	// claim the other's). Once A is in its copy phase its claim is done,
	// and the holders are its copies.
	poll(t, time.Minute, "A's copy to take the copy claim lock", func() bool {
		if a.Info().Phase != PhaseCopy {
			return false
		}
		var n int
		if err := f.dstConns[0].QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE `+claimLockHeld, copyClaimLock, f.task.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})

	// Another run claims the task and does nothing more: it died.
	if err := f.newTask(t, f.task.log).Claim(ctx); err != nil {
		t.Fatalf("the other run's claim: %v", err)
	}
	select {
	case <-a.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("A still runs two minutes after the other run's claim: %+v", a.Info())
	}
	info := a.Info()
	if info.State != TaskStopped || !errors.Is(info.Err, errClaimLost) {
		t.Fatalf("A ended %s (%v), want stopped with errClaimLost", info.State, info.Err)
	}
	var state string
	if err := f.dstConns[0].QueryRow(ctx, `SELECT state FROM shardgate_reshard.tasks WHERE task = $1`, f.task.Name).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "running" {
		t.Fatalf("the task's record says %q after A stopped, want running (so that it resumes)", state)
	}

	// A Manager on another proxy takes the free lease and resumes the
	// task, which copies everything and streams.
	m2 := NewManager(gate, f.task.log)
	defer m2.Close()
	resumed, err := m2.Resume(ctx)
	if err != nil || len(resumed) != 1 {
		t.Fatalf("Resume: %d tasks (%v), want 1", len(resumed), err)
	}
	b := resumed[0]
	poll(t, 2*time.Minute, "the resumed task to stream", func() bool {
		info := b.Info()
		if info.State != TaskRunning {
			t.Fatalf("the resumed task ended %s: %v", info.State, info.Err)
		}
		return info.Phase == PhaseStream
	})
	f.task = b.Task
	compareBatchTables(t, f)
}

// poll calls cond every 20 ms until it holds, failing the test after
// timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
