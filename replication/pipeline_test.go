package replication

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// commit ends the group in one round trip (start, then finish): the
// tests' form of what reader.flushAll does for every applier at once.
func (a *applier) commit(ctx context.Context) error {
	if err := a.start(ctx); err != nil {
		return err
	}
	return a.finish()
}

// TestPipelineError checks a round trip whose statement fails to prepare:
// the error is the server's, names the statement, and the statements the
// round trip prepared are forgotten (the server skipped their Parse), so
// that a later round trip prepares them again rather than executing names
// the server does not know.
func TestPipelineError(t *testing.T) {
	f := newStreamFixture(t, 1, batchSchema, "", batchRules)
	ctx := t.Context()
	a, err := f.task.newApplier(ctx, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.conn.Close(ctx)
	text := func(v string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	kv := &relation{name: "public.kv", ident: qualified("public", "kv"), cols: []string{"id", "v", "big"}, key: []int{0}}
	bad := &relation{name: "public.kv", ident: qualified("public", "kv"), cols: []string{"id", "nope"}, key: []int{0}}
	end := a.progress + 100
	err = a.apply(ctx, op{final: end - 1, commit: true, end: end, changes: []change{
		{kind: changeInsert, rel: bad, new: []*pglogrepl.TupleDataColumn{text("1"), text("2")}},
	}})
	if err == nil {
		err = a.commit(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != wire.UndefinedColumn || !strings.Contains(err.Error(), `prepare "INSERT INTO`) {
		t.Fatalf("error %v, want the server's undefined_column on preparing the INSERT", err)
	}
	if len(a.prepared) != 0 {
		t.Fatalf("%d statements still counted as prepared after the failed round trip", len(a.prepared))
	}
	if err := a.conn.PgConn().Exec(ctx, "ROLLBACK").Close(); err != nil {
		t.Fatal(err)
	}
	a.inTx = false
	end += 100
	if err := a.apply(ctx, op{final: end - 1, commit: true, end: end, changes: []change{
		{kind: changeInsert, rel: kv, new: []*pglogrepl.TupleDataColumn{text("1"), text("2"), text("x")}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := a.commit(ctx); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := f.dstConns[0].QueryRow(ctx, "SELECT v FROM kv WHERE id = 1").Scan(&v); err != nil || v != 2 {
		t.Fatalf("kv row 1: v %d (%v), want 2", v, err)
	}
}
