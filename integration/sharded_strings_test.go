package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestShardedNonStandardStrings: a session with standard_conforming_strings
// off (SET, or at login through options) on a 2-shard database gets the
// answers one PostgreSQL with the same rows gives, where the router reads
// a string literal or writes it back into the statements the shards run:
// a merged aggregate next to a constant, the rows of a multi-row INSERT
// split between the shards, an INSERT … SELECT. With it off, 'a\\b' is a\b.
// Before, the router read every literal as with standard_conforming_strings
// on, and the shards got a\\b. psql runs the simple protocol; pgx (which
// refuses the simple protocol with the setting off) the extended one.
func TestShardedNonStandardStrings(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, p, direct := twoShardsBesidePlain(t, ctx)
	sharded := p.AppURL("app")
	statements := []string{
		`SELECT 'a\\b' || count(*) AS x FROM accounts`,
		`INSERT INTO accounts VALUES (1, 'one\\1'), (2, 'two\\2'), (3, 'three\\'' 3'), (4, 'four\\n')`,
		`INSERT INTO accounts SELECT g, 'gen\\' || g FROM generate_series(10, 13) g`,
		`SELECT id, email, length(email) FROM accounts ORDER BY id`,
		`SELECT max(email), min(email) || '\\x' FROM accounts WHERE email <> 'x\\y'`,
		`SELECT count(*) FROM accounts WHERE email = 'one\\1'`,
		`DELETE FROM accounts`,
	}
	// psql: each statement in one session with the setting off.
	psqlRun := func(url string) string {
		t.Helper()
		args := []string{"-At", "-c", "SET standard_conforming_strings = off"}
		for _, sql := range statements {
			args = append(args, "-c", sql)
		}
		out, err := runPsql(t, url, args...)
		if err != nil {
			t.Fatalf("psql: %v", err)
		}
		return out
	}
	if want, got := psqlRun(direct), psqlRun(sharded); got != want {
		t.Errorf("psql:\n through the proxy:\n%s\n directly:\n%s", got, want)
	}
	// pgx: the setting from the startup packet, every extended mode.
	pgxRun := func(url string, mode pgx.QueryExecMode) string {
		t.Helper()
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		cfg.RuntimeParams["standard_conforming_strings"] = "off"
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var out strings.Builder
		for _, sql := range statements {
			rows, err := c.Query(ctx, sql)
			if err != nil {
				t.Fatalf("%v %s: %v", mode, sql, err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintln(&out, vals...)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%v %s: %v", mode, sql, err)
			}
			fmt.Fprintln(&out, rows.CommandTag())
		}
		return out.String()
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		if want, got := pgxRun(direct, mode), pgxRun(sharded, mode); got != want {
			t.Errorf("pgx %v:\n through the proxy:\n%s\n directly:\n%s", mode, got, want)
		}
	}
}
