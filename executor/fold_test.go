package executor

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// foldEval answers the fold statement with a fixed value per group and
// records the parameters it got.
type foldEval struct {
	q      OuterQuery
	params [][][]byte
}

func (f *foldEval) Eval(q OuterQuery, n int, params func(int) [][]byte, row func(int, [][]byte) error) ([]Field, error) {
	f.q = q
	for i := 0; i < n; i++ {
		var p [][]byte
		for _, v := range params(i) {
			p = append(p, bytes.Clone(v))
		}
		f.params = append(f.params, p)
		out := make([][]byte, len(p))
		for k := range out {
			out[k] = []byte("folded")
		}
		if err := row(i, out[:len(q.ResultFormats)]); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// TestFoldIntervalSums: SELECT g, sum(iv), avg(iv) FROM t GROUP BY g over
// two shards. A group with partial sums on both shards is added by the
// server, as an array of the shards' texts (quoted); a group with one
// partial keeps it without an avg, and avg over no values is NULL without
// asking.
func TestFoldIntervalSums(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "sum", OID: oidInterval}, {Name: "avg", OID: oidInterval}, {Name: "count", OID: oidInt8}}
	eval := &foldEval{}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 3, OrderBy: []SortKey{{Col: 0}}, Eval: eval, Aggs: []Agg{
		{Col: 1, Kind: AggSum}, {Col: 2, Kind: AggAvg, SumCol: 2, CountCol: 3}}}
	a := [][]string{{"a", "1 day", "1 day", "1"}, {"b", "2 mons", "NULL", "0"}, {"c", "NULL", "NULL", "0"}}
	b := [][]string{{"a", `-3 "x\`, "-2 days", "2"}, {"c", "NULL", "NULL", "0"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{"a", "folded", "folded"}, {"b", "2 mons", "NULL"}, {"c", "NULL", "NULL"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	wantSQL := "SELECT (SELECT pg_catalog.sum(v) FROM pg_catalog.unnest($1::pg_catalog.interval[]) AS u(v)), " +
		"(SELECT pg_catalog.sum(v) FROM pg_catalog.unnest($2::pg_catalog.interval[]) AS u(v)) OPERATOR(pg_catalog./) $3::pg_catalog.int8::pg_catalog.float8"
	if eval.q.SQL != wantSQL {
		t.Errorf("SQL %s", eval.q.SQL)
	}
	if want := []uint32{1187, 1187, oidInt8}; !reflect.DeepEqual(eval.q.ParamOIDs, want) {
		t.Errorf("parameter types %v, want %v", eval.q.ParamOIDs, want)
	}
	wantParams := [][][]byte{{[]byte(`{"1 day","-3 \"x\\"}`), []byte(`{"1 day","-2 days"}`), []byte("3")}}
	if !reflect.DeepEqual(eval.params, wantParams) {
		t.Errorf("parameters %q, want %q", eval.params, wantParams)
	}
}

// TestFoldBinaryMoney: binary partial money sums travel as array_send's
// binary array of money.
func TestFoldBinaryMoney(t *testing.T) {
	m := &Merger{cols: []Column{{OID: oidMoney, Format: 1}}}
	got := m.partialArray(foldCol{col: 0, array: 791, elem: oidMoney}, [][]byte{{0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 2}})
	want := []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 0x16, 0, 0, 0, 2, 0, 0, 0, 1,
		0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 2}
	if !bytes.Equal(got, want) {
		t.Errorf("array % x, want % x", got, want)
	}
}

// TestFoldSubgrouped: with a DISTINCT aggregate the shards send a partial
// sum per DISTINCT value, which the proxy adds into one binary sum as it
// reads them (from text in any IntervalStyle); in the binary format no
// server is asked, in text one writes the sum. Money in text is refused.
func TestFoldSubgrouped(t *testing.T) {
	cols := []Column{{Name: "sum", OID: oidInterval}, {Name: "count", OID: oidInt8}, {Name: "x", OID: oidInt4}}
	eval := &foldEval{}
	spec := Spec{Limit: -1, Visible: 2, SortedBy: []SortKey{{Col: 2}}, Eval: eval,
		Aggs: []Agg{{Col: 0, Kind: AggSum}, {Col: 1, Kind: AggCount, Distinct: true}}}
	a := [][]string{{"1 mon -2 days", "1", "1"}, {"@ 3 hours ago", "1", "2"}}
	b := [][]string{{"P1D", "1", "1"}, {"-1-1", "1", "3"}}
	got := run(t, spec, cols, a, b)
	if want := [][]string{{"folded", "3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	// -12 months, -1 day, -3 hours: usecs, days, months.
	sum := appendBinaryInterval(nil, interval{months: -12, days: -1, usecs: -3 * 3600e6})
	if want := [][][]byte{{append([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0xa2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 16}, sum...)}}; !reflect.DeepEqual(eval.params, want) {
		t.Errorf("parameters % x, want % x", eval.params, want)
	}
	if eval.q.ParamFormats[0] != 1 {
		t.Errorf("parameter formats %v", eval.q.ParamFormats)
	}
	over := [][]string{{"2147483000 mons", "1", "1"}, {"1000 mons", "1", "2"}}
	var buf bytes.Buffer
	m, err := NewMerger(spec, cols, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run([]Rows{&rowsOf{rows: over}}); err == nil || !strings.Contains(err.Error(), "interval out of range") {
		t.Errorf("overflow: %v", err)
	}
	cols[0].OID = oidMoney
	if _, err := NewMerger(spec, cols, nil); err == nil {
		t.Fatal("text sum(money) with count(DISTINCT x) merged")
	}
}

// TestAddBinary: interval_pl's and cash_pl's overflow checks.
func TestAddBinary(t *testing.T) {
	iv := func(mo, d, us int64) []byte {
		return appendBinaryInterval(nil, interval{months: mo, days: d, usecs: us})
	}
	for _, tc := range []struct {
		a, b []byte
		ok   bool
	}{
		{iv(2147483646, -2147483647, 9223372036854775806), iv(1, -1, 1), true},
		{iv(2147483647, 0, 0), iv(1, 0, 0), false},
		{iv(0, -2147483648, 0), iv(0, -1, 0), false},
		{iv(0, 0, -9223372036854775807), iv(0, 0, -2), false},
		{iv(-5, 5, -5), iv(5, -5, 5), true},
	} {
		if _, err := addBinary(oidInterval, tc.a, tc.b); (err == nil) != tc.ok {
			t.Errorf("% x + % x: %v", tc.a, tc.b, err)
		}
	}
	m := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	if s, err := addBinary(oidMoney, m(-3), m(5)); err != nil || !bytes.Equal(s, m(2)) {
		t.Errorf("money: % x %v", s, err)
	}
	if _, err := addBinary(oidMoney, m(9223372036854775807), m(1)); err == nil || !strings.Contains(err.Error(), "money out of range") {
		t.Errorf("money overflow: %v", err)
	}
}
