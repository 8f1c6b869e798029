package executor

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// rowsOf is a Rows over text DataRows; "NULL" stands for NULL.
type rowsOf struct {
	rows [][]string
	i    int
}

func (r *rowsOf) Next() ([]byte, error) {
	if r.i >= len(r.rows) {
		return nil, nil
	}
	var cols [][]byte
	for _, v := range r.rows[r.i] {
		if v == "NULL" {
			cols = append(cols, nil)
		} else {
			cols = append(cols, []byte(v))
		}
	}
	r.i++
	msg := appendDataRow(nil, cols, len(cols))
	return msg[5:], nil
}

// decode reads DataRow messages back into strings.
func decode(t *testing.T, b []byte) [][]string {
	t.Helper()
	r := wire.NewReader(bytes.NewReader(b), 4096, 1<<20)
	var out [][]string
	for {
		typ, _, body, err := r.Next()
		if err != nil {
			return out
		}
		if typ != 'D' {
			t.Fatalf("unexpected %q", typ)
		}
		cols, err := SplitRow(body, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, textRow(cols))
	}
}

// textRow is a DataRow's values as text, NULL as "NULL".
func textRow(cols [][]byte) []string {
	var row []string
	for _, c := range cols {
		if c == nil {
			row = append(row, "NULL")
		} else {
			row = append(row, string(c))
		}
	}
	return row
}

func run(t *testing.T, spec Spec, cols []Column, shards ...[][]string) [][]string {
	t.Helper()
	var buf bytes.Buffer
	m, err := NewMerger(spec, cols, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var srcs []Rows
	for _, s := range shards {
		srcs = append(srcs, &rowsOf{rows: s})
	}
	n, err := m.Run(srcs)
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, buf.Bytes())
	if int(n) != len(got) {
		t.Fatalf("count %d, rows %d", n, len(got))
	}
	return got
}

func TestOrderedMerge(t *testing.T) {
	cols := []Column{{Name: "id", OID: oidInt8}, {Name: "name", OID: oidText}}
	a := [][]string{{"1", "a"}, {"4", "d"}, {"NULL", "x"}}
	b := [][]string{{"2", "b"}, {"3", "c"}, {"5", "e"}}
	got := run(t, Spec{OrderBy: []SortKey{{Col: 0}}, Limit: -1}, cols, a, b)
	want := [][]string{{"1", "a"}, {"2", "b"}, {"3", "c"}, {"4", "d"}, {"5", "e"}, {"NULL", "x"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	// DESC puts NULLs first (PostgreSQL's default), with LIMIT/OFFSET.
	a = [][]string{{"NULL", "x"}, {"4", "d"}, {"1", "a"}}
	b = [][]string{{"5", "e"}, {"3", "c"}, {"2", "b"}}
	got = run(t, Spec{OrderBy: []SortKey{{Col: 0, Desc: true, NullsFirst: true}}, Limit: 3, Offset: 1}, cols, a, b)
	want = [][]string{{"5", "e"}, {"4", "d"}, {"3", "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("desc got %v", got)
	}
}

func TestConcatLimitHidden(t *testing.T) {
	cols := []Column{{Name: "a", OID: oidInt4}, {Name: "hidden", OID: oidInt4}}
	got := run(t, Spec{Limit: 3, Visible: 1}, cols, [][]string{{"1", "9"}, {"2", "9"}}, [][]string{{"3", "9"}, {"4", "9"}})
	want := [][]string{{"1"}, {"2"}, {"3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestAggregateMerge(t *testing.T) {
	// SELECT g, count(*), sum(x), min(x), max(x), avg(x), bool_and(b) ... GROUP BY g ORDER BY g,
	// with avg rewritten to hidden sum/count columns 7 and 8.
	cols := []Column{{Name: "g", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "sum", OID: oidNumeric},
		{Name: "min", OID: oidInt4}, {Name: "max", OID: oidInt4}, {Name: "avg", OID: oidNumeric}, {Name: "bool_and", OID: oidBool},
		{Name: "s", OID: oidNumeric}, {Name: "c", OID: oidInt8}}
	spec := Spec{GroupBy: []int{0}, OrderBy: []SortKey{{Col: 0}}, Limit: -1, Visible: 7, Aggs: []Agg{
		{Col: 1, Kind: AggCount}, {Col: 2, Kind: AggSum}, {Col: 3, Kind: AggMin}, {Col: 4, Kind: AggMax},
		{Col: 5, Kind: AggAvg, SumCol: 7, CountCol: 8}, {Col: 6, Kind: AggBoolAnd}}}
	a := [][]string{{"x", "2", "3", "1", "2", "1.5", "t", "3", "2"}, {"y", "1", "10", "10", "10", "10", "t", "10", "1"}}
	b := [][]string{{"x", "1", "4", "4", "4", "4", "f", "4", "1"}, {"z", "0", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "0"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{
		{"x", "3", "7", "1", "4", "2.3333333333333333", "f"},
		{"y", "1", "10", "10", "10", "10.0000000000000000", "t"},
		{"z", "0", "NULL", "NULL", "NULL", "NULL", "NULL"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
}

func TestDistinct(t *testing.T) {
	cols := []Column{{Name: "v", OID: oidInt4}}
	got := run(t, Spec{Distinct: true, OrderBy: []SortKey{{Col: 0}}, Limit: -1}, cols, [][]string{{"3"}, {"1"}, {"1"}}, [][]string{{"2"}, {"3"}})
	want := [][]string{{"1"}, {"2"}, {"3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestAggregateWithoutGroupBy(t *testing.T) {
	cols := []Column{{Name: "count", OID: oidInt8}}
	got := run(t, Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggCount}}}, cols, [][]string{{"2"}}, [][]string{{"1"}})
	if !reflect.DeepEqual(got, [][]string{{"3"}}) {
		t.Fatalf("got %v", got)
	}
}

func TestDistinctOn(t *testing.T) {
	cols := []Column{{Name: "k", OID: oidInt4}, {Name: "v", OID: oidInt4}}
	got := run(t, Spec{Limit: -1, DistinctOn: []int{0}, OrderBy: []SortKey{{Col: 0}, {Col: 1, Desc: true}}}, cols,
		[][]string{{"1", "5"}, {"2", "1"}}, [][]string{{"1", "7"}, {"2", "3"}})
	if !reflect.DeepEqual(got, [][]string{{"1", "7"}, {"2", "3"}}) {
		t.Fatalf("got %v", got)
	}
}
