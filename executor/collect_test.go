package executor

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// runErr is run for a merge expected to fail: it returns the error.
func runErr(t *testing.T, spec Spec, cols []Column, shards ...[][]string) error {
	t.Helper()
	m, err := NewMerger(spec, cols, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var srcs []Rows
	for _, s := range shards {
		srcs = append(srcs, &rowsOf{rows: s})
	}
	_, err = m.Run(srcs)
	return err
}

// TestStringAggSorted: SELECT g, string_agg(t, sep ORDER BY y DESC NULLS
// FIRST), count(*) … GROUP BY g, which shards run grouped by g and y and
// sorted by both: each partial follows in y order after its own row's
// separator; a NULL partial adds nothing, a NULL separator no separator.
func TestStringAggSorted(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "string_agg", OID: oidText}, {Name: "count", OID: oidInt8},
		{Name: "sep", OID: oidText}, {Name: "y", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 3,
		SortedBy: []SortKey{{Col: 0}, {Col: 4, Desc: true, NullsFirst: true}},
		Aggs:     []Agg{{Col: 1, Kind: AggStringAgg, SepCol: 3}, {Col: 2, Kind: AggCount}}}
	a := [][]string{{"a", "n", "1", ",", "NULL"}, {"a", "x5", "1", ";", "5"}, {"a", "NULL", "2", ",", "3"}, {"b", "b1", "1", ",", "1"}}
	b := [][]string{{"a", "x4", "1", "NULL", "4"}, {"a", "x1,x1", "2", "-", "1"}, {"c", "NULL", "1", ",", "2"}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{"a", "n;x5x4-x1,x1", "7"}, {"b", "b1", "1"}, {"c", "NULL", "1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestStringAggBytea: bytea partials join in hex after one \x, or as
// they are in escape form; a separator column in text joins a binary
// result as its bytes.
func TestStringAggBytea(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format int16
		sepFmt int16
		a, b   [][]string
		want   string
	}{
		{"hex", 0, 0, [][]string{{`\x0102`, `\x2c`}}, [][]string{{`\x03`, `\x2c`}}, `\x01022c03`},
		{"escape", 0, 0, [][]string{{`a\\b`, `,`}}, [][]string{{`\001c`, `\054`}}, `a\\b,\001c`},
		{"binary value, text separator", 1, 0, [][]string{{"\x01\x02", `\x2c00`}}, [][]string{{"\x03", `\x2c00`}}, "\x01\x02\x2c\x00\x03"},
		{"binary", 1, 1, [][]string{{"\x01", ";"}}, [][]string{{"\x02", "NULL"}, {"\x03", ";"}}, "\x01\x02;\x03"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols := []Column{{Name: "string_agg", OID: oidBytea, Format: tc.format}, {Name: "sep", OID: oidBytea, Format: tc.sepFmt}}
			spec := Spec{Limit: -1, Visible: 1, Aggs: []Agg{{Col: 0, Kind: AggStringAgg, SepCol: 1}}}
			got := run(t, spec, cols, tc.a, tc.b)
			if want := [][]string{{tc.want}}; !reflect.DeepEqual(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

// TestArrayAggText: text partials keep array_out's quoting; arrays of
// arrays stack along a new first dimension, lower bounds kept in the
// decoration; box uses ';'.
func TestArrayAggText(t *testing.T) {
	for _, tc := range []struct {
		name string
		oid  uint32
		a, b []string
		want string
	}{
		{"quoted text", 1009, []string{`{"a,b","\"q\"",NULL,""}`, "NULL"}, []string{`{"NULL","sp ace","back\\slash"}`}, `{"a,b","\"q\"",NULL,"","NULL","sp ace","back\\slash"}`},
		{"two dimensions", 1007, []string{`{{1,2},{3,NULL}}`}, []string{`{{5,6}}`}, `{{1,2},{3,NULL},{5,6}}`},
		{"lower bounds", 1007, []string{`[1:1][2:3]={{7,8}}`}, []string{`[1:2][2:3]={{7,8},{9,9}}`}, `[1:3][2:3]={{7,8},{7,8},{9,9}}`},
		{"box", 1020, []string{`{(1,1),(0,0)}`}, []string{`{(2,2),(1,1)}`}, `{(1,1),(0,0);(2,2),(1,1)}`},
		{"all NULL", 1007, []string{"NULL"}, []string{"NULL"}, "NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols := []Column{{Name: "array_agg", OID: tc.oid}}
			var a, b [][]string
			for _, v := range tc.a {
				a = append(a, []string{v})
			}
			for _, v := range tc.b {
				b = append(b, []string{v})
			}
			got := run(t, Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggArrayAgg}}}, cols, a, b)
			if want := [][]string{{tc.want}}; !reflect.DeepEqual(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	// Arrays of different dimensions do not stack.
	cols := []Column{{Name: "array_agg", OID: 1007}}
	err := runErr(t, Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggArrayAgg}}}, cols, [][]string{{`{{1,2}}`}}, [][]string{{`{{1}}`}})
	if e, ok := wire.AsError(err); !ok || e.Code != wire.ArraySubscriptError || e.Message != "cannot accumulate arrays of different dimensionality" {
		t.Errorf("got %v", err)
	}
}

// binArray is array_send's form of int4 elements (nil: NULL) with the
// given dimensions, lower bounds 1.
func binArray(dims []int, elems ...*int32) string {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(dims)))
	flag := uint32(0)
	for _, e := range elems {
		if e == nil {
			flag = 1
		}
	}
	out = binary.BigEndian.AppendUint32(out, flag)
	out = binary.BigEndian.AppendUint32(out, oidInt4)
	for _, d := range dims {
		out = binary.BigEndian.AppendUint32(out, uint32(d))
		out = binary.BigEndian.AppendUint32(out, 1)
	}
	for _, e := range elems {
		if e == nil {
			out = binary.BigEndian.AppendUint32(out, 0xffffffff)
			continue
		}
		out = binary.BigEndian.AppendUint32(out, 4)
		out = binary.BigEndian.AppendUint32(out, uint32(*e))
	}
	return string(out)
}

func i4(v int32) *int32 { return &v }

// TestArrayAggBinary: binary partials stack their elements; the result
// has the NULL flag when any partial has it.
func TestArrayAggBinary(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidInt4, Format: 1}, {Name: "array_agg", OID: 1007, Format: 1}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Aggs: []Agg{{Col: 1, Kind: AggArrayAgg}}, OrderBy: []SortKey{{Col: 0}}}
	g1, g2 := string(binary.BigEndian.AppendUint32(nil, 1)), string(binary.BigEndian.AppendUint32(nil, 2))
	a := [][]string{{g1, binArray([]int{2}, i4(1), i4(2))}, {g2, binArray([]int{1, 2}, i4(1), i4(2))}}
	b := [][]string{{g1, binArray([]int{1}, nil)}, {g2, binArray([]int{2, 2}, i4(3), nil, i4(5), i4(6))}}
	got := run(t, spec, cols, a, b)
	want := [][]string{{g1, binArray([]int{3}, i4(1), i4(2), nil)}, {g2, binArray([]int{3, 2}, i4(1), i4(2), i4(3), nil, i4(5), i4(6))}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	err := runErr(t, Spec{Limit: -1, Aggs: []Agg{{Col: 1, Kind: AggArrayAgg}}}, cols,
		[][]string{{g1, binArray([]int{1, 2}, i4(1), i4(2))}}, [][]string{{g1, binArray([]int{1, 1}, i4(1))}})
	if e, ok := wire.AsError(err); !ok || e.Code != wire.ArraySubscriptError {
		t.Errorf("got %v", err)
	}
}

// TestJSONAgg: json_agg partials join with ", ", and with "\n " more
// before a non-null element of an array or composite; jsonb_agg's with
// ", ", in binary after the version byte.
func TestJSONAgg(t *testing.T) {
	cols := []Column{{Name: "json_agg", OID: oidJSON}, {Name: "structured", OID: oidBool}}
	spec := Spec{Limit: -1, Visible: 1, Aggs: []Agg{{Col: 0, Kind: AggJSONAgg, StructCol: 1}}}
	got := run(t, spec, cols, [][]string{{`[{"a":1}, ` + "\n " + `{"a":2}]`, "t"}}, [][]string{{"[null]", "t"}, {`[{"a":3}]`, "t"}})
	if want := `[{"a":1}, ` + "\n " + `{"a":2}, null, ` + "\n " + `{"a":3}]`; got[0][0] != want {
		t.Errorf("structured: got %q, want %q", got[0][0], want)
	}
	got = run(t, spec, cols, [][]string{{`[{"a":1}]`, "f"}}, [][]string{{`[2, "x"]`, "f"}})
	if want := `[{"a":1}, 2, "x"]`; got[0][0] != want {
		t.Errorf("json values: got %q, want %q", got[0][0], want)
	}
	got = run(t, spec, cols, [][]string{{"[]", "f"}}, [][]string{{"[1]", "f"}, {"[]", "f"}, {"[2]", "f"}})
	if want := `[1, 2]`; got[0][0] != want {
		t.Errorf("empty strict partials: got %q, want %q", got[0][0], want)
	}
	cols = []Column{{Name: "jsonb_agg", OID: oidJSONB, Format: 1}}
	spec = Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggJSONBAgg}}}
	got = run(t, spec, cols, [][]string{{"\x01[1, {\"a\": [2]}]"}}, [][]string{{"NULL"}, {"\x01[null]"}})
	if want := "\x01[1, {\"a\": [2]}, null]"; got[0][0] != want {
		t.Errorf("jsonb: got %q, want %q", got[0][0], want)
	}
}

// TestCollectNoRows: an aggregate without GROUP BY over no rows, which
// shards grouping by ORDER BY keys or separators answer with no row, is
// one row: count 0, the collections NULL.
func TestCollectNoRows(t *testing.T) {
	cols := []Column{{Name: "array_agg", OID: 1007}, {Name: "string_agg", OID: oidText}, {Name: "count", OID: oidInt8}, {Name: "sep", OID: oidText}, {Name: "y", OID: oidInt4}}
	for _, sorted := range [][]SortKey{{{Col: 4}}, nil} {
		spec := Spec{Limit: -1, Visible: 3, SortedBy: sorted, Aggs: []Agg{{Col: 0, Kind: AggArrayAgg}, {Col: 1, Kind: AggStringAgg, SepCol: 3}, {Col: 2, Kind: AggCount}}}
		if got := run(t, spec, cols, nil, nil); !reflect.DeepEqual(got, [][]string{{"NULL", "NULL", "0"}}) {
			t.Errorf("sorted %v: got %v", sorted, got)
		}
	}
}

// TestBitAggregates: integer partials combine in their width, bit strings
// bit by bit; bit strings of different lengths fail as bitand does.
func TestBitAggregates(t *testing.T) {
	cols := []Column{{Name: "a", OID: oidInt4}, {Name: "o", OID: oidInt8}, {Name: "x", OID: oidInt2}, {Name: "b", OID: oidBit}}
	spec := Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggBitAnd}, {Col: 1, Kind: AggBitOr}, {Col: 2, Kind: AggBitXor}, {Col: 3, Kind: AggBitXor}}}
	got := run(t, spec, cols, [][]string{{"6", "1", "-3", "1100"}}, [][]string{{"NULL", "NULL", "NULL", "NULL"}}, [][]string{{"12", "8589934592", "5", "1010"}})
	if want := [][]string{{"4", "8589934593", "-8", "0110"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("text: got %v, want %v", got, want)
	}
	bin := []Column{{Name: "a", OID: oidInt2, Format: 1}, {Name: "b", OID: oidVarbit, Format: 1}}
	spec = Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: AggBitOr}, {Col: 1, Kind: AggBitAnd}}}
	got = run(t, spec, bin, [][]string{{"\x00\x05", "\x00\x00\x00\x0a\xff\xc0"}}, [][]string{{"\x01\x02", "\x00\x00\x00\x0a\x0f\x40"}})
	if want := [][]string{{"\x01\x07", "\x00\x00\x00\x0a\x0f\x40"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("binary: got %q, want %q", got, want)
	}
	for _, tc := range []struct {
		kind AggKind
		op   string
		col  Column
		a, b string
	}{
		{AggBitAnd, "AND", Column{Name: "b", OID: oidVarbit}, "101", "10"},
		{AggBitOr, "OR", Column{Name: "b", OID: oidVarbit, Format: 1}, "\x00\x00\x00\x03\xa0", "\x00\x00\x00\x02\x80"},
		{AggBitXor, "XOR", Column{Name: "b", OID: oidBit}, "1", "11"},
	} {
		err := runErr(t, Spec{Limit: -1, Aggs: []Agg{{Col: 0, Kind: tc.kind}}}, []Column{tc.col}, [][]string{{tc.a}}, [][]string{{tc.b}})
		e, ok := wire.AsError(err)
		if !ok || e.Code != wire.StringDataLengthMismatch || e.Message != "cannot "+tc.op+" bit strings of different sizes" {
			t.Errorf("%v: got %v", tc.kind, err)
		}
	}
}

// TestSortedMergeDirections: shards sorted by the group key, then an
// ORDER BY key DESC NULLS FIRST, merge in that order.
func TestSortedMergeDirections(t *testing.T) {
	cols := []Column{{Name: "array_agg", OID: 1007}, {Name: "y", OID: oidInt4}, {Name: "z", OID: oidText}}
	spec := Spec{Limit: -1, Visible: 1, SortedBy: []SortKey{{Col: 1, Desc: true, NullsFirst: true}, {Col: 2}}, Aggs: []Agg{{Col: 0, Kind: AggArrayAgg}}}
	a := [][]string{{"{1}", "NULL", "b"}, {"{2}", "3", "a"}, {"{3}", "1", "NULL"}}
	b := [][]string{{"{4}", "NULL", "a"}, {"{5}", "3", "b"}, {"{6}", "2", "a"}}
	got := run(t, spec, cols, a, b)
	if want := [][]string{{"{4,1,2,5,6,3}"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestCollectDistinct: array_agg(DISTINCT x), count(DISTINCT x) …
// GROUP BY g, which shards run grouped by g and x and sorted by both:
// each x of a group is appended once, in x order, NULL last.
func TestCollectDistinct(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "array_agg", OID: 1007}, {Name: "count", OID: oidInt8}, {Name: "x", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 3, SortedBy: []SortKey{{Col: 0}, {Col: 3}},
		Aggs: []Agg{{Col: 1, Kind: AggArrayAgg, Distinct: true}, {Col: 2, Kind: AggCount, Distinct: true}}}
	a := [][]string{{"a", "{1}", "1", "1"}, {"a", "{3}", "1", "3"}, {"a", "{NULL}", "0", "NULL"}, {"b", "{2}", "1", "2"}}
	b := [][]string{{"a", "{1}", "1", "1"}, {"a", "{2}", "1", "2"}, {"a", "{NULL}", "0", "NULL"}, {"b", "{2}", "1", "2"}}
	got := run(t, spec, cols, a, b)
	if want := [][]string{{"a", "{1,2,3,NULL}", "3"}, {"b", "{2}", "1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// FuzzCollect feeds arbitrary partial results of every collecting and
// bit aggregate, in both formats, to the merge: it must answer or fail,
// never panic.
func FuzzCollect(f *testing.F) {
	f.Add(`{"a,b",NULL}`, `[1:1][2:3]={{7,8}}`, false)
	f.Add(binArray([]int{2}, i4(1), nil), binArray([]int{1, 1}, i4(1)), true)
	f.Add(`[1, {"a": 2}]`, `[]`, false)
	f.Add("\x01[1]", "\x01[null]", true)
	f.Add(`\x0102`, `\001`, false)
	f.Add("0101", "01", false)
	f.Add("\x00\x00\x00\x03\xa0", "\x00\x00\x00\x03\x40", true)
	kinds := []struct {
		kind AggKind
		oid  uint32
	}{{AggArrayAgg, 1007}, {AggArrayAgg, 1020}, {AggStringAgg, oidBytea}, {AggStringAgg, oidText}, {AggJSONAgg, oidJSON},
		{AggJSONBAgg, oidJSONB}, {AggBitAnd, oidInt4}, {AggBitOr, oidVarbit}, {AggBitXor, oidInt8}}
	f.Fuzz(func(t *testing.T, a, b string, bin bool) {
		format := int16(0)
		if bin {
			format = 1
		}
		for _, k := range kinds {
			cols := []Column{{Name: "agg", OID: k.oid, Format: format}, {Name: "extra", OID: oidBool}}
			agg := Agg{Col: 0, Kind: k.kind, SepCol: 1, StructCol: 1}
			if k.kind == AggStringAgg {
				cols[1] = Column{Name: "sep", OID: k.oid}
			}
			spec := Spec{Limit: -1, Visible: 1, Aggs: []Agg{agg}, SortedBy: []SortKey{{Col: 1}}}
			for _, sp := range []Spec{spec, {Limit: -1, Visible: 1, Aggs: []Agg{agg}}} {
				m, err := NewMerger(sp, cols, &bytes.Buffer{})
				if err != nil {
					continue
				}
				m.Run([]Rows{&rowsOf{rows: [][]string{{a, b}}}, &rowsOf{rows: [][]string{{b, a}, {a, "t"}}}})
			}
		}
	})
}

// TestGroupsStreamed: groups that arrive sorted by their key and that
// nothing reorders are sent as each completes, not once every shard has
// finished, so that a grouped string_agg holds one group at a time: by the
// time the shards are half read, the sink has rows.
func TestGroupsStreamed(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidInt8}, {Name: "string_agg", OID: oidText}, {Name: "sep", OID: oidText}, {Name: "y", OID: oidInt4}}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 2,
		SortedBy: []SortKey{{Col: 0}, {Col: 3}},
		Aggs:     []Agg{{Col: 1, Kind: AggStringAgg, SepCol: 2}}}
	value := strings.Repeat("x", 1000)
	shard := func(part int) [][]string {
		var rows [][]string
		for g := range 200 {
			rows = append(rows, []string{strconv.Itoa(g), value, ",", strconv.Itoa(part)})
		}
		return rows
	}
	var sink bytes.Buffer
	m, err := NewMerger(spec, cols, &sink)
	if err != nil {
		t.Fatal(err)
	}
	a, b := &rowsOf{rows: shard(0)}, &rowsOf{rows: shard(1)}
	sentEarly := -1
	watch := watchedRows{Rows: b, at: 100, seen: func() { sentEarly = sink.Len() }}
	if _, err := m.Run([]Rows{a, &watch}); err != nil {
		t.Fatal(err)
	}
	if sentEarly <= 0 {
		t.Errorf("nothing was sent before the shards were half read (%d bytes)", sentEarly)
	}
	got := decode(t, sink.Bytes())
	if len(got) != 200 || got[199][0] != "199" || got[0][1] != value+","+value {
		t.Fatalf("%d groups, last %v", len(got), got[len(got)-1][0])
	}
}

// watchedRows calls seen when row at is read.
type watchedRows struct {
	Rows
	n, at int
	seen  func()
}

func (w *watchedRows) Next() ([]byte, error) {
	if w.n++; w.n == w.at {
		w.seen()
	}
	return w.Rows.Next()
}
