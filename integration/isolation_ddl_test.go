package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestIsoStatementsAfterDDL: a statement shared by its text between
// clients is prepared again after a schema change passed through the
// proxy. Without that, a client's Parse of "SELECT $1::mood" after the
// type was dropped and created again reuses a server statement whose
// parameter type is the dropped one ("cache lookup failed for type").
func TestIsoStatementsAfterDDL(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ddl := simpleConn(t, p.AppURL("app"))
	execIn(t, ddl, simple, "CREATE TYPE mood AS ENUM ('ok', 'meh')")
	const q = "SELECT $1::mood::text"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		before := connectConfig(t, p.AppURL("app"), mode, nil)
		checkRow(t, "before the change ["+mode.String()+"]", row(t, before, mode, q, "ok"), "ok")
		execIn(t, ddl, simple, "DROP TYPE mood")
		execIn(t, ddl, simple, "CREATE TYPE mood AS ENUM ('ok', 'meh')")
		after := connectConfig(t, p.AppURL("app"), mode, nil)
		checkRow(t, "a new client after the change ["+mode.String()+"]", row(t, after, mode, q, "meh"), "meh")
	}
}

// TestIsoStatementsAfterShardedDDL: DDL that runs on every shard of a
// sharded database (a fan-out) makes the proxy prepare shared statements
// again, as DDL on one server does: a new client's query whose result type
// the ALTER changed must not reuse a server statement prepared before it
// ("cached plan must not change result type").
func TestIsoStatementsAfterShardedDDL(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	p := startProxy(t, e.proxyConfig("transaction", 1))
	const q = "SELECT email FROM accounts WHERE id = 3"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		before := connectConfig(t, p.AppURL("two"), mode, nil)
		checkRow(t, "before the change ["+mode.String()+"]", row(t, before, mode, q), "a3")
		ddl := simpleConn(t, p.AppURL("two"))
		execIn(t, ddl, simple, "ALTER TABLE accounts ALTER COLUMN email TYPE varchar(40)")
		after := connectConfig(t, p.AppURL("two"), mode, nil)
		checkRow(t, "a new client after the change ["+mode.String()+"]", row(t, after, mode, q), "a3")
		execIn(t, ddl, simple, "ALTER TABLE accounts ALTER COLUMN email TYPE text")
	}
}
