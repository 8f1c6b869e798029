package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/admin"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/proxy"
	"github.com/shardgate/shardgate/wire"
)

// These tests run the admin database without PostgreSQL: the one database
// points at a closed port, and no admin command needs a server. They serve
// it through a frontend.Listener wired as internal/proxy wires it, from an
// external test package, so that package admin itself does not import
// frontend.

const testConfig = `
listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { size: 3, checkout_timeout: 1s }
users:
  - { name: app, password: app-secret }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 1, database: app_0 }]
`

// startAdmin serves testConfig with the admin handler and returns the admin
// URL.
func startAdmin(t *testing.T) (*frontend.Listener, string) {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfig), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	l := frontend.NewListener(st, log)
	l.Admin = proxy.AdminHandler(admin.New(proxy.AdminView(l), l.Reload, log))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		l.State().Pools.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return l, fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", ln.Addr())
}

// rows runs sql and returns the column names and the rows as text.
func rows(t *testing.T, conn *pgx.Conn, sql string) ([]string, [][]string) {
	t.Helper()
	rs, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rs.Close()
	var cols []string
	for _, f := range rs.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	var out [][]string
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return cols, out
}

func colIndex(t *testing.T, cols []string, name string) int {
	t.Helper()
	for i, c := range cols {
		if c == name {
			return i
		}
	}
	t.Fatalf("no column %q in %v", name, cols)
	return -1
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

var queryModes = []pgx.QueryExecMode{
	pgx.QueryExecModeSimpleProtocol,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeCacheStatement,
}

func TestAdminWithoutServers(t *testing.T) {
	_, url := startAdmin(t)
	ctx := context.Background()
	for _, mode := range queryModes {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)

			cols, rs := rows(t, conn, "SHOW HELP")
			if len(cols) != 2 || len(rs) != admin.CommandCount() {
				t.Fatalf("SHOW HELP: %v, %d rows", cols, len(rs))
			}
			cols, rs = rows(t, conn, "show config;")
			cfgMap := map[string]string{}
			for _, r := range rs {
				cfgMap[r[0]] = r[1]
			}
			if cfgMap["pool.size"] != "3" || cfgMap["admin.password"] != "<redacted>" ||
				cfgMap["users[0].password"] != "<redacted>" || cfgMap["databases[0].shards[0].database"] != "app_0" {
				t.Fatalf("SHOW CONFIG: %v", cfgMap)
			}
			_, rs = rows(t, conn, "SHOW VERSION")
			if len(rs) != 1 || !strings.HasPrefix(rs[0][0], "shardgate ") {
				t.Fatalf("SHOW VERSION: %v", rs)
			}
			cols, rs = rows(t, conn, "SHOW DATABASES")
			if len(rs) != 1 || rs[0][colIndex(t, cols, "name")] != "app" || rs[0][colIndex(t, cols, "pool_size")] != "3" {
				t.Fatalf("SHOW DATABASES: %v %v", cols, rs)
			}
			cols, rs = rows(t, conn, "SHOW CLIENTS")
			if len(rs) < 1 || rs[0][colIndex(t, cols, "state")] != "active" {
				t.Fatalf("SHOW CLIENTS: %v %v", cols, rs)
			}
			cols, rs = rows(t, conn, "SHOW LISTS")
			if len(rs) != 9 || rs[0][0] != "databases" || rs[0][1] != "1" {
				t.Fatalf("SHOW LISTS: %v %v", cols, rs)
			}
			cols, rs = rows(t, conn, "SHOW SHARDS")
			if len(rs) != 1 || rs[0][colIndex(t, cols, "healthy")] != "false" || rs[0][colIndex(t, cols, "port")] != "1" {
				t.Fatalf("SHOW SHARDS: %v %v", cols, rs)
			}
			for _, sql := range []string{"SHOW POOLS", "SHOW SERVERS", "SHOW STATS"} {
				if _, rs := rows(t, conn, sql); len(rs) != 0 {
					t.Fatalf("%s: %v, want no pools yet", sql, rs)
				}
			}
			for _, sql := range []string{"PAUSE", "RESUME", "PAUSE app", "RESUME app", "MAINTENANCE ON", "MAINTENANCE OFF app", "MAINTENANCE OFF", "SET application_name = 'x'"} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
		})
	}
}

func TestAdminErrors(t *testing.T) {
	_, url := startAdmin(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tests := []struct {
		sql, code string
	}{
		{"SELECT 1", wire.SyntaxError},
		{"SHOW NOTHING", wire.SyntaxError},
		{"PAUSE nosuchdb", wire.InvalidCatalogName},
		{"MAINTENANCE SIDEWAYS", wire.SyntaxError},
		{"KILL 999999", wire.UndefinedObject},
		{"KILL abc", wire.InvalidParameterValue},
		{"SET nosuch = 1", wire.UndefinedObject},
		{"SET pool_size = 0", wire.InvalidParameterValue},
		{"SET checkout_timeout = forever", wire.InvalidParameterValue},
		{"SHUTDOWN", wire.FeatureNotSupported}, // no shutdown hook in this test
		{"RELOAD", wire.ConfigFileError},       // test.yaml does not exist
	}
	for _, tc := range tests {
		t.Run(tc.sql, func(t *testing.T) {
			_, err := conn.Exec(ctx, tc.sql)
			if got := sqlstate(err); got != tc.code {
				t.Fatalf("%s: SQLSTATE %q, want %s (%v)", tc.sql, got, tc.code, err)
			}
			// The session goes on after an error.
			if _, err := conn.Exec(ctx, "SHOW VERSION"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAdminSet(t *testing.T) {
	l, url := startAdmin(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{"SET pool_size = 7", "set checkout_timeout to '250ms'"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	db := l.State().Config.Database("app")
	if db.Pool.Size != 7 || db.Pool.CheckoutTimeout != 250*time.Millisecond {
		t.Fatalf("pool after SET: %+v", db.Pool)
	}
	cols, rs := rows(t, conn, "SHOW DATABASES")
	if rs[0][colIndex(t, cols, "pool_size")] != "7" || rs[0][colIndex(t, cols, "checkout_timeout")] != "250ms" {
		t.Fatalf("SHOW DATABASES: %v %v", cols, rs)
	}
}
