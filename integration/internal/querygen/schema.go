package querygen

import "strings"

// family is what the generator may do with a value: which aggregates take
// it, which expressions apply to it, how its constants are written.
type family int

const (
	famInt       family = iota // int2, int4, int8
	famNumeric                 // numeric, any typmod
	famFloat                   // float8
	famBool                    // bool
	famText                    // text, varchar, in the database's default collation
	famChar                    // "char"
	famBytea                   // bytea
	famUUID                    // uuid
	famDate                    // date
	famTimestamp               // timestamp and timestamptz
	famInterval                // interval
	famInet                    // inet
	famEnum                    // the enum mood
	famIntArray                // int4[]
	famTextArray               // text[]
)

// column is one column of a generated table.
type column struct {
	name string
	typ  string
	fam  family
	// variant marks columns holding values that are equal but spelled
	// differently (numeric 1.0 and 1.00, interval '1 day' and '24:00:00').
	// Which spelling min/max, GROUP BY, DISTINCT or a tie in ORDER BY
	// shows depends on the order rows are read, on one server as across
	// shards (docs/routing.md "Limits"), so the generator never asks for
	// that: such a column is only projected, compared, counted and summed,
	// and ordered with its text as a tie-break.
	variant bool
	// values are the column's SQL literals; data draws rows from them, so
	// that groups and duplicates span shards, and queries compare with them.
	values []string
	// key marks the sharding key, shard_key.
	key bool
}

// table is a generated table; its alias qualifies every column a query
// names, so that joins need no disambiguation.
type table struct {
	name  string
	alias string
	cols  []column
	// rows is how many rows Data inserts.
	rows int
	// nulls is how often Data puts NULL in a nullable column, in percent.
	nulls int
}

var (
	int2Values = []string{"-32768", "32767", "0", "1", "-1", "2", "3", "7", "100"}
	int4Values = []string{"-2147483648", "2147483647", "0", "1", "-1", "5", "42", "1000"}
	int8Values = []string{"-9223372036854775808", "9223372036854775807", "0", "1", "-1", "10", "123456789012"}
	// numericValues spell equal values with different scales.
	numericValues = []string{"'1'", "'1.0'", "'1.00'", "'0'", "'0.000'", "'-2.5'", "'-2.50'", "'3.14159'",
		"'1e20'", "'-1e-10'", "'NaN'", "'Infinity'", "'-Infinity'", "'99999999999999999999.99999'"}
	// numeric3Values fit numeric(12,3), whose values all have scale 3.
	numeric3Values = []string{"'0'", "'1.5'", "'-1.5'", "'999999999.999'", "'-999999999.999'", "'0.001'", "'NaN'", "'2'"}
	// floatValues have no -0, which equals 0 with other bytes.
	floatValues = []string{"'0'", "'1.5'", "'-1.5'", "'1e308'", "'-1e308'", "'5e-324'", "'NaN'", "'Infinity'",
		"'-Infinity'", "'0.1'", "'3'"}
	// textValues sort differently in en_US.UTF-8 and in byte order.
	textValues = []string{"'a'", "'B'", "'b'", "'A'", "'é'", "'e'", "' a'", "''", "'ab'", "'a b'", "'Zürich'",
		"'zebra'", "'日本'", "'ß'", "'ss'", "'1'", "'10'", "'2'", "'co-op'", "'coop'"}
	charValues    = []string{`'a'`, `'B'`, `'b'`, `'é'`, `''`, `'~'`}
	byteaValues   = []string{`'\x'`, `'\x00'`, `'\xff'`, `'\x0001'`, `'\x61'`, `'\x6162'`, `'\xdeadbeef'`}
	uuidValues    = []string{"'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'7fffffff-0000-0000-0000-000000000001'"}
	dateValues    = []string{"'-infinity'", "'infinity'", "'2000-01-01'", "'1999-12-31'", "'2024-02-29'", "'0001-01-01'", "'0044-03-15 BC'"}
	tsValues      = []string{"'-infinity'", "'infinity'", "'2000-01-01 00:00:00'", "'2024-02-29 12:34:56.789'", "'1970-01-01'", "'2038-01-19 03:14:07.999999'"}
	tzValues      = []string{"'-infinity'", "'infinity'", "'2000-01-01 00:00:00+00'", "'2000-01-01 02:00:00+02'", "'2024-02-29 12:34:56.789-05'", "'1970-01-01 00:00:00+00'"}
	intervalVals  = []string{"'1 day'", "'24:00:00'", "'1 mon'", "'30 days'", "'0'", "'-1 day'", "'1 year 2 mons 3 days 04:05:06.789'", "'-00:00:01'", "'00:00:00.000001'"}
	inetValues    = []string{"'10.0.0.1'", "'10.0.0.1/8'", "'10.0.0.0/8'", "'192.168.1.5/24'", "'::1'", "'::ffff:1.2.3.4'", "'fe80::1/64'", "'0.0.0.0/0'"}
	moodValues    = []string{"'sad'", "'meh'", "'ok'", "'happy'"}
	intArrValues  = []string{"'{}'", "'{1}'", "'{1,2}'", "'{1,NULL}'", "'{NULL}'", "'{2,1}'", "'{1,2,3}'", "'[0:1]={1,2}'", "'{{1,2},{3,4}}'", "'{-2147483648}'"}
	textArrValues = []string{`'{}'`, `'{a}'`, `'{B}'`, `'{b}'`, `'{a,B}'`, `'{"",NULL}'`, `'{é}'`, `'{" a"}'`}
	// shardKeys has few values, so that many rows share a shard, and the
	// extremes of bigint; NULL keys go to shard 0.
	shardKeys = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
		"-9223372036854775808", "9223372036854775807", "0", "-1"}
	lookupCodes = []string{"-1", "0", "1", "2", "3", "7", "50"}
)

// tables are the generated schema: items and events, sharded by shard_key
// and co-located (joined on it), and lookup, an omni table joined to
// items on a small integer.
var tables = []table{
	{name: "items", alias: "a", rows: 300, nulls: 12, cols: []column{
		{name: "shard_key", typ: "bigint", fam: famInt, values: shardKeys, key: true},
		{name: "i2", typ: "int2", fam: famInt, values: int2Values},
		{name: "i4", typ: "int4", fam: famInt, values: int4Values},
		{name: "i8", typ: "int8", fam: famInt, values: int8Values},
		{name: "n", typ: "numeric", fam: famNumeric, values: numericValues, variant: true},
		{name: "n3", typ: "numeric(12,3)", fam: famNumeric, values: numeric3Values},
		{name: "f8", typ: "float8", fam: famFloat, values: floatValues},
		{name: "b", typ: "bool", fam: famBool, values: []string{"true", "false"}},
		{name: "tx", typ: "text", fam: famText, values: textValues},
		{name: "vc", typ: "varchar(12)", fam: famText, values: textValues[:12]},
		{name: "ch", typ: `"char"`, fam: famChar, values: charValues},
		{name: "bt", typ: "bytea", fam: famBytea, values: byteaValues},
		{name: "u", typ: "uuid", fam: famUUID, values: uuidValues},
		{name: "d", typ: "date", fam: famDate, values: dateValues},
		{name: "ts", typ: "timestamp", fam: famTimestamp, values: tsValues},
		{name: "tz", typ: "timestamptz", fam: famTimestamp, values: tzValues},
		{name: "iv", typ: "interval", fam: famInterval, values: intervalVals, variant: true},
		{name: "ip", typ: "inet", fam: famInet, values: inetValues},
		{name: "m", typ: "mood", fam: famEnum, values: moodValues},
		{name: "ia", typ: "int4[]", fam: famIntArray, values: intArrValues},
		{name: "ta", typ: "text[]", fam: famTextArray, values: textArrValues},
	}},
	{name: "events", alias: "e", rows: 120, nulls: 10, cols: []column{
		{name: "shard_key", typ: "bigint", fam: famInt, values: shardKeys, key: true},
		{name: "grp", typ: "int4", fam: famInt, values: []string{"1", "2", "3", "2147483647"}},
		{name: "amt", typ: "numeric(12,2)", fam: famNumeric, values: []string{"'0'", "'10.5'", "'-3.25'", "'9999999999.99'", "'0.01'"}},
		{name: "note", typ: "text", fam: famText, values: textValues[:8]},
		{name: "day", typ: "date", fam: famDate, values: dateValues[:5]},
	}},
	{name: "lookup", alias: "l", nulls: 0, cols: []column{
		{name: "code", typ: "int2", fam: famInt, values: lookupCodes},
		{name: "label", typ: "text", fam: famText, values: textValues[:6]},
		{name: "w", typ: "numeric(6,2)", fam: famNumeric, values: []string{"'1.50'", "'2.00'", "'-0.25'"}},
	}},
}

// tableNamed returns the table called name.
func tableNamed(name string) *table {
	for i := range tables {
		if tables[i].name == name {
			return &tables[i]
		}
	}
	panic("querygen: no table " + name) // the generator names only its own tables
}

// Schema is the DDL of the generated schema, for every database (the
// reference one and each shard): the enum mood (its labels' sort order
// differs from their creation order) and the three tables. Every table
// but lookup is sharded by its bigint column shard_key, which a proxy
// configuration names as `{ column: shard_key, type: bigint }`; lookup is
// omni.
func Schema() string {
	var b strings.Builder
	b.WriteString("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');\n")
	b.WriteString("ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok';\n")
	for _, t := range tables {
		b.WriteString("CREATE TABLE " + t.name + " (")
		if t.name == "lookup" {
			b.WriteString("id int8 PRIMARY KEY")
		} else {
			b.WriteString("id int8 NOT NULL")
		}
		for _, c := range t.cols {
			b.WriteString(", " + c.name + " " + c.typ)
		}
		b.WriteString(");\n")
	}
	return b.String()
}
