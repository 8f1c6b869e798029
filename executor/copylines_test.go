package executor

import (
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// TestCopyLines maps shard-local COPY line numbers back to the client's:
// a header every shard gets, rows spread over two shards, a CSV row with a
// quoted newline (two lines to PostgreSQL, except in a file's first line,
// before it knows the file's line ending), and a CONTEXT rewritten in
// place.
func TestCopyLines(t *testing.T) {
	csv, _ := NewCopyFormat("csv", "", "", "", "", true, 0)
	cl := newCopyLines(2, csv)
	cl.sent([]byte("id,email\n"), false, 0, 1) // client line 1
	cl.sent([]byte("2,a\n"), true, 0)          // 2 → shard 0 line 2
	cl.sent([]byte("3,b\n"), true, 1)          // 3 → shard 1 line 2
	cl.sent([]byte("4,\"a\nb\"\n"), true, 1)   // 4–5 → shard 1 lines 3–4
	cl.sent([]byte("6,c\n"), true, 0)          // 6 → shard 0 line 3
	for _, tc := range []struct{ shard, local, want int }{
		{0, 1, 1}, {1, 1, 1}, {0, 2, 2}, {1, 2, 3}, {1, 3, 4}, {1, 4, 5}, {0, 3, 6},
	} {
		if got, ok := cl.client(tc.shard, tc.local); !ok || got != tc.want {
			t.Errorf("shard %d line %d: client line %d, %v; want %d", tc.shard, tc.local, got, ok, tc.want)
		}
	}
	if _, ok := cl.client(0, 4); ok {
		t.Error("shard 0 line 4 (never sent) mapped")
	}
	e := &wire.Error{Code: "23505", More: []wire.ErrorField{{Type: 'W', Value: `COPY accounts, line 3: "6,x"`}, {Type: 'F', Value: "nbtinsert.c"}}}
	got := cl.fix(0, e)
	if got.More[0].Value != `COPY accounts, line 6: "6,x"` || e.More[0].Value != `COPY accounts, line 3: "6,x"` {
		t.Errorf("fix: %q (the shard's error now %q)", got.More[0].Value, e.More[0].Value)
	}
	// Without a header, a quoted newline in a shard's first line counts
	// for the client (its second line) but not for the shard.
	csv.Header = false
	nh := newCopyLines(2, csv)
	nh.sent([]byte("1,a\n"), true, 0)        // 1 → shard 0 line 1
	nh.sent([]byte("2,\"a\nb\"\n"), true, 1) // 2–3 → shard 1 line 1
	nh.sent([]byte("4,c\n"), true, 1)        // 4 → shard 1 line 2
	for _, tc := range []struct{ shard, local, want int }{{0, 1, 1}, {1, 1, 3}, {1, 2, 4}} {
		if got, ok := nh.client(tc.shard, tc.local); !ok || got != tc.want {
			t.Errorf("no header: shard %d line %d: client line %d, %v; want %d", tc.shard, tc.local, got, ok, tc.want)
		}
	}
	bf, _ := NewCopyFormat("binary", "", "", "", "", false, 0)
	bin := newCopyLines(1, bf)
	bin.sent([]byte("PGCOPY header"), false, 0)
	bin.sent([]byte("row"), true, 0)
	if got, ok := bin.client(0, 1); !ok || got != 1 {
		t.Errorf("binary: shard line 1 is client line %d, %v; want 1", got, ok)
	}
}
