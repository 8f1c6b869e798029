package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A statement naming a table that does not exist, on a database with a
// column sharding rule, answers PostgreSQL's 42P01 — every field, the
// position included — in the simple protocol, at Parse and in a Parse,
// Bind and Execute batch; a table the proxy's catalog cannot see stays
// refused.

var unknownTableQueries = []string{
	"SELECT * FROM no_such_table",
	"SELECT a.id, count(*) FROM accounts a JOIN no_such_table n ON n.id = a.id GROUP BY a.id ORDER BY 2 DESC LIMIT 3",
	"SELECT stddev(x), count(DISTINCT y), count(DISTINCT z) FROM public.missing WHERE x > 3",
	"SELECT (SELECT max(v) FROM nope) FROM accounts",
}

// TestAgg2UnknownTableErrors compares the errors field by field.
func TestAgg2UnknownTableErrors(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startProxy(t, e.proxyConfig("transaction", 2))
	ref := pgConnect(t, ctx, e.cl.DSN("ref"))
	for _, db := range []string{"two", "three"} {
		c := pgConnect(t, ctx, p.AppURL(db))
		for _, sql := range unknownTableQueries {
			for _, mode := range []string{"simple", "parse", "execute"} {
				want, got := unknownTableError(ctx, ref, mode, sql), unknownTableError(ctx, c, mode, sql)
				if want.Code != "42P01" {
					t.Fatalf("ref %s %s: %+v", mode, sql, want)
				}
				if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
					t.Errorf("%s %s %s:\n got  %+v\n want %+v", db, mode, sql, got, want)
				}
			}
		}
		// The session is usable after them.
		if res := c.ExecParams(ctx, "SELECT count(*) FROM accounts", nil, nil, nil, nil).Read(); res.Err != nil || string(res.Rows[0][0]) != "8" {
			t.Errorf("%s: after the errors: %v %q", db, res.Err, res.Rows)
		}
	}
}

// unknownTableError runs sql on c in a protocol mode and returns the
// error it got.
func unknownTableError(ctx context.Context, c *pgconn.PgConn, mode, sql string) pgconn.PgError {
	var err error
	switch mode {
	case "simple":
		_, err = c.Exec(ctx, sql).ReadAll()
	case "parse":
		_, err = c.Prepare(ctx, "", sql, nil)
	default:
		err = c.ExecParams(ctx, sql, nil, nil, nil, nil).Read().Err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return pgconn.PgError{Message: fmt.Sprintf("not a PostgreSQL error: %v", err)}
	}
	return *pe
}

// unknownTableScripts run through every runner: the errors and a
// transaction they abort; then a table created in the client's open
// transaction, which the proxy's catalog session cannot see: refused,
// never answered from the wrong shards. (A script with a refusal is
// compared on the sharded databases only up to it.)
var unknownTableScripts = []diffScript{
	{name: "unknown tables", stmts: []string{
		unknownTableQueries[0],
		unknownTableQueries[1],
		"SELECT count(*) FROM accounts",
		"BEGIN",
		"SELECT email FROM accounts WHERE id = 3",
		unknownTableQueries[2],
		"SELECT 1",
		"ROLLBACK",
		unknownTableQueries[3],
		"SELECT count(*) FROM accounts",
	}},
	{name: "a table the catalog cannot see", stmts: []string{
		"BEGIN",
		"CREATE TABLE created_in_tx (v int)",
		"SELECT * FROM created_in_tx",
		"ROLLBACK",
	}, refusedOnTwo: map[int]string{
		2: refusal("cannot tell whether table created_in_tx is sharded by column shard_key: the proxy does not know its columns",
			"List created_in_tx in omni_tables or sharded_tables, or filter it by its sharding column."),
	}},
}

// TestAgg2UnknownTableDiff runs unknownTableScripts through every runner.
func TestAgg2UnknownTableDiff(t *testing.T) {
	checkGoroutines(t)
	diffAll(t, newDiffEnv(t), unknownTableScripts)
}
