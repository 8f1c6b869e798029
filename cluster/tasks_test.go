package cluster

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestPublishTasksAfterTakeover: the rows SHOW TASKS reads from the
// control database when a task moved between proxies (TestChaosReshardCluster
// seed 17571897610396541197 waited 90 s for a finished task, listed as
// "stopped" by a proxy whose killed process had stopped its run):
//
//   - p1's run stopped (to be resumed); p0 resumed the task and finished
//     it. p1 publishing its stopped run again must not hide p0's "done".
//   - p1's run stopped and nobody has published the task since; a new
//     process of p1, which does not know that run, drops its row.
func TestPublishTasksAfterTakeover(t *testing.T) {
	ctx := t.Context()
	c := pgtest.New(t, pgtest.Options{})
	if err := c.CreateDatabase(ctx, "control"); err != nil {
		t.Fatal(err)
	}
	member := func(name string, tasks ...TaskRow) *Member {
		m, err := New(&config.Config{Cluster: &config.Cluster{Name: name, Control: c.DSN("control")}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		m.SetTaskHooks(TaskHooks{Tasks: func() []TaskRow { return tasks }})
		return m
	}
	publish := func(m *Member) {
		t.Helper()
		conn, err := m.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := ensureSchema(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if err := m.publishTasks(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	// rows are the tasks an observer (a third member) lists: id, proxy, state.
	observer := member("observer")
	rows := func() map[int]string {
		t.Helper()
		got, err := observer.Tasks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]string{}
		for _, r := range got {
			out[r.ID] = r.Proxy + " " + r.State
		}
		return out
	}

	stopped1 := TaskRow{ID: 1, Proxy: "p1", State: "stopped", Resumable: true}
	p1 := member("p1", stopped1)
	publish(p1)
	publish(member("p0", TaskRow{ID: 1, Proxy: "p0", State: "done"}))
	publish(p1)
	if got := rows()[1]; got != "p0 done" {
		t.Fatalf("task 1 after p0 finished it and p1 published its stopped run again: %q, want p0 done", got)
	}

	publish(member("p1", TaskRow{ID: 2, Proxy: "p1", State: "stopped", Resumable: true}))
	publish(member("p1")) // p1's next process
	if got, ok := rows()[2]; ok {
		t.Fatalf("task 2, a stopped run of p1's killed process, still listed: %q", got)
	}
	if got := rows()[1]; got != "p0 done" {
		t.Fatalf("task 1 after p1's restart: %q, want p0 done", got)
	}
}
