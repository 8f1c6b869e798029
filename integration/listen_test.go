package integration

import (
	"context"
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
