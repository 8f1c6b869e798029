package integration

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestIsoUnnamedStatement: the unnamed prepared statement is the client's
// own. A client that never parsed one, on the server another client left
// its unnamed statement on, gets PostgreSQL's 26000 for a Bind of it, not
// the other client's rows; a failed unnamed Parse leaves the client none
// (PostgreSQL drops the old one before it parses), on whichever server its
// next Bind runs.
func TestIsoUnnamedStatement(t *testing.T) {
	checkGoroutines(t)
	t.Run("one shard", func(t *testing.T) {
		cl := isoCluster(t)
		p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
		isoUnnamedStatement(t, p.AppURL("app"))
	})
	// On a sharded database the proxy answers Parse and Bind itself
	// (sharded_ext.go): the same answers.
	t.Run("two shards", func(t *testing.T) {
		_, p := twoShards(t, "transaction")
		isoUnnamedStatement(t, p.AppURL("app"))
	})
}

func isoUnnamedStatement(t *testing.T, url string) {
	a := dialWire(t, url)
	defer a.close()
	b := dialWire(t, url)
	defer b.close()
	step := func(w *wireConn, zs int, msgs ...pgproto3.FrontendMessage) string {
		t.Helper()
		return strings.Join(w.run([]wireStep{{send: msgs, zs: zs}}, nil)[0], " ")
	}
	const noUnnamed = `E(ERROR 26000 "unnamed prepared statement does not exist" detail "") Z(I)`

	checkMsgs(t, "a parses and runs its unnamed statement",
		step(a, 1, parseMsg("", "SELECT 'secret'"), bindMsg(""), execMsg(0), syncMsg), "1 2 D[secret] C(SELECT 1) Z(I)")
	// b, on the same (only) server, never parsed one.
	checkMsgs(t, "b binds the unnamed statement", step(b, 1, bindMsg(""), execMsg(0), syncMsg), noUnnamed)
	checkMsgs(t, "b describes the unnamed statement",
		step(b, 1, &pgproto3.Describe{ObjectType: 'S'}, syncMsg), noUnnamed)
	checkMsgs(t, "a's statement is still a's",
		step(a, 1, bindMsg(""), execMsg(0), syncMsg), "2 D[secret] C(SELECT 1) Z(I)")

	// A failed Parse drops a's unnamed statement; b's Parse then takes the
	// server's, and a's next Bind must not find b's.
	checkMsgs(t, "a's failed Parse, then a Bind in the same write",
		step(a, 2, parseMsg("", "SELECT nope"), syncMsg, bindMsg(""), execMsg(0), syncMsg),
		`E(ERROR 42703 "column \"nope\" does not exist" detail "") Z(I) `+noUnnamed)
	checkMsgs(t, "b parses one", step(b, 1, parseMsg("", "SELECT 'b'"), bindMsg(""), execMsg(0), syncMsg), "1 2 D[b] C(SELECT 1) Z(I)")
	checkMsgs(t, "a binds after its failed Parse", step(a, 1, bindMsg(""), execMsg(0), syncMsg), noUnnamed)
	// A simple Query drops the unnamed statement too (exec_simple_query).
	checkMsgs(t, "b after a simple Query",
		step(b, 2, queryMsg("SELECT 1"), bindMsg(""), execMsg(0), syncMsg), "T(?column?:23) D[1] C(SELECT 1) Z(I) "+noUnnamed)
}
