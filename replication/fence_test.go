package replication

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFenceWaitsForSessions: the fence terminates the source's sessions
// and returns only once they have exited, so that nothing one of them
// commits lands after the fence's flush position. A backend that cannot
// exit (SIGSTOPped with a write open) fails the fence when its context
// ends; once it runs again, it exits without committing, and the fence
// succeeds.
func TestFenceWaitsForSessions(t *testing.T) {
	ctx := t.Context()
	f := newStreamFixture(t, 2, batchSchema, "", batchRules)
	victim, err := pgx.Connect(ctx, f.c.DSN("src_0"))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(context.Background())
	var pid int
	if err := victim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Exec(ctx, "INSERT INTO kv (id, v) VALUES (-1, 1)"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP backend %d: %v", pid, err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	none := func(int) []uint32 { return nil }

	// The deadline must outlast the fence's steps before the wait (a
	// connection, SET, ALTER, terminate): on a loaded CI machine 300 ms
	// ran out in the terminate query, and the error then did not name the
	// stopped session. A stopped backend never exits, so any deadline
	// ends in the wait; 5 s only bounds the test.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = f.task.Fence(short, none)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "did not exit") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fence with a stopped backend: %v; want an error saying it did not exit by the deadline", err)
	}

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	if _, err := f.task.Fence(ctx, none); err != nil {
		t.Fatalf("Fence once the backend runs: %v", err)
	}
	check := fixtureConnect(t, f.c.DSN("postgres"))
	var alive bool
	if err := check.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if alive {
		t.Fatalf("backend %d still runs after the fence returned", pid)
	}
	if err := f.task.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	src := fixtureConnect(t, f.c.DSN("src_0"))
	var n int
	if err := src.QueryRow(ctx, "SELECT count(*) FROM kv WHERE id = -1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the terminated session's write committed (%d rows)", n)
	}
}
