package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestShardedNoticesOnce: a notice that PostgreSQL raises once per
// statement (the scanner's nonstandard backslash or truncated identifier,
// DROP … IF EXISTS of a missing table) reaches a client of a 2-shard
// database once, as from one PostgreSQL holding the same rows, while one
// raised per row (a PL/pgSQL RAISE, which carries a CONTEXT) comes once
// per row — in every pgx execution mode, each statement run twice so that
// the second finds it parsed already. The scanner's come at every Parse
// the client sends, never at the Parses the proxy adds (a statement
// prepared on another server, a shard that lacks it) — through a sharded
// database and through a pass-through one. Before, each shard's copy of a
// statement-level notice went to the client, and the scanner's came or
// not as the proxy's statement cache had it.
func TestShardedNoticesOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl, p, direct := twoShardsBesidePlain(t, ctx)
	pass := startProxy(t, poolConfig(cl, "transaction", 2, "plain"))
	const fn = `CREATE FUNCTION noisy(x bigint) RETURNS bigint LANGUAGE plpgsql AS $$BEGIN RAISE NOTICE 'row %', x > 0; RETURN x; END$$`
	setup := []string{
		"CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, email text)", fn,
		"INSERT INTO accounts SELECT g, 'u' || g FROM generate_series(1, 8) g",
	}
	for _, url := range []string{direct, p.AppURL("app")} {
		c := connect(t, url)
		for _, sql := range setup {
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	// Every id from 1 to 8 is on one of the two shards; both hold some.
	statements := []string{
		`SELECT 'a\\b' AS x FROM accounts ORDER BY id LIMIT 2`,
		`SELECT count(*) FROM accounts WHERE email <> 'a\\b'`,
		`UPDATE accounts SET email = email || 'x\\y' WHERE id < 0`,
		`DROP TABLE IF EXISTS no_such_table`,
		`SELECT noisy(id) FROM accounts ORDER BY id`,
		`SELECT id AS ` + strings.Repeat("long_name_", 7) + ` FROM accounts ORDER BY id LIMIT 1`,
		`SELECT id AS ` + strings.Repeat("other_name_", 7) + ` FROM accounts WHERE id = 3`,
		`SELECT sum(noisy(id)) FROM accounts`,
	}
	notices := func(url string, mode pgx.QueryExecMode, sql string) string {
		t.Helper()
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		cfg.DefaultQueryExecMode = mode
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%s %s %q P=%d W=%q", n.Severity, n.Code, n.Message, n.Position, n.Where))
			mu.Unlock()
		}
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if strings.Contains(sql, `\\`) {
			if _, err := c.Exec(ctx, "SET standard_conforming_strings = off"); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := c.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(got, "\n")
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		for _, sql := range statements {
			if mode == pgx.QueryExecModeSimpleProtocol && strings.Contains(sql, `\\`) {
				continue // pgx refuses it with standard_conforming_strings off
			}
			want := notices(direct, mode, sql)
			if want == "" {
				t.Fatalf("%v %s: PostgreSQL raised no notice", mode, sql)
			}
			for _, via := range []struct{ what, url string }{{"sharded", p.AppURL("app")}, {"pass-through", pass.AppURL("plain")}} {
				for run := range 2 {
					if got := notices(via.url, mode, sql); got != want {
						t.Errorf("%v %s, run %d through the %s proxy:\n%s\n directly:\n%s", mode, sql, run+1, via.what, got, want)
					}
				}
			}
		}
	}
}
