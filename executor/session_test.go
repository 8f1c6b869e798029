package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// backend emulates, synchronously, what a Session asks of a PostgreSQL
// server: simple Queries answered with CommandComplete and ReadyForQuery,
// the transaction status following BEGIN, COMMIT, ROLLBACK and PREPARE
// TRANSACTION. A Query containing fail (or matching failOn) fails.
type backend struct {
	mu      sync.Mutex
	in      []byte
	out     bytes.Buffer
	status  byte
	queries []string
	failOn  string
	breakOn string // a Query containing it, and every write after it, fails
	broken  bool   // every write fails
	id      int    // the shard, in the rows it returns
	copying bool   // in COPY FROM STDIN
	copied  []byte
	// cursorRows are the rows a cursor declared FOR SELECT cursor rows
	// has left to fetch, failRow the 1-based row its FETCH fails at (0:
	// none), fetched the rows fetched so far.
	cursorRows, failRow, fetched int
}

func (b *backend) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.out.Len() == 0 {
		return 0, io.EOF
	}
	return b.out.Read(p)
}

func (b *backend) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken {
		return 0, net.ErrClosed
	}
	b.in = append(b.in, p...)
	for len(b.in) >= 5 {
		n := int(binary.BigEndian.Uint32(b.in[1:5]))
		if len(b.in) < 1+n {
			break
		}
		typ, body := b.in[0], b.in[5:1+n]
		b.in = b.in[1+n:]
		if typ == 'Q' && b.breakOn != "" && strings.Contains(string(body), b.breakOn) {
			b.queries = append(b.queries, string(bytes.TrimRight(body, "\x00")))
			b.broken = true // it ran; its answer is lost
			return len(p), nil
		}
		switch typ {
		case 'Q':
			b.query(string(bytes.TrimRight(body, "\x00")))
		case 'd':
			b.copied = append(b.copied, body...)
		case 'c', 'f':
			b.copying = false
			if typ == 'c' {
				b.out.Write(wire.AppendCommandComplete(nil, fmt.Sprintf("COPY %d", bytes.Count(b.copied, []byte("\n")))))
			} else {
				b.out.Write(wire.AppendError(nil, wire.Errorf(wire.QueryCanceled, "COPY from stdin failed")))
			}
			b.out.Write(wire.AppendReadyForQuery(nil, b.status))
		}
	}
	return len(p), nil
}

func (b *backend) query(q string) {
	b.queries = append(b.queries, q)
	up := strings.ToUpper(q)
	switch {
	case strings.Contains(q, "fail") || b.failOn != "" && strings.Contains(q, b.failOn):
		b.out.Write(wire.AppendError(nil, wire.Errorf(wire.InternalError, "failed: %s", q)))
		if b.status == 'T' {
			b.status = 'E'
		}
	case strings.HasPrefix(up, "DECLARE "):
		// DECLARE name NO SCROLL CURSOR FOR SELECT cursor rows; FETCH FORWARD 0
		b.out.Write(wire.AppendCommandComplete(nil, "DECLARE CURSOR"))
		b.out.Write(wire.AppendRowDescription(nil, []wire.Field{{Name: "v", OID: wire.OIDText, Size: -1}}))
		b.out.Write(wire.AppendCommandComplete(nil, "FETCH 0"))
		b.out.Write(wire.AppendReadyForQuery(nil, b.status))
		return
	case strings.HasPrefix(up, "FETCH FORWARD "):
		var n int
		fmt.Sscanf(q, "FETCH FORWARD %d", &n)
		b.out.Write(wire.AppendRowDescription(nil, []wire.Field{{Name: "v", OID: wire.OIDText, Size: -1}}))
		k := 0
		for ; k < n && b.cursorRows > 0; k++ {
			b.fetched++
			b.cursorRows--
			if b.fetched == b.failRow {
				b.out.Write(wire.AppendError(nil, wire.Errorf("22012", "division by zero")))
				b.status = 'E'
				b.out.Write(wire.AppendReadyForQuery(nil, b.status))
				return
			}
			b.out.Write(wire.AppendDataRow(nil, [][]byte{[]byte(fmt.Sprintf("s%d-%d", b.id, b.fetched))}))
		}
		b.out.Write(wire.AppendCommandComplete(nil, fmt.Sprintf("FETCH %d", k)))
		b.out.Write(wire.AppendReadyForQuery(nil, b.status))
		return
	case strings.HasPrefix(up, "BEGIN"):
		b.status = 'T'
	case strings.HasPrefix(q, "SELECT pg_current_xact_id(); "):
		b.out.Write(wire.AppendRowDescription(nil, []wire.Field{{Name: "pg_current_xact_id", OID: 5069, Size: 8}}))
		b.out.Write(wire.AppendDataRow(nil, [][]byte{[]byte("742")}))
		b.out.Write(wire.AppendCommandComplete(nil, "SELECT 1"))
		b.status = 'I'
	case q == "SELECT rows":
		b.out.Write(wire.AppendRowDescription(nil, []wire.Field{{Name: "v", OID: wire.OIDText, Size: -1}}))
		for _, v := range []string{"a", "b"} {
			b.out.Write(wire.AppendDataRow(nil, [][]byte{[]byte(fmt.Sprintf("s%d-%s", b.id, v))}))
		}
		b.out.Write(wire.AppendCommandComplete(nil, "SELECT 2"))
		b.out.Write(wire.AppendReadyForQuery(nil, b.status))
		return
	case strings.HasPrefix(up, "UPDATE"):
		b.out.Write(wire.AppendCommandComplete(nil, "UPDATE 1"))
		b.out.Write(wire.AppendReadyForQuery(nil, b.status))
		return
	case strings.HasPrefix(up, "COPY"):
		b.copying = true
		b.out.Write([]byte{'G', 0, 0, 0, 9, 0, 0, 1, 0, 0})
		return
	case strings.HasPrefix(up, "ROLLBACK TO"):
		if b.status == 'E' {
			b.status = 'T'
		}
	case strings.HasPrefix(up, "COMMIT PREPARED"), strings.HasPrefix(up, "ROLLBACK PREPARED"):
	case strings.HasPrefix(up, "COMMIT"), strings.HasPrefix(up, "ROLLBACK"), strings.HasPrefix(up, "PREPARE TRANSACTION"):
		b.status = 'I'
	}
	b.out.Write(wire.AppendCommandComplete(nil, "OK"))
	b.out.Write(wire.AppendReadyForQuery(nil, b.status))
}

func (b *backend) sent() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.queries...)
}

type backendConn struct{ b *backend }

func (c backendConn) Read(p []byte) (int, error)       { return c.b.Read(p) }
func (c backendConn) Write(p []byte) (int, error)      { return c.b.Write(p) }
func (backendConn) Close() error                       { return nil }
func (backendConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (backendConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (backendConn) SetDeadline(t time.Time) error      { return nil }
func (backendConn) SetReadDeadline(t time.Time) error  { return nil }
func (backendConn) SetWriteDeadline(t time.Time) error { return nil }

// testSession returns a session over n shards, each holding a server on a
// backend of its own, and the backends.
func testSession(t *testing.T, n int) (*Session, []*backend) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	coord := NewCoordinator("test", log)
	var ids atomic.Uint64
	var pools []*pool.Pool
	var backends []*backend
	for i := range n {
		p := pool.New(pool.Key{Database: "app", User: "app", Shard: i, Role: "primary"},
			pool.Target{Host: "127.0.0.1", Port: 1 + i}, config.Pool{Size: 2, Mode: config.PoolTransaction}, log, &ids)
		t.Cleanup(p.Close)
		b := &backend{status: 'I', id: i}
		conn := backendConn{b}
		p.Checkin(&pool.Server{Conn: conn, R: wire.NewReader(conn, 4<<10, 1<<20), W: bufio.NewWriter(conn),
			Params: map[string]string{}, Session: map[string]string{}, Prepared: map[string]struct{}{}, Addr: "fake"})
		pools, backends = append(pools, p), append(backends, b)
	}
	s := NewSession(pools, coord)
	for i, p := range pools {
		srv, err := p.Checkout(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.Hold(i, srv)
	}
	return s, backends
}

// runOn sends what TxPrefix asks for, then q, on shard i, as a client would.
func runOn(t *testing.T, s *Session, i int, q string) {
	t.Helper()
	if pre := s.TxPrefix(i, false); pre != "" {
		if _, serr, err := s.Internal(i, pre); err != nil || serr != nil {
			t.Fatalf("prefix on shard %d: %v %v", i, serr, err)
		}
	}
	if _, serr, err := s.Internal(i, q); err != nil || serr != nil {
		t.Fatalf("%s on shard %d: %v %v", q, i, serr, err)
	}
}

func TestSessionLazyBeginReplaysLog(t *testing.T) {
	s, b := testSession(t, 2)
	if !s.Begin("START TRANSACTION ISOLATION LEVEL REPEATABLE READ") || s.Begin("BEGIN") {
		t.Fatal("Begin: want a new transaction, then a refusal")
	}
	runOn(t, s, 0, "INSERT 1")
	if _, _, _, err := s.Savepoint(SavepointSet, "a", `SAVEPOINT "a"`, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetOnJoined(0, "SET work_mem = '1MB'"); err != nil {
		t.Fatal(err)
	}
	s.LogSetting("SET work_mem = '1MB'")
	runOn(t, s, 1, "INSERT 2")
	want := "START TRANSACTION ISOLATION LEVEL REPEATABLE READ\n; SAVEPOINT \"a\"; SET work_mem = '1MB'\n;"
	if got := b[1].sent(); len(got) != 2 || got[0] != want {
		t.Fatalf("shard 1 got %q, want the transaction's BEGIN and log %q first", got, want)
	}
	if got := s.Joined(); len(got) != 2 || s.Status() != 'T' {
		t.Fatalf("joined %v, status %c: want both shards, T", got, s.Status())
	}
	tag, restore, serr, err := s.Savepoint(SavepointRollbackTo, "a", `ROLLBACK TO "a"`, 0)
	if tag != "ROLLBACK" || restore != 7 || serr != nil || err != nil {
		t.Fatalf("ROLLBACK TO: %q %d %v %v, want ROLLBACK and the mark 7", tag, restore, serr, err)
	}
	if _, _, serr, _ := s.Savepoint(SavepointRelease, "nosuch", "RELEASE nosuch", 0); serr == nil || serr.Code != wire.InvalidSavepointSpecification {
		t.Fatalf("RELEASE of an unknown savepoint: %v, want 3B001", serr)
	}
}

func TestSessionCommitTwoPhase(t *testing.T) {
	s, b := testSession(t, 2)
	var stages []string
	s.coord.Knobs.AtStage = func(stage string) { stages = append(stages, stage) }
	s.Begin("BEGIN")
	runOn(t, s, 0, "UPDATE a")
	runOn(t, s, 1, "UPDATE b")
	tag, committed, err := s.End(true)
	if err != nil || tag != "COMMIT" || len(committed) != 2 {
		t.Fatalf("End: %q %v %v", tag, committed, err)
	}
	// Shard 0 coordinates: it prepares first, with its xid, and its
	// COMMIT PREPARED is the commit point; shard 1's GID names that xid.
	tag0 := CoordTag("127.0.0.1", 1, "")
	coordGID := fmt.Sprintf("sg:test-1:0:%08x:0:0", tag0)
	want := [][]string{
		{"SELECT pg_current_xact_id(); PREPARE TRANSACTION '" + coordGID + "'", "COMMIT PREPARED '" + coordGID + "'"},
		{fmt.Sprintf("PREPARE TRANSACTION 'sg:test-1:0:%08x:742:1'", tag0), fmt.Sprintf("COMMIT PREPARED 'sg:test-1:0:%08x:742:1'", tag0)},
	}
	for i, be := range b {
		q := be.sent()
		last2 := q[len(q)-2:]
		if fmt.Sprint(last2) != fmt.Sprint(want[i]) {
			t.Errorf("shard %d got %q, want %q", i, last2, want[i])
		}
	}
	if strings.Join(stages, ",") != "prepared,decided" {
		t.Errorf("stages %v", stages)
	}
	if s.Status() != 'I' || s.InTxOn(0) || s.InTxOn(1) {
		t.Fatalf("after COMMIT: status %c, joined %v", s.Status(), s.Joined())
	}
}

func TestSessionPrepareFailureRollsBack(t *testing.T) {
	s, b := testSession(t, 2)
	b[1].failOn = "PREPARE TRANSACTION"
	s.Begin("BEGIN")
	runOn(t, s, 0, "UPDATE a")
	runOn(t, s, 1, "UPDATE b")
	_, _, err := s.End(true)
	if e, ok := wire.AsError(err); !ok || !strings.Contains(e.Message, "two-phase commit failed on shard 1") {
		t.Fatalf("End: %v, want the shard's error", err)
	}
	q0 := b[0].sent()
	if want := fmt.Sprintf("ROLLBACK PREPARED 'sg:test-1:0:%08x:0:0'", CoordTag("127.0.0.1", 1, "")); q0[len(q0)-1] != want {
		t.Errorf("shard 0 got %q, want its prepared transaction rolled back (%s)", q0, want)
	}
	if q1 := b[1].sent(); q1[len(q1)-1] != "ROLLBACK" {
		t.Errorf("shard 1 got %q, want ROLLBACK", q1)
	}
}

// TestSessionCommitOutcomeUnknown: when the coordinator's connection is
// lost in its COMMIT PREPARED, the transaction may have committed: the
// client gets 08007 and the other shards stay prepared for the resolver,
// never rolled back.
func TestSessionCommitOutcomeUnknown(t *testing.T) {
	s, b := testSession(t, 2)
	b[0].breakOn = "COMMIT PREPARED"
	s.Begin("BEGIN")
	runOn(t, s, 0, "UPDATE a")
	runOn(t, s, 1, "UPDATE b")
	_, _, err := s.End(true)
	if e, ok := wire.AsError(err); !ok || e.Code != wire.TransactionResolutionUnknown {
		t.Fatalf("End: %v, want 08007", err)
	}
	q1 := b[1].sent()
	if last := q1[len(q1)-1]; !strings.HasPrefix(last, "PREPARE TRANSACTION") {
		t.Errorf("shard 1's last statement is %q, want its PREPARE TRANSACTION (left for the resolver)", last)
	}
}

func TestSessionAbortedCommitRollsBack(t *testing.T) {
	s, b := testSession(t, 2)
	s.Begin("BEGIN")
	runOn(t, s, 0, "UPDATE a")
	s.Abort()
	if s.Status() != 'E' {
		t.Fatalf("status %c, want E", s.Status())
	}
	tag, _, err := s.End(true)
	if tag != "ROLLBACK" || err != nil {
		t.Fatalf("COMMIT of an aborted transaction: %q %v, want ROLLBACK", tag, err)
	}
	if q := b[0].sent(); q[len(q)-1] != "ROLLBACK" {
		t.Errorf("shard 0 got %q", q)
	}
	if len(b[1].sent()) != 0 {
		t.Errorf("shard 1, never joined, got %q", b[1].sent())
	}
}

func TestSessionServerLost(t *testing.T) {
	s, b := testSession(t, 2)
	b[1].broken = true
	_, _, err := s.Internal(1, "SELECT 1")
	var se *ShardError
	if !errors.As(err, &se) || se.Shard != 1 || se.Server != s.Server(1) || !se.Server.Broken {
		t.Fatalf("Internal on a dead server: %v, want a *ShardError naming shard 1's broken server", err)
	}
	s.Detach()
	if s.Holds() {
		t.Fatal("Detach left a server held")
	}
}

// messages splits a stream of backend messages into type letters and
// bodies.
func messages(b []byte) (types string, bodies [][]byte) {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		types += string(b[0])
		bodies = append(bodies, b[5:1+n])
		b = b[1+n:]
	}
	return types, bodies
}

func TestSessionExecuteRead(t *testing.T) {
	s, _ := testSession(t, 2)
	var sink bytes.Buffer
	tag, err := s.Execute(&Answer{Plan: &Plan{Kind: RouteRead, Shards: []int{0, 1}, SQL: "SELECT rows"}, Sink: &sink}, false)
	if err != nil || tag != "SELECT 4" {
		t.Fatalf("Execute: %q %v, want SELECT 4", tag, err)
	}
	types, bodies := messages(sink.Bytes())
	if types != "TDDDD" {
		t.Fatalf("the client got %q, want one RowDescription and 4 rows", types)
	}
	var rows []string
	for _, b := range bodies[1:] {
		cols, _ := SplitRow(b, nil)
		rows = append(rows, string(cols[0]))
	}
	if strings.Join(rows, ",") != "s0-a,s0-b,s1-a,s1-b" {
		t.Fatalf("rows %v", rows)
	}
}

func TestSessionExecuteImplicitWrite(t *testing.T) {
	s, b := testSession(t, 2)
	tag, err := s.Execute(&Answer{Plan: &Plan{Kind: RouteWrite, Shards: []int{0, 1}, SQL: "UPDATE t", Write: true}, Sink: io.Discard}, true)
	if err != nil || tag != "UPDATE 2" {
		t.Fatalf("Execute: %q %v, want UPDATE 2", tag, err)
	}
	for i, be := range b {
		q := be.sent()
		prepare := "PREPARE TRANSACTION"
		if i == 0 {
			prepare = "SELECT pg_current_xact_id(); PREPARE TRANSACTION" // the coordinator
		}
		if len(q) != 4 || q[0] != "BEGIN\n;" || q[1] != "UPDATE t" || !strings.HasPrefix(q[2], prepare) || !strings.HasPrefix(q[3], "COMMIT PREPARED") {
			t.Errorf("shard %d got %q, want BEGIN, the write, and two-phase commit", i, q)
		}
	}
}

func TestSessionExecuteWriteErrorRollsBack(t *testing.T) {
	s, b := testSession(t, 2)
	b[1].failOn = "UPDATE"
	_, err := s.Execute(&Answer{Plan: &Plan{Kind: RouteWrite, Shards: []int{0, 1}, SQL: "UPDATE t", Write: true}, Sink: io.Discard}, true)
	if e, ok := wire.AsError(err); !ok || e.Code != wire.InternalError {
		t.Fatalf("Execute: %v, want shard 1's error", err)
	}
	for i, be := range b {
		if q := be.sent(); q[len(q)-1] != "ROLLBACK" {
			t.Errorf("shard %d got %q, want the implicit transaction rolled back", i, q)
		}
	}
}

// copyFrom is a client sending msgs during COPY FROM STDIN.
type copyFrom struct {
	bytes.Buffer
	msgs [][]byte // type byte, then body
}

func (c *copyFrom) Flush() error { return nil }

func (c *copyFrom) Next() (byte, []byte, error) {
	if len(c.msgs) == 0 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	m := c.msgs[0]
	c.msgs = c.msgs[1:]
	return m[0], m[1:], nil
}

func TestSessionCopyIn(t *testing.T) {
	p := &Plan{Kind: RouteCopy, Shards: []int{0, 1}, SQL: "COPY t FROM STDIN", Copy: &router.Copy{Format: "text", Column: -1}}
	t.Run("every row to every shard", func(t *testing.T) {
		s, b := testSession(t, 2)
		cl := &copyFrom{msgs: [][]byte{[]byte("d1\n2\n"), []byte("d3\n"), []byte("c")}}
		tag, err := s.CopyIn(p, cl)
		if err != nil || tag != "COPY 3" {
			t.Fatalf("CopyIn: %q %v, want COPY 3 (rows of an omni table count once)", tag, err)
		}
		if types, _ := messages(cl.Bytes()); types != "G" {
			t.Errorf("the client got %q, want CopyInResponse", types)
		}
		for i, be := range b {
			q := be.sent()
			if string(be.copied) != "1\n2\n3\n" || !strings.HasPrefix(q[len(q)-1], "COMMIT PREPARED") {
				t.Errorf("shard %d: copied %q, queries %q", i, be.copied, q)
			}
		}
	})
	t.Run("client fails the copy", func(t *testing.T) {
		s, b := testSession(t, 2)
		cl := &copyFrom{msgs: [][]byte{[]byte("d1\n"), []byte("fno more\x00")}}
		_, err := s.CopyIn(p, cl)
		if e, ok := wire.AsError(err); !ok || e.Code != wire.QueryCanceled || !strings.Contains(e.Message, "no more") {
			t.Fatalf("CopyIn: %v, want 57014 with the client's reason", err)
		}
		for i, be := range b {
			if q := be.sent(); q[len(q)-1] != "ROLLBACK" {
				t.Errorf("shard %d got %q, want ROLLBACK", i, q)
			}
		}
	})
	t.Run("client goes away", func(t *testing.T) {
		s, _ := testSession(t, 2)
		_, err := s.CopyIn(p, &copyFrom{})
		var ce *ClientError
		if !errors.As(err, &ce) {
			t.Fatalf("CopyIn: %v, want a *ClientError", err)
		}
	})
}

// wantOne is a sink that takes rows one at a time (RowsWanted) and asks
// the shards' cursor to stop after stopAfter rows (0: never).
type wantOne struct {
	bytes.Buffer
	cur       *ShardCursor
	stopAfter int
}

func (w *wantOne) RowsWanted() int64 { return 1 }

func (w *wantOne) Write(b []byte) (int, error) {
	n, _ := w.Buffer.Write(b)
	if types, _ := messages(w.Bytes()); w.stopAfter > 0 && strings.Count(types, "D") >= w.stopAfter {
		w.cur.Stop = true
	}
	return n, nil
}

// TestSessionExecuteShardCursor: a read run as the shards' cursors
// fetches in batches of 1, 2, 4, … until a batch comes back short, and
// its tag counts every row; Stop closes each shard's cursor at the end of
// the batch under way; a row that fails fails the read at its batch.
func TestSessionExecuteShardCursor(t *testing.T) {
	plan := &Plan{Kind: RouteRead, Shards: []int{0, 1}, SQL: "SELECT cursor rows"}
	t.Run("to the end", func(t *testing.T) {
		s, b := testSession(t, 2)
		b[0].cursorRows, b[1].cursorRows = 5, 3
		cur := s.NewCursor()
		var sink bytes.Buffer
		tag, err := s.Execute(&Answer{Plan: plan, Sink: &sink, Cursor: cur}, false)
		if err != nil || tag != "SELECT 8" {
			t.Fatalf("Execute: %q %v, want SELECT 8", tag, err)
		}
		if types, _ := messages(sink.Bytes()); types != "TDDDDDDDD" {
			t.Fatalf("the client got %q", types)
		}
		name := `"` + cur.Name + `"`
		want0 := []string{"DECLARE " + name + " NO SCROLL CURSOR FOR SELECT cursor rows\n; FETCH FORWARD 0 FROM " + name,
			"FETCH FORWARD 1 FROM " + name, "FETCH FORWARD 2 FROM " + name, "FETCH FORWARD 4 FROM " + name}
		if got := b[0].sent(); strings.Join(got, "|") != strings.Join(want0, "|") {
			t.Fatalf("shard 0 got %q, want %q", got, want0)
		}
		// 3 rows: batches 1 and 2 come back full, so a third one asks.
		if got := b[1].sent(); len(got) != 4 || got[3] != "FETCH FORWARD 4 FROM "+name {
			t.Fatalf("shard 1 got %q", got)
		}
		if next := s.NewCursor(); next.Name == cur.Name {
			t.Fatalf("two cursors named %q", next.Name)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		s, b := testSession(t, 2)
		b[0].cursorRows, b[1].cursorRows = 100, 100
		cur := s.NewCursor()
		sink := &wantOne{cur: cur, stopAfter: 2}
		if _, err := s.Execute(&Answer{Plan: plan, Sink: sink, Cursor: cur}, false); err != nil {
			t.Fatal(err)
		}
		if b[0].fetched != 3 || b[1].fetched != 0 {
			t.Fatalf("fetched %d and %d rows, want 3 (batches 1 and 2) and 0", b[0].fetched, b[1].fetched)
		}
		for i, bk := range b {
			got := bk.sent()
			if last := got[len(got)-1]; last != `CLOSE "`+cur.Name+`"` {
				t.Fatalf("shard %d: last query %q, want its cursor closed", i, last)
			}
		}
	})
	t.Run("a failing row", func(t *testing.T) {
		s, b := testSession(t, 2)
		b[0].cursorRows, b[1].cursorRows = 10, 10
		b[1].failRow = 6
		_, err := s.Execute(&Answer{Plan: plan, Sink: io.Discard, Cursor: s.NewCursor()}, false)
		if e, ok := wire.AsError(err); !ok || e.Code != "22012" {
			t.Fatalf("Execute: %v, want the shard's 22012", err)
		}
		if b[1].fetched != 6 {
			t.Fatalf("shard 1 fetched %d rows, want 6 (batches 1, 2 and the failing 4)", b[1].fetched)
		}
	})
}

// TestSessionDetachAt checks that DetachAt returns the servers at the time
// its caller read, not at a clock read of the pool's: at a time past the
// server's lifetime the pool closes it, where Detach, now, keeps it.
func TestSessionDetachAt(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		at   bool
		idle int
	}{{"Detach", false, 1}, {"DetachAt", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			var ids atomic.Uint64
			p := pool.New(pool.Key{Database: "app", User: "app", Role: "primary"}, pool.Target{Host: "127.0.0.1", Port: 1},
				config.Pool{Size: 1, Mode: config.PoolTransaction, ServerLifetime: time.Hour}, log, &ids)
			t.Cleanup(p.Close)
			conn := backendConn{&backend{status: 'I'}}
			// A server made here, not connected by the pool: created at
			// Mono 0, the test process's start.
			p.Checkin(&pool.Server{Conn: conn, R: wire.NewReader(conn, 4<<10, 1<<20), W: bufio.NewWriter(conn),
				Params: map[string]string{}, Session: map[string]string{}, Prepared: map[string]struct{}{}, Addr: "fake"})
			srv, err := p.Checkout(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := NewSession([]*pool.Pool{p}, NewCoordinator("test", log))
			s.Hold(0, srv)
			if tc.at {
				s.DetachAt(2 * time.Hour) // past the server's lifetime
			} else {
				s.Detach()
			}
			if s.Holds() {
				t.Fatal("the session still holds its server")
			}
			if n := p.Snapshot().Idle; n != tc.idle {
				t.Fatalf("%d idle servers in the pool, want %d", n, tc.idle)
			}
		})
	}
}
