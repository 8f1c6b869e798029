package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// buildProxy compiles cmd/proxy into a temporary directory.
func buildProxy(t testing.TB) string {
	t.Helper()
	return goBuild(t, "../cmd/proxy")
}

// buildCrashProxy compiles internal/crashproxy, the proxy with test knobs
// set from flags (-crash-2pc, -crash-cutover, -stall-copy), into a
// temporary directory.
func buildCrashProxy(t testing.TB) string {
	t.Helper()
	return goBuild(t, "./internal/crashproxy")
}

func goBuild(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// freePort reserves a port for a proxy process, one that stays free when the
// test stops the proxy and starts it again on the same address.
func freePort(t testing.TB) int {
	t.Helper()
	return pgtest.Port(t)
}

// proxyProcess runs the built proxy with a config file.
type proxyProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	log  *syncLog
}

// syncLog is a process's output, written by the process's copying
// goroutines while the test reads it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProxyProcess starts bin (buildProxy or buildCrashProxy) with
// configPath and flags, and waits until it accepts connections on addr.
func startProxyProcess(t testing.TB, bin, configPath, addr string, flags ...string) *proxyProcess {
	t.Helper()
	eventLoopFile(t, configPath)
	cmd := exec.Command(bin, append([]string{"-config", configPath}, flags...)...)
	var log syncLog
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proxyProcess{cmd: cmd, addr: addr, done: make(chan error, 1), log: &log}
	exited := make(chan struct{})
	go func() { p.done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	eventually(t, 20*time.Second, "proxy to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return true
		}
		return false
	})
	return p
}

// twoPhaseConfig is the config of a proxy process on addr in front of
// e's shards, whose resolver rolls back undecided transactions after
// timeout.
func twoPhaseConfig(t *testing.T, e *shardedEnv, addr, timeout string) string {
	t.Helper()
	cfg := fmt.Sprintf(`listen: %s
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 8, checkout_timeout: 10s }
limits: { in_doubt_timeout: %s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
      - { host: %s, port: %d, database: shard0 }
      - { host: %s, port: %d, database: shard1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
`, addr, timeout, appPassword, e.cl.User, e.cl.Password, e.cl.Host, e.cl.Port, e.cl.Host, e.cl.Port)
	path := filepath.Join(t.TempDir(), "shardgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// preparedCount counts the prepared transactions on e's shards; -1 when a
// shard does not answer (so that a wait for 0 goes on).
func preparedCount(e *shardedEnv) int {
	n := 0
	for _, d := range e.direct {
		var k int
		if err := d.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&k); err != nil {
			return -1
		}
		n += k
	}
	return n
}

// twoShardKeys returns two keys on different shards of two.
func twoShardKeys(t *testing.T) (a, b int64) {
	a, b = 1, 2
	for shardOf(t, b, 2) == shardOf(t, a, 2) {
		b++
	}
	return a, b
}

// TestTwoPhaseCrash kills the proxy (SIGKILL) in the middle of a
// two-phase commit and checks that a restart resolves every prepared
// transaction: committed once the coordinating shard committed, rolled
// back (after the in-doubt timeout) before.
func TestTwoPhaseCrash(t *testing.T) {
	bin := buildCrashProxy(t)
	for _, tc := range []struct {
		stage      string
		wantCommit bool
		prepared   int // prepared transactions the crash leaves
	}{{"prepared", false, 2}, {"decided", true, 1}} {
		t.Run(tc.stage, func(t *testing.T) {
			e := newShardedEnv(t, 2)
			ctx := context.Background()
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			path := twoPhaseConfig(t, e, addr, "1s")
			p := startProxyProcess(t, bin, path, addr, "-crash-2pc", tc.stage)
			url := fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addr)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			a, b := twoShardKeys(t)
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "INSERT INTO accounts (id, email) VALUES ($1, 'a')", a)
			mustExec(t, conn, "INSERT INTO accounts (id, email) VALUES ($1, 'b')", b)
			if _, err := conn.Exec(ctx, "COMMIT"); err == nil {
				t.Fatal("COMMIT succeeded although the proxy was killed")
			}
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("proxy did not die\n%s", p.log.String())
			}
			if n := preparedCount(e); n != tc.prepared {
				t.Fatalf("%d prepared transactions after the crash, want %d", n, tc.prepared)
			}
			startProxyProcess(t, bin, path, addr)
			eventually(t, 15*time.Second, "recovery to resolve prepared transactions", func() bool { return preparedCount(e) == 0 })
			c2 := connect(t, url)
			var n int
			if err := c2.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id IN ($1, $2)", a, b).Scan(&n); err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.wantCommit {
				want = 2
			}
			if n != want {
				t.Fatalf("%d of the transaction's rows exist after recovery, want %d", n, want)
			}
		})
	}
}
