package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
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
	broken  bool // every write fails
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
		if typ == 'Q' {
			b.query(string(bytes.TrimRight(body, "\x00")))
		}
	}
	return len(p), nil
}

func (b *backend) query(q string) {
	b.queries = append(b.queries, q)
	up := strings.ToUpper(q)
	switch {
	case strings.Contains(q, "fail") || b.failOn != "" && strings.Contains(q, b.failOn):
		b.out.Write(wire.AppendError(nil, wire.Errorf("XX000", "failed: %s", q)))
		if b.status == 'T' {
			b.status = 'E'
		}
	case strings.HasPrefix(up, "BEGIN"):
		b.status = 'T'
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
	dir := t.TempDir()
	coord := NewCoordinator(func() string { return filepath.Join(dir, "2pc.log") }, "test", log)
	t.Cleanup(func() { coord.Close() })
	var ids atomic.Uint64
	var pools []*pool.Pool
	var backends []*backend
	for i := range n {
		p := pool.New(pool.Key{Database: "app", User: "app", Shard: i, Role: "primary"},
			pool.Target{Host: "127.0.0.1", Port: 1 + i}, config.Pool{Size: 2, Mode: config.PoolTransaction}, log, &ids)
		t.Cleanup(p.Close)
		b := &backend{status: 'I'}
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
	if _, _, serr, _ := s.Savepoint(SavepointRelease, "nosuch", "RELEASE nosuch", 0); serr == nil || serr.Code != "3B001" {
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
	for i, be := range b {
		q := be.sent()
		last2 := q[len(q)-2:]
		if !strings.HasPrefix(last2[0], "PREPARE TRANSACTION 'sg:test-1:") || !strings.HasPrefix(last2[1], "COMMIT PREPARED 'sg:test-1:") {
			t.Errorf("shard %d got %q, want PREPARE TRANSACTION then COMMIT PREPARED", i, last2)
		}
	}
	if strings.Join(stages, ",") != "prepared,decided" {
		t.Errorf("stages %v", stages)
	}
	dlog, err := s.coord.Log()
	if err != nil || dlog.Committed("test-1") {
		t.Fatalf("the decision of a finished transaction is still open (%v)", err)
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
	if !strings.HasPrefix(q0[len(q0)-1], "ROLLBACK PREPARED 'sg:test-1:0'") {
		t.Errorf("shard 0 got %q, want its prepared transaction rolled back", q0)
	}
	if q1 := b[1].sent(); q1[len(q1)-1] != "ROLLBACK" {
		t.Errorf("shard 1 got %q, want ROLLBACK", q1)
	}
	if dlog, _ := s.coord.Log(); dlog.Committed("test-1") {
		t.Error("a decision was logged for a transaction that failed to prepare")
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
