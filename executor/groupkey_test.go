package executor

import (
	"reflect"
	"testing"
)

// TestGroupByEqualValues: values PostgreSQL's equality calls equal form
// one group even when shards spell them differently (numeric 1.0 and
// 1.00, float -0 and 0, char(n) blanks, interval '1 day' and '24:00:00');
// the group shows the first shard's spelling.
func TestGroupByEqualValues(t *testing.T) {
	for _, tc := range []struct {
		oid  uint32
		a, b string // one shard's value, the other's
	}{
		{oidNumeric, "1.0", "1.00"},
		{oidNumeric, "0.000", "0"},
		{oidNumeric, "NaN", "NaN"},
		{oidFloat8, "-0", "0"},
		{oidFloat4, "NaN", "NaN"},
		{oidBPChar, "ab  ", "ab"},
		{oidInterval, "1 day", "24:00:00"},
		{oidInterval, "1 mon", "30 days"},
	} {
		cols := []Column{{Name: "g", OID: tc.oid}, {Name: "count", OID: oidInt8}}
		spec := Spec{GroupBy: []int{0}, Limit: -1, Aggs: []Agg{{Col: 1, Kind: AggCount}}}
		got := run(t, spec, cols, [][]string{{tc.a, "2"}}, [][]string{{tc.b, "3"}})
		if want := [][]string{{tc.a, "5"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("GROUP BY %d over %q and %q: got %v, want %v", tc.oid, tc.a, tc.b, got, want)
		}
	}
	for _, tc := range []struct {
		oid  uint32
		a, b string
	}{
		{oidNumeric, "1.0", "1.01"},
		{oidFloat8, "1", "1.0000000001"},
		{oidBPChar, " ab", "ab"},
		{oidInterval, "1 day", "23:59:59"},
		{oidText, "ab ", "ab"},
	} {
		if string(groupValue(tc.oid, 0, []byte(tc.a))) == string(groupValue(tc.oid, 0, []byte(tc.b))) {
			t.Errorf("%d: %q and %q share a group, want two", tc.oid, tc.a, tc.b)
		}
	}
}
