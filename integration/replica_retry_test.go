package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/pool"
)

// TestRetryReadOnReplica: a read balanced to a replica whose server dies
// between its checkout (and the checkout's probe) and the read — a
// replica restarted, a backend ended by an operator — runs again on a
// replica's server, not on the primary's. Both paths: a one-shard database
// (retryElsewhere) and a routed statement of a sharded one
// (replaceShardServer), over the simple and the extended protocol. The
// proxy's checkout hook ends the backend of the server it just lent, in
// the window no probe covers, and waits until it exited: its FATAL waits in
// the proxy's socket when the read goes out. Before the fix both retries
// went to the primary (pg_is_in_recovery false).
func TestRetryReadOnReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, replica, yaml := replicatedDatabases(t)
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}

	// The hook's own connection to the replica, used from the proxy's
	// goroutine while the test's waits for its read: pgx conns are not
	// shared, so the test never uses this one itself.
	killer := simpleConn(t, replica.DSN("postgres"))
	var mu sync.Mutex
	var armed bool
	var killed []uint32
	var hookErrs []error
	hook := func(shard int, s *pool.Server) {
		mu.Lock()
		defer mu.Unlock()
		if !armed {
			return
		}
		armed = false
		if role := s.Pool().Key.Role; role != "replica" {
			hookErrs = append(hookErrs, fmt.Errorf("the read was lent a %s server of shard %d, want a replica's", role, shard))
			return
		}
		if err := endBackend(ctx, killer, s.PID); err != nil {
			hookErrs = append(hookErrs, err)
			return
		}
		killed = append(killed, s.PID)
	}
	p := startProxyConfig(t, cfg, func(l *frontend.Listener) { l.CheckoutHookForTest = hook })

	// Every database holds the rows: the routed read finds its row on
	// whichever shard the key hashes to.
	for _, db := range []string{"app", "shard0", "shard1"} {
		c := simpleConn(t, primary.DSN(db))
		mustExec(t, c, "INSERT INTO items SELECT g, 'x' FROM generate_series(1, 10) g")
		replicated := simpleConn(t, replica.DSN(db))
		eventually(t, 20*time.Second, "the rows of "+db+" on the replica", func() bool {
			var n int
			err := replicated.QueryRow(ctx, "SELECT count(*) FROM items", pgx.QueryExecModeSimpleProtocol).Scan(&n)
			return err == nil && n == 10
		})
	}

	const read = "SELECT pg_is_in_recovery(), pg_backend_pid(), v FROM items WHERE id = $1"
	for _, db := range []string{"app", "sharded"} {
		for _, m := range []struct {
			name string
			mode pgx.QueryExecMode
		}{{"simple", pgx.QueryExecModeSimpleProtocol}, {"extended", pgx.QueryExecModeExec}} {
			t.Run(db+"/"+m.name, func(t *testing.T) {
				c := connectConfig(t, p.AppURL(db), m.mode, nil)
				if got := row(t, c, m.mode, read, 3); got[0] != "true" {
					t.Fatalf("before: the read ran on a primary (%v); the test needs it balanced to the replica", got)
				}
				mu.Lock()
				armed, killed, hookErrs = true, nil, nil
				mu.Unlock()
				got, err := queryRow(c, m.mode, read, 3)
				mu.Lock()
				stillArmed, ended, errs := armed, killed, hookErrs
				armed = false
				mu.Unlock()
				if len(errs) > 0 {
					t.Fatalf("checkout hook: %v", errs)
				}
				if stillArmed || len(ended) != 1 {
					t.Fatalf("the hook ended %v (armed %v): the read took no new server", ended, stillArmed)
				}
				if err != nil {
					t.Fatalf("the read whose replica server died before it: %s", errText(err))
				}
				if got[0] != "true" || got[2] != "x" {
					t.Fatalf("the retried read answered %v: want it on a replica (pg_is_in_recovery true), row x", got)
				}
				if got[1] == fmt.Sprint(ended[0]) {
					t.Fatalf("the read answered from the ended backend %s", got[1])
				}
			})
		}
	}
}

// endBackend terminates backend pid through conn (a connection to its
// server) and waits until it exited: its FATAL was sent by then.
func endBackend(ctx context.Context, conn *pgx.Conn, pid uint32) error {
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pgx.QueryExecModeSimpleProtocol, int64(pid)).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pgx.QueryExecModeSimpleProtocol, int64(pid)).Scan(&n); err != nil {
			return fmt.Errorf("waiting for backend %d to exit: %w", pid, err)
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("backend %d did not exit within 5s", pid)
}
