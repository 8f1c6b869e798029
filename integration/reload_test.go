package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// reloadConfig is a config for database app on cl with pool size and the
// given users (all with the app password, connecting as the superuser).
func reloadConfig(cl *pgtest.Cluster, size int, users ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: %d, checkout_timeout: 5s }
users:
`, size)
	for _, u := range users {
		fmt.Fprintf(&b, "  - { name: %s, password: %s, server_user: %s, server_password: %s }\n", u, appPassword, cl.User, cl.Password)
	}
	fmt.Fprintf(&b, "databases:\n  - name: app\n    shards: [{ host: %s, port: %d, database: app }]\n", cl.Host, cl.Port)
	return b.String()
}

// backendPID returns the PostgreSQL backend serving conn's next statement.
func backendPID(t testing.TB, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// mustRun runs sql, failing the test on an error.
func mustRun(t testing.TB, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// poolSize returns the size SHOW POOLS reports for app/user.
func poolSize(t testing.TB, adm *pgx.Conn, user string) string {
	t.Helper()
	tb, err := adminPgx(adm, "SHOW POOLS")
	if err != nil {
		t.Fatal(err)
	}
	r := tb.find(t, map[string]string{"database": "app", "user": user})
	if r == nil {
		return ""
	}
	return r[tb.col(t, "size")]
}

// TestReloadKeepsUnchangedPools: a reload that does not touch a pool keeps
// its server connections; one that changes its size replaces it, while an
// open connection (and its open transaction) keeps working.
func TestReloadKeepsUnchangedPools(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	o := startOperated(t, reloadConfig(cl, 4, "app"))
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	app := connect(t, o.AppURL("app"))
	pid := backendPID(t, app)

	// An unrelated change: the pool and its connection stay.
	o.rewrite(t, reloadConfig(cl, 4, "app", "other"))
	mustRun(t, adm, "RELOAD")
	if got := backendPID(t, app); got != pid {
		t.Fatalf("backend %d after an unrelated reload, want %d (the pool's connection)", got, pid)
	}

	// A new size replaces the pool: SHOW POOLS has it at once, the open
	// transaction finishes on its old server, the next one uses the new
	// pool.
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inTx int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	o.rewrite(t, reloadConfig(cl, 6, "app", "other"))
	mustRun(t, adm, "RELOAD")
	if got := poolSize(t, adm, "app"); got != "6" {
		t.Fatalf("SHOW POOLS size %q after reload, want 6", got)
	}
	var again int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&again); err != nil || again != inTx {
		t.Fatalf("open transaction moved from backend %d to %d (%v)", inTx, again, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backendPID(t, app); got == pid {
		t.Fatalf("still on backend %d after the pool was replaced", got)
	}
	// The replaced pool's server connections are closed.
	eventually(t, 10*time.Second, "the old pool's connection to close", func() bool {
		var n int
		err := app.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return err == nil && n == 0
	})
}

// TestReloadBadFile: a file that does not load changes nothing, and RELOAD
// says where the problem is.
func TestReloadBadFile(t *testing.T) {
	cl := cluster(t, "app")
	good := reloadConfig(cl, 4, "app")
	o := startOperated(t, good)
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	app := connect(t, o.AppURL("app"))
	backendPID(t, app)

	o.rewrite(t, strings.Replace(good, "size: 4", "size: ten", 1))
	_, err := adm.Exec(ctx, "RELOAD")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != wire.ConfigFileError || !strings.Contains(pe.Detail, o.File+":3:") ||
		!strings.Contains(pe.Detail, "pool.size") {
		t.Fatalf("RELOAD of a bad file: %#v", err)
	}
	// psql shows the same.
	if _, err := runPsql(t, o.AdminURL(), "-c", "RELOAD"); adminCode(err) != wire.ConfigFileError ||
		!strings.Contains(err.Error(), "DETAIL:  "+o.File+":3:") {
		t.Fatalf("psql RELOAD of a bad file: %v", err)
	}
	if got := poolSize(t, adm, "app"); got != "4" {
		t.Fatalf("SHOW POOLS size %q, want the old 4", got)
	}
	backendPID(t, app)
	fresh := connect(t, o.AppURL("app"))
	backendPID(t, fresh)

	o.rewrite(t, strings.Replace(good, "size: 4", "size: 3", 1))
	mustRun(t, adm, "RELOAD")
	if got := poolSize(t, adm, "app"); got != "3" {
		t.Fatalf("SHOW POOLS size %q after fixing the file, want 3", got)
	}
}

// TestReloadRemovesUser: a client whose user a reload removed finishes its
// transaction, then gets 57P01 at its next statement.
func TestReloadRemovesUser(t *testing.T) {
	cl := cluster(t, "app")
	o := startOperated(t, reloadConfig(cl, 4, "app", "temp"))
	ctx := context.Background()
	adm := connect(t, o.AdminURL())
	app := connect(t, o.AppURL("app"))
	idle := connect(t, o.URL("temp", appPassword, "app"))
	busy := connect(t, o.URL("temp", appPassword, "app"))
	backendPID(t, idle)
	tx, err := busy.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	backendPID(t, busy)

	o.rewrite(t, reloadConfig(cl, 4, "app"))
	mustRun(t, adm, "RELOAD")
	if got := poolSize(t, adm, "temp"); got != "" {
		t.Fatalf("SHOW POOLS still lists temp (size %q)", got)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("open transaction after its user was removed: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]*pgx.Conn{"idle": idle, "busy": busy} {
		if _, err := conn.Exec(ctx, "SELECT 1"); sqlstate(err) != wire.AdminShutdown {
			t.Fatalf("%s client of a removed user: %v, want 57P01", name, err)
		}
	}
	backendPID(t, app)
	if _, err := pgx.Connect(ctx, o.URL("temp", appPassword, "app")); sqlstate(err) != wire.InvalidPassword {
		t.Fatalf("login of a removed user: %v", err)
	}
}

// TestReloadUnderLoad runs pgbench's TPC-B-like script with 32 clients
// while the config file is rewritten and reloaded 20 times: the pool size
// alternates, a user comes and goes, and one file in between is bad. No
// transaction may fail, and SHOW POOLS follows every good reload.
func TestReloadUnderLoad(t *testing.T) {
	checkGoroutines(t)
	pgbench := need(t, "pgbench")
	cl := cluster(t, "app")
	o := startOperated(t, reloadConfig(cl, 8, "app"))
	adm := connect(t, o.AdminURL())
	stdout, stderr, code := runClient(t, o.proxy, 60*time.Second, pgbench, "-i", "-s", "2", "-q")
	if code != 0 {
		t.Fatalf("pgbench -i: exit %d\n%s\n%s", code, stdout, stderr)
	}

	type bench struct {
		stdout, stderr bytes.Buffer
		err            error
	}
	done := make(chan *bench, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		b := &bench{}
		cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", "32", "-j", "4", "-T", "10")
		cmd.Env = clientEnv(o.proxy)
		cmd.Stdout, cmd.Stderr = &b.stdout, &b.stderr
		b.err = cmd.Run()
		done <- b
	}()
	// Reload while pgbench has its clients connected and busy.
	eventually(t, 10*time.Second, "pgbench clients", func() bool {
		tb, err := adminPgx(adm, "SHOW DATABASES")
		return err == nil && tb.num(t, map[string]string{"name": "app"}, "clients") >= 32
	})
	var reloads, failures int
	for i := 0; i < 20; i++ {
		size := []int{8, 16}[i%2]
		users := []string{"app"}
		if i >= 5 && i < 12 {
			users = append(users, "extra")
		}
		bad := i == 10
		text := reloadConfig(cl, size, users...)
		if bad {
			text = strings.Replace(text, "mode: transaction", "mode: transactional", 1)
		}
		o.rewrite(t, text)
		_, err := adm.Exec(context.Background(), "RELOAD")
		switch {
		case bad && sqlstate(err) == wire.ConfigFileError:
			failures++
		case bad:
			t.Fatalf("reload %d of a bad file: %v", i, err)
		case err != nil:
			t.Fatalf("reload %d: %v", i, err)
		default:
			reloads++
			if got := poolSize(t, adm, "app"); got != fmt.Sprint(size) {
				t.Fatalf("reload %d: SHOW POOLS size %s, want %d", i, got, size)
			}
			hasExtra := strings.Contains(text, "extra")
			if tb, err := adminPgx(adm, "SHOW CONFIG"); err != nil ||
				(tb.find(t, map[string]string{"key": "users[1].name"}) != nil) != hasExtra {
				t.Fatalf("reload %d: SHOW CONFIG users (want extra: %v): %v", i, hasExtra, err)
			}
		}
		time.Sleep(300 * time.Millisecond) // spread the reloads over pgbench's run
	}
	b := <-done
	r, err := parsePgbench(b.stdout.String())
	if b.err != nil || err != nil || r.failed != 0 || r.done == 0 {
		t.Fatalf("pgbench under reloads: %v, %+v, %v\nstdout:\n%s\nstderr:\n%s", b.err, r, err, &b.stdout, &b.stderr)
	}
	if reloads != 19 || failures != 1 {
		t.Fatalf("%d reloads, %d failures; want 19 and 1", reloads, failures)
	}
	t.Logf("pgbench: %d transactions, %.0f tps, across %d reloads", r.done, r.tps, reloads)
}
