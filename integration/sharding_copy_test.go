package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestShardedCopy: COPY FROM STDIN in binary, text and CSV: every row on
// its shard, omni rows on every shard, tags counted once.
func TestShardedCopy(t *testing.T) {
	e := newShardedEnv(t, 3)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))

	// Binary (pgx CopyFrom).
	var rows [][]any
	for id := int64(1); id <= 1000; id++ {
		rows = append(rows, []any{id, fmt.Sprintf("u%d@x", id)})
	}
	n, err := pc.CopyFrom(ctx, pgx.Identifier{"accounts"}, []string{"id", "email"}, pgx.CopyFromRows(rows))
	if err != nil || n != 1000 {
		t.Fatalf("binary copy: %d rows, %v", n, err)
	}
	// Text, with the key not in the first column and a NULL.
	text := ""
	for id := 1; id <= 300; id++ {
		text += fmt.Sprintf("%d\t%d\t%d.5\t\\N\n", id*10, id, id)
	}
	tag, err := pc.PgConn().CopyFrom(ctx, strings.NewReader(text), "COPY orders (id, account_id, amount, note) FROM STDIN")
	if err != nil || tag.RowsAffected() != 300 {
		t.Fatalf("text copy: %v %v", tag, err)
	}
	// CSV with a header, quotes and a custom delimiter into an omni table.
	csv := "code;name\n\"fr\";\"France; the \"\"hexagon\"\"\"\njp;Japan\n"
	tag, err = pc.PgConn().CopyFrom(ctx, strings.NewReader(csv), "COPY countries FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';')")
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("csv copy: %v %v", tag, err)
	}
	total := 0
	for i, d := range e.direct {
		r, err := d.Query(ctx, "SELECT id FROM accounts")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var id int64
			r.Scan(&id)
			total++
			if s := shardOf(t, id, 3); s != i {
				t.Errorf("account %d on shard %d, want %d", id, i, s)
			}
		}
		r.Close()
		r, _ = d.Query(ctx, "SELECT account_id FROM orders")
		for r.Next() {
			var id int64
			r.Scan(&id)
			if s := shardOf(t, id, 3); s != i {
				t.Errorf("order of account %d on shard %d, want %d", id, i, s)
			}
		}
		r.Close()
		var name string
		d.QueryRow(ctx, "SELECT name FROM countries WHERE code = 'fr'").Scan(&name)
		if name != `France; the "hexagon"` {
			t.Errorf("shard %d: omni row %q", i, name)
		}
	}
	if total != 1000 {
		t.Fatalf("%d accounts across shards", total)
	}
	// A row with a bad key aborts the whole COPY on every shard.
	_, err = pc.PgConn().CopyFrom(ctx, strings.NewReader("5000\t1\t1\t\\N\nnot-a-number\t2\t2\t\\N\n"), "COPY orders (id, account_id, amount, note) FROM STDIN")
	if err == nil {
		t.Fatal("bad key accepted")
	}
	var cnt int
	if err := pc.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&cnt); err != nil || cnt != 300 {
		t.Fatalf("after failed copy: %d orders (%v)", cnt, err)
	}
}
