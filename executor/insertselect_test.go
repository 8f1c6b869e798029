package executor

import (
	"bytes"
	"testing"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// testInsertSelect plans sql, an INSERT … SELECT into accounts sharded by
// bigint id over two shards, and returns the statement's row router with
// the given literal types, as prepare would leave it.
func testInsertSelect(t testing.TB, sql string, types ...string) *insertSelect {
	t.Helper()
	r, err := router.New(&config.Database{Name: "app", Shards: make([]config.Shard, 2),
		ShardedTables: []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Analyze(sql)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Route(nil, nil, router.Hints{})
	if err != nil {
		t.Fatal(err)
	}
	if p.InsertSelect == nil {
		t.Fatalf("%s: plan %v has no InsertSelect", sql, p)
	}
	return &insertSelect{is: p.InsertSelect, types: types, bufs: make([][]byte, 2), pending: make([]bool, 2)}
}

func TestInsertSelectRows(t *testing.T) {
	x := testInsertSelect(t, "INSERT INTO accounts (email, id, note) SELECT 'x', g, NULL FROM generate_series(1, 3) g", "", "integer", "")
	var msgs []byte
	for _, row := range [][][]byte{
		{[]byte("it's"), []byte("1"), nil},
		{[]byte(`back\slash`), []byte("2"), []byte("n")},
		{[]byte("x"), []byte("1"), nil},
	} {
		msgs = wire.AppendDataRow(msgs, row)
	}
	msgs = wire.AppendCommandComplete(msgs, "SELECT 3") // not a row: ignored
	if n, err := x.Write(msgs); err != nil || n != len(msgs) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	one, err := x.is.Shard([]byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := x.is.Shard([]byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for _, r := range []struct {
		shard int
		text  string
	}{{one, `('it''s', '1'::integer, NULL)`}, {two, `(E'back\\slash', '2'::integer, 'n')`}, {one, `('x', '1'::integer, NULL)`}} {
		if want[r.shard] != "" {
			want[r.shard] += ", "
		}
		want[r.shard] += r.text
	}
	for shard, w := range want {
		if got := string(x.bufs[shard]); got != w {
			t.Errorf("shard %d: %s\nwant     %s", shard, got, w)
		}
	}
	if x.is.Prefix != "INSERT INTO accounts (email, id, note) VALUES " || x.is.Suffix != "" {
		t.Errorf("INSERT %q … %q", x.is.Prefix, x.is.Suffix)
	}
	// A row whose key the sharding function rejects fails the statement.
	if _, err := x.Write(wire.AppendDataRow(nil, [][]byte{[]byte("x"), []byte("1.5"), nil})); err == nil {
		t.Error("a key of 1.5 was routed")
	}
	// A row of another width is the proxy's error.
	if _, err := x.Write(wire.AppendDataRow(nil, [][]byte{[]byte("1")})); err == nil {
		t.Error("a row of one column was routed")
	}
}

func TestInsertSelectMessages(t *testing.T) {
	parse := appendParse(nil, "SELECT $1", []uint32{25})
	want := []byte{'P', 0, 0, 0, 21, 0}
	want = append(want, "SELECT $1\x00"...)
	want = append(want, 0, 1, 0, 0, 0, 25)
	if !bytes.Equal(parse, want) {
		t.Errorf("Parse % x\nwant  % x", parse, want)
	}
	bind := appendBind(nil, [][]byte{[]byte("ab"), nil}, []int16{1})
	want = []byte{'B', 0, 0, 0, 24, 0, 0, 0, 1, 0, 1, 0, 2, 0, 0, 0, 2, 'a', 'b', 0xff, 0xff, 0xff, 0xff, 0, 0}
	if !bytes.Equal(bind, want) {
		t.Errorf("Bind % x\nwant % x", bind, want)
	}
}

func TestMultibyteEscapes(t *testing.T) {
	for enc, want := range map[string]bool{"UTF8": false, "SQL_ASCII": false, "LATIN1": false, "EUC_JP": false,
		"SJIS": true, "SHIFT_JIS_2004": true, "BIG5": true, "GBK": true, "UHC": true, "GB18030": true, "JOHAB": true} {
		if got := multibyteEscapes(enc); got != want {
			t.Errorf("%s: %v, want %v", enc, got, want)
		}
	}
}

// BenchmarkInsertSelectRows measures what the proxy does for each row of
// INSERT … SELECT: split the DataRow, route its key, quote its values.
func BenchmarkInsertSelectRows(b *testing.B) {
	x := testInsertSelect(b, "INSERT INTO accounts (id, email, balance) SELECT g, 'u' || g, g % 100 FROM generate_series(1, 3) g", "integer", "text", "integer")
	var msgs []byte
	for i := range 100 {
		msgs = wire.AppendDataRow(msgs, [][]byte{[]byte(string(rune('1' + i%9))), []byte("user12345@example.com"), []byte("42")})
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(msgs)))
	for b.Loop() {
		if _, err := x.Write(msgs); err != nil {
			b.Fatal(err)
		}
		for i := range x.bufs {
			x.bufs[i] = x.bufs[i][:0]
		}
	}
}
