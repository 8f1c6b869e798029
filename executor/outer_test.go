package executor

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// fakeEval evaluates "count + 1" over text parameters the way a server
// would, as int4, and drops the groups whose count is below min (HAVING).
type fakeEval struct {
	min   int64
	q     OuterQuery
	calls int
}

func (f *fakeEval) Eval(q OuterQuery, n int, params func(int) [][]byte, row func(int, [][]byte) error) ([]Field, error) {
	f.q = q
	for i := 0; i < n; i++ {
		f.calls++
		p := params(i)
		c, err := strconv.ParseInt(string(p[0]), 10, 64)
		if err != nil {
			return nil, err
		}
		if c < f.min {
			continue
		}
		if err := row(i, [][]byte{[]byte(strconv.FormatInt(c+1, 10))}); err != nil {
			return nil, err
		}
	}
	return []Field{{Name: "?column?", OID: oidInt4, Size: 4, Typmod: -1}}, nil
}

// described splits a merger's output into its messages.
func described(t *testing.T, b []byte) (desc []Field, rows [][]string) {
	t.Helper()
	r := wire.NewReader(bytes.NewReader(b), 4096, 1<<20)
	for {
		typ, _, body, err := r.Next()
		if err != nil {
			return desc, rows
		}
		switch typ {
		case 'T':
			if desc, err = parseFields(body); err != nil {
				t.Fatal(err)
			}
		case 'D':
			cols, err := SplitRow(body, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, textRow(cols))
		default:
			t.Fatalf("unexpected message %q", typ)
		}
	}
}

// TestMergeOuter: SELECT g, count(*) + 1 FROM t GROUP BY g HAVING …
// ORDER BY 2 DESC, with count(*) hidden in column 2 and a placeholder in
// column 1.
func TestMergeOuter(t *testing.T) {
	shardDesc := appendRowDescription(nil, []Field{
		{Name: "g", Table: 42, Attnum: 1, OID: oidText, Size: -1, Typmod: -1},
		{Name: "?column?", OID: oidInt8, Size: 8, Typmod: -1},
		{Name: "__shardgate_1", OID: oidInt8, Size: 8, Typmod: -1},
	})[5:]
	cols, err := ParseRowDescription(shardDesc)
	if err != nil {
		t.Fatal(err)
	}
	eval := &fakeEval{min: 2}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 2, Aggs: []Agg{{Col: 2, Kind: AggCount}},
		OrderBy: []SortKey{{Col: 1, Desc: true, NullsFirst: true}},
		Outer:   &Outer{SQL: "SELECT __shardgate_in.i1 + 1 FROM __shardgate_in", Inputs: []int{2}, Outputs: []int{1}, Eval: eval, Describe: true, Desc: shardDesc}}
	var buf bytes.Buffer
	m, err := NewMerger(spec, cols, &buf)
	if err != nil {
		t.Fatal(err)
	}
	n, err := m.Run([]Rows{
		&rowsOf{rows: [][]string{{"a", "NULL", "1"}, {"b", "NULL", "5"}, {"c", "NULL", "1"}}},
		&rowsOf{rows: [][]string{{"a", "NULL", "2"}, {"c", "NULL", "0"}, {"NULL", "NULL", "4"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	desc, rows := described(t, buf.Bytes())
	wantDesc := []Field{{Name: "g", Table: 42, Attnum: 1, OID: oidText, Size: -1, Typmod: -1}, {Name: "?column?", OID: oidInt4, Size: 4, Typmod: -1}}
	if !reflect.DeepEqual(desc, wantDesc) {
		t.Errorf("RowDescription %+v, want %+v", desc, wantDesc)
	}
	want := [][]string{{"b", "6"}, {"NULL", "5"}, {"a", "4"}} // c's count 1 fails HAVING
	if n != 3 || !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %v (%d), want %v", rows, n, want)
	}
	if eval.calls != 4 {
		t.Errorf("%d evaluations, want one per group", eval.calls)
	}
	wantQ := OuterQuery{SQL: "WITH __shardgate_in(i1) AS MATERIALIZED (SELECT $1) SELECT __shardgate_in.i1 + 1 FROM __shardgate_in",
		ParamOIDs: []uint32{oidInt8}, ParamFormats: []int16{0}, ResultFormats: []int16{0}}
	if !reflect.DeepEqual(eval.q, wantQ) {
		t.Errorf("query %+v, want %+v", eval.q, wantQ)
	}
}

// recordEval records the parameters it is given and returns one text
// column "x" for every group.
type recordEval struct {
	q      OuterQuery
	params [][]string
}

func (f *recordEval) Eval(q OuterQuery, n int, params func(int) [][]byte, row func(int, [][]byte) error) ([]Field, error) {
	f.q = q
	for i := 0; i < n; i++ {
		var p []string
		for _, v := range params(i) {
			p = append(p, string(v))
		}
		f.params = append(f.params, p)
		if err := row(i, [][]byte{[]byte("x")}); err != nil {
			return nil, err
		}
	}
	return []Field{{Name: "t", OID: oidText, Size: -1, Typmod: -1}}, nil
}

// TestMergeOuterAvg: avg(x), which shards return as an int8 sum, is
// passed to the outer statement as avg's numeric, and orders as numeric.
func TestMergeOuterAvg(t *testing.T) {
	cols := []Column{{Name: "g", OID: oidText}, {Name: "avg", OID: oidInt8}, {Name: "count", OID: oidInt8}, {Name: "t", OID: oidText}}
	eval := &recordEval{}
	spec := Spec{Limit: -1, GroupBy: []int{0}, Visible: 2, Aggs: []Agg{{Col: 1, Kind: AggAvg, SumCol: 1, CountCol: 2}},
		OrderBy: []SortKey{{Col: 1}, {Col: 3}},
		Outer:   &Outer{SQL: "SELECT …", Inputs: []int{1}, Outputs: []int{3}, Eval: eval}}
	// avg(a) = 21 / 2, avg(b) = 37 / 4: in text, "10.5…" would come first.
	got := run(t, spec, cols, [][]string{{"a", "20", "1", "NULL"}, {"b", "37", "4", "NULL"}}, [][]string{{"a", "1", "1", "NULL"}})
	want := [][]string{{"b", "9.2500000000000000"}, {"a", "10.5000000000000000"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if !reflect.DeepEqual(eval.q.ParamOIDs, []uint32{oidNumeric}) || !reflect.DeepEqual(eval.params, [][]string{{"10.5000000000000000"}, {"9.2500000000000000"}}) {
		t.Errorf("parameters %v typed %v, want avg's numeric", eval.params, eval.q.ParamOIDs)
	}
}

func TestTypmodCast(t *testing.T) {
	for _, tc := range []struct {
		oid    uint32
		typmod int32
		want   string
	}{
		{oidVarchar, 24, "::pg_catalog.varchar(20)"},
		{oidBPChar, 7, "::pg_catalog.bpchar(3)"},
		{oidNumeric, 10<<16 | 2 + 4, "::pg_catalog.numeric(10,2)"},
		{oidNumeric, 5<<16 | (-2 & 0x7ff) + 4, "::pg_catalog.numeric(5,-2)"},
		{oidTimestamp, 3, "::pg_catalog.timestamp(3)"},
		{oidTimestamptz, 0, "::pg_catalog.timestamptz(0)"},
		{oidVarchar, -1, ""},
		{oidText, 10, ""},
	} {
		if got := typmodCast(tc.oid, tc.typmod); got != tc.want {
			t.Errorf("typmodCast(%d, %d) = %q, want %q", tc.oid, tc.typmod, got, tc.want)
		}
	}
}

func TestOuterStatement(t *testing.T) {
	o := &Outer{SQL: "SELECT x", Inputs: []int{3, 1}}
	got := o.statement([]uint32{oidVarchar, oidInt8}, []int32{24, -1})
	if want := "WITH __shardgate_in(i1, i2) AS MATERIALIZED (SELECT $1::pg_catalog.varchar(20), $2) SELECT x"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&Outer{SQL: "SELECT FROM __shardgate_in WHERE random() > 0.5"}).statement(nil, nil); got != "WITH __shardgate_in AS MATERIALIZED (SELECT ) SELECT FROM __shardgate_in WHERE random() > 0.5" {
		t.Errorf("no inputs: %q", got)
	}
}

// script is a server's answers, in order.
func script(msgs ...[]byte) []byte { return bytes.Join(msgs, nil) }

func dataRow(vals ...string) []byte {
	cols := make([][]byte, len(vals))
	for i, v := range vals {
		if v != "NULL" {
			cols[i] = []byte(v)
		}
	}
	return wire.AppendDataRow(nil, cols)
}

// TestShardEval runs the outer statement against a scripted server: the
// first batch prepares, describes and executes; a group whose execution
// returns no row fails HAVING; groups larger than a batch go alone.
func TestShardEval(t *testing.T) {
	desc := appendRowDescription(nil, []Field{{Name: "r", OID: oidNumeric, Size: -1, Typmod: -1}})
	big := strings.Repeat("9", outerBatch)
	for _, tc := range []struct {
		name    string
		params  [][][]byte
		answers []byte
		rows    map[int]string
		syncs   int
		code    string
	}{
		{
			name:   "one batch",
			params: [][][]byte{{[]byte("1")}, {[]byte("2")}, {nil}},
			answers: script(wire.AppendParseComplete(nil), wire.AppendParameterDescription(nil, []uint32{oidInt8}), desc,
				wire.AppendBindComplete(nil), dataRow("0.5"), wire.AppendCommandComplete(nil, "SELECT 1"),
				wire.AppendBindComplete(nil), wire.AppendCommandComplete(nil, "SELECT 0"),
				wire.AppendBindComplete(nil), dataRow("NULL"), wire.AppendCommandComplete(nil, "SELECT 1"),
				wire.AppendReadyForQuery(nil, 'I')),
			rows:  map[int]string{0: "0.5", 2: "NULL"},
			syncs: 1,
		},
		{
			name:   "batches",
			params: [][][]byte{{[]byte(big)}, {[]byte(big)}},
			answers: script(wire.AppendParseComplete(nil), wire.AppendParameterDescription(nil, []uint32{oidInt8}), desc,
				wire.AppendBindComplete(nil), dataRow("1"), wire.AppendCommandComplete(nil, "SELECT 1"), wire.AppendReadyForQuery(nil, 'I'),
				wire.AppendBindComplete(nil), dataRow("2"), wire.AppendCommandComplete(nil, "SELECT 1"), wire.AppendReadyForQuery(nil, 'I')),
			rows:  map[int]string{0: "1", 1: "2"},
			syncs: 2,
		},
		{
			name:   "no groups",
			params: nil,
			answers: script(wire.AppendParseComplete(nil), wire.AppendParameterDescription(nil, []uint32{oidInt8}), desc,
				wire.AppendReadyForQuery(nil, 'I')),
			rows:  map[int]string{},
			syncs: 1,
		},
		{
			name:   "division by zero",
			params: [][][]byte{{[]byte("1")}, {[]byte("0")}, {[]byte("3")}},
			answers: script(wire.AppendParseComplete(nil), wire.AppendParameterDescription(nil, []uint32{oidInt8}), desc,
				wire.AppendBindComplete(nil), dataRow("1"), wire.AppendCommandComplete(nil, "SELECT 1"),
				wire.AppendBindComplete(nil), wire.AppendError(nil, wire.Errorf(wire.DivisionByZero, "division by zero")),
				wire.AppendReadyForQuery(nil, 'E')),
			code:  wire.DivisionByZero,
			syncs: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent bytes.Buffer
			srv := &pool.Server{R: wire.NewReader(bytes.NewReader(append(tc.answers, wire.AppendReadyForQuery(nil, 'I')...)), 1024, 1<<20),
				W: bufio.NewWriter(&sent), Params: map[string]string{}, Unnamed: []byte("client's")}
			r := NewShardRows(srv, io.Discard)
			r.status = 'I' // the fan-out statement's answer is read
			q := OuterQuery{SQL: "WITH … SELECT", ParamOIDs: []uint32{oidInt8}, ParamFormats: []int16{0}, ResultFormats: []int16{1}}
			got := map[int]string{}
			fields, err := shardEval{r}.Eval(q, len(tc.params), func(i int) [][]byte { return tc.params[i] },
				func(i int, vals [][]byte) error {
					if vals[0] == nil {
						got[i] = "NULL"
					} else {
						got[i] = string(vals[0])
					}
					return nil
				})
			if tc.code != "" {
				if e, ok := wire.AsError(err); !ok || e.Code != tc.code || srv.Broken || r.status != 'E' {
					t.Fatalf("err %v, broken %v, status %c: want %s on a usable server", err, srv.Broken, r.status, tc.code)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.rows) || len(fields) != 1 || fields[0].OID != oidNumeric {
					t.Fatalf("rows %v fields %+v, want %v", got, fields, tc.rows)
				}
			}
			if n := bytes.Count(sent.Bytes(), []byte{'S', 0, 0, 0, 4}); n != tc.syncs {
				t.Errorf("%d Syncs, want %d", n, tc.syncs)
			}
			if len(srv.Unnamed) != 0 {
				t.Error("the server's unnamed statement is still taken to be the client's")
			}
			if !bytes.HasPrefix(sent.Bytes(), appendParse(nil, q.SQL, q.ParamOIDs)) {
				t.Error("the first batch does not start with Parse")
			}
		})
	}
}
