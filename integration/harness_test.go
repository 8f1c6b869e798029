package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/pgtest"
	"gopkg.in/yaml.v3"
)

// appPassword is the password of the proxy user "app" in test configs.
const appPassword = "app-secret"

// proxy is a running in-process shardgate.
type proxy struct {
	Addr     string
	Listener *frontend.Listener
	Config   *config.Config
}

// URL returns a postgres:// URL for user/password through the proxy.
func (p *proxy) URL(user, password, db string) string {
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", user, password, p.Addr, db)
}

// AppURL is the URL of the "app" user for database db.
func (p *proxy) AppURL(db string) string { return p.URL("app", appPassword, db) }

// startProxy loads yamlText (with {{LISTEN}} replaced by a free port) and
// serves it until the test ends.
func startProxy(t testing.TB, yamlText string) *proxy {
	t.Helper()
	cfg, err := config.Parse([]byte(yamlText), "test.yaml")
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlText)
	}
	return startProxyConfig(t, cfg)
}

// startProxyConfig serves cfg until the test ends; setup runs on the
// listener before it serves (to set test hooks).
//
// SHARDGATE_TEST_EVENT_LOOP=0 turns limits.event_loop (on by default) off
// in every proxy the tests start, to run them over goroutines, and =1 turns
// it on where a config turned it off: here, and in the config files of
// operated proxies and proxy processes (eventLoopFile).
func startProxyConfig(t testing.TB, cfg *config.Config, setup ...func(*frontend.Listener)) *proxy {
	t.Helper()
	if on, set := testEventLoop(); set {
		cfg.Limits.EventLoop = on
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	l := frontend.NewListener(st, log)
	for _, f := range setup {
		f(l)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		l.State().Pools.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &proxy{Addr: ln.Addr().String(), Listener: l, Config: cfg}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// cluster starts a PostgreSQL server with databases dbs.
func cluster(t testing.TB, dbs ...string) *pgtest.Cluster {
	t.Helper()
	return clusterWith(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret"}, dbs...)
}

// sslCluster is cluster with ssl = on (pgtest.Options.SSL), for servers
// reached over TLS.
func sslCluster(t testing.TB, dbs ...string) *pgtest.Cluster {
	t.Helper()
	return clusterWith(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", SSL: true}, dbs...)
}

// clusterWith starts a cluster with o and creates the databases dbs.
func clusterWith(t testing.TB, o pgtest.Options, dbs ...string) *pgtest.Cluster {
	t.Helper()
	cl := pgtest.New(t, o)
	ctx := context.Background()
	for _, db := range dbs {
		if err := cl.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	return cl
}

// poolConfig returns a YAML config with one single-shard database per name
// in dbs, all on cl, for user "app" (SCRAM) and admin "admin".
func poolConfig(cl *pgtest.Cluster, mode string, size int, dbs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: %d, checkout_timeout: 2s }
limits: { client_login_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
`, mode, size, appPassword, cl.User, cl.Password)
	for _, db := range dbs {
		fmt.Fprintf(&b, "  - name: %s\n    shards: [{ host: %s, port: %d, database: %s }]\n", db, cl.Host, cl.Port, db)
	}
	return b.String()
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// sqlstate returns the SQLSTATE of err, or "".
func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		return string(qe.Code)
	}
	return ""
}

// need returns the path of a client binary (psql, pgbench); without it the
// test skips, or fails under CI=true.
func need(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if dir, err := pgtest.Binaries(); err == nil {
		p := dir + "/" + name
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (CI=true: tests must not skip)", name)
	}
	t.Skipf("%s not found", name)
	return ""
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testEventLoop reads SHARDGATE_TEST_EVENT_LOOP: set reports whether it
// names a setting of limits.event_loop for every proxy the tests start
// ("1": on, "0": off), and on which one.
func testEventLoop() (on, set bool) {
	switch os.Getenv("SHARDGATE_TEST_EVENT_LOOP") {
	case "1":
		return true, true
	case "0":
		return false, true
	}
	return false, false
}

// eventLoopFile sets limits.event_loop in the YAML config file at path as
// testEventLoop says, before a proxy reads it. A file the test rewrites
// later (for a RELOAD) keeps what it writes.
func eventLoopFile(t testing.TB, path string) {
	t.Helper()
	on, given := testEventLoop()
	if !given {
		return
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("%s: not a YAML mapping (%v)", path, err)
	}
	top := doc.Content[0]
	set := func(m *yaml.Node, key string, val *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				m.Content[i+1] = val
				return
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, val)
	}
	limits := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "limits" && top.Content[i+1].Kind == yaml.MappingNode {
			limits = top.Content[i+1]
		}
	}
	set(limits, "event_loop", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(on)})
	set(top, "limits", limits)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}
