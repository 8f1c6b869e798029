package executor

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// taggedSpec is SELECT g, count(DISTINCT a), sum(DISTINCT b), sum(c)
// FROM t GROUP BY g as shards run it: GROUP BY g, GROUPING SETS ((), a,
// b), with a (column 4), b (5) and GROUPING(a, b) (6) hidden, sorted by
// g, the tag, a, b. Tag 3 is g alone, 1 is g and a, 2 is g and b.
func taggedSpec() (Spec, []Column) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "sum", OID: oidInt8}, {Name: "sum", OID: oidInt8},
		{Name: "a", OID: oidInt4}, {Name: "b", OID: oidInt4}, {Name: "grouping", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 4,
		SortedBy: []SortKey{{Col: 0}, {Col: 6}, {Col: 4}, {Col: 5}},
		Tagged:   &Tagging{Col: 6, Plain: 3, Values: map[int64]int{1: 4, 2: 5}},
		Aggs: []Agg{{Col: 1, Kind: AggCount, Distinct: true, Tag: 1}, {Col: 2, Kind: AggSum, Distinct: true, Tag: 2},
			{Col: 3, Kind: AggSum, Tag: 3}}}
	return spec, cols
}

// TestTaggedMerge: each aggregate reads only the rows of its grouping
// set (the other sets' values, 99 here, are ignored), a DISTINCT value on
// both shards counts once, NULL values count nothing, and a group's first
// row may be of any set.
func TestTaggedMerge(t *testing.T) {
	spec, cols := taggedSpec()
	// Shard A holds t rows (x,1,10,1) (x,1,20,2) (x,NULL,20,3) (y,2,NULL,4);
	// shard B (x,1,10,5) (x,2,30,6) (z,NULL,NULL,7).
	a := [][]string{
		{"x", "1", "99", "99", "1", "NULL", "1"}, {"x", "0", "99", "99", "NULL", "NULL", "1"},
		{"x", "99", "10", "99", "NULL", "10", "2"}, {"x", "99", "20", "99", "NULL", "20", "2"}, {"x", "99", "99", "6", "NULL", "NULL", "3"},
		{"y", "1", "99", "99", "2", "NULL", "1"}, {"y", "99", "NULL", "99", "NULL", "NULL", "2"}, {"y", "99", "99", "4", "NULL", "NULL", "3"}}
	b := [][]string{
		{"x", "1", "99", "99", "1", "NULL", "1"}, {"x", "1", "99", "99", "2", "NULL", "1"},
		{"x", "99", "10", "99", "NULL", "10", "2"}, {"x", "99", "30", "99", "NULL", "30", "2"}, {"x", "99", "99", "11", "NULL", "NULL", "3"},
		{"z", "0", "99", "99", "NULL", "NULL", "1"}, {"z", "99", "NULL", "99", "NULL", "NULL", "2"}, {"z", "99", "99", "7", "NULL", "NULL", "3"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{"x", "2", "60", "17"}, {"y", "1", "NULL", "4"}, {"z", "0", "NULL", "7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// Sorted again by a count, which only a complete group has.
	spec.OrderBy = []SortKey{{Col: 1, Desc: true}}
	if got := run(t, spec, cols, a, b); !reflect.DeepEqual(got, want) {
		t.Errorf("ordered: got %v, want %v", got, want)
	}
}

// TestTaggedMergeNoRows: without GROUP BY, each shard's empty grouping
// set gives its one row even over no rows; the answer is PostgreSQL's:
// counts 0, sums and avg NULL.
func TestTaggedMergeNoRows(t *testing.T) {
	cols := []Column{{Name: "count", OID: oidInt8}, {Name: "avg", OID: oidNumeric}, {Name: "c", OID: oidInt8},
		{Name: "a", OID: oidInt4}, {Name: "b", OID: oidNumeric}, {Name: "grouping", OID: oidInt4}}
	spec := Spec{Limit: -1, Visible: 2, SortedBy: []SortKey{{Col: 5}, {Col: 3}, {Col: 4}},
		Tagged: &Tagging{Col: 5, Plain: 3, Values: map[int64]int{1: 3, 2: 4}},
		Aggs: []Agg{{Col: 0, Kind: AggCount, Distinct: true, Tag: 1},
			{Col: 1, Kind: AggAvg, SumCol: 1, CountCol: 2, Distinct: true, Tag: 2}}}
	empty := [][]string{{"0", "NULL", "0", "NULL", "NULL", "3"}}
	if got := run(t, spec, cols, empty, empty); !reflect.DeepEqual(got, [][]string{{"0", "NULL"}}) {
		t.Errorf("no rows: got %v", got)
	}
	// avg(DISTINCT b) over 1.0 (both shards) and 2: (1.0 + 2) / 2.
	a := [][]string{{"1", "9", "9", "7", "NULL", "1"}, {"9", "1.0", "1", "NULL", "1.0", "2"}, {"9", "9", "9", "NULL", "NULL", "3"}}
	b := [][]string{{"1", "9", "9", "7", "NULL", "1"}, {"9", "1.00", "1", "NULL", "1.00", "2"}, {"9", "2", "1", "NULL", "2", "2"}, {"9", "9", "9", "NULL", "NULL", "3"}}
	if got, want := run(t, spec, cols, a, b), [][]string{{"1", "1.5000000000000000"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestTaggedMergeUnknownTag: a tag of no grouping set (a value the shards
// grouped as part of the group key) is refused, not merged.
func TestTaggedMergeUnknownTag(t *testing.T) {
	spec, cols := taggedSpec()
	var buf bytes.Buffer
	m, err := NewMerger(spec, cols, &buf)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]string{{"x", "1", "1", "1", "1", "NULL", "1"}, {"x", "1", "1", "1", "NULL", "1", "0"}}
	_, err = m.Run([]Rows{&rowsOf{rows: rows}})
	if e, ok := wire.AsError(err); !ok || e.Code != wire.FeatureNotSupported {
		t.Fatalf("got %v, want 0A000", err)
	}
	// One value's set only (the other value is a GROUP BY expression): a
	// collision tags every row of a group as the set's, none as the
	// query's groups alone.
	cols = []Column{{Name: "g", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "sum", OID: oidInt8}, {Name: "a", OID: oidInt4}, {Name: "grouping", OID: oidInt4}}
	one := Spec{Limit: -1, GroupBy: []int{0}, Visible: 3, SortedBy: []SortKey{{Col: 0}, {Col: 4}, {Col: 3}},
		Tagged: &Tagging{Col: 4, Plain: 1, Values: map[int64]int{0: 3}},
		Aggs:   []Agg{{Col: 1, Kind: AggCount, Distinct: true, Tag: 0}, {Col: 2, Kind: AggSum, Tag: 1}}}
	buf.Reset()
	if m, err = NewMerger(one, cols, &buf); err != nil {
		t.Fatal(err)
	}
	rows = [][]string{{"x", "1", "5", "1", "0"}, {"x", "1", "5", "1", "0"}}
	_, err = m.Run([]Rows{&rowsOf{rows: rows}})
	if e, ok := wire.AsError(err); !ok || e.Code != wire.FeatureNotSupported {
		t.Fatalf("one set: got %v, want 0A000", err)
	}
}

// TestDistinctBitXor: bit_xor(DISTINCT x) folds each x once: a value on
// both shards does not cancel out.
func TestDistinctBitXor(t *testing.T) {
	cols := []Column{{Name: "bit_xor", OID: oidInt4}, {Name: "x", OID: oidInt4}}
	spec := Spec{Limit: -1, Visible: 1, SortedBy: []SortKey{{Col: 1}}, Aggs: []Agg{{Col: 0, Kind: AggBitXor, Distinct: true}}}
	got := run(t, spec, cols, [][]string{{"1", "1"}, {"4", "4"}}, [][]string{{"1", "1"}, {"2", "2"}})
	if want := [][]string{{"7"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestAddFloatNaN: a sum's NaN is its left operand's, as PostgreSQL's
// float8pl gives it, an avg's its right one's, as float8_accum does,
// whatever order Go's compiler puts the operands in.
func TestAddFloatNaN(t *testing.T) {
	neg, pos := math.Float64frombits(0xfff8000000000000), math.Float64frombits(0x7ff8000000000000)
	for _, tc := range []struct {
		x, y float64
		want uint64
	}{{neg, pos, 0xfff8000000000000}, {pos, neg, 0x7ff8000000000000}, {1, pos, 0x7ff8000000000000}, {neg, 1, 0xfff8000000000000}} {
		if got := math.Float64bits(addFloat(tc.x, tc.y)); got != tc.want {
			t.Errorf("%x + %x = %x, want %x", math.Float64bits(tc.x), math.Float64bits(tc.y), got, tc.want)
		}
		if got, want := math.Float64bits(accumFloat(tc.y, tc.x)), tc.want; got != want {
			t.Errorf("accum %x + %x = %x, want %x", math.Float64bits(tc.y), math.Float64bits(tc.x), got, want)
		}
	}
}

// TestDistinctEmptyValue: an empty text value on two shards is one value,
// not NULL: count(DISTINCT s) counts it once.
func TestDistinctEmptyValue(t *testing.T) {
	cols := []Column{{Name: "count", OID: oidInt8}, {Name: "count", OID: oidInt8}, {Name: "s", OID: oidText, Format: 1},
		{Name: "a", OID: oidInt4}, {Name: "grouping", OID: oidInt4}}
	spec := Spec{Limit: -1, Visible: 2, SortedBy: []SortKey{{Col: 4}, {Col: 2}, {Col: 3}},
		Tagged: &Tagging{Col: 4, Plain: 3, Values: map[int64]int{1: 2, 2: 3}},
		Aggs:   []Agg{{Col: 0, Kind: AggCount, Distinct: true, Tag: 1}, {Col: 1, Kind: AggCount, Distinct: true, Tag: 2}}}
	shard := [][]string{{"1", "9", "", "NULL", "1"}, {"0", "9", "NULL", "NULL", "1"}, {"9", "1", "NULL", "4", "2"}, {"9", "9", "NULL", "NULL", "3"}}
	if got, want := run(t, spec, cols, shard, shard), [][]string{{"1", "1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestTaggedMergeRowValue: the set of a row value (a, b) groups by both
// fields (Tagging.More), so that rows equal in a but not in b are two
// values, and a row equal in both on two shards is one. Shards run SELECT
// g, count(DISTINCT (a, b)), count(DISTINCT b) … GROUP BY g, GROUPING SETS
// ((), (a, b), b) with a (3), b (4) and GROUPING(a, b) (5) hidden: tag 0
// is g with a and b, 2 is g and b, 3 is g alone. Shard A holds (x,1,10)
// (x,1,20) (x,NULL,NULL), shard B (x,1,10) (x,2,10).
func TestTaggedMergeRowValue(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "count", OID: oidInt8},
		{Name: "a", OID: oidInt4}, {Name: "b", OID: oidInt4}, {Name: "grouping", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 3,
		SortedBy: []SortKey{{Col: 0}, {Col: 5}, {Col: 3}, {Col: 4}},
		Tagged:   &Tagging{Col: 5, Plain: 3, Values: map[int64]int{0: 3, 2: 4}, More: map[int64][]int{0: {4}}},
		Aggs:     []Agg{{Col: 1, Kind: AggCount, Distinct: true, Tag: 0}, {Col: 2, Kind: AggCount, Distinct: true, Tag: 2}}}
	a := [][]string{
		{"x", "1", "99", "1", "10", "0"}, {"x", "1", "99", "1", "20", "0"}, {"x", "1", "99", "NULL", "NULL", "0"},
		{"x", "99", "1", "NULL", "10", "2"}, {"x", "99", "1", "NULL", "20", "2"}, {"x", "99", "NULL", "NULL", "NULL", "2"},
		{"x", "99", "99", "NULL", "NULL", "3"}}
	b := [][]string{
		{"x", "1", "99", "1", "10", "0"}, {"x", "1", "99", "2", "10", "0"},
		{"x", "99", "1", "NULL", "10", "2"}, {"x", "99", "99", "NULL", "NULL", "3"}}
	got := run(t, spec, cols, a, b)
	if want := [][]string{{"x", "4", "2"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
