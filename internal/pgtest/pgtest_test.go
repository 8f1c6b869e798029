package pgtest_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

func TestStartExec(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.New(t, pgtest.Options{Settings: map[string]string{
		"work_mem":         "8MB",
		"application_name": "it's quoted",
	}})
	if c.Host != "127.0.0.1" || c.Port == 0 || c.User != "postgres" {
		t.Fatalf("cluster = %+v", c)
	}
	if err := c.Exec(ctx, "postgres", "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "postgres", "SELECT * FROM missing"); err == nil {
		t.Fatal("Exec of a bad statement succeeded")
	}
	if got := queryString(t, c.DSN("postgres"), "SELECT count(*)::text FROM t"); got != "2" {
		t.Errorf("count = %s, want 2", got)
	}
	for _, tc := range []struct{ setting, want string }{
		{"wal_level", "logical"},
		{"max_prepared_transactions", "20"},
		{"max_connections", "200"},
		{"fsync", "off"},
		{"TimeZone", "UTC"},
		{"work_mem", "8MB"},
		{"application_name", "it's quoted"},
		{"server_encoding", "UTF8"},
	} {
		if got := queryString(t, c.DSN("postgres"), "SHOW "+tc.setting); got != tc.want {
			t.Errorf("SHOW %s = %q, want %q", tc.setting, got, tc.want)
		}
	}

	if err := c.CreateDatabase(ctx, "shard-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateRole(ctx, "app", "app-pw", false); err != nil {
		t.Fatal(err)
	}
	dsn := "postgres://app:app-pw@" + net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) + "/shard-1?sslmode=disable"
	if got := queryString(t, dsn, "SELECT current_user || '@' || current_database()"); got != "app@shard-1" {
		t.Errorf("connected as %s, want app@shard-1", got)
	}
	if got := queryString(t, c.DSN("postgres"), "SELECT rolsuper::text FROM pg_roles WHERE rolname = 'app'"); got != "false" {
		t.Errorf("app rolsuper = %s", got)
	}
	if err := c.CreateDatabase(ctx, "shard-1"); err == nil {
		t.Error("creating a database twice succeeded")
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		auth, hashPrefix string
	}{
		{"scram-sha-256", "SCRAM-SHA-256$"},
		{"md5", "md5"},
		{"password", "SCRAM-SHA-256$"},
	} {
		t.Run(tc.auth, func(t *testing.T) {
			t.Parallel()
			c := pgtest.New(t, pgtest.Options{Auth: tc.auth, Password: "s3cr'et"})
			if got := queryString(t, c.DSN("postgres"), "SELECT 'ok'"); got != "ok" {
				t.Fatalf("SELECT 'ok' = %q", got)
			}
			if got := queryString(t, c.DSN("postgres"), "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'"); !strings.HasPrefix(got, tc.hashPrefix) {
				t.Errorf("postgres password hash = %.20s…, want prefix %s", got, tc.hashPrefix)
			}
			for _, password := range []string{"wrong", ""} {
				u, err := url.Parse(c.DSN("postgres"))
				if err != nil {
					t.Fatal(err)
				}
				u.User = url.UserPassword(c.User, password)
				conn, err := pgx.Connect(t.Context(), u.String())
				if err == nil {
					conn.Close(t.Context())
					t.Fatalf("connected with password %q", password)
				}
				if password == "" {
					continue // pgx gives up before asking the server
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != wire.InvalidPassword {
					t.Errorf("wrong password: %v, want SQLSTATE 28P01", err)
				}
			}
			// Roles created later get the same hashing.
			if err := c.CreateRole(t.Context(), "app", "app-pw", true); err != nil {
				t.Fatal(err)
			}
			if got := queryString(t, c.DSN("postgres"), "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'"); !strings.HasPrefix(got, tc.hashPrefix) {
				t.Errorf("app password hash = %.20s…, want prefix %s", got, tc.hashPrefix)
			}
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	t.Parallel()
	for _, opts := range []pgtest.Options{
		{Auth: "ident"},
		{Auth: "scram-sha-256"},
		{Settings: map[string]string{"work_mem = 1MB\nfsync": "on"}},
		{Settings: map[string]string{"work_mem": "1MB\nfsync = on"}},
	} {
		if c, err := pgtest.Start(t.Context(), opts); err == nil {
			c.Stop()
			t.Errorf("Start(%+v) succeeded", opts)
		}
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pw"})
	port := c.Port
	if err := c.Exec(ctx, "postgres", "CREATE TABLE t (v text); INSERT INTO t VALUES ('before kill')"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if pids := pgtest.ProcessesIn(c.DataDir); len(pids) != 0 {
		t.Errorf("processes %v left after Kill", pids)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("connection survived Kill")
	}
	if err := c.Kill(); err == nil {
		t.Error("second Kill succeeded")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port != port {
		t.Errorf("port changed from %d to %d", port, c.Port)
	}
	if err := c.Restart(ctx); err == nil {
		t.Error("Restart of a running cluster succeeded")
	}
	if got := queryString(t, c.DSN("postgres"), "SELECT v FROM t"); got != "before kill" {
		t.Errorf("after Kill+Restart: %q", got)
	}

	if err := c.StopKeep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.DataDir); err != nil {
		t.Fatalf("StopKeep removed the data dir: %v", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c.DSN("postgres"), "SELECT v FROM t"); got != "before kill" {
		t.Errorf("after StopKeep+Restart: %q", got)
	}
}

func TestRestartOnTakenPort(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.New(t, pgtest.Options{})
	if err := c.StopKeep(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Restart(ctx)
	l.Close()
	if !errors.Is(err, pgtest.ErrPortInUse) || !strings.Contains(err.Error(), "could not create any TCP/IP sockets") {
		t.Fatalf("Restart on a taken port: %v; want port in use, with the server log", err)
	}
	if pids := pgtest.ProcessesIn(c.DataDir); len(pids) != 0 {
		t.Errorf("processes %v left after a failed Restart", pids)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStartCanceled(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if c, err := pgtest.Start(ctx, pgtest.Options{}); err == nil {
		c.Stop()
		t.Fatal("Start with a canceled context succeeded")
	} else if !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v", err)
	}
}

func TestStopRemovesEverything(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	c, err := pgtest.Start(t.Context(), pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.DirForTest()
	if pids := pgtest.ProcessesIn(dir); len(pids) == 0 {
		t.Fatal("found no server processes while running")
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if pids := pgtest.ProcessesIn(dir); len(pids) != 0 {
		t.Errorf("processes %v left after Stop", pids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir after Stop: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)), time.Second); err == nil {
		conn.Close()
		t.Error("port still accepts connections after Stop")
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Restart(t.Context()); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

func TestParallelStarts(t *testing.T) {
	t.Parallel()
	const n = 4
	clusters := make([]*pgtest.Cluster, n)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i] = pgtest.New(t, pgtest.Options{}) })
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, c := range clusters {
		if c == nil || seen[c.Port] {
			t.Fatalf("clusters: %v", clusters)
		}
		seen[c.Port] = true
		if got := queryString(t, c.DSN("postgres"), "SELECT current_setting('port')"); got != strconv.Itoa(c.Port) {
			t.Errorf("port %d answered as %s", c.Port, got)
		}
	}
}

func TestReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pw"})
	if err := primary.Exec(ctx, "postgres", "CREATE TABLE t (v text); INSERT INTO t VALUES ('base')"); err != nil {
		t.Fatal(err)
	}
	replica, err := primary.StartReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := replica.Stop(); err != nil {
			t.Error(err)
		}
	})
	if replica.Port == primary.Port || replica.DataDir == primary.DataDir {
		t.Fatalf("replica shares port or data dir with primary: %d %s", replica.Port, replica.DataDir)
	}
	if got := queryString(t, replica.DSN("postgres"), "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Errorf("pg_is_in_recovery() = %s", got)
	}
	if got := queryString(t, replica.DSN("postgres"), "SELECT v FROM t"); got != "base" {
		t.Errorf("replica has %q from the base backup", got)
	}
	if err := primary.Exec(ctx, "postgres", "INSERT INTO t VALUES ('streamed')"); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT count(*)::text FROM t WHERE v = 'streamed'"
	deadline := time.Now().Add(30 * time.Second)
	for queryString(t, replica.DSN("postgres"), q) != "1" {
		if time.Now().After(deadline) {
			t.Fatal("row written on the primary never reached the replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := replica.Exec(ctx, "postgres", "INSERT INTO t VALUES ('x')"); err == nil {
		t.Error("write on the replica succeeded")
	}
}

func TestBinaries(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	if _, err := pgtest.Binaries(); !errors.Is(err, pgtest.ErrNoBinaries) || !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Errorf("Binaries with an empty PG_BINDIR: %v", err)
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int // sign
	}{
		{"15", "15", 0},
		{"9.6", "15", -1},
		{"16", "15", 1},
		{"10", "9.6", 1},
		{"9.6", "9.5", 1},
	} {
		got := pgtest.CompareVersions(tc.a, tc.b)
		if sign(got) != tc.want {
			t.Errorf("compareVersions(%s, %s) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// requireBinaries skips a test that uses Start rather than New when
// PostgreSQL is missing, and fails it in CI, as New does.
func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := pgtest.Binaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// queryString runs a query that returns one text value.
func queryString(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// BenchmarkStartStop measures a cluster's life after the template exists:
// copy, start, first connection and stop.
func BenchmarkStartStop(b *testing.B) {
	pgtest.New(b, pgtest.Options{}) // makes the template outside the loop
	b.ReportAllocs()
	for b.Loop() {
		c, err := pgtest.Start(b.Context(), pgtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}
