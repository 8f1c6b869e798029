package executor

import (
	"reflect"
	"testing"
)

// TestRunningWindows: SELECT k, x, sum(x) OVER (ORDER BY k), count(*)
// OVER (ORDER BY k) … ORDER BY k, each shard's running values in its rows
// (peers, equal k, share the value of the last of them): a merged row's
// value combines every shard's at its k — the next row's of a shard whose
// next row is a peer, else its last sent row's; a running sum that is
// still NULL on a shard adds nothing.
func TestRunningWindows(t *testing.T) {
	cols := []Column{{Name: "k", OID: oidInt4}, {Name: "x", OID: oidInt4}, {Name: "sum", OID: oidInt8}, {Name: "count", OID: oidInt8}}
	spec := Spec{Limit: -1, OrderBy: []SortKey{{Col: 0}}, WindowOrder: 1,
		Windows: []Window{{Col: 2, Kind: WinRunning, Agg: AggSum}, {Col: 3, Kind: WinRunning, Agg: AggCount}}}
	a := [][]string{{"1", "10", "10", "1"}, {"2", "5", "16", "3"}, {"2", "1", "16", "3"}, {"4", "NULL", "16", "4"}}
	b := [][]string{{"2", "7", "7", "1"}, {"3", "3", "10", "2"}, {"5", "NULL", "10", "3"}}
	c := [][]string{{"0", "NULL", "NULL", "1"}}
	got := run(t, spec, cols, a, b, c)
	want := [][]string{{"0", "NULL", "NULL", "1"}, {"1", "10", "10", "2"},
		{"2", "5", "23", "5"}, {"2", "1", "23", "5"}, {"2", "7", "23", "5"},
		{"3", "3", "26", "6"}, {"4", "NULL", "26", "7"}, {"5", "NULL", "26", "8"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	// With LIMIT, as PostgreSQL computes windows before it.
	spec.Limit = 3
	if got := run(t, spec, cols, a, b, c); !reflect.DeepEqual(got, want[:3]) {
		t.Errorf("LIMIT 3: got %v, want %v", got, want[:3])
	}
}

// TestRunningMinEmptyText: a running min(t) whose value on a shard is the
// empty string (not NULL) stays the minimum in the later rows of other
// shards.
func TestRunningMinEmptyText(t *testing.T) {
	cols := []Column{{Name: "k", OID: oidInt4}, {Name: "min", OID: oidText}}
	spec := Spec{Limit: -1, OrderBy: []SortKey{{Col: 0}}, WindowOrder: 1,
		Windows: []Window{{Col: 1, Kind: WinRunning, Agg: AggMin}}}
	got := run(t, spec, cols, [][]string{{"1", ""}}, [][]string{{"2", "b"}, {"3", "a"}})
	want := [][]string{{"1", ""}, {"2", ""}, {"3", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestLagWindow: lag(x, 2) OVER (ORDER BY k) from a hidden copy of x
// (column 2): the value two merged rows before, NULL for the first two,
// and a NULL argument stays NULL; the hidden column is cut.
func TestLagWindow(t *testing.T) {
	cols := []Column{{Name: "k", OID: oidInt4}, {Name: "lag", OID: oidText}, {Name: "x", OID: oidText}}
	spec := Spec{Limit: -1, OrderBy: []SortKey{{Col: 0}}, WindowOrder: 1, Visible: 2,
		Windows: []Window{{Col: 1, Kind: WinLag, Arg: 2, Offset: 2}}}
	a := [][]string{{"1", "shard", "a"}, {"4", "shard", "NULL"}, {"5", "shard", "e"}}
	b := [][]string{{"2", "shard", ""}, {"3", "shard", "c"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{"1", "NULL"}, {"2", "NULL"}, {"3", "a"}, {"4", ""}, {"5", "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
