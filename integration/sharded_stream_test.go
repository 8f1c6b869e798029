package integration

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// streamConn is a raw protocol connection to the proxy's sharded database
// app, for fetching portals in chunks.
type streamConn struct {
	t  *testing.T
	hc *pgconn.HijackedConn
}

func dialStream(t *testing.T, url string) *streamConn {
	t.Helper()
	return &streamConn{t: t, hc: hijack(t, url)}
}

// chunk sends msgs and reads to ReadyForQuery: the number of DataRows,
// and what ended the last Execute ("PortalSuspended", a command tag, or
// "E" and the SQLSTATE).
func (s *streamConn) chunk(msgs ...pgproto3.FrontendMessage) (rows int, end string) {
	s.t.Helper()
	fe := s.hc.Frontend
	for _, m := range msgs {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		s.t.Fatal(err)
	}
	s.hc.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		m, err := fe.Receive()
		if err != nil {
			s.t.Fatalf("read: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			rows++
		case *pgproto3.PortalSuspended:
			end = "PortalSuspended"
		case *pgproto3.CommandComplete:
			end = string(m.CommandTag)
		case *pgproto3.ErrorResponse:
			end = "E" + m.Code
		case *pgproto3.ReadyForQuery:
			return rows, end
		}
	}
}

// TestShardStreamedPortalBeyondBuffer fetches a cross-shard read of 80 MB
// in chunks of 500 rows, as JDBC does with a fetch size, inside a
// transaction: the proxy streams it (a buffered portal stops at 64 MiB)
// and its heap stays far below the result's size.
func TestShardStreamedPortalBeyondBuffer(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, 1000) g"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	const want = 1000 * 40
	rows, end := c.chunk(&pgproto3.Parse{Name: "big", Query: "SELECT a.id, repeat('x', 2000) FROM accounts a, generate_series(1, 40) g"},
		&pgproto3.Bind{DestinationPortal: "c", PreparedStatement: "big"},
		&pgproto3.Execute{Portal: "c", MaxRows: 500}, &pgproto3.Sync{})
	heap := watchHeap(t)
	total := rows
	for end == "PortalSuspended" {
		if rows != 500 {
			t.Fatalf("a chunk of %d rows, want 500", rows)
		}
		heap.sample()
		rows, end = c.chunk(&pgproto3.Execute{Portal: "c", MaxRows: 500}, &pgproto3.Sync{})
		total += rows
	}
	if total != want || end != "SELECT 0" {
		t.Fatalf("fetched %d rows ending with %q, want %d ending with SELECT 0", total, end, want)
	}
	t.Logf("the test process's heap grew by %d MiB at most while fetching", heap.peak>>20)
	if heap.peak > heapGrowthBound {
		t.Errorf("heap grew by %d MiB while the proxy streamed an 80 MB result", heap.peak>>20)
	}
	if rows, end := c.chunk(&pgproto3.Query{String: "COMMIT"}); end != "COMMIT" {
		t.Fatalf("COMMIT: %d rows, %q", rows, end)
	}
}

// TestShardStreamedPortalCounts checks the rows of a streamed portal: all
// of them arrive once, in chunks of the Execute's limit, and another
// statement between two chunks neither loses nor repeats any.
func TestShardStreamedPortalCounts(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, 2000) g"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	rows, end := c.chunk(&pgproto3.Parse{Name: "all", Query: "SELECT id FROM accounts ORDER BY id"},
		&pgproto3.Bind{DestinationPortal: "c", PreparedStatement: "all"},
		&pgproto3.Execute{Portal: "c", MaxRows: 700}, &pgproto3.Sync{})
	total := rows
	for i := 0; end == "PortalSuspended"; i++ {
		if i == 1 {
			if n, tag := c.chunk(&pgproto3.Query{String: "SELECT count(*) FROM accounts"}); n != 1 || tag != "SELECT 1" {
				t.Fatalf("a Query between chunks: %d rows, %q", n, tag)
			}
		}
		rows, end = c.chunk(&pgproto3.Execute{Portal: "c", MaxRows: 700}, &pgproto3.Sync{})
		total += rows
	}
	if total != 2000 || end != fmt.Sprintf("SELECT %d", 2000-2*700) {
		t.Fatalf("fetched %d rows ending with %q, want 2000 ending with SELECT 600", total, end)
	}
	c.chunk(&pgproto3.Query{String: "COMMIT"})
}

// TestShardStreamedPortalClientLeaves: a client that leaves while a
// cross-shard portal is suspended leaves nothing on the servers: the next
// client (the pool has one server per shard) gets clean answers.
func TestShardStreamedPortalClientLeaves(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, 5000) g"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	if _, end := c.chunk(&pgproto3.Parse{Query: "SELECT a.id, repeat('y', 500) FROM accounts a, generate_series(1, 20) g"},
		&pgproto3.Bind{}, &pgproto3.Execute{MaxRows: 10}, &pgproto3.Sync{}); end != "PortalSuspended" {
		t.Fatalf("first chunk ended with %q", end)
	}
	c.hc.Conn.Close()
	next := dialStream(t, p.AppURL("app"))
	if rows, end := next.chunk(&pgproto3.Query{String: "SELECT count(*) FROM accounts"}); rows != 1 || end != "SELECT 1" {
		t.Fatalf("next client: %d rows, %q", rows, end)
	}
	// The left client's servers were closed; their backends end soon after.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows, end := next.chunk(&pgproto3.Query{String: "SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction'"})
		if rows == 0 && end == "SELECT 0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a server is still in the left client's transaction: %d rows, %q", rows, end)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's view
	}
}

// heapGrowthBound bounds how far the heap of a test process may grow while
// its proxy streams an 80 MB result (watchHeap): far below the result.
const heapGrowthBound = 32 << 20

// heapWatch measures how far the test process's heap grows over its live
// size when the watch began. The collector's target is 10% meanwhile, so
// garbage adds little, and what earlier tests left reachable does not
// count: the peak is about what the proxy holds while it streams.
type heapWatch struct {
	base, peak uint64
	ms         runtime.MemStats
}

func watchHeap(t *testing.T) *heapWatch {
	old := debug.SetGCPercent(10)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	runtime.GC()
	h := &heapWatch{}
	runtime.ReadMemStats(&h.ms)
	h.base = h.ms.HeapAlloc
	return h
}

// sample notes the heap's size now.
func (h *heapWatch) sample() {
	runtime.ReadMemStats(&h.ms)
	if h.ms.HeapAlloc > h.base {
		h.peak = max(h.peak, h.ms.HeapAlloc-h.base)
	}
}
