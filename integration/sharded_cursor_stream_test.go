package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestShardCursorStreams fetches an 80 MB cursor over both shards forward
// in chunks, in the simple protocol (psycopg2's named cursors, Django's
// iterator()) and through a prepared FETCH in the extended one (pgx): the
// proxy reads the merge as FETCH asks, so every row arrives once, its heap
// stays far below the result's size, and the cursor, declared without
// SCROLL, scans forward only once it has dropped the rows behind it, with
// PostgreSQL's error for a cursor that cannot move back.
func TestShardCursorStreams(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, 1000) g"})
	const want = 1000 * 40
	big := "SELECT a.id, repeat('x', 2000) FROM accounts a, generate_series(1, 40) g"
	for _, extended := range []bool{false, true} {
		if _, end := c.chunk(&pgproto3.Query{String: "BEGIN"}); end != "BEGIN" {
			t.Fatalf("BEGIN: %q", end)
		}
		if _, end := c.chunk(&pgproto3.Query{String: "DECLARE big CURSOR FOR " + big}); end != "DECLARE CURSOR" {
			t.Fatalf("DECLARE: %q", end)
		}
		if extended {
			if _, end := c.chunk(&pgproto3.Parse{Name: "next", Query: "FETCH 500 FROM big"}, &pgproto3.Sync{}); end != "" {
				t.Fatalf("Parse of the FETCH: %q", end)
			}
		}
		fetch := func() (int, string) {
			if extended {
				return c.chunk(&pgproto3.Bind{PreparedStatement: "next"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			}
			return c.chunk(&pgproto3.Query{String: "FETCH FORWARD 500 FROM big"})
		}
		heap := watchHeap(t)
		total := 0
		for i := 0; ; i++ {
			rows, end := fetch()
			total += rows
			heap.sample()
			if rows == 0 {
				if end != "FETCH 0" {
					t.Fatalf("extended %v: the last FETCH ended with %q", extended, end)
				}
				break
			}
			if rows != 500 || end != "FETCH 500" {
				t.Fatalf("extended %v: FETCH %d returned %d rows, %q", extended, i, rows, end)
			}
		}
		if total != want {
			t.Fatalf("extended %v: fetched %d rows, want %d", extended, total, want)
		}
		t.Logf("extended %v: the test process's heap grew by %d MiB at most while fetching", extended, heap.peak>>20)
		if heap.peak > heapGrowthBound {
			t.Errorf("extended %v: heap grew by %d MiB while the proxy streamed an 80 MB cursor", extended, heap.peak>>20)
		}
		if _, end := c.chunk(&pgproto3.Query{String: "FETCH BACKWARD 1 FROM big"}); end != "E55000" {
			t.Fatalf("extended %v: FETCH BACKWARD after the dropped rows: %q, want E55000", extended, end)
		}
		if _, end := c.chunk(&pgproto3.Query{String: "ROLLBACK"}); end != "ROLLBACK" {
			t.Fatalf("ROLLBACK: %q", end)
		}
	}
}

// TestShardCursorStreamInterrupted: statements between two FETCHes of a
// cursor over both shards (which need the servers its merge holds) lose
// or repeat none of its rows; CLOSE of a cursor mid-stream frees its
// servers for the next statement; and an error in a row the merge has not
// reached yet comes at the FETCH that reaches it, as in PostgreSQL, not at
// DECLARE.
func TestShardCursorStreamInterrupted(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, repeat('e', 200) || g FROM generate_series(1, 2000) g"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	steps := []struct {
		q    string
		rows int
		end  string
	}{
		{"DECLARE c CURSOR FOR SELECT id, email FROM accounts ORDER BY id", 0, "DECLARE CURSOR"},
		{"FETCH 700 FROM c", 700, "FETCH 700"},
		{"SELECT count(*) FROM accounts", 1, "SELECT 1"},
		{"UPDATE accounts SET email = 'x' WHERE id IN (1, 2)", 0, "UPDATE 2"},
		{"FETCH 1 FROM c", 1, "FETCH 1"},
		{"FETCH BACKWARD 2 FROM c", 2, "FETCH 2"},
		{"FETCH ALL FROM c", 1301, "FETCH 1301"},
		{"DECLARE d CURSOR FOR SELECT id FROM accounts", 0, "DECLARE CURSOR"},
		{"FETCH 3 FROM d", 3, "FETCH 3"},
		{"CLOSE d", 0, "CLOSE CURSOR"},
		{"SELECT count(*) FROM accounts WHERE email = 'x'", 1, "SELECT 1"},
		{"FETCH 1 FROM d", 0, "E34000"},
	}
	for _, s := range steps {
		if rows, end := c.chunk(&pgproto3.Query{String: s.q}); rows != s.rows || end != s.end {
			t.Fatalf("%s: %d rows, %q; want %d, %q", s.q, rows, end, s.rows, s.end)
		}
	}
	c.chunk(&pgproto3.Query{String: "ROLLBACK"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	for _, s := range []struct {
		q   string
		end string
	}{
		// Without ORDER BY each shard scans in its own order: id 1500
		// fails once its shard reaches it, after hundreds of rows.
		{"DECLARE e CURSOR FOR SELECT id, 1 / (id - 1500), email FROM accounts", "DECLARE CURSOR"},
		{"FETCH 5 FROM e", "FETCH 5"},
		{"FETCH ALL FROM e", "E22012"},
		{"FETCH 1 FROM e", "E25P02"},
		{"ROLLBACK", "ROLLBACK"},
		// COMMIT reads the rest of a WITH HOLD cursor's rows, and drops
		// those of a cursor without HOLD.
		{"BEGIN", "BEGIN"},
		{"DECLARE h CURSOR WITH HOLD FOR SELECT id FROM accounts ORDER BY id", "DECLARE CURSOR"},
		{"DECLARE w CURSOR FOR SELECT id FROM accounts ORDER BY id", "DECLARE CURSOR"},
		{"FETCH 5 FROM w", "FETCH 5"},
		{"FETCH 5 FROM h", "FETCH 5"},
		{"COMMIT", "COMMIT"},
		{"FETCH 1 FROM w", "E34000"},
		{"FETCH ALL FROM h", "FETCH 1995"},
		{"CLOSE h", "CLOSE CURSOR"},
		{"BEGIN", "BEGIN"},
		{"DECLARE w CURSOR FOR SELECT id FROM accounts ORDER BY id", "DECLARE CURSOR"},
		{"FETCH 5 FROM w", "FETCH 5"},
		{"ROLLBACK", "ROLLBACK"},
		{"SELECT count(*) FROM accounts", "SELECT 1"},
	} {
		if _, end := c.chunk(&pgproto3.Query{String: s.q}); end != s.end {
			t.Fatalf("%s: %q, want %q", s.q, end, s.end)
		}
	}
	// The servers the cursors used went back clean: the next client
	// reads from both shards.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, p.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	res, err := pc.Exec(ctx, "SELECT count(*) FROM accounts WHERE email = 'x'").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "0" {
		t.Fatalf("next client: %v, %v", res, err)
	}
}

// TestShardCursorStreamClientLeaves: a client that leaves in the middle
// of a cursor over both shards leaves no server behind mid-answer: the
// next client reads both shards.
func TestShardCursorStreamClientLeaves(t *testing.T) {
	_, p := twoShards(t, "transaction")
	c := dialStream(t, p.AppURL("app"))
	c.chunk(&pgproto3.Query{String: "INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, 5000) g"})
	c.chunk(&pgproto3.Query{String: "BEGIN"})
	c.chunk(&pgproto3.Query{String: "DECLARE c NO SCROLL CURSOR FOR SELECT a.id, repeat('y', 500) FROM accounts a, generate_series(1, 20) g"})
	if rows, end := c.chunk(&pgproto3.Query{String: "FETCH 10 FROM c"}); rows != 10 || end != "FETCH 10" {
		t.Fatalf("FETCH 10: %d rows, %q", rows, end)
	}
	c.hc.Conn.Close()
	for range 3 {
		next := dialStream(t, p.AppURL("app"))
		if rows, end := next.chunk(&pgproto3.Query{String: "SELECT count(*) FROM accounts"}); rows != 1 || end != "SELECT 1" {
			t.Fatalf("next client: %d rows, %q", rows, end)
		}
		next.hc.Conn.Close()
	}
}
