package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/shardgate/shardgate/wire"
)

// checkGoroutines records the number of goroutines now and, when the test
// ends, waits until it is back to (at most) that number. Call it first in a
// test, before the cluster and proxy start: cleanups run last-in first-out,
// so the check runs after the proxy shut down, its pools closed, the test's
// client connections closed and the cluster stopped.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if t.Failed() {
			return // a failed test may legitimately leave clients behind
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d goroutines before the test, %d after it\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestGracefulShutdown: Shutdown lets a client finish its open transaction,
// terminates idle clients with 57P01, refuses new connections, and returns
// once the last client left.
func TestGracefulShutdown(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (x int)")
	setup.Close(ctx)

	a := connect(t, p.AppURL("app"))
	b := connect(t, p.AppURL("app"))
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "INSERT INTO t VALUES (42)")
	mustExec(t, b, "SELECT 1") // b logged in and idle

	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- p.Listener.Shutdown(sctx)
	}()

	// New connections are refused once the listener closed.
	eventually(t, 5*time.Second, "new connections to be refused", func() bool {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	// The idle client is terminated by the administrator.
	_, err := b.Exec(ctx, "SELECT 1")
	if got := sqlstate(err); got != wire.AdminShutdown {
		t.Fatalf("idle client: SQLSTATE %q, want 57P01 (%v)", got, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned while a transaction was open: %v", err)
	default:
	}

	// The client in a transaction may finish it.
	mustExec(t, a, "INSERT INTO t VALUES (43)")
	mustExec(t, a, "COMMIT")
	// Once its transaction is over the client is terminated too, which
	// lets Shutdown return.
	_, err = a.Exec(ctx, "SELECT 1")
	if got := sqlstate(err); got != wire.AdminShutdown {
		t.Fatalf("client after commit: SQLSTATE %q, want 57P01 (%v)", got, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the last client left")
	}

	direct := connect(t, cl.DSN("app"))
	var sum int
	if err := direct.QueryRow(ctx, "SELECT coalesce(sum(x), 0) FROM t").Scan(&sum); err != nil || sum != 85 {
		t.Fatalf("committed rows: sum %d (%v), want 85", sum, err)
	}
	if _, err := pgx.Connect(ctx, p.AppURL("app")); err == nil {
		t.Fatal("connected after shutdown")
	}
}

// TestShutdownTimeout: clients still in a transaction when the shutdown
// context ends are disconnected, their transaction rolled back, and
// Shutdown reports the timeout.
//
// The TLS client (on the event loop unless SHARDGATE_TEST_EVENT_LOOP=0)
// is closed under its TLS session: Shutdown's goroutine closes its socket
// and the client's own close ends the session.
func TestShutdownTimeout(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { testShutdownTimeout(t, useTLS) })
	}
}

func testShutdownTimeout(t *testing.T, useTLS bool) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	cfg := poolConfig(cl, "transaction", 1, "app")
	if useTLS {
		fields, _ := clientCert(t)
		cfg = withTLS(t, cfg, fields)
	}
	p := startProxy(t, cfg)
	ctx := context.Background()
	url := p.AppURL("app")
	if useTLS {
		url = tlsURL(p, "sslmode=require")
	}
	a := connect(t, url)
	mustExec(t, a, "CREATE TABLE t (x int)")
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "INSERT INTO t VALUES (1)")

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := p.Listener.Shutdown(sctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want a deadline error", err)
	}
	if _, err := a.Exec(ctx, "COMMIT"); err == nil {
		t.Fatal("COMMIT succeeded on a connection closed by shutdown")
	}
	direct := connect(t, cl.DSN("app"))
	eventually(t, 10*time.Second, "the transaction to be rolled back", func() bool {
		var rows, busy int
		err := direct.QueryRow(ctx, `SELECT (SELECT count(*) FROM t),
			(SELECT count(*) FROM pg_stat_activity WHERE datname = 'app' AND state LIKE 'idle in transaction%')`).Scan(&rows, &busy)
		return err == nil && rows == 0 && busy == 0
	})
}

// TestShutdownDuringCopy: Shutdown while a client is in the middle of
// sending a large COPY message does not disturb the stream; the COPY and
// the transaction complete.
func TestShutdownDuringCopy(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (v text)")
	setup.Close(ctx)

	hc := hijack(t, p.AppURL("app"))
	fe := hc.Frontend
	fe.Send(&pgproto3.Query{String: "BEGIN"})
	fe.Send(&pgproto3.Query{String: "COPY t FROM STDIN"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	expectMsgs(t, fe, "CommandComplete", "ReadyForQuery", "CopyInResponse")
	// One CopyData message of 200 kB holding 2000 rows, sent in two
	// halves with the shutdown in between.
	row := strings.Repeat("x", 99) + "\n"
	data := strings.Repeat(row, 2000)
	msg := (&pgproto3.CopyData{Data: []byte(data)})
	raw, err := msg.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	half := len(raw) / 2
	if _, err := hc.Conn.Write(raw[:half]); err != nil {
		t.Fatal(err)
	}
	// Wait until the proxy has read all of it: it is then inside the
	// message, waiting for the rest.
	_, proxyPort, _ := net.SplitHostPort(p.Addr)
	_, clientPort, _ := net.SplitHostPort(hc.Conn.LocalAddr().String())
	eventually(t, 5*time.Second, "the proxy to read the first half", func() bool {
		n, err := receiveQueue(proxyPort, clientPort)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})

	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- p.Listener.Shutdown(sctx)
	}()
	eventually(t, 5*time.Second, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	// Shutdown closes the listener and wakes clients under the lock that
	// Clients takes: once Clients returns, every client was woken.
	p.Listener.Clients()

	if _, err := hc.Conn.Write(raw[half:]); err != nil {
		t.Fatal(err)
	}
	fe.Send(&pgproto3.CopyDone{})
	fe.Send(&pgproto3.Query{String: "COMMIT"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	got := expectMsgs(t, fe, "CommandComplete", "ReadyForQuery", "CommandComplete", "ReadyForQuery")
	if tag := string(got[0].(*pgproto3.CommandComplete).CommandTag); tag != "COPY 2000" {
		t.Fatalf("COPY: %s", tag)
	}
	if tag := string(got[2].(*pgproto3.CommandComplete).CommandTag); tag != "COMMIT" {
		t.Fatalf("COMMIT: %s", tag)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	direct := connect(t, cl.DSN("app"))
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 2000 {
		t.Fatalf("%d rows (%v), want 2000", n, err)
	}
}

// receiveQueue returns how many bytes wait unread in the receive queue of
// the local TCP socket on port local connected to port remote, from
// /proc/net/tcp (addresses there are hex IP:port).
func receiveQueue(local, remote string) (int, error) {
	lp, err := strconv.Atoi(local)
	if err != nil {
		return 0, err
	}
	rp, err := strconv.Atoi(remote)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	lsuffix, rsuffix := fmt.Sprintf(":%04X", lp), fmt.Sprintf(":%04X", rp)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line) // sl local rem st tx_queue:rx_queue ...
		if len(f) < 5 || !strings.HasSuffix(f[1], lsuffix) || !strings.HasSuffix(f[2], rsuffix) {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		return int(n), err
	}
	return 0, fmt.Errorf("no socket %s->%s in /proc/net/tcp", local, remote)
}
