package querygen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestSameSeedSameQueries: a seed and an index name one query, whatever
// was generated before; another seed gives other queries; Data depends
// on its seed only.
func TestSameSeedSameQueries(t *testing.T) {
	g := Generator{Seed: 42}
	var first []Case
	for i := range 200 {
		first = append(first, g.Query(i))
	}
	for i := 199; i >= 0; i-- {
		if got := g.Query(i); !reflect.DeepEqual(got, first[i]) {
			t.Fatalf("query %d: %+v, then %+v", i, first[i], got)
		}
	}
	other := Generator{Seed: 43}
	same := 0
	for i := range first {
		if other.Query(i).SQL == first[i].SQL {
			same++
		}
	}
	if same > 20 {
		t.Errorf("seeds 42 and 43 give %d equal queries of %d", same, len(first))
	}
	if a, b := strings.Join(Data(7), ";"), strings.Join(Data(7), ";"); a != b {
		t.Error("Data(7) differs between calls")
	}
	if strings.Join(Data(7), ";") == strings.Join(Data(8), ";") {
		t.Error("Data(7) equals Data(8)")
	}
}

// TestQueriesCoverConstructs: the generator produces every construct of
// its brief in a few hundred queries, so that a differential run tests
// them all.
func TestQueriesCoverConstructs(t *testing.T) {
	g := Generator{Seed: 1}
	var all strings.Builder
	ordered, refusable := 0, 0
	const n = 1500
	for i := range n {
		c := g.Query(i)
		all.WriteString(c.SQL + "\n")
		if c.Ordered {
			ordered++
		}
		if c.MayRefuse != "" {
			refusable++
		}
	}
	text := all.String()
	for _, want := range []string{
		"count(*)", "count(DISTINCT ", "sum(", "avg(", "min(", "max(", "bool_and(", "bool_or(", "every(",
		"stddev", "var_",
		"FILTER (WHERE", "coalesce(sum(", "round(", "count(*)::int", "CASE WHEN", "::numeric - min(",
		"GROUP BY", "HAVING", "SELECT DISTINCT ", "SELECT DISTINCT ON (", "ORDER BY", " DESC", "NULLS FIRST",
		"NULLS LAST", "LIMIT", "OFFSET", "FETCH FIRST", "a.shard_key = ", "a.shard_key IN (", "= ANY(",
		" IS NULL", " IN (", "JOIN lookup", "LEFT JOIN", "JOIN events", "USING (shard_key)", "FROM events", "FROM lookup",
		" AS o", `COLLATE "C"`, "bool_or(",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no query of %d holds %q", n, want)
		}
	}
	if ordered < n/4 || ordered > n*3/4 {
		t.Errorf("%d of %d queries ordered totally", ordered, n)
	}
	if refusable == 0 || refusable > n/10 {
		t.Errorf("%d of %d queries may be refused", refusable, n)
	}
}

// TestQueriesRunOnPostgreSQL loads Schema and Data into a real
// PostgreSQL database in en_US.UTF-8 and runs generated queries: each
// must run without an error, but for the few errors the generator
// accepts because PostgreSQL raises them deterministically (division by
// zero in an aggregate expression over no rows). QUERYGEN_SEED replays a
// seed, QUERYGEN_QUERIES sets the number of queries (default 300).
func TestQueriesRunOnPostgreSQL(t *testing.T) {
	seed := envUint(t, "QUERYGEN_SEED", uint64(time.Now().UnixNano()))
	n := int(envUint(t, "QUERYGEN_QUERIES", 300))
	t.Logf("seed %d (QUERYGEN_SEED=%d replays it)", seed, seed)
	conn := loadedDatabase(t, seed)
	ctx := context.Background()
	g := Generator{Seed: seed}
	empty := 0
	for i := range n {
		c := g.Query(i)
		rows, err := conn.Query(ctx, c.SQL, pgx.QueryExecModeSimpleProtocol)
		count := 0
		if err == nil {
			for rows.Next() {
				count++
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil && !acceptedError(err) {
			t.Errorf("seed %d query %d: %v\n%s", seed, i, err, c.SQL)
		}
		if c.ParamSQL != "" {
			rows, perr := conn.Query(ctx, c.ParamSQL, c.Params...)
			if perr == nil {
				rows.Close()
				perr = rows.Err()
			}
			if (perr == nil) != (err == nil) || perr != nil && !acceptedError(perr) {
				t.Errorf("seed %d query %d with parameters %v: %v (%v without)\n%s", seed, i, c.Params, perr, err, c.ParamSQL)
			}
		}
		if count == 0 {
			empty++
		}
	}
	// Queries that all return nothing would prove little.
	if empty > n/2 {
		t.Errorf("seed %d: %d of %d queries returned no rows", seed, empty, n)
	}
}

// acceptedError reports whether err is one PostgreSQL raises the same
// way whatever order it reads rows in.
func acceptedError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012"
}

// loadedDatabase starts a cluster, creates a database in en_US.UTF-8 with
// Schema and Data(seed) and returns a connection to it.
func loadedDatabase(t *testing.T, seed uint64) *pgx.Conn {
	t.Helper()
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	if err := cl.Exec(ctx, "postgres", "CREATE DATABASE gen TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, "gen", Schema()); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, "gen", strings.Join(Data(seed), ";\n")); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, cl.DSN("gen"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil || n != tableNamed("items").rows {
		t.Fatalf("items holds %d rows (%v)", n, err)
	}
	return conn
}

// envUint reads an unsigned integer from the environment, or def.
func envUint(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("%s: %w", name, err))
	}
	return v
}

// TestGapsSwitch: a known gap's construct appears only when Gaps enables
// it, so that the differential test passes without it and reproduces the
// difference with it.
func TestGapsSwitch(t *testing.T) {
	gaps := map[string]func(Case) bool{}
	for gap, shows := range gaps {
		t.Run(gap, func(t *testing.T) {
			without, with := 0, 0
			for i := range 3000 {
				if shows(Generator{Seed: 3}.Query(i)) {
					without++
				}
				if shows(Generator{Seed: 3, Gaps: []string{gap}}.Query(i)) {
					with++
				}
			}
			if without != 0 || with == 0 {
				t.Errorf("%d of 3000 queries show it without the gap, %d with it", without, with)
			}
		})
	}
}
