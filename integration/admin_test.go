package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/admin"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	sgproxy "github.com/shardgate/shardgate/internal/proxy" // "proxy" is this package's in-process proxy
	"github.com/shardgate/shardgate/metrics"
	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// operated is a proxy wired like cmd/proxy wires it: the admin database,
// metrics over HTTP, and reloads of a config file that tests rewrite.
type operated struct {
	*proxy
	File        string               // the config file RELOAD reads
	MetricsAddr string               // host:port of /metrics and /healthz
	Tasks       *replication.Manager // the admin database's resharding tasks
	Gate        admin.Gate           // the listener, as a cutover drives it
	shutdowns   chan struct{}
}

// startOperated writes yamlText to a file and serves it with the admin
// database and metrics; setup runs before it serves (to set test knobs).
func startOperated(t testing.TB, yamlText string, setup ...func(*operated)) *operated {
	t.Helper()
	file := filepath.Join(t.TempDir(), "shardgate.yaml")
	if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	eventLoopFile(t, file)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlText)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	l := frontend.NewListener(st, log)
	m := metrics.New(l)
	view := sgproxy.AdminView(l)
	h := admin.New(view, func() error {
		err := l.Reload()
		m.Reloaded(err)
		return err
	}, log)
	o := &operated{File: file, Gate: admin.Gate{L: view}, shutdowns: make(chan struct{}, 1)}
	h.Shutdown = func() { o.shutdowns <- struct{}{} }
	h.Tasks = replication.NewManager(o.Gate, log)
	h.Tasks.Pauses = m
	o.Tasks = h.Tasks
	l.Admin = sgproxy.AdminHandler(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := m.Listen("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	o.MetricsAddr = ms.Addr()
	o.proxy = &proxy{Addr: ln.Addr().String(), Listener: l, Config: cfg}
	for _, f := range setup {
		f(o)
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
		if err := ms.Shutdown(ctx); err != nil {
			t.Errorf("metrics shutdown: %v", err)
		}
	})
	// Registered last, so it runs first: the tasks stop while the proxy
	// they cut over through still serves. Close does not drop anything, as
	// at a proxy shutdown.
	t.Cleanup(o.Tasks.Close)
	return o
}

// AdminURL is the URL of the admin database.
func (o *operated) AdminURL() string { return o.URL("admin", "admin-secret", "admin") }

// rewrite replaces the config file (atomically, as editors and config
// management do).
func (o *operated) rewrite(t testing.TB, yamlText string) {
	t.Helper()
	tmp := o.File + ".tmp"
	if err := os.WriteFile(tmp, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, o.File); err != nil {
		t.Fatal(err)
	}
}

// table is a result set as text: booleans t/f, numbers in decimal.
type table struct {
	cols []string
	rows [][]string
}

// col returns the index of column name.
func (tb *table) col(t testing.TB, name string) int {
	t.Helper()
	i := slices.Index(tb.cols, name)
	if i < 0 {
		t.Fatalf("no column %q in %v", name, tb.cols)
	}
	return i
}

// find returns the first row whose columns have the given values.
func (tb *table) find(t testing.TB, match map[string]string) []string {
	t.Helper()
next:
	for _, r := range tb.rows {
		for k, v := range match {
			if r[tb.col(t, k)] != v {
				continue next
			}
		}
		return r
	}
	return nil
}

// get returns column name of the row matching match, failing without one.
func (tb *table) get(t testing.TB, match map[string]string, name string) string {
	t.Helper()
	r := tb.find(t, match)
	if r == nil {
		t.Fatalf("no row %v in %v %v", match, tb.cols, tb.rows)
	}
	return r[tb.col(t, name)]
}

func (tb *table) num(t testing.TB, match map[string]string, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(tb.get(t, match, name), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// adminPgx runs sql on conn and returns its result as text.
func adminPgx(conn *pgx.Conn, sql string) (*table, error) {
	rs, err := conn.Query(context.Background(), sql)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	tb := &table{}
	for _, f := range rs.FieldDescriptions() {
		tb.cols = append(tb.cols, f.Name)
	}
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case bool:
				row[i] = map[bool]string{true: "t", false: "f"}[v]
			default:
				row[i] = fmt.Sprint(v)
			}
		}
		tb.rows = append(tb.rows, row)
	}
	return tb, rs.Err()
}

// psqlError is a failed psql run: its SQLSTATE (from VERBOSITY=verbose)
// and output.
type psqlError struct {
	code, out string
}

func (e *psqlError) Error() string { return fmt.Sprintf("psql: SQLSTATE %s: %s", e.code, e.out) }

var psqlCode = regexp.MustCompile(`(?m)^(?:ERROR|FATAL):  ([0-9A-Z]{5}):`)

// adminPsql runs sql with psql in unaligned mode and parses the output.
func adminPsql(t testing.TB, url, sql string) (*table, error) {
	t.Helper()
	out, err := runPsql(t, url, "-q", "-A", "-F", "\t", "-P", "footer=off", "-c", sql)
	if err != nil {
		return nil, err
	}
	tb := &table{}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return tb, nil
	}
	tb.cols = strings.Split(lines[0], "\t")
	for _, l := range lines[1:] {
		tb.rows = append(tb.rows, strings.Split(l, "\t"))
	}
	return tb, nil
}

// runPsql runs psql with args against url, with verbose errors.
func runPsql(t testing.TB, url string, args ...string) (string, error) {
	t.Helper()
	psql := need(t, "psql")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, append([]string{"-X", "-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=1", "-d", url}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e := &psqlError{out: stderr.String()}
		if m := psqlCode.FindStringSubmatch(e.out); m != nil {
			e.code = m[1]
		}
		return stdout.String(), e
	}
	return stdout.String(), nil
}

// adminClient runs admin commands one way (psql, or pgx in one mode).
type adminClient struct {
	name string
	run  func(t testing.TB, sql string) (*table, error)
}

func adminClients(t *testing.T, o *operated) []adminClient {
	clients := []adminClient{{name: "psql", run: func(t testing.TB, sql string) (*table, error) {
		return adminPsql(t, o.AdminURL(), sql)
	}}}
	for _, mode := range execModes {
		cfg, err := pgx.ParseConfig(o.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		conn, err := pgx.ConnectConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		clients = append(clients, adminClient{name: "pgx-" + mode.String(), run: func(t testing.TB, sql string) (*table, error) {
			return adminPgx(conn, sql)
		}})
	}
	return clients
}

func mustAdmin(t testing.TB, c adminClient, sql string) *table {
	t.Helper()
	tb, err := c.run(t, sql)
	if err != nil {
		t.Fatalf("%s: %s: %v", c.name, sql, err)
	}
	return tb
}

// TestAdminCommands runs every admin command through psql and through pgx
// in each query mode (simple, and extended with and without statement
// caching), checking columns and values.
func TestAdminCommands(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	ctx := context.Background()
	app := connect(t, o.AppURL("app"))
	var one int
	if err := app.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, "SELECT 1/0"); sqlstate(err) != wire.DivisionByZero {
		t.Fatalf("division by zero: %v", err)
	}
	victim := connect(t, o.AppURL("app"))
	if _, err := victim.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	appPool := map[string]string{"database": "app", "user": "app", "shard": "0"}

	clients := adminClients(t, o)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			// The previous round's SET replaced the pool: fill it again.
			if _, err := app.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			// The client has its answer a moment before its server is
			// back in the pool.
			var tb *table
			eventually(t, 10*time.Second, "an idle server", func() bool {
				tb = mustAdmin(t, c, "SHOW POOLS")
				return tb.num(t, appPool, "sv_active") == 0
			})
			wantCols := []string{"database", "user", "shard", "role", "host", "port", "mode", "size",
				"cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_total", "maxwait", "maxwait_us",
				"paused", "maintenance", "banned"}
			if !slices.Equal(tb.cols, wantCols) {
				t.Fatalf("SHOW POOLS columns %v", tb.cols)
			}
			if tb.get(t, appPool, "mode") != "transaction" || tb.get(t, appPool, "size") != "4" ||
				tb.get(t, appPool, "role") != "primary" || tb.get(t, appPool, "paused") != "f" ||
				tb.get(t, appPool, "port") != strconv.Itoa(cl.Port) || tb.num(t, appPool, "sv_idle") < 1 ||
				tb.num(t, appPool, "cl_waiting") != 0 {
				t.Fatalf("SHOW POOLS: %v", tb.rows)
			}

			tb = mustAdmin(t, c, "show clients;")
			if !slices.Equal(tb.cols, []string{"id", "user", "database", "addr", "state", "tls", "application_name", "connect_time", "queries"}) {
				t.Fatalf("SHOW CLIENTS columns %v", tb.cols)
			}
			if tb.find(t, map[string]string{"user": "app", "database": "app", "state": "idle", "tls": "f"}) == nil {
				t.Fatalf("SHOW CLIENTS: no idle app client: %v", tb.rows)
			}

			tb = mustAdmin(t, c, "SHOW SERVERS")
			if !slices.Equal(tb.cols, []string{"pool", "database", "user", "shard", "id", "state", "addr", "pid", "connect_time"}) {
				t.Fatalf("SHOW SERVERS columns %v", tb.cols)
			}
			if pid := tb.num(t, map[string]string{"database": "app", "state": "idle"}, "pid"); pid <= 0 {
				t.Fatalf("SHOW SERVERS pid %d", pid)
			}

			tb = mustAdmin(t, c, "SHOW DATABASES")
			db := map[string]string{"name": "app"}
			if tb.get(t, db, "shards") != "1" || tb.get(t, db, "pool_size") != "4" || tb.get(t, db, "pool_mode") != "transaction" ||
				tb.get(t, db, "checkout_timeout") != "2s" || tb.get(t, db, "paused") != "f" || tb.num(t, db, "clients") < 2 {
				t.Fatalf("SHOW DATABASES: %v %v", tb.cols, tb.rows)
			}

			tb = mustAdmin(t, c, "SHOW SHARDS")
			if !slices.Equal(tb.cols, []string{"database", "shard", "host", "port", "role", "healthy", "error"}) {
				t.Fatalf("SHOW SHARDS columns %v", tb.cols)
			}
			if tb.get(t, map[string]string{"database": "app", "shard": "0"}, "healthy") != "t" {
				t.Fatalf("SHOW SHARDS: %v", tb.rows)
			}

			tb = mustAdmin(t, c, "SHOW STATS")
			if tb.num(t, appPool, "total_query_count") < 3 || tb.num(t, appPool, "total_xact_count") < 3 ||
				tb.num(t, appPool, "total_errors") < 1 || tb.num(t, appPool, "total_query_time") <= 0 ||
				tb.num(t, appPool, "total_server_connects") < 1 {
				t.Fatalf("SHOW STATS: %v %v", tb.cols, tb.rows)
			}

			tb = mustAdmin(t, c, "SHOW CONFIG")
			if tb.get(t, map[string]string{"key": "admin.password"}, "value") != "<redacted>" ||
				tb.get(t, map[string]string{"key": "users[0].server_password"}, "value") != "<redacted>" ||
				tb.get(t, map[string]string{"key": "pool.size"}, "value") != "4" {
				t.Fatalf("SHOW CONFIG: %v", tb.rows)
			}
			for _, r := range tb.rows {
				if strings.Contains(r[1], appPassword) || strings.Contains(r[1], cl.Password) {
					t.Fatalf("SHOW CONFIG leaks a password: %v", r)
				}
			}

			tb = mustAdmin(t, c, "SHOW VERSION")
			if len(tb.rows) != 1 || !strings.HasPrefix(tb.rows[0][0], "shardgate ") {
				t.Fatalf("SHOW VERSION: %v", tb.rows)
			}
			tb = mustAdmin(t, c, "SHOW LISTS")
			if tb.get(t, map[string]string{"list": "databases"}, "items") != "1" || tb.num(t, map[string]string{"list": "servers"}, "items") < 1 {
				t.Fatalf("SHOW LISTS: %v", tb.rows)
			}
			tb = mustAdmin(t, c, "SHOW HELP")
			if tb.find(t, map[string]string{"command": "MAINTENANCE ON|OFF [db]"}) == nil || len(tb.rows) < 17 {
				t.Fatalf("SHOW HELP: %v", tb.rows)
			}

			for _, sql := range []string{"RELOAD", "PAUSE", "RESUME", "PAUSE app", "RESUME app",
				"MAINTENANCE ON app", "MAINTENANCE OFF app", "SET checkout_timeout = '3s'", "set checkout_timeout to 2s"} {
				mustAdmin(t, c, sql)
			}
			if _, err := c.run(t, "SHOW NONSENSE"); adminCode(err) != wire.SyntaxError {
				t.Fatalf("unknown command: %v", err)
			}
		})
	}

	// KILL last: it ends the victim.
	c := clients[0]
	tb := mustAdmin(t, c, "SHOW CLIENTS")
	var victimID string
	for _, r := range tb.rows {
		if r[tb.col(t, "user")] == "app" {
			victimID = r[tb.col(t, "id")] // rows are by id: the newest app client is the victim
		}
	}
	mustAdmin(t, c, "KILL "+victimID)
	_, err := victim.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("killed client still works")
	}
	if code := sqlstate(err); code != wire.AdminShutdown && !victim.IsClosed() {
		t.Fatalf("killed client: %v", err)
	}
	if _, err := app.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("other client after KILL: %v", err)
	}
}

// adminCode returns the SQLSTATE of an admin command error from psql or
// pgx.
func adminCode(err error) string {
	if e, ok := err.(*psqlError); ok {
		return e.code
	}
	return sqlstate(err)
}

// TestAdminAligned checks that psql renders results as tables.
func TestAdminAligned(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	out, err := runPsql(t, o.AdminURL(), "-c", "SHOW DATABASES")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "name | shards |") || !strings.Contains(lines[0], "| maintenance") ||
		!strings.HasPrefix(lines[1], "------+") || !strings.Contains(out, "(1 row)") {
		t.Fatalf("aligned output:\n%s", out)
	}
}

func TestAdminAuth(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	ctx := context.Background()
	tests := []struct {
		name, url, code string
	}{
		{"wrong admin password", o.URL("admin", "wrong", "admin"), wire.InvalidPassword},
		{"app user on admin database", o.URL("app", appPassword, "admin"), wire.InvalidPassword},
		{"admin user on app database", o.URL("admin", "admin-secret", "app"), wire.InvalidPassword},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, tc.url)
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connected")
			}
			if got := sqlstate(err); got != tc.code {
				t.Fatalf("SQLSTATE %q, want %s (%v)", got, tc.code, err)
			}
		})
	}
	if _, err := runPsql(t, o.URL("admin", "wrong", "admin"), "-c", "SHOW POOLS"); err == nil ||
		!strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("psql with a wrong password: %v", err)
	}
}

// waitForClientState polls SHOW CLIENTS until n clients of user are in
// state.
func waitForClientState(t testing.TB, adm *pgx.Conn, user, state string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d %s clients in state %s", n, user, state), func() bool {
		tb, err := adminPgx(adm, "SHOW CLIENTS")
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, r := range tb.rows {
			if r[tb.col(t, "user")] == user && r[tb.col(t, "state")] == state {
				got++
			}
		}
		return got == n
	})
}

// TestAdminPauseResume checks PgBouncer's PAUSE: it waits for the open
// transaction, then holds new transactions until RESUME.
func TestAdminPauseResume(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	inTx := connect(t, o.AppURL("app"))
	later := connect(t, o.AppURL("app"))

	tx, err := inTx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() {
		admin2, err := pgx.Connect(ctx, o.AdminURL())
		if err != nil {
			paused <- err
			return
		}
		defer admin2.Close(ctx)
		_, err = admin2.Exec(ctx, "PAUSE app")
		paused <- err
	}()
	// PAUSE waits for the open transaction; the transaction goes on.
	eventually(t, 10*time.Second, "database paused", func() bool {
		tb, err := adminPgx(adm, "SHOW DATABASES")
		return err == nil && tb.get(t, map[string]string{"name": "app"}, "paused") == "t"
	})
	select {
	case err := <-paused:
		t.Fatalf("PAUSE returned during an open transaction: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := tx.Exec(ctx, "SELECT 2"); err != nil {
		t.Fatalf("open transaction during PAUSE: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatalf("PAUSE: %v", err)
	}

	// A new transaction waits until RESUME.
	done := make(chan error, 1)
	go func() {
		var n int
		done <- later.QueryRow(ctx, "SELECT 42").Scan(&n)
	}()
	waitForClientState(t, adm, "app", "waiting", 1)
	// SHOW CLIENTS says "waiting" from the client's checkout on; the gate
	// counts it once it waits there (on a goroutine, if it came from the
	// event loop).
	eventually(t, 10*time.Second, "SHOW DATABASES counts the client waiting at the gate", func() bool {
		tb, err := adminPgx(adm, "SHOW DATABASES")
		return err == nil && tb.get(t, map[string]string{"name": "app"}, "waiting") == "1"
	})
	select {
	case err := <-done:
		t.Fatalf("query ran while paused: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := adm.Exec(ctx, "RESUME app"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("query after RESUME: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("query still blocked after RESUME")
	}

	// PAUSE of every database, then RESUME of every database.
	if _, err := adm.Exec(ctx, "PAUSE"); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := later.Exec(ctx, "SELECT 1"); done <- err }()
	waitForClientState(t, adm, "app", "waiting", 1)
	if _, err := adm.Exec(ctx, "RESUME"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAdminMaintenance checks MAINTENANCE: it holds clients before their
// next transaction without waiting for open ones, and survives RELOAD.
func TestAdminMaintenance(t *testing.T) {
	cl := cluster(t, "app")
	yaml := poolConfig(cl, "transaction", 4, "app")
	o := startOperated(t, yaml)
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	inTx := connect(t, o.AppURL("app"))
	idle := connect(t, o.AppURL("app"))

	tx, err := inTx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Exec(ctx, "MAINTENANCE ON"); err != nil { // returns at once
		t.Fatal(err)
	}
	o.rewrite(t, strings.Replace(yaml, "size: 4", "size: 5", 1))
	if _, err := adm.Exec(ctx, "RELOAD"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := idle.Exec(ctx, "SELECT 1")
		errs <- err
	}()
	waitForClientState(t, adm, "app", "waiting", 1)
	// The open transaction is not held.
	if _, err := tx.Exec(ctx, "SELECT 2"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tb, err := adminPgx(adm, "SHOW DATABASES")
	if err != nil || tb.get(t, map[string]string{"name": "app"}, "maintenance") != "t" {
		t.Fatalf("SHOW DATABASES: %v %v", tb, err)
	}
	if _, err := adm.Exec(ctx, "MAINTENANCE OFF"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatalf("held client after MAINTENANCE OFF: %v", err)
	}
	tb, err = adminPgx(adm, "SHOW POOLS")
	if err != nil || tb.get(t, map[string]string{"database": "app"}, "size") != "5" {
		t.Fatalf("SHOW POOLS after reload: %v %v", tb, err)
	}
}

// TestAdminShutdown checks that SHUTDOWN answers, then triggers the
// shutdown hook.
func TestAdminShutdown(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	if _, err := runPsql(t, o.AdminURL(), "-c", "SHUTDOWN"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.shutdowns:
	case <-time.After(5 * time.Second):
		t.Fatal("SHUTDOWN did not call the shutdown hook")
	}
}

// TestAdminKillInTransaction: KILL of a client inside a transaction rolls
// the transaction back and returns its server, so a later PAUSE does not
// wait for it.
func TestAdminKillInTransaction(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	setup := connect(t, o.AppURL("app"))
	mustRun(t, setup, "CREATE TABLE killed (x int)")
	victim := connect(t, o.AppURL("app"))
	mustRun(t, victim, "BEGIN")
	mustRun(t, victim, "INSERT INTO killed VALUES (1)")

	tb, err := adminPgx(adm, "SHOW CLIENTS")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"user": "app", "state": "active"}, "id")
	mustRun(t, adm, "KILL "+id)
	eventually(t, 10*time.Second, "the killed client's server to return", func() bool {
		tb, err := adminPgx(adm, "SHOW POOLS")
		return err == nil && tb.num(t, map[string]string{"database": "app"}, "sv_active") == 0
	})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := adm.Exec(pctx, "PAUSE app"); err != nil {
		t.Fatalf("PAUSE after KILL: %v", err)
	}
	mustRun(t, adm, "RESUME app")
	var n int
	if err := setup.QueryRow(ctx, "SELECT count(*) FROM killed").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows of the killed transaction: %d (%v), want 0", n, err)
	}
	if _, err := victim.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("killed client still works")
	}
}
