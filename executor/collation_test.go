package executor

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// collationStrings are ordered differently by byte order and by en_US:
// case, accents, punctuation and spaces, digits, scripts, and strings
// that strcoll says equal though their bytes differ (unassigned code
// points), whose order only the strcmp tie-break decides.
var collationStrings = []string{
	"a", "A", "b", "B", "ab", "Ab", "aB", "AB", "a b", "a-b", "a_b", "a.b", "ab-", "-ab", "ab ", " ab",
	"ába", "abá", "äb", "Äb", "æ", "ae", "ß", "ss", "ç", "c", "é", "e", "E", "è", "ê", "ë", "e\u0301", "ñ", "n",
	"1", "10", "2", "01", "1.5", "½", "", " ", "!", "?", "@", "$", "a\u00adb", "a\u200bb",
	"\u0378", "\u0379", "a\u0378", "a\u0379", "a\u0530", "x\u0557y", "x\u0378y",
	"日本", "本日", "Ωμέγα", "ωμέγα", "Привет", "привет", "😀", "🙂", "Zürich", "Zurich", "zebra", "Zebra",
	"co-op", "coop", "co op", "O'Brien", "OBrien", "o'brien",
}

// TestLibcCollationAgainstPostgres compares text the way PostgreSQL does
// in an en_US.UTF-8 database: text, varchar, character(n) (trailing
// spaces ignored), name and text[], every pair.
func TestLibcCollationAgainstPostgres(t *testing.T) {
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE coll TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, cl.DSN("coll"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SELECT pg_database_collation_actual_version(oid) FROM pg_database WHERE datname = 'coll'").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != LibcVersion() {
		t.Fatalf("the server's C library is %s and the test's %s: they may sort differently", version, LibcVersion())
	}
	en, err := LibcCollation("en_US.UTF-8")
	if err != nil {
		t.Fatal(err)
	}
	arrays := []string{}
	for i := 0; i+1 < len(collationStrings); i += 3 {
		arrays = append(arrays, arrayLiteral(collationStrings[i:i+2]), arrayLiteral(collationStrings[i:i+1]))
	}
	tests := []struct {
		typ    string
		oid    uint32
		coll   Collation
		values []string
	}{
		{"text", oidText, en, collationStrings},
		{"varchar", oidVarchar, en, collationStrings},
		{"character(12)", oidBPChar, en, collationStrings},
		{`text COLLATE "C"`, oidText, Collation{}, collationStrings},
		// A cast keeps its input's collation: text::name orders in
		// en_US, while a name column orders in C (the type's collation).
		{"name", oidName, en, collationStrings},
		{`name COLLATE "C"`, oidName, Collation{}, collationStrings},
		{"text[]", 1009, en, arrays},
	}
	for _, tc := range tests {
		t.Run(tc.typ, func(t *testing.T) {
			text, bin, want := pgValues(t, conn, tc.typ, tc.values)
			for _, f := range []struct {
				name   string
				format int16
				values [][]byte
			}{{"text", 0, text}, {"binary", 1, bin}} {
				cmp, err := orderedComparator(Column{Name: "v", OID: tc.oid, Format: f.format}, ColumnOrder{Collation: tc.coll})
				if err != nil {
					t.Fatal(err)
				}
				checkPairs(t, f.name, f.values, want, cmp)
			}
		})
	}
	if _, err := LibcCollation("xx_NO.SUCH-LOCALE"); err == nil {
		t.Error("a locale that does not exist opened")
	}
}

func BenchmarkLibcCollation(b *testing.B) {
	if !pgtest.HasLocale("en_US.UTF-8") {
		b.Skip("no en_US.UTF-8 locale")
	}
	en, err := LibcCollation("en_US.UTF-8")
	if err != nil {
		b.Fatal(err)
	}
	t := &textCompare{coll: en}
	x, y := []byte("Customer Name 00123 Zürich"), []byte("customer name 00124 Zurich")
	b.ReportAllocs()
	for b.Loop() {
		t.compare(x, y)
	}
}
