package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// portalStateCases are extended-protocol exchanges whose answers depend
// on the state of portals and of the transaction, which a sharded
// database keeps in the proxy (the shards run each portal on their own
// and outside the client's failed transaction): each step is one write,
// compared message by message with one PostgreSQL.
var portalStateCases = []struct {
	name  string
	steps []wireStep
}{
	{"a named portal bound twice", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("s", "SELECT email FROM accounts WHERE id = $1::bigint"),
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}},
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", Parameters: [][]byte{[]byte("2")}},
			&pgproto3.Execute{Portal: "p"}, syncMsg}, zs: 1},
	}},
	{"a Bind that fails, not followed by its Execute", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("z", "SELECT 1/0"), parseMsg("u", "UPDATE accounts SET email = email || 'u' WHERE id = $1::bigint"),
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "z"},
			&pgproto3.Bind{DestinationPortal: "q", PreparedStatement: "u", Parameters: [][]byte{[]byte("3")}},
			&pgproto3.Execute{Portal: "q"}, syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT email FROM accounts WHERE id = 3")}, zs: 1},
	}},
	{"a Bind that fails after a statement ran", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("z", "SELECT 1/0"), parseMsg("u", "UPDATE accounts SET email = email || 'u' WHERE id = $1::bigint"),
			&pgproto3.Bind{DestinationPortal: "q", PreparedStatement: "u", Parameters: [][]byte{[]byte("4")}},
			&pgproto3.Execute{Portal: "q"},
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "z"}, syncMsg}, zs: 1},
		// The UPDATE was rolled back with the batch.
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT email FROM accounts WHERE id = 4")}, zs: 1},
	}},
	{"a Bind that fails in a batch a Flush keeps open", []wireStep{
		// On the UPDATE's shard, whose server is inside the batch (a
		// row-limited Execute).
		{send: []pgproto3.FrontendMessage{parseMsg("z", "SELECT 1/0 FROM accounts WHERE id = $1::bigint"),
			parseMsg("u", "UPDATE accounts SET email = email || 'u' WHERE id = $1::bigint"), syncMsg,
			&pgproto3.Bind{PreparedStatement: "u", Parameters: [][]byte{[]byte("3")}}, &pgproto3.Execute{MaxRows: 5},
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "z", Parameters: [][]byte{[]byte("3")}}, flushMsg, syncMsg}, zs: 2},
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT email FROM accounts WHERE id = 3")}, zs: 1},
	}},
	{"a Parse or Describe that fails after a statement ran", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("u", "UPDATE accounts SET email = email || 'u' WHERE id = $1::bigint"),
			&pgproto3.Bind{PreparedStatement: "u", Parameters: [][]byte{[]byte("5")}}, &pgproto3.Execute{},
			parseMsg("n", "SELECT nope"), syncMsg,
			&pgproto3.Bind{PreparedStatement: "u", Parameters: [][]byte{[]byte("6")}}, &pgproto3.Execute{},
			&pgproto3.Describe{ObjectType: 'S', Name: "none"}, syncMsg}, zs: 2},
		// Both UPDATEs were rolled back with their batches.
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT id, email FROM accounts WHERE id IN (5, 6) ORDER BY id")}, zs: 1},
	}},
	{"a portal executed again after its end", []wireStep{
		{send: []pgproto3.FrontendMessage{
			parseMsg("r", "SELECT id FROM accounts WHERE id = $1::bigint"),
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "r", Parameters: [][]byte{[]byte("1")}},
			&pgproto3.Execute{Portal: "p"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Execute{Portal: "p", MaxRows: 1},
			parseMsg("f", "SELECT id FROM accounts ORDER BY id"),
			&pgproto3.Bind{DestinationPortal: "f", PreparedStatement: "f"},
			&pgproto3.Execute{Portal: "f", MaxRows: 3}, &pgproto3.Execute{Portal: "f"}, &pgproto3.Execute{Portal: "f"},
			parseMsg("w", "UPDATE accounts SET email = email || 'w' WHERE id = $1::bigint RETURNING email"),
			&pgproto3.Bind{DestinationPortal: "w", PreparedStatement: "w", Parameters: [][]byte{[]byte("2")}},
			&pgproto3.Execute{Portal: "w"}, &pgproto3.Execute{Portal: "w"},
			syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{
			parseMsg("v", "UPDATE accounts SET email = email || 'v' WHERE id = $1::bigint"),
			&pgproto3.Bind{DestinationPortal: "v", PreparedStatement: "v", Parameters: [][]byte{[]byte("2")}},
			&pgproto3.Execute{Portal: "v"}, &pgproto3.Execute{Portal: "v"}, syncMsg}, zs: 1},
		// The UPDATEs ran once each.
		{send: []pgproto3.FrontendMessage{queryMsg("SELECT email FROM accounts WHERE id = 2")}, zs: 1},
	}},
	{"an aborted transaction", []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"),
			parseMsg("s", "SELECT email FROM accounts WHERE id = $1::bigint"),
			parseMsg("u", "UPDATE accounts SET email = email WHERE id = $1::bigint"),
			parseMsg("g", "SELECT g FROM generate_series(1, 3) g"),
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "g"},
			&pgproto3.Execute{Portal: "p", MaxRows: 1}, syncMsg,
			&pgproto3.Bind{DestinationPortal: "w", PreparedStatement: "u", Parameters: [][]byte{[]byte("1")}},
			&pgproto3.Execute{Portal: "w"}, syncMsg,
			queryMsg("SELECT 1/0")}, zs: 4},
		// Describe of a portal: NoData for one without rows, alone and
		// with its Execute (which fails).
		{send: []pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'P', Name: "w"}, syncMsg,
			&pgproto3.Describe{ObjectType: 'P', Name: "w"}, &pgproto3.Execute{Portal: "w"}, syncMsg,
			&pgproto3.Describe{ObjectType: 'P', Name: "p"}, syncMsg}, zs: 3},
		// Parse: refused, but for the empty query; the name check comes
		// after.
		{send: []pgproto3.FrontendMessage{parseMsg("t", "SELECT 2"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("s", ""), syncMsg, parseMsg("e", ""), syncMsg}, zs: 2},
		// Describe: refused for a statement that returns rows only.
		{send: []pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'S', Name: "s"}, syncMsg,
			&pgproto3.Describe{ObjectType: 'S', Name: "u"}, syncMsg}, zs: 2},
		// A suspended portal: refused.
		{send: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "p", MaxRows: 1}, syncMsg,
			queryMsg("ROLLBACK")}, zs: 2},
	}},
	{"a portal whose Bind failed in a transaction block", []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"), parseMsg("z", "SELECT 1/0"),
			&pgproto3.Bind{DestinationPortal: "h", PreparedStatement: "z"}, &pgproto3.Execute{Portal: "h"}, syncMsg}, zs: 2},
		{send: []pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'P', Name: "h"}, &pgproto3.Execute{Portal: "h"}, syncMsg,
			queryMsg("ROLLBACK")}, zs: 2},
	}},
	{"a simple Query drops the unnamed portal", []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"), parseMsg("g", "SELECT g FROM generate_series(1, 3) g"),
			&pgproto3.Bind{PreparedStatement: "g"}, syncMsg, queryMsg("SELECT 1"),
			&pgproto3.Execute{}, syncMsg, queryMsg("ROLLBACK")}, zs: 5},
	}},
	{"a suspended portal described before its next Execute", []wireStep{
		// On one shard, and merged from two (a portal on one shard is
		// lost when another statement runs there, docs/routing.md).
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"),
			parseMsg("g", "SELECT g FROM generate_series(1, 3) g"), parseMsg("f", "SELECT id FROM accounts ORDER BY id"),
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "g"}, &pgproto3.Execute{Portal: "p", MaxRows: 1}, syncMsg,
			&pgproto3.Describe{ObjectType: 'P', Name: "p"}, &pgproto3.Execute{Portal: "p", MaxRows: 1}, syncMsg,
			&pgproto3.Bind{DestinationPortal: "q", PreparedStatement: "f"}, &pgproto3.Execute{Portal: "q", MaxRows: 2}, syncMsg,
			&pgproto3.Describe{ObjectType: 'P', Name: "q"}, &pgproto3.Execute{Portal: "q", MaxRows: 2}, syncMsg,
			queryMsg("ROLLBACK")}, zs: 6},
	}},
	{"a statement described while a portal is suspended", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("g", "SELECT g FROM generate_series(1, 3) g"),
			parseMsg("s", "SELECT email FROM accounts WHERE id = $1::bigint"), syncMsg,
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "g"}, &pgproto3.Execute{Portal: "p", MaxRows: 1},
			&pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Describe{ObjectType: 'S', Name: "g"},
			&pgproto3.Execute{Portal: "p", MaxRows: 1}, syncMsg}, zs: 2},
	}},
	{"a known statement parsed again in an aborted transaction", []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("k", "SELECT 7"), syncMsg, &pgproto3.Close{ObjectType: 'S', Name: "k"}, syncMsg}, zs: 2},
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"), queryMsg("SELECT 1/0"), parseMsg("k", "SELECT 7"), syncMsg}, zs: 3},
		// Pipelined behind a batch that fails.
		{send: []pgproto3.FrontendMessage{queryMsg("ROLLBACK"), queryMsg("BEGIN"),
			&pgproto3.Execute{Portal: "nope"}, syncMsg, parseMsg("k", "SELECT 7"), syncMsg, queryMsg("ROLLBACK")}, zs: 5},
	}},
}

// TestPortalStates runs portalStateCases through a sharded database (two
// shards, each case's ids on both) and a one-shard transaction-pooled
// one, against one PostgreSQL database with the same rows.
func TestPortalStates(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, p, plain := twoShardsBesidePlain(t, ctx)
	one := startProxy(t, poolConfig(cl, "transaction", 1, "plain"))
	for _, tc := range portalStateCases {
		for _, target := range []struct {
			name string
			url  string
		}{{"sharded", p.AppURL("app")}, {"one shard", one.AppURL("plain")}} {
			t.Run(tc.name+"/"+target.name, func(t *testing.T) {
				rows := "DELETE FROM accounts; INSERT INTO accounts (id, email) SELECT g, 'e' || g FROM generate_series(1, 6) g"
				execIn(t, simpleConn(t, plain), simple, rows)
				if target.name == "sharded" {
					execIn(t, simpleConn(t, target.url), simple, rows)
				}
				d := dialWire(t, plain)
				defer d.close()
				want := d.run(tc.steps, nil)
				if target.name != "sharded" {
					execIn(t, simpleConn(t, plain), simple, rows)
				}
				a := dialWire(t, target.url)
				defer a.close()
				got := a.run(tc.steps, nil)
				sameWire(t, tc.name, tc.steps, got, want)
			})
		}
	}
}
