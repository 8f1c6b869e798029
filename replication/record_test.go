package replication

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTaskRecordedThroughAnOutage: destination shard 0, which keeps the
// task's record, drops the task's first connections. The run retries the
// record before it copies, so the record says "running" (a restarted or
// another proxy would resume the task); before, a record that failed at
// the start was only logged, and a proxy killed then lost the task.
func TestTaskRecordedThroughAnOutage(t *testing.T) {
	ctx := t.Context()
	f := newTaskFixture(t, 2, batchSchema, `INSERT INTO kv SELECT g, g, 'x' FROM generate_series(1, 100) g`, batchRules)
	// pgx may dial twice per connect (sslmode=prefer): 6 drops fail at
	// least 3 attempts.
	const drops = 6
	relay := newDroppingRelay(t, net.JoinHostPort(f.c.Host, strconv.Itoa(f.c.Port)), drops)
	f.dst.Shards[0].Host, f.dst.Shards[0].Port = "127.0.0.1", relay.port()
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
	deadline := time.Now().Add(time.Minute)
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
			t.Fatalf("a minute on: record %q (%v), phase %s, %d connections dropped", state, err, m.phaseName(), relay.dropped.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := relay.dropped.Load(); n != drops {
		t.Fatalf("%d connections dropped, want %d", n, drops)
	}
}

func isUndefinedTable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42P01"
}

// droppingRelay forwards TCP connections to a server, closing the first
// drop of them at once.
type droppingRelay struct {
	ln      net.Listener
	dropped atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn // forwarded, both ends
	closed  bool
}

func (r *droppingRelay) track(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return
	}
	r.conns = append(r.conns, c)
}

func newDroppingRelay(tb testing.TB, target string, drop int32) *droppingRelay {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &droppingRelay{ln: ln}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		r.closed = true
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if r.dropped.Load() < drop {
				r.dropped.Add(1)
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				r.track(c)
				r.track(s)
				go func() { io.Copy(s, c); s.Close() }()
				io.Copy(c, s)
			}()
		}
	}()
	return r
}

func (r *droppingRelay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }
