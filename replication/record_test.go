package replication

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/faultnet"
)

// TestTaskRecordedThroughAnOutage: destination shard 0, which keeps the
// task's record, refuses connections when the task starts. The run retries
// the record before it copies, so once the shard is back the record says
// "running" (a restarted or another proxy would resume the task); before,
// a record that failed at the start was only logged, and a proxy killed
// then lost the task.
func TestTaskRecordedThroughAnOutage(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, `INSERT INTO kv SELECT g, g, 'x' FROM generate_series(1, 100) g`, batchRules)
	relay, err := faultnet.Listen(net.JoinHostPort(f.c.Host, strconv.Itoa(f.c.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	relay.SetRefuse(true)
	f.dst.Shards[0].Host, f.dst.Shards[0].Port = "127.0.0.1", relay.Port()
	task := f.newTask(t, f.task.log)
	m := &Managed{Task: task, Kind: KindCopyData, Source: "src", Dest: "dst", m: &Manager{},
		done: make(chan struct{}), cutover: make(chan chan error)}
	rctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	go m.run(rctx)
	defer func() {
		cancel()
		<-m.done
	}()
	// The run failed to reach the shard and waits to retry; the shard
	// comes back.
	deadline := time.Now().Add(time.Minute)
	for m.Info().Err == nil {
		if time.Now().After(deadline) {
			t.Fatal("a minute on, the run has not failed to reach destination shard 0")
		}
		time.Sleep(20 * time.Millisecond)
	}
	relay.SetRefuse(false)
	for {
		var state string
		err := f.dstConns[0].QueryRow(ctx, `SELECT state FROM shardgate_reshard.tasks WHERE task = $1`, task.Name).Scan(&state)
		if err == nil && state == TaskRunning.String() && m.phaseName() == PhaseStream.String() {
			break
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && !isUndefinedTable(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute on: record %q (%v), phase %s", state, err, m.phaseName())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isUndefinedTable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42P01"
}

// TestTaskRecordedBeforeTheAnswer: once StartNamed (RESHARD, COPY_DATA)
// returns, the task's "running" record is on destination shard 0, before
// its run has done anything: a proxy killed right after answering leaves a
// task that a restart or another proxy resumes. Before, the run wrote the
// record, so a proxy killed in that moment lost the task.
func TestTaskRecordedBeforeTheAnswer(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, `INSERT INTO kv SELECT g, g, 'x' FROM generate_series(1, 10) g`, batchRules)
	cfg := &config.Config{
		Users:     []config.User{{Name: "app", ServerUser: f.c.User, ServerPassword: f.c.Password}},
		Databases: []config.Database{*f.src, *f.dst},
	}
	m := NewManager(fixedGate{cfg}, f.task.log)
	release := make(chan struct{})
	m.KnobsForTest.AtRunStart = func() { <-release }
	task, err := m.StartNamed(KindCopyData, "src", "dst", Names{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		task.cancel()
		<-task.done
	}()
	var state string
	err = f.dstConns[0].QueryRow(ctx, `SELECT state FROM shardgate_reshard.tasks WHERE task = $1`, task.Task.Name).Scan(&state)
	if err != nil || state != TaskRunning.String() {
		t.Fatalf("record on destination shard 0 once the task started: %q, %v; want %q", state, err, TaskRunning)
	}
}
