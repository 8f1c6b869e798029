package executor

import (
	"reflect"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// TestAvgOrdersAsNumeric: avg(x), which shards return as an int8 sum(x)
// with a hidden count, orders and compares as avg's numeric.
func TestAvgOrdersAsNumeric(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "avg", OID: oidInt8}, {Name: "count", OID: oidInt8}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 2, Aggs: []Agg{{Col: 1, Kind: AggAvg, SumCol: 1, CountCol: 2}},
		OrderBy: []SortKey{{Col: 1}}, Having: []Cond{{Col: 1, Op: ">", Value: []byte("9.3")}}}
	// avg(a) = 21 / 2, avg(b) = 37 / 4, avg(c) = 9: in text, "10.5…" would come first.
	got := run(t, spec, cols, [][]string{{"a", "20", "1"}, {"b", "37", "4"}, {"c", "9", "1"}}, [][]string{{"a", "1", "1"}})
	want := [][]string{{"a", "10.5000000000000000"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	spec.Having = nil
	got = run(t, spec, cols, [][]string{{"a", "20", "1"}, {"b", "37", "4"}, {"c", "9", "1"}}, [][]string{{"a", "1", "1"}})
	want = [][]string{{"c", "9.0000000000000000"}, {"b", "9.2500000000000000"}, {"a", "10.5000000000000000"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// TestAvgOfOtherTypes: avg of a type PostgreSQL has no avg of (money,
// whose sum the shards compute) is refused.
func TestAvgOfOtherTypes(t *testing.T) {
	cols := []Column{{Name: "avg", OID: oidMoney}, {Name: "count", OID: oidInt8}}
	_, err := NewMerger(Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggAvg, SumCol: 0, CountCol: 1}}}, cols, nil)
	if err == nil {
		t.Fatal("avg(money) merged")
	}
}

// TestGroupedDistinct: SELECT DISTINCT count(*) … GROUP BY g applies to
// the output rows.
func TestGroupedDistinct(t *testing.T) {
	cols := []Column{{Name: "count", OID: oidInt8}, {Name: "g", OID: oidText}}
	spec := Spec{Limit: -1, GroupBy: []int{1}, Visible: 1, Distinct: true, Aggs: []Agg{{Col: 0, Kind: AggCount}}}
	got := run(t, spec, cols, [][]string{{"2", "a"}, {"1", "b"}}, [][]string{{"1", "b"}, {"3", "c"}})
	if want := [][]string{{"2"}, {"3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestDistinctAggregates: SELECT g, count(DISTINCT x), sum(DISTINCT x),
// count(*) FROM t GROUP BY g, which shards run grouped by g and x and
// sorted by both: a value on both shards counts once, every row counts.
func TestDistinctAggregates(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "sum", OID: oidInt8},
		{Name: "count", OID: oidInt8}, {Name: "x", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, SortedBy: []SortKey{{Col: 0}, {Col: 4}}, Visible: 4, Aggs: []Agg{
		{Col: 1, Kind: AggCount, Distinct: true}, {Col: 2, Kind: AggSum, Distinct: true}, {Col: 3, Kind: AggCount}}}
	a := [][]string{{"a", "1", "1", "2", "1"}, {"a", "1", "5", "1", "5"}, {"a", "0", "NULL", "3", "NULL"}, {"b", "1", "2", "1", "2"}}
	b := [][]string{{"a", "1", "1", "4", "1"}, {"a", "1", "7", "1", "7"}, {"c", "1", "3", "1", "3"}, {"NULL", "1", "4", "2", "4"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{"a", "3", "13", "11"}, {"b", "1", "2", "1"}, {"c", "1", "3", "1"}, {"NULL", "1", "4", "2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestDistinctAggregatesNoRows: without GROUP BY, an aggregate over no
// rows is one row — counts 0, the rest NULL — even though shards grouping
// by the DISTINCT value return none.
func TestDistinctAggregatesNoRows(t *testing.T) {
	cols := []Column{{Name: "count", OID: oidInt8}, {Name: "sum", OID: oidInt8}, {Name: "avg", OID: oidInt8}, {Name: "c", OID: oidInt8}, {Name: "x", OID: oidInt4}}
	spec := Spec{Limit: -1, SortedBy: []SortKey{{Col: 4}}, Visible: 3, Aggs: []Agg{
		{Col: 0, Kind: AggCount, Distinct: true}, {Col: 1, Kind: AggSum, Distinct: true}, {Col: 2, Kind: AggAvg, SumCol: 2, CountCol: 3, Distinct: true}}}
	if got := run(t, spec, cols, nil, nil); !reflect.DeepEqual(got, [][]string{{"0", "NULL", "NULL"}}) {
		t.Errorf("got %v", got)
	}
	// Numeric values equal but written differently are one value.
	cols = []Column{{Name: "count", OID: oidInt8}, {Name: "sum", OID: oidNumeric}, {Name: "avg", OID: oidNumeric}, {Name: "c", OID: oidInt8}, {Name: "x", OID: oidNumeric}}
	got := run(t, spec, cols, [][]string{{"1", "1.0", "1.0", "1", "1.0"}}, [][]string{{"1", "1.00", "1.00", "1", "1.00"}, {"1", "2", "2", "1", "2"}})
	if want := [][]string{{"2", "3.0", "1.5000000000000000"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestHavingValues: a HAVING comparison the merge makes itself reads its
// value as the column's type — a binary parameter of a text result, in the
// column's binary format — and refuses what it would read differently from
// PostgreSQL.
func TestHavingValues(t *testing.T) {
	int8Text := Column{OID: oidInt8}
	for _, tc := range []struct {
		h    Cond
		col  Column
		want string // the value as the merge compares it, or the SQLSTATE
	}{
		{Cond{Value: []byte{0, 0, 0, 0, 0, 0, 0, 5}, Format: 1, Param: true}, int8Text, "5"},
		{Cond{Value: []byte{0xff, 0xfe}, Format: 1, Param: true}, Column{OID: oidInt2}, "-2"},
		{Cond{Value: []byte{0, 0, 0, 5}, Format: 1, Param: true}, int8Text, wire.InvalidBinaryRepresentation},
		{Cond{Value: []byte("7"), Param: false}, Column{OID: oidInt4}, "7"},
		{Cond{Value: []byte("7"), Param: false}, Column{OID: oidText}, wire.FeatureNotSupported},
		{Cond{Value: []byte("abc"), Param: true}, Column{OID: oidText}, "abc"},
		{Cond{Value: []byte("yes"), Param: true}, Column{OID: oidBool}, wire.FeatureNotSupported},
		{Cond{Value: []byte("2000-01-01"), Param: true}, Column{OID: oidTimestamp}, wire.FeatureNotSupported},
	} {
		got := ""
		err := checkHaving(tc.h, tc.col)
		if err == nil && tc.h.Format != tc.col.Format {
			var v []byte
			v, err = convertConst(tc.h.Value, tc.col)
			got = string(v)
		} else if err == nil {
			got = string(tc.h.Value)
		}
		if e, ok := wire.AsError(err); ok {
			got = e.Code
		}
		if got != tc.want {
			t.Errorf("%+v against OID %d: %q (%v), want %q", tc.h, tc.col.OID, got, err, tc.want)
		}
	}
}
