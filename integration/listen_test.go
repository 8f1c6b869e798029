package integration

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestListenSessionMode: an idle session-mode client gets NOTIFY payloads
// as they happen, not only at its next query.
func TestListenSessionMode(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "session", 2, "app"))
	ctx := context.Background()
	l := connect(t, p.AppURL("app"))
	mustExec(t, l, "LISTEN jobs")
	direct := connect(t, cl.DSN("app"))
	for i, payload := range []string{"first", "second"} {
		mustExec(t, direct, "SELECT pg_notify('jobs', $1)", payload)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := l.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("notification %d: %v", i, err)
		}
		if n.Channel != "jobs" || n.Payload != payload {
			t.Fatalf("notification %d: %+v", i, n)
		}
		// The connection still answers queries between notifications.
		var one int
		if err := l.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("query after notification: %v", err)
		}
	}
}

// TestListenTransactionMode: LISTEN pins a transaction-mode client to its
// server, and it gets every NOTIFY, whether the payload arrives while it
// waits, during a query, or after a wait that timed out (pgx's own
// TestListenNotify sequence, repeated to catch a notification lost
// between the relay and the idle watcher).
func TestListenTransactionMode(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	l := connect(t, p.AppURL("app"))
	mustExec(t, l, "LISTEN chat")
	n := connect(t, p.AppURL("app"))
	wait := func(step string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := l.WaitForNotification(wctx)
		if err != nil || got.Channel != "chat" {
			t.Fatalf("%s: %v %+v", step, err, got)
		}
	}
	for i := range 30 {
		mustExec(t, n, "NOTIFY chat")
		wait("waiting")
		mustExec(t, n, "NOTIFY chat")
		rows, _ := l.Query(ctx, "SELECT 1")
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		wait("read during a query")
		tctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		if got, err := l.WaitForNotification(tctx); err == nil {
			t.Fatalf("round %d: a notification nobody sent: %+v", i, got)
		}
		cancel()
		mustExec(t, n, "NOTIFY chat")
		wait("after a timeout")
	}
}

// TestListenNoticesArriveDuringSettle: a pinned transaction-mode client
// gets every NOTIFY even when it arrives while the proxy runs its own
// statements on the server after a transaction (the probe that keeps the
// client pinned): those answers are read by the proxy, and a notification
// among them is the client's.
func TestListenNoticesArriveDuringSettle(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	l := connect(t, p.AppURL("app"))
	mustExec(t, l, "LISTEN chat")
	direct := connect(t, cl.DSN("app"))
	const n = 300
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := direct.Exec(ctx, "SELECT pg_notify('chat', $1)", fmt.Sprint(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	got := map[string]bool{}
	for len(got) < n {
		// Each query ends a transaction, after which the proxy probes the
		// pinned session; notifications arrive all the while.
		rows, err := l.Query(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		for {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			nt, err := l.WaitForNotification(wctx)
			cancel()
			if err != nil {
				break
			}
			got[nt.Payload] = true
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			for len(got) < n {
				nt, err := l.WaitForNotification(wctx)
				if err != nil {
					cancel()
					t.Fatalf("got %d of %d notifications: %v", len(got), n, err)
				}
				got[nt.Payload] = true
			}
			cancel()
		default:
		}
	}
}
