package executor

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// pgValues returns values of type typ as PostgreSQL writes them in text
// and in binary, and how PostgreSQL compares each pair (want[i][j] is -1,
// 0 or 1 for values[i] against values[j], by the type's < and =).
func pgValues(t *testing.T, conn *pgx.Conn, typ string, values []string) (text, bin [][]byte, want [][]int) {
	t.Helper()
	ctx := context.Background()
	lit := arrayLiteral(values)
	rows, err := conn.Query(ctx, "SELECT s::"+typ+", s::"+typ+" FROM unnest($1::text[]) WITH ORDINALITY AS u(s, i) ORDER BY i",
		pgx.QueryResultFormats{0, 1}, lit)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		raw := rows.RawValues()
		text = append(text, append([]byte{}, raw[0]...))
		bin = append(bin, append([]byte{}, raw[1]...))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s %v: %v", typ, values, err)
	}
	want = make([][]int, len(values))
	for i := range want {
		want[i] = make([]int, len(values))
	}
	rows, err = conn.Query(ctx, `WITH v AS (SELECT s::`+typ+` AS v, i FROM unnest($1::text[]) WITH ORDINALITY AS u(s, i))
		SELECT a.i, b.i, CASE WHEN a.v < b.v THEN -1 WHEN a.v = b.v THEN 0 ELSE 1 END FROM v AS a, v AS b`, lit)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var i, j int
		var c int
		if err := rows.Scan(&i, &j, &c); err != nil {
			t.Fatal(err)
		}
		want[i-1][j-1] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return text, bin, want
}

// arrayLiteral writes a text[] literal whose elements are values.
func arrayLiteral(values []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// checkPairs compares every pair of values with f and fails where the
// sign differs from PostgreSQL's.
func checkPairs(t *testing.T, what string, values [][]byte, want [][]int, f compareFunc) {
	t.Helper()
	for i := range values {
		for j := range values {
			got, err := f(values[i], values[j])
			if err != nil {
				t.Fatalf("%s: compare %q %q: %v", what, values[i], values[j], err)
			}
			if got != want[i][j] {
				t.Errorf("%s: compare(%q, %q) = %d, PostgreSQL says %d", what, values[i], values[j], got, want[i][j])
			}
		}
	}
}

type typeCase struct {
	typ      string
	oid      uint32
	values   []string
	settings []string // each runs before, as its own subtest
}

var typeCases = []typeCase{
	{typ: "interval", oid: oidInterval, settings: []string{
		"SET IntervalStyle = postgres", "SET IntervalStyle = postgres_verbose",
		"SET IntervalStyle = sql_standard", "SET IntervalStyle = iso_8601",
	}, values: []string{
		"1 mon", "30 days", "720:00:00", "1 day", "24:00:00", "-1 day", "1 day -24:00:00", "1 year", "12 mons",
		"-1 year 2 mons", "1 mon -1 sec", "29 days 23:59:59.999999", "0", "00:00:00.000001", "-00:00:00.000001",
		"178000000 years", "-178000000 years", "2147483647 days", "-2147483648 days", "2562047788:00:54.775807",
		"-2562047788:00:54.775807", "1 year 2 mons 3 days 04:05:06.789", "-1 year -2 mons +3 days -04:05:06.789",
		"1.5 seconds", "1 minute", "-1 minute", "1 hour 1 second", "1 day 1 second", "-1 day +1 second",
		"1 year -1 day", "3 days 4 hours", "-3 days -4 hours", "0.5 seconds", "1.000001 seconds", "1 sec",
		"2 years -13 mons 1 day", "100 hours", "1 mon 1 day 1 hour", "-1 mon -1 day -1 hour",
	}},
	{typ: "inet", oid: oidInet, values: []string{
		"192.168.1.5", "192.168.1.5/24", "192.168.1.0/24", "192.168.1.0/25", "10.0.0.0/8", "10.0.0.1", "10.0.0.1/32",
		"0.0.0.0/0", "255.255.255.255", "::1", "::ffff:1.2.3.4", "fe80::1/64", "fe80::/64", "::/0", "2001:db8::/32",
		"2001:db8::1", "2001:db8::1/128", "1.2.3.4/31", "1.2.3.5/31", "128.0.0.0/1", "127.255.255.255",
	}},
	{typ: "cidr", oid: oidCidr, values: []string{
		"192.168.1.0/24", "192.168.1.0/25", "192.168.0.0/16", "10.0.0.0/8", "10.0.0.1/32", "0.0.0.0/0",
		"::/0", "2001:db8::/32", "2001:db8::1/128", "fe80::/10",
	}},
	{typ: "macaddr", oid: oidMacaddr, values: []string{"08:00:2b:01:02:03", "08:00:2b:01:02:04", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00", "08:00:2c:00:00:00", "a8:00:2b:01:02:03"}},
	{typ: "macaddr8", oid: oidMacaddr8, values: []string{"08:00:2b:01:02:03:04:05", "08:00:2b:01:02:03:04:06", "ff:ff:ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00:00:00", "08:00:2b:ff:fe:01:02:03"}},
	{typ: "bytea", oid: oidBytea, settings: []string{"SET bytea_output = hex", "SET bytea_output = escape"}, values: []string{
		`\x`, `\x00`, `\x0001`, `\x01`, `\xff`, `\x41`, "abc", "ab", `\x6162`, `\x5c`, `\x5c5c`, `\x7f`, `\x80`, `\x20`, `\x0a`,
	}},
	{typ: "bool", oid: oidBool, values: []string{"t", "f", "true", "false"}},
	{typ: "uuid", oid: oidUUID, values: []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12", "10000000-0000-0000-0000-000000000000"}},
	{typ: `"char"`, oid: oidChar, values: []string{"a", "A", `\200`, `\377`, "", `\`, " ", "z", `\177`}},
	{typ: "varbit", oid: oidVarbit, values: []string{"0", "1", "10", "01", "101010101", "", "11111111", "111111110", "1111111101", "00000000", "000000000"}},
	{typ: "bit(3)", oid: oidBit, values: []string{"000", "001", "010", "100", "111"}},
	{typ: "date", oid: oidDate, values: []string{
		"2024-01-02", "0001-01-01 BC", "0001-02-29 BC", "0002-01-01 BC", "10000-01-01", "5874897-12-31", "4713-11-24 BC",
		"infinity", "-infinity", "1999-12-31", "2000-01-01", "2000-02-29", "1900-03-01", "0001-01-01",
	}},
	{typ: "time", oid: oidTime, values: []string{"00:00", "24:00:00", "23:59:59.999999", "12:00:00.5", "12:00:00.05", "12:00", "00:00:00.000001"}},
	{typ: "timetz", oid: oidTimetz, values: []string{
		"12:00+00", "13:00+01", "11:00-01", "12:00:00+05:30", "06:30+00", "12:00+00:00:15", "24:00:00-15:59", "00:00+15:59",
		"12:00:00.5-03:30", "08:30-00:00",
	}},
	{typ: "timestamp", oid: oidTimestamp, values: []string{
		"2024-01-01 10:00:00", "2024-01-01 09:59:59.999999", "0001-01-01 00:00:00 BC", "0001-02-29 12:00:00 BC",
		"294276-12-31 23:59:59.999999", "4714-11-24 00:00:00 BC", "infinity", "-infinity", "2000-01-01 00:00:00",
		"1999-12-31 23:59:59.5", "2024-01-01 24:00:00",
	}},
	{typ: "timestamptz", oid: oidTimestamptz, settings: []string{
		"SET TimeZone = 'UTC'", "SET TimeZone = 'America/St_Johns'", "SET TimeZone = 'Europe/Amsterdam'", "SET TimeZone = 'Asia/Kolkata'",
	}, values: []string{
		"2024-11-03 01:30:00-04", "2024-11-03 01:10:00-05", "2024-01-01 00:00:00.5+00", "2024-01-01 00:00:00.25+00",
		"1900-01-01 00:00:00+00", "1890-06-01 12:00:00+00", "0044-03-15 12:00:00+00 BC", "infinity", "-infinity",
		"294276-12-31 23:59:59.999999+00", "2000-01-01 00:00:00+14",
	}},
	{typ: "money", oid: oidMoney, values: []string{"0", "1.00", "-1.00", "92233720368547758.07", "-92233720368547758.08", "0.01"}},
	{typ: "int4[]", oid: 1007, values: []string{
		"{}", "{1}", "{1,2}", "{1,NULL}", "{NULL}", "{NULL,1}", "{{1,2},{3,4}}", "[0:1]={1,2}", "{2}", "{1,2,3}",
		"{{1},{2}}", "{{1,2}}", "[2:3]={1,2}", "[0:0][1:2]={{1,2}}",
	}},
	{typ: "interval[]", oid: 1187, values: []string{"{}", `{"1 mon"}`, `{"30 days"}`, `{"1 mon","1 day"}`, `{NULL}`, `{"1 day",NULL}`}},
	{typ: "bytea[]", oid: 1001, values: []string{`{"\\x00"}`, `{"\\x0001"}`, `{"\\x"}`, `{abc}`, `{"\\xff",NULL}`}},
	{typ: "inet[]", oid: 1041, values: []string{`{10.0.0.1}`, `{10.0.0.0/8}`, `{::1}`, `{10.0.0.1,::1}`}},
}

// TestComparatorsAgainstPostgres checks each type's comparator, in text
// and binary formats, against PostgreSQL's < and = on every pair of
// values.
func TestComparatorsAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, tc := range typeCases {
		settings := tc.settings
		if settings == nil {
			settings = []string{"RESET ALL"}
		}
		for _, set := range settings {
			t.Run(tc.typ+"/"+set, func(t *testing.T) {
				if _, err := conn.Exec(ctx, "RESET ALL; "+set); err != nil {
					t.Fatal(err)
				}
				text, bin, want := pgValues(t, conn, tc.typ, tc.values)
				if tc.oid != oidMoney {
					f, err := comparator(tc.oid, 0)
					if err != nil {
						t.Fatal(err)
					}
					checkPairs(t, "text", text, want, f)
				}
				f, err := comparator(tc.oid, 1)
				if err != nil {
					t.Fatal(err)
				}
				checkPairs(t, "binary", bin, want, f)
			})
		}
	}
}

// TestTextReadsTheStoredValue checks that reading the text forms of
// intervals, dates and times gives exactly the value PostgreSQL stores
// (its binary form), in every IntervalStyle and time zone.
func TestTextReadsTheStoredValue(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, tc := range typeCases {
		var read func(text, bin []byte) (bool, error)
		switch tc.oid {
		case oidInterval:
			read = func(text, bin []byte) (bool, error) {
				x, err := textInterval(string(text))
				if err != nil {
					return false, err
				}
				y, err := binaryInterval(bin)
				return x == y, err
			}
		case oidDate:
			read = func(text, bin []byte) (bool, error) {
				x, err := textDate(string(text))
				y := int64(int32(binary.BigEndian.Uint32(bin)))
				switch y {
				case 1<<31 - 1:
					y = 1<<63 - 1
				case -1 << 31:
					y = -1 << 63
				}
				return x == y, err
			}
		case oidTimestamp, oidTimestamptz, oidTime:
			read = func(text, bin []byte) (bool, error) {
				var x int64
				var err error
				if tc.oid == oidTime {
					x, err = parseISOTime(string(text))
				} else {
					x, err = textTimestamp(string(text), tc.oid == oidTimestamptz)
				}
				return x == int64(binary.BigEndian.Uint64(bin)), err
			}
		case oidTimetz:
			read = func(text, bin []byte) (bool, error) {
				x, err := textTimetz(string(text))
				if err != nil {
					return false, err
				}
				y, err := binaryTimetz(bin)
				return x == y, err
			}
		default:
			continue
		}
		settings := tc.settings
		if settings == nil {
			settings = []string{"RESET ALL"}
		}
		for _, set := range settings {
			if _, err := conn.Exec(ctx, "RESET ALL; "+set); err != nil {
				t.Fatal(err)
			}
			text, bin, _ := pgValues(t, conn, tc.typ, tc.values)
			for i := range text {
				ok, err := read(text[i], bin[i])
				if err != nil || !ok {
					t.Errorf("%s, %s: %q reads as another value than %x (%v)", tc.typ, set, text[i], bin[i], err)
				}
			}
		}
	}
}

func TestOrderRefusals(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		fmt  int16
	}{
		{"money in text", oidMoney, 0},
		{"json", 114, 0},
		{"jsonb", 3802, 1},
		{"point", 600, 0},
		{"array of json", 199, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := comparator(tc.oid, tc.fmt); err == nil {
				t.Fatalf("type OID %d format %d: no error", tc.oid, tc.fmt)
			}
		})
	}
	// A user type (maybe an enum) without an OrderSource is refused.
	_, err := NewMerger(Spec{OrderBy: []SortKey{{Col: 0}}, Limit: -1}, []Column{{Name: "e", OID: 16390}}, new(strings.Builder))
	if err == nil {
		t.Fatal("user-defined type ordered without a catalog")
	}
	// Text in another collation without an OrderSource is refused.
	_, err = NewMerger(Spec{OrderBy: []SortKey{{Col: 0}}, Limit: -1, Collation: "en_US.UTF-8"}, []Column{{Name: "t", OID: oidText}}, new(strings.Builder))
	if err == nil {
		t.Fatal("text in en_US.UTF-8 ordered without a catalog")
	}
}

func TestTextArrayParse(t *testing.T) {
	tests := []struct {
		in     string
		elems  []string // "NULL" for NULL
		dims   []int
		lbound []int
	}{
		{"{}", nil, nil, nil},
		{"{a,b}", []string{"a", "b"}, []int{2}, []int{1}},
		{`{"a,b","c\"d",NULL,"NULL",""}`, []string{"a,b", `c"d`, "NULL", "'NULL'", ""}, []int{5}, []int{1}},
		{"{{1,2},{3,4},{5,6}}", []string{"1", "2", "3", "4", "5", "6"}, []int{3, 2}, []int{1, 1}},
		{"[0:1]={x,y}", []string{"x", "y"}, []int{2}, []int{0}},
		{"[-2:-1][3:3]={{x},{y}}", []string{"x", "y"}, []int{2, 1}, []int{-2, 3}},
	}
	for _, tc := range tests {
		a, err := textArray([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		var elems []string
		for _, e := range a.elems {
			switch {
			case e == nil:
				elems = append(elems, "NULL")
			case string(e) == "NULL":
				elems = append(elems, "'NULL'")
			default:
				elems = append(elems, string(e))
			}
		}
		if strings.Join(elems, "|") != strings.Join(tc.elems, "|") || len(elems) != len(tc.elems) ||
			!equalInts(a.dims, tc.dims) || !equalInts(a.lbound, tc.lbound) {
			t.Errorf("%s: elems %q dims %v lbound %v", tc.in, elems, a.dims, a.lbound)
		}
	}
	for _, bad := range []string{"", "{", "{a", "{a,}", "{,a}", `{"a}`, "[1:2]{a,b}", "{a}x"} {
		if _, err := textArray([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
