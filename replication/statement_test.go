package replication

import (
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"
)

// TestChangeArgsMatchStatement: the parameters collected for a cached
// statement are those statement numbers, and changes of one shape build
// the same SQL, for every kind of change and mix of present, NULL and
// unchanged TOASTed columns.
func TestChangeArgsMatchStatement(t *testing.T) {
	text := func(s string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(s)}
	}
	null := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
	toast := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
	byKey := &relation{name: "public.t", ident: `"public"."t"`, cols: []string{"id", "a", "b", "c"}, key: []int{0}}
	full := &relation{name: "public.f", ident: `"public"."f"`, cols: []string{"id", "a", "b"}, key: []int{0, 1, 2}, full: true}
	tuple := func(cs ...*pglogrepl.TupleDataColumn) []*pglogrepl.TupleDataColumn { return cs }
	changes := []change{
		{kind: changeInsert, rel: byKey, new: tuple(text("1"), text("x"), null, text(""))},
		{kind: changeInsert, rel: byKey, new: tuple(text("2"), toast, text("y"), null)},
		{kind: changeUpdate, rel: byKey, new: tuple(text("1"), text("x"), toast, text("z")), old: tuple(text("1"), text("x"), toast, text("z"))},
		{kind: changeUpdate, rel: byKey, new: tuple(text("5"), text("x"), null, text("z")), old: tuple(text("4"))},
		{kind: changeUpdate, rel: byKey, new: tuple(toast, toast, toast, toast), old: tuple(text("4"))},
		{kind: changeDelete, rel: byKey, old: tuple(text("7"), null, null, null)},
		{kind: changeDelete, rel: full, old: tuple(text("7"), null, text("q"))},
		{kind: changeUpdate, rel: full, new: tuple(text("7"), text("r"), toast), old: tuple(text("7"), null, toast)},
		{kind: changeTruncate, rel: byKey},
	}
	a := &applier{}
	sqlOf := map[shape]string{}
	for i := range changes {
		c := &changes[i]
		sql, args, needed := a.statement(c)
		sh, ok := shapeOf(c)
		if ok != needed && c.kind != changeTruncate {
			t.Fatalf("change %d: shapeOf ok=%v, statement needed=%v", i, ok, needed)
		}
		if !ok {
			continue
		}
		if got := changeArgs(c); !slices.EqualFunc(got, args, func(x, y []byte) bool {
			return (x == nil) == (y == nil) && string(x) == string(y)
		}) {
			t.Errorf("change %d (%s): changeArgs = %q, statement's = %q", i, sql, got, args)
		}
		if prev, seen := sqlOf[sh]; seen && prev != sql {
			t.Errorf("change %d: one shape, two statements:\n%s\n%s", i, prev, sql)
		}
		sqlOf[sh] = sql
	}
	// The same shape again with other values builds the same statement.
	again := change{kind: changeInsert, rel: byKey, new: tuple(text("9"), text("w"), null, text("v"))}
	sql, _, _ := a.statement(&again)
	sh, _ := shapeOf(&again)
	if sqlOf[sh] != sql {
		t.Errorf("same shape, other statement: %q vs %q", sqlOf[sh], sql)
	}
}
