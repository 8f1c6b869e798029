package frontend

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

const fuzzConfig = `
pool: { mode: transaction, size: 1, checkout_timeout: 10ms, server_lifetime: 0s, idle_timeout: 0s }
users:
  - { name: app, password: secret }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 1 }]
`

// loopRun is the outcome of running the client message loop over input.
type loopRun struct {
	out    []byte      // everything the client received
	fake   *fakeServer // the server the client's pool held
	server *pool.Server
	client *client
	err    error // what loop returned
}

// runLoop runs a logged-in transaction-mode client's message loop on
// input against a fakeServer, in this goroutine: every socket is in
// memory, nothing blocks.
func runLoop(t testing.TB, input []byte) loopRun {
	cfg, err := config.Parse([]byte(fuzzConfig), "fuzz.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st := &State{Config: cfg, Pools: pool.NewRegistry(cfg, log)}
	l := NewListener(st, log)
	db, u := cfg.Database("app"), cfg.User("app")
	var ids atomic.Uint64
	p := pool.New(pool.Key{Database: "app", User: "app", Role: "primary"},
		pool.Target{Host: "127.0.0.1", Port: 1}, db.Pool, log, &ids)
	defer p.Close()
	fake := newFakeServer()
	srv := fake.server()
	p.Checkin(srv) // the pool's only server

	var out bytes.Buffer
	c := newClient(l, &fakeConn{r: bytes.NewReader(input), w: &out})
	c.st, c.user, c.db, c.mode, c.pool = st, u, db, db.Pool.Mode, p
	err = c.loop(context.Background())
	return loopRun{out: out.Bytes(), fake: fake, server: srv, client: c, err: err}
}

// checkLoop checks the invariants of a finished loop: the client got
// well-formed messages, its server went back to the pool, and unless the
// server was closed as broken, it is idle, out of any COPY or skipped
// batch, and holds exactly the statements the proxy thinks it holds.
func checkLoop(t testing.TB, r loopRun) {
	t.Helper()
	checkClientOutput(t, r.out)
	if r.client.server != nil {
		t.Fatal("the client still holds its server after the loop ended")
	}
	checkServer(t, r.fake, r.server)
}

// checkClientOutput checks that out is a sequence of whole backend
// messages.
func checkClientOutput(t testing.TB, out []byte) {
	t.Helper()
	rd := wire.NewReader(bytes.NewReader(out), 1024, 1<<30)
	for {
		typ, _, body, err := rd.Next()
		if err != nil {
			if rd.Buffered() > 0 {
				t.Fatalf("malformed output to the client: %v", err)
			}
			break
		}
		if !bytes.ContainsRune([]byte("123ntTDCIZEsNAGHdcSVK"), rune(typ)) {
			t.Fatalf("unexpected message %q %q to the client", typ, body)
		}
	}
}

// checkServer checks a server the client returned: unless it was closed as
// broken, it is idle, out of any COPY or skipped batch, and holds exactly
// the statements the proxy thinks it holds.
func checkServer(t testing.TB, f *fakeServer, server *pool.Server) {
	t.Helper()
	if server.Broken {
		return
	}
	if f.status != 'I' || f.skipping || f.copying || f.batch {
		t.Fatalf("server returned to the pool in status %c (skipping %v, copying %v, in a batch %v)", f.status, f.skipping, f.copying, f.batch)
	}
	have := slices.Sorted(maps.Keys(f.stmts))
	think := slices.Sorted(maps.Keys(server.Prepared))
	if !slices.Equal(have, think) {
		t.Fatalf("the server has statements %v, the proxy thinks %v", have, think)
	}
	// The proxy's record of the unnamed statement is the statement, none
	// (empty: the server must have none, or the next client could bind
	// it), or unknown.
	switch {
	case bytes.Equal(server.Unnamed, unknownUnnamed):
	case len(server.Unnamed) == 0 && f.unnamed != nil:
		t.Fatalf("the server's unnamed statement is %q, the proxy thinks it has none", f.unnamed)
	case len(server.Unnamed) > 0 && !bytes.Equal(server.Unnamed, f.unnamed):
		t.Fatalf("the server's unnamed statement is %q, the proxy thinks %q", f.unnamed, server.Unnamed)
	}
}

const shardedFuzzConfig = `
pool: { mode: transaction, size: 1, checkout_timeout: 10ms, server_lifetime: 0s, idle_timeout: 0s }
users:
  - { name: app, password: secret }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 1 }, { host: 127.0.0.1, port: 2 }]
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
    omni_tables: [countries]
`

// shardedRun is the outcome of running a sharded client's message loop.
type shardedRun struct {
	out     []byte
	fakes   []*fakeServer // shard i's server
	servers []*pool.Server
	client  *client
	err     error
}

// runShardedLoop is runLoop for a client of a database with two shards
// (newShardedClient).
func runShardedLoop(t testing.TB, dir string, input []byte) shardedRun {
	var out bytes.Buffer
	run, done := newShardedClient(t, dir, &fakeConn{r: bytes.NewReader(input), w: &out})
	defer done()
	run.err = run.client.loop(context.Background())
	run.out = out.Bytes()
	return run
}

// newShardedClient returns a logged-in transaction-mode client on conn of
// a database with two shards, each pool holding one fakeServer; the
// router has no catalog. Two-phase commits log their decisions under
// dir. done closes the pools and the log.
func newShardedClient(t testing.TB, dir string, conn net.Conn) (run shardedRun, done func()) {
	cfg, err := config.Parse([]byte(shardedFuzzConfig), "fuzz.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TwoPhaseCommitLog = filepath.Join(dir, "2pc.log")
	log := slog.New(slog.DiscardHandler)
	st := &State{Config: cfg, Pools: pool.NewRegistry(cfg, log)}
	l := NewListener(st, log)
	db, u := cfg.Database("app"), cfg.User("app")
	rt, err := router.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(l, conn)
	c.st, c.user, c.db, c.mode = st, u, db, db.Pool.Mode
	c.rt = &routerPlanner{r: rt}
	var ids atomic.Uint64
	run.client = c
	var pools []*pool.Pool
	for i := range db.Shards {
		p := pool.New(pool.Key{Database: "app", User: "app", Shard: i, Role: "primary"},
			pool.Target{Host: "127.0.0.1", Port: 1 + i}, db.Pool, log, &ids)
		fake := newFakeServer()
		srv := fake.server()
		p.Checkin(srv)
		pools = append(pools, p)
		run.fakes, run.servers = append(run.fakes, fake), append(run.servers, srv)
	}
	c.setShards(pools)
	c.pool = pools[0]
	return run, func() {
		for _, p := range pools {
			p.Close()
		}
	}
}

// checkShardedLoop is checkLoop for a sharded client: every shard's server
// went back to the pool in a state the proxy knows.
func checkShardedLoop(t testing.TB, r shardedRun) {
	t.Helper()
	checkClientOutput(t, r.out)
	if r.client.server != nil || r.client.holdsShards() {
		t.Fatal("the client still holds a server after the loop ended")
	}
	for i := range r.fakes {
		checkServer(t, r.fakes[i], r.servers[i])
	}
}

// FuzzClientMessages drives the message loop of a logged-in client with
// arbitrary bytes: it must never panic or hang, and must leave its server
// in a state it knows.
func FuzzClientMessages(f *testing.F) {
	for _, seed := range clientSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // keep batches below flushWriteThreshold: no writer goroutine
		}
		checkLoop(t, runLoop(t, data))
	})
}

// FuzzShardedMessages is FuzzClientMessages for a client of a database
// with two shards: the proxy routes, answers Parse, Bind, Describe and
// Close itself, fans statements out and merges their answers
// (sharded.go, sharded_ext.go, fanout.go). It must never panic or hang,
// and must return every shard's server in a state it knows.
func FuzzShardedMessages(f *testing.F) {
	for _, seed := range shardedSeeds() {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		checkShardedLoop(t, runShardedLoop(t, dir, data))
	})
}

// encode concatenates frontend messages.
func encode(msgs ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		var err error
		b, err = m.Encode(b)
		if err != nil {
			panic(err)
		}
	}
	return b
}

func clientSeeds() [][]byte {
	q := func(s string) *pgproto3.Query { return &pgproto3.Query{String: s} }
	parse := func(name, s string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: s} }
	bind := func(stmt string) *pgproto3.Bind { return &pgproto3.Bind{PreparedStatement: stmt} }
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	flush := &pgproto3.Flush{}
	return [][]byte{
		encode(q("SELECT 1"), &pgproto3.Terminate{}),
		encode(parse("s", "SELECT 1"), bind("s"), exec, sync, bind("s"), exec, sync),
		encode(parse("", "SELECT 2"), sync, q("SELECT 3"), bind(""), exec, sync),
		encode(parse("", "SELECT 1"), sync, bind(""), exec, sync),
		encode(parse("", "fail"), bind(""), exec, parse("s", "SELECT 4"), sync, bind("s"), exec, sync),
		encode(parse("", "SELECT 5"), &pgproto3.Describe{ObjectType: 'S'}, flush, bind(""), exec, sync),
		encode(parse("", "INSERT"), bind(""), exec, flush),
		encode(q("BEGIN"), parse("a", "SELECT 6"), bind("a"), exec, sync, q("execfail"), bind("a"), exec, sync, q("ROLLBACK"), bind("a"), exec, sync),
		encode(q("COPY t FROM STDIN"), &pgproto3.CopyData{Data: []byte("1\n")}, &pgproto3.CopyDone{}, q("SELECT 7")),
		encode(q("COPY t FROM STDIN"), &pgproto3.CopyData{Data: []byte("1\n")}),
		encode(q("COPY t FROM STDIN"), &pgproto3.CopyFail{Message: "no"}, q("SELECT 8")),
		encode(parse("a", "SELECT 9"), sync, q("DEALLOCATE ALL"), bind("a"), exec, sync, parse("a", "SELECT 10"), bind("a"), exec, sync),
		encode(q("BEGIN"), parse("b", "SELECT 11"), sync, q("DEALLOCATE ALL"), q("ROLLBACK"), parse("b", "SELECT 11"), bind("b"), exec, sync),
		encode(parse("c", "SELECT 12"), &pgproto3.Close{ObjectType: 'S', Name: "c"}, sync, bind("c"), exec, sync),
		encode(&pgproto3.FunctionCall{Function: 1}, q("SET search_path TO a"), q("BEGIN"), q("SELECT 13")),
		encode(q("DISCARD ALL"), parse("", "SELECT 14"), bind(""), exec, sync, &pgproto3.Close{ObjectType: 'P'}, sync),
		encode(parse("x", "execfail"), bind("x"), exec, parse("y", "SELECT 15"), bind("y"), exec, sync, bind("y"), exec, sync),
	}
}

// TestClientMessageSeeds runs the fuzz seeds with their expected answers,
// so that the fake server and the loop are known to agree on the normal
// cases before the fuzzer explores the rest.
func TestClientMessageSeeds(t *testing.T) {
	want := []string{
		"C Z",
		"1 2 C Z 2 C Z",
		"1 Z C Z E Z",
		"1 Z 2 C Z",
		"E Z E Z",
		"1 t n 2 C Z",
		"1 2 C",
		"C Z 1 2 C Z E Z E Z C Z 2 C Z", // Bind fails in the failed transaction
		"G C Z C Z",
		"G",
		"G E Z C Z",
		"1 Z C Z E Z 1 2 C Z",
		"C Z 1 Z C Z C Z 1 2 C Z",
		"1 3 Z E Z",
		"V Z C Z C Z C Z",
		"C Z 1 2 C Z 3 Z",
		"1 2 E Z E Z", // y was parsed after the error: it does not exist
	}
	for i, seed := range clientSeeds() {
		r := runLoop(t, seed)
		checkLoop(t, r)
		if got := messageTypes(r.out); got != want[i] {
			t.Errorf("seed %d: client got %q, want %q", i, got, want[i])
		}
	}
}

// messageTypes lists the types of the messages in b, separated by spaces.
func messageTypes(b []byte) string {
	rd := wire.NewReader(bytes.NewReader(b), 1024, 1<<30)
	var types []string
	for {
		typ, _, _, err := rd.Next()
		if err != nil {
			return strings.Join(types, " ")
		}
		types = append(types, string(typ))
	}
}
