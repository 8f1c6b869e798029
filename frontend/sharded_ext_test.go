package frontend

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// rawMsg frames body as a frontend message of type typ, however malformed
// the body.
func rawMsg(typ byte, body string) []byte {
	return wire.FinishMessage(append([]byte{typ, 0, 0, 0, 0}, body...), 0)
}

// clientErrors returns the ErrorResponses in a client's output.
func clientErrors(out []byte) []*wire.Error {
	rd := wire.NewReader(bytes.NewReader(out), 1024, 1<<30)
	var errs []*wire.Error
	for {
		typ, _, body, err := rd.Next()
		if err != nil {
			return errs
		}
		if typ == 'E' {
			errs = append(errs, wire.ParseError(body))
		}
	}
}

// TestShardedMalformedMessages sends extended-protocol messages with short
// or malformed bodies to a sharded client. Each must fail as PostgreSQL 15
// fails it (the messages are PostgreSQL's, checked against a server): an
// ERROR 08P01 in its place, the rest of the batch skipped until Sync, and
// the session usable afterwards.
func TestShardedMalformedMessages(t *testing.T) {
	// s is a statement of one parameter, routed by it; o a read of every
	// shard merged by a column the client did not select (a hidden
	// result column).
	prelude := encode(
		&pgproto3.Parse{Name: "s", Query: "SELECT * FROM accounts WHERE id = $1"},
		&pgproto3.Parse{Name: "o", Query: "SELECT name FROM accounts ORDER BY id"},
	)
	tests := []struct {
		name string
		msgs []byte // sent after prelude, before Sync
		want string // PostgreSQL's message
	}{
		{"describe empty", rawMsg('D', ""), "no data left in message"},
		{"describe empty before execute", append(rawMsg('D', ""), rawMsg('E', "\x00\x00\x00\x00\x00")...), "no data left in message"},
		{"describe unterminated", rawMsg('D', "Ss"), "invalid string in message"},
		{"describe subtype", rawMsg('D', "X\x00"), "invalid DESCRIBE message subtype 88"},
		{"describe trailing", rawMsg('D', "Ss\x00x"), "invalid message format"},
		{"close empty", rawMsg('C', ""), "no data left in message"},
		{"close unterminated", rawMsg('C', "Ss"), "invalid string in message"},
		{"close subtype", rawMsg('C', "X\x00"), "invalid CLOSE message subtype 88"},
		{"close trailing", rawMsg('C', "Ss\x00x"), "invalid message format"},
		{"bind empty", rawMsg('B', ""), "invalid string in message"},
		{"bind portal only", rawMsg('B', "\x00"), "invalid string in message"},
		{"bind names only", rawMsg('B', "\x00s\x00"), "insufficient data left in message"},
		{"bind short formats", rawMsg('B', "\x00s\x00\x00\x02\x00"), "insufficient data left in message"},
		{"bind no parameter count", rawMsg('B', "\x00s\x00\x00\x00"), "insufficient data left in message"},
		{"bind short parameter", rawMsg('B', "\x00s\x00\x00\x00\x00\x01\x00\x00\x00\x05ab"), "insufficient data left in message"},
		{"bind negative length", rawMsg('B', "\x00s\x00\x00\x00\x00\x01\xff\xff\xff\xfe\x00\x00"), "insufficient data left in message"},
		{"bind no result formats", rawMsg('B', "\x00s\x00\x00\x00\x00\x01\x00\x00\x00\x011"), "insufficient data left in message"},
		{"bind short result formats", rawMsg('B', "\x00s\x00\x00\x00\x00\x01\x00\x00\x00\x011\x00\x02\x00\x00"), "insufficient data left in message"},
		{"bind short result formats, hidden column", append(rawMsg('B', "\x00o\x00\x00\x00\x00\x00\x01\x00"), rawMsg('E', "\x00\x00\x00\x00\x00")...), "insufficient data left in message"},
		{"bind trailing", rawMsg('B', "\x00s\x00\x00\x00\x00\x01\x00\x00\x00\x011\x00\x00x"), "invalid message format"},
		{"bind format count", rawMsg('B', "\x00s\x00\x00\x02\x00\x00\x00\x00\x00\x01\x00\x00\x00\x011\x00\x00"), "bind message has 2 parameter formats but 1 parameters"},
		{"execute empty", rawMsg('E', ""), "invalid string in message"},
		{"execute no row count", rawMsg('E', "\x00"), "insufficient data left in message"},
		{"execute short row count", rawMsg('E', "\x00\x00\x00"), "insufficient data left in message"},
		{"execute trailing", rawMsg('E', "\x00\x00\x00\x00\x00x"), "invalid message format"},
		{"parse empty", rawMsg('P', ""), "invalid string in message"},
		{"parse no query", rawMsg('P', "a\x00"), "invalid string in message"},
		{"parse no type count", rawMsg('P', "a\x00SELECT 1\x00"), "insufficient data left in message"},
		{"parse short types", rawMsg('P', "a\x00SELECT 1\x00\x00\x02\x00\x00\x00\x00"), "insufficient data left in message"},
		{"parse trailing", rawMsg('P', "a\x00SELECT 1\x00\x00\x00x"), "invalid message format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			input := append(append([]byte{}, prelude...), tc.msgs...)
			input = append(input, encode(&pgproto3.Sync{}, &pgproto3.Query{String: "SELECT 1"})...)
			r := runShardedLoop(t, t.TempDir(), input)
			checkShardedLoop(t, r)
			if got := messageTypes(r.out); got != "1 1 E Z C Z" {
				t.Fatalf("client got %q, want %q", got, "1 1 E Z C Z")
			}
			errs := clientErrors(r.out)
			if e := errs[0]; e.Severity != "ERROR" || e.Code != wire.ProtocolViolation || e.Message != tc.want {
				t.Fatalf("error %s %s %q, want ERROR 08P01 %q", e.Severity, e.Code, e.Message, tc.want)
			}
		})
	}
}

// TestShardedExtendedSeeds runs well-formed extended-protocol batches on a
// sharded client, so that the fake servers and the sharded paths are
// known to agree before the fuzzer explores the rest.
func TestShardedExtendedSeeds(t *testing.T) {
	want := []string{
		"C Z",
		"1 2 C Z 2 C Z",
		"1 t n 2 C Z",
		"1 2 n C Z",
		"C Z 1 2 C Z C Z",
		"1 3 Z E Z",
		"1 2 C Z",
		"1 2 C Z", // a binary sharding key
		"1 2 C Z",
		"C Z C Z C Z C Z C Z C Z",
		"G C Z C Z",
		"E Z C Z", // the proxy rejects the Parse: Bind and Execute are skipped
		"1 2 n C 3 Z",
		"C Z C Z C Z",
		"1 2 C Z",
		"1 2 C Z",
		"1 2 D s Z E Z",
	}
	seeds := shardedSeeds()
	if len(seeds) != len(want) {
		t.Fatalf("%d seeds, %d answers", len(seeds), len(want))
	}
	for i, seed := range seeds {
		r := runShardedLoop(t, t.TempDir(), seed)
		checkShardedLoop(t, r)
		if got := messageTypes(r.out); got != want[i] {
			t.Errorf("seed %d: client got %q, want %q%s", i, got, want[i], errorsOf(r.out))
		}
	}
}

func errorsOf(out []byte) string {
	var b strings.Builder
	for _, e := range clientErrors(out) {
		b.WriteString("; " + e.Error())
	}
	return b.String()
}

// shardedSeeds are batches of a sharded client: the fuzz seeds of
// FuzzShardedMessages.
func shardedSeeds() [][]byte {
	q := func(s string) *pgproto3.Query { return &pgproto3.Query{String: s} }
	parse := func(name, s string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: s} }
	bind := func(stmt string, params ...string) *pgproto3.Bind {
		b := &pgproto3.Bind{PreparedStatement: stmt}
		for _, p := range params {
			b.Parameters = append(b.Parameters, []byte(p))
		}
		return b
	}
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	return [][]byte{
		encode(q("SELECT * FROM accounts WHERE id = 1"), &pgproto3.Terminate{}),
		encode(parse("s", "SELECT * FROM accounts WHERE id = $1"), bind("s", "1"), exec, sync, bind("s", "2"), exec, sync),
		encode(parse("", "SELECT * FROM countries"), &pgproto3.Describe{ObjectType: 'S'}, bind(""), exec, sync),
		encode(parse("a", "SELECT name FROM accounts ORDER BY id"), bind("a"), &pgproto3.Describe{ObjectType: 'P'}, exec, sync),
		encode(q("BEGIN"), parse("u", "UPDATE accounts SET name = 'x'"), bind("u"), exec, sync, q("COMMIT")),
		encode(parse("c", "SELECT 1"), &pgproto3.Close{ObjectType: 'S', Name: "c"}, sync, bind("c"), exec, sync),
		encode(parse("i", "INSERT INTO accounts (id, name) VALUES ($1, 'a'), ($2, 'b')"), bind("i", "1", "2"), exec, sync),
		encode(parse("b", "SELECT * FROM accounts WHERE id = $1"),
			&pgproto3.Bind{PreparedStatement: "b", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{{0, 0, 0, 0, 0, 0, 0, 7}}}, exec, sync),
		encode(parse("l", "SELECT id FROM accounts ORDER BY id LIMIT $1 OFFSET $2"), bind("l", "1", "2"), exec, sync),
		encode(q("BEGIN"), q("SAVEPOINT a"), q("INSERT INTO accounts (id) VALUES (1)"), q("ROLLBACK TO a"), q("INSERT INTO accounts (id) VALUES (2)"), q("COMMIT")),
		encode(q("COPY accounts (id, name) FROM STDIN"), &pgproto3.CopyData{Data: []byte("1\tx\n2\ty\n")}, &pgproto3.CopyDone{}, q("SELECT 1")),
		encode(parse("", "SELEC"), bind(""), exec, sync, q("SELECT 1")),
		encode(parse("s", "SELECT * FROM accounts WHERE id = $1"), &pgproto3.Bind{DestinationPortal: "x", PreparedStatement: "s", Parameters: [][]byte{[]byte("3")}},
			&pgproto3.Describe{ObjectType: 'P', Name: "x"}, &pgproto3.Execute{Portal: "x"}, &pgproto3.Close{ObjectType: 'P', Name: "x"}, sync),
		encode(q("SET shardgate.shard TO 1"), q("SELECT * FROM accounts"), q("RESET shardgate.shard")),
		encode(parse("f", "SELECT * FROM countries"), bind("f"), exec, &pgproto3.Flush{}, sync),
		encode(parse("w", "UPDATE accounts SET name = $1"), bind("w", "x"), exec, sync),
		encode(parse("p", "SELECT 'suspend' FROM accounts WHERE id = 1"), bind("p"), &pgproto3.Execute{MaxRows: 1}, sync, &pgproto3.Execute{MaxRows: 1}, sync),
	}
}

// TestShardedPreparedAfterError checks the proxy's record of the
// statements each shard has prepared when a statement fails: a Parse a
// shard rejects fails the client's Parse (its statement does not exist),
// and a shard where only the Bind or Execute failed has the statement (it
// is not parsed again, which would fail with 42P05). The fake servers reject the Parse
// of a text with "fail" and the Execute of one with "execfail".
func TestShardedPreparedAfterError(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want []string // the SQLSTATEs of the two executions
	}{
		// As PostgreSQL: the Parse fails, so the statement does not exist
		// for the next Bind.
		{"parse rejected by one shard", "SELECT 'fail' FROM accounts WHERE id = 1", []string{wire.SyntaxError, wire.InvalidSQLStatementName}},
		{"parse rejected by every shard", "SELECT 'fail' FROM accounts", []string{wire.SyntaxError, wire.InvalidSQLStatementName}},
		{"execute failed on one shard", "SELECT 'execfail' FROM accounts WHERE id = 1", []string{wire.DivisionByZero, wire.DivisionByZero}},
		{"execute failed on every shard", "SELECT 'execfail' FROM accounts", []string{wire.DivisionByZero, wire.DivisionByZero}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := func() []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "a"}, &pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			msgs := append([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "a", Query: tc.sql}}, run()...)
			msgs = append(msgs, run()...)
			r := runShardedLoop(t, t.TempDir(), encode(msgs...))
			checkShardedLoop(t, r)
			var got []string
			for _, e := range clientErrors(r.out) {
				got = append(got, e.Code)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("errors %v, want %v%s", got, tc.want, errorsOf(r.out))
			}
		})
	}
}

// TestShardedSuspendedPortal executes a one-shard portal with a row limit
// and then again for the rest. In the same batch, or inside a transaction
// block, the proxy keeps the portal open on its shard and fetches the
// next rows; after the Sync of an implicit transaction the portal is gone,
// as in PostgreSQL.
func TestShardedSuspendedPortal(t *testing.T) {
	limit := &pgproto3.Execute{MaxRows: 1}
	parse := &pgproto3.Parse{Name: "s", Query: "SELECT 'suspend' FROM accounts WHERE id = 1"}
	bind := &pgproto3.Bind{PreparedStatement: "s"}
	sync, flush := &pgproto3.Sync{}, &pgproto3.Flush{}
	tests := []struct {
		name  string
		msgs  []pgproto3.FrontendMessage
		want  string
		error string // the SQLSTATE of the one error, if any
	}{
		{"rest in the same batch", []pgproto3.FrontendMessage{parse, bind, limit, flush, limit, flush, limit, sync},
			"1 2 D s D s D s Z", ""},
		{"rest after the implicit transaction's Sync", []pgproto3.FrontendMessage{parse, bind, limit, sync, limit, sync,
			bind, &pgproto3.Execute{}, sync}, // bound again: runs whole
			"1 2 D s Z E Z 2 C Z", wire.InvalidCursorName},
		{"rest inside a transaction block", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
			parse, bind, limit, sync, limit, sync, &pgproto3.Query{String: "COMMIT"}},
			"C Z 1 2 D s Z D s Z C Z", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runShardedLoop(t, t.TempDir(), encode(tc.msgs...))
			checkShardedLoop(t, r)
			if got := messageTypes(r.out); got != tc.want {
				t.Fatalf("client got %q, want %q%s", got, tc.want, errorsOf(r.out))
			}
			errs := clientErrors(r.out)
			if tc.error != "" && (len(errs) != 1 || errs[0].Code != tc.error) {
				t.Fatalf("errors %v, want one %s", errs, tc.error)
			}
		})
	}
}

// TestShardedServerLostInBatch: a shard's server that fails under an
// extended-protocol batch outside a transaction answers the message that
// needed it with 08006; the rest of the batch is skipped and the client's
// Sync alone answers ReadyForQuery.
func TestShardedServerLostInBatch(t *testing.T) {
	var out bytes.Buffer
	input := encode(&pgproto3.Parse{Name: "a", Query: "SELECT * FROM accounts"}, &pgproto3.Bind{PreparedStatement: "a"},
		&pgproto3.Execute{}, &pgproto3.Bind{PreparedStatement: "a"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	run, done := newShardedClient(t, t.TempDir(), &fakeConn{r: bytes.NewReader(input), w: &out})
	defer done()
	run.fakes[1].closed = true
	run.client.loop(context.Background())
	if got, want := messageTypes(out.Bytes()), "1 2 E Z"; got != want {
		t.Fatalf("client got %q, want %q%s", got, want, errorsOf(out.Bytes()))
	}
	if e := clientErrors(out.Bytes())[0]; e.Code != wire.ConnectionFailure {
		t.Fatalf("error %v, want %s", e, wire.ConnectionFailure)
	}
}

// TestPlanBoundKeepsAnalysis checks that a Bind of a client's statement
// routes with the router's analysis kept on the statement
// (routerPlanner.planBound): a statement too long for the router's cache is
// parsed once for any number of Binds, each Bind routes its own key as
// planParams does, and a change of standard_conforming_strings or of the
// router (a reload) analyses it again.
func TestPlanBoundKeepsAnalysis(t *testing.T) {
	run, done := newShardedClient(t, t.TempDir(), &fakeConn{r: bytes.NewReader(nil), w: &bytes.Buffer{}})
	defer done()
	c := run.client
	// Longer than the router's cache keeps: without the statement's own
	// analysis every Bind would parse it again.
	long := "SELECT * FROM accounts WHERE id = $1 /* " + strings.Repeat("x", 70<<10) + " */"
	st := &sStmt{sql: long}
	bindKey := func(t *testing.T, key string) {
		t.Helper()
		params := [][]byte{[]byte(key)}
		got, err := c.rt.planBound(nil, st, params, nil, c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.rt.planParams(nil, "SELECT * FROM accounts WHERE id = $1", params, nil, c)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != want.Kind || len(got.Shards) != 1 || got.Shards[0] != want.Shards[0] || got.SQL != long {
			t.Fatalf("key %s: plan %v %v %.40q, want %v %v", key, got.Kind, got.Shards, got.SQL, want.Kind, want.Shards)
		}
	}
	parses := func() int64 { return c.rt.(*routerPlanner).r.ParsesForTest() }
	before := parses()
	for k := 1; k <= 20; k++ {
		bindKey(t, strconv.Itoa(k))
	}
	// The short statement planParams routes is parsed once, then cached.
	if n := parses() - before; n != 2 {
		t.Fatalf("20 Binds parsed %d statements, want 2 (the long one once, the short one once)", n)
	}
	c.nonStandardLogin = true
	before = parses()
	bindKey(t, "21")
	bindKey(t, "22")
	if n := parses() - before; n != 2 {
		t.Fatalf("after standard_conforming_strings changed, 2 Binds parsed %d statements, want 2 (each text once)", n)
	}
	reloaded, err := router.New(c.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.rt = &routerPlanner{r: reloaded}
	bindKey(t, "23")
	bindKey(t, "24")
	if n := reloaded.ParsesForTest(); n != 2 {
		t.Fatalf("a reloaded router parsed %d statements for 2 Binds, want 2 (each text once)", n)
	}
}
