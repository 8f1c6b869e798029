//go:build linux

package frontend

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/shardgate/shardgate/wire"
)

// startSilentListener serves a Listener whose one database is never
// reached (no test here logs in), with client_login_timeout login.
func startSilentListener(t *testing.T, login time.Duration) (*Listener, string) {
	t.Helper()
	l, port := serveTestListener(t, fmt.Appendf(nil, `listen: 127.0.0.1:0
limits: { client_login_timeout: %s }
users:
  - { name: app, auth_type: trust, server_user: app, server_password: x }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 1, database: app }]
`, login))
	return l, fmt.Sprintf("127.0.0.1:%d", port)
}

// dialSilent opens n connections to addr that send nothing, closed when
// the test ends.
func dialSilent(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// waitSilent polls until n connections wait in l's evloop for their first
// bytes.
func waitSilent(t *testing.T, l *Listener, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.silent.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections wait for their first bytes, want %d", l.silent.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSilentConnectionsHoldNoBuffers: a connection that has sent nothing
// holds neither a goroutine nor the client's 48 KiB of socket buffers: it
// waits in the evloop, so that thousands of them (up to max_client_conn)
// cost little until their login times out; once it sends its first packet
// it is answered as any.
func TestSilentConnectionsHoldNoBuffers(t *testing.T) {
	l, addr := startSilentListener(t, 30*time.Second)
	// The evloop and its sweep start with the first connection.
	dialSilent(t, addr, 1)
	waitSilent(t, l, 1)
	const n = 300
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	conns := dialSilent(t, addr, n)
	waitSilent(t, l, n+1)
	if g := runtime.NumGoroutine(); g > g0+n/10 {
		t.Errorf("%d goroutines with %d silent connections, %d before: they hold goroutines", g, n, g0)
	}
	if p := l.Parked(); p != 0 {
		t.Errorf("Parked() = %d with only silent connections, want 0", p)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := (int64(m1.HeapInuse) - int64(m0.HeapInuse)) / n
	stacks := (int64(m1.StackInuse) - int64(m0.StackInuse)) / n
	t.Logf("per silent connection: heap in use %d B, stacks %d B", per, stacks)
	if per > 8<<10 {
		t.Errorf("a silent connection holds %d B of heap, want under 8 KiB (its buffers are 48 KiB)", per)
	}
	if stacks > 1<<10 {
		t.Errorf("a silent connection holds %d B of goroutine stacks, want under 1 KiB", stacks)
	}

	// The first packet of one of them is answered: SSLRequest, no TLS.
	c := conns[0]
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := wire.AppendInt32(wire.AppendInt32(nil, 8), 80877103)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
		t.Fatalf("SSLRequest answered %q, %v; want N", b[:], err)
	}
}

// TestSilentConnectionTimesOut: a connection that sends nothing gets
// client_login_timeout's FATAL, as one that stalls later in its login.
func TestSilentConnectionTimesOut(t *testing.T) {
	_, addr := startSilentListener(t, 200*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := wire.NewReader(c, 1024, 1024)
	typ, _, body, err := r.Next()
	if err != nil || typ != 'E' {
		t.Fatalf("got %q, %v; want an ErrorResponse", typ, err)
	}
	if e := wire.ParseError(body); e.Severity != "FATAL" || e.Code != wire.ProtocolViolation {
		t.Fatalf("got %v (%s %s), want FATAL 08P01 client_login_timeout", e, e.Severity, e.Code)
	}
	if _, _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the FATAL: %v, want EOF", err)
	}
}

// TestSilentConnectionsAtShutdown: Shutdown does not wait for connections
// that sent nothing until their login times out; they are refused as
// PostgreSQL refuses connections during shutdown (FATAL 57P03).
func TestSilentConnectionsAtShutdown(t *testing.T) {
	l, addr := startSilentListener(t, time.Minute)
	conns := dialSilent(t, addr, 3)
	waitSilent(t, l, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with silent connections: %v", err)
	}
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := wire.NewReader(c, 1024, 1024)
		typ, _, body, err := r.Next()
		if err != nil || typ != 'E' {
			t.Fatalf("connection %d got %q, %v; want an ErrorResponse", i, typ, err)
		}
		if e := wire.ParseError(body); e.Severity != "FATAL" || e.Code != wire.CannotConnectNow {
			t.Fatalf("connection %d got %v (%s %s), want FATAL 57P03", i, e, e.Severity, e.Code)
		}
	}
}
