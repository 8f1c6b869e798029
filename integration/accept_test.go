package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestAcceptOutOfDescriptors runs the proxy as a process with 48 file
// descriptors and opens more connections than it can accept. accept
// fails with EMFILE; the proxy must log it, keep serving, and accept
// again once connections close — before the fix, Serve returned the
// error and the whole proxy exited (PgBouncer pauses its accepts too).
func TestAcceptOutOfDescriptors(t *testing.T) {
	cl := cluster(t, "app")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	cfg := strings.Replace(poolConfig(cl, "transaction", 2, "app"), "listen: 127.0.0.1:0", "listen: "+addr, 1)
	cfgPath := filepath.Join(dir, "shardgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// ulimit -n sets the hard limit too, so that the Go runtime cannot
	// raise the soft one at start.
	wrapper := filepath.Join(dir, "proxy.sh")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n 48 || exit 1\nexec %s \"$@\"\n", buildProxy(t))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startProxyProcess(t, wrapper, cfgPath, addr)
	url := fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := connect(t, url)
	mustExec(t, before, "SELECT 1")

	// The kernel completes the handshakes in the listen backlog whether
	// or not the proxy can accept them.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 80 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break // the backlog is full
		}
		flood = append(flood, c)
	}
	exited := func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			return true
		default:
			return false
		}
	}
	eventually(t, 20*time.Second, "the proxy to log the failed accept", func() bool {
		return exited() || strings.Contains(p.log.String(), "cannot accept connections")
	})
	if exited() {
		t.Fatalf("the proxy exited when it ran out of descriptors: %v\n%s", <-p.done, p.log.String())
	}
	t.Logf("out of descriptors after %d connections", len(flood))
	// A client that logged in before goes on.
	var n int
	if err := before.QueryRow(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
		t.Fatalf("the client served before the flood: %d, %v", n, err)
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	// Accepting resumes: the flood's connections are accepted and,
	// closed, end at once; then new clients log in.
	eventually(t, 30*time.Second, "a new client to log in", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		c, err := pgx.Connect(cctx, url)
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		return c.QueryRow(cctx, "SELECT 1").Scan(&n) == nil && n == 1
	})
	if exited() {
		t.Fatalf("the proxy exited: %v\n%s", <-p.done, p.log.String())
	}
}
