package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestExtendedRunStops: what ends the proxy's run over a write's buffered
// messages (extendedRun) hands the rest to the message-by-message path in
// order: a Query after a Sync, and a malformed message, which ends the
// connection with 08P01 as PostgreSQL does, its batch rolled back.
func TestExtendedRunStops(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE runs (x int)")
	setup.Close(ctx)

	// A Query after a Sync in the same write ends the run: the loop takes
	// it, and the answers come in order.
	a := dialWire(t, p.AppURL("app"))
	defer a.close()
	steps := []wireStep{{send: []pgproto3.FrontendMessage{
		parseMsg("", "INSERT INTO runs VALUES ($1)"), &pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, execMsg(0), syncMsg,
		queryMsg("SELECT count(*) FROM runs"),
		parseMsg("", "SELECT $1::int * 2"), &pgproto3.Bind{Parameters: [][]byte{[]byte("21")}}, execMsg(0), syncMsg,
	}, zs: 3}}
	got := a.run(steps, nil)
	checkMsgs(t, "batch, query, batch", strings.Join(got[0], " "),
		"1 2 C(INSERT 0 1) Z(I) T(count:20) D[1] C(SELECT 1) Z(I) 1 2 D[42] C(SELECT 1) Z(I)")

	// A malformed Bind inside the run is the protocol violation it is on
	// the message-by-message path: FATAL 08P01, and nothing after it runs.
	bad := dialWire(t, p.AppURL("app"))
	defer bad.close()
	raw := []byte{'B', 0, 0, 0, 6, 'x', 'y'} // a portal name without its NUL
	bad.fe.Send(parseMsg("", "INSERT INTO runs VALUES (2)"))
	bad.fe.Send(&pgproto3.Bind{})
	bad.fe.Send(execMsg(0))
	if err := bad.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.hc.Conn.Write(append(raw, 'S', 0, 0, 0, 4)); err != nil {
		t.Fatal(err)
	}
	gotBad := bad.read(wireStep{toErr: true})
	if last := gotBad[len(gotBad)-1]; !strings.HasPrefix(last, "E(FATAL 08P01 ") {
		t.Fatalf("malformed Bind in a run: %v, want FATAL 08P01 at the end", gotBad)
	}
	if rest := bad.read(wireStep{n: 1}); len(rest) != 1 || rest[0] != "read error: connection closed" {
		t.Fatalf("after the FATAL: %v, want the connection closed", rest)
	}
	check := connect(t, p.AppURL("app"))
	defer check.Close(ctx)
	var n int
	if err := check.QueryRow(ctx, "SELECT count(*) FROM runs").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the malformed batch: %d, %v; want 1 (its INSERT rolled back)", n, err)
	}
}
