//go:build !noicu

package executor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestICUCollationKnownOrders checks orders that ICU's CLDR data fixes:
// lower case before upper in en-US, ä with a in German and after z in
// Swedish, and a case-insensitive nondeterministic collation.
func TestICUCollationKnownOrders(t *testing.T) {
	tests := []struct {
		locale        string
		deterministic bool
		in, want      []string
	}{
		{"en-US", true, []string{"b", "B", "a", "ab", "", "A"}, []string{"", "a", "A", "ab", "b", "B"}},
		{"de-DE", true, []string{"z", "ä", "a", "b"}, []string{"a", "ä", "b", "z"}},
		{"sv-SE", true, []string{"z", "ä", "a", "b"}, []string{"a", "b", "z", "ä"}},
		{"und", true, []string{"co-op", "coop", "co op", "Coop"}, []string{"co op", "co-op", "coop", "Coop"}},
	}
	for _, tc := range tests {
		t.Run(tc.locale, func(t *testing.T) {
			c, err := ICUCollation(tc.locale, tc.deterministic)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]byte, len(tc.in))
			for i, s := range tc.in {
				got[i] = []byte(s)
			}
			if err := c.Sort(got); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if string(got[i]) != tc.want[i] {
					t.Fatalf("sorted %q, want %q", got, tc.want)
				}
			}
		})
	}
	ci, err := ICUCollation("und-u-ks-level2", false)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := ci.Compare([]byte("abc"), []byte("ABC")); err != nil || d != 0 || ci.Deterministic() {
		t.Fatalf("case-insensitive compare(abc, ABC) = %d, %v; deterministic %v", d, err, ci.Deterministic())
	}
	cs, err := ICUCollation("und-u-ks-level2", true)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := cs.Compare([]byte("abc"), []byte("ABC")); err != nil || d != 1 {
		t.Fatalf("deterministic compare(abc, ABC) = %d, %v: want the strcmp tie-break, 1", d, err)
	}
}

// TestICUVersion checks the version string's shape (u_versionToString:
// dotted numbers, trailing zeros dropped, such as "153.120") and that the
// collators are cached per locale.
func TestICUVersion(t *testing.T) {
	if !ICUAvailable() {
		t.Fatal("built with ICU, but ICUAvailable is false")
	}
	c, err := ICUCollation("en-US", true)
	if err != nil {
		t.Fatal(err)
	}
	if v := c.ICUVersion(); !regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,3}$`).MatchString(v) {
		t.Fatalf("version %q", v)
	}
	d, err := ICUCollation("en-US", false)
	if err != nil || d.icu != c.icu {
		t.Fatalf("en-US opened twice (%v)", err)
	}
	if (Collation{}).ICUVersion() != "" {
		t.Fatal("byte order has an ICU version")
	}
}

// TestICUCollationAgainstPostgres compares text as PostgreSQL 15 does in
// an ICU database (en-US default) and in the ICU collations of
// pg_collation, every pair, in text and binary formats: after checking
// that the server's ICU gives each collation the proxy's version.
func TestICUCollationAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	if err := cl.Exec(ctx, "postgres", "CREATE DATABASE icu TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, "icu", "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, cl.DSN("icu"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tests := []struct {
		typ, coll, locale string
		deterministic     bool
	}{
		{"text", "", "en-US", true},
		{"varchar", "", "en-US", true},
		{"character(12)", "", "en-US", true},
		{"text", "de-x-icu", "de", true},
		{"text", "sv-x-icu", "sv", true},
		{"text", "und-x-icu", "und", true},
		{"text", "ci", "und-u-ks-level2", false},
	}
	for _, tc := range tests {
		name := tc.typ + " " + tc.coll
		t.Run(name, func(t *testing.T) {
			var version string
			q := "SELECT pg_database_collation_actual_version(oid) FROM pg_database WHERE datname = 'icu'"
			if tc.coll != "" {
				q = "SELECT pg_collation_actual_version(oid) FROM pg_collation WHERE collname = '" + tc.coll + "'"
			}
			if err := conn.QueryRow(ctx, q).Scan(&version); err != nil {
				t.Fatal(err)
			}
			coll, err := ICUCollation(tc.locale, tc.deterministic)
			if err != nil {
				t.Fatal(err)
			}
			if version != coll.ICUVersion() {
				t.Fatalf("the server's ICU gives %s version %s and the test's %s", tc.locale, version, coll.ICUVersion())
			}
			typ := tc.typ
			if tc.coll != "" {
				typ += ` COLLATE "` + tc.coll + `"`
			}
			values := slices.Concat(collationStrings, []string{"ABC", "abc", "Abc", "a\u0301", "á"})
			text, bin, want := pgValues(t, conn, typ, values)
			oid := map[string]uint32{"text": oidText, "varchar": oidVarchar, "character(12)": oidBPChar}[tc.typ]
			for _, f := range []struct {
				name   string
				format int16
				values [][]byte
			}{{"text", 0, text}, {"binary", 1, bin}} {
				cmp, err := orderedComparator(Column{Name: "v", OID: oid, Format: f.format}, ColumnOrder{Collation: coll})
				if err != nil {
					t.Fatal(err)
				}
				checkPairs(t, f.name, f.values, want, cmp)
			}
		})
	}
}

func BenchmarkICUCollation(b *testing.B) {
	en, err := ICUCollation("en-US", true)
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

// TestICUCollationShared compares on one collator from several goroutines
// at once, as the merges of concurrent clients do: each gets the answers
// one goroutine alone gets.
func TestICUCollationShared(t *testing.T) {
	c, err := ICUCollation("de-DE", true)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, len(collationStrings))
	for i := range collationStrings {
		want[i], _ = c.Compare([]byte(collationStrings[i]), []byte(collationStrings[(i+1)%len(collationStrings)]))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			t := &textCompare{coll: c}
			for range 200 {
				for i := range collationStrings {
					got, err := t.compare([]byte(collationStrings[i]), []byte(collationStrings[(i+1)%len(collationStrings)]))
					if err != nil || got != want[i] {
						errs <- fmt.Errorf("compare %q: %d, %v; want %d", collationStrings[i], got, err, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
