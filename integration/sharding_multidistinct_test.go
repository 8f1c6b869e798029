package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DISTINCT aggregates of several values (and FILTERs) across shards, over
// table md, which the sharded databases shard by shard_key. Its rows are
// drawn from a seed (MULTIDISTINCT_SEED replays one): values from small
// domains, so that each is on several shards, with NULLs and extremes
// (int4 and int8 bounds, ±1e308, infinities and NaN). Every query is
// compared with one PostgreSQL holding the same rows, over two and three
// shards, in every runner of the differential harness (pgx exec modes, a
// row-limited Execute, lib/pq, psql, drivers) and byte for byte in text
// and binary results, RowDescription included.

const multiDistinctTable = `CREATE TABLE md (shard_key bigint, g int, h text, a int, b numeric(12,3), c float8, d bigint, s text, flag bool, iv interval)`

// multiDistinctQueries are run over every seed's rows.
var multiDistinctQueries = []string{
	"SELECT count(DISTINCT a), sum(DISTINCT b) FROM md",
	"SELECT g, count(DISTINCT a), count(DISTINCT b), sum(a) FROM md GROUP BY g ORDER BY g",
	"SELECT count(DISTINCT a), count(DISTINCT b), sum(d), count(*) FROM md WHERE false",
	"SELECT g, count(DISTINCT a), sum(DISTINCT b) FROM md WHERE false GROUP BY g",
	"SELECT count(DISTINCT a), count(DISTINCT a) FILTER (WHERE flag), count(DISTINCT a) FILTER (WHERE NOT flag) FROM md",
	"SELECT h, avg(DISTINCT a), avg(DISTINCT b), sum(DISTINCT c), sum(DISTINCT d), avg(DISTINCT d) FROM md GROUP BY h ORDER BY h",
	"SELECT g, count(DISTINCT h), min(c), max(h), bool_and(flag), bool_or(flag), count(DISTINCT d), sum(d) FROM md GROUP BY g ORDER BY g",
	"SELECT g, string_agg(DISTINCT s, ','), array_agg(DISTINCT a), count(DISTINCT b) FROM md GROUP BY g ORDER BY g",
	"SELECT array_agg(DISTINCT d), string_agg(DISTINCT h, '|'), count(DISTINCT c) FROM md",
	"SELECT g, count(DISTINCT a) - count(DISTINCT b) AS diff, count(DISTINCT a) * 10 + count(DISTINCT s) FROM md GROUP BY g ORDER BY g",
	"SELECT g, count(DISTINCT a) AS na FROM md GROUP BY g HAVING count(DISTINCT b) > 1 ORDER BY na DESC, g",
	"SELECT g, flag, count(DISTINCT a), sum(DISTINCT a), count(DISTINCT s) FROM md GROUP BY g, flag ORDER BY count(DISTINCT s), g, flag LIMIT 5 OFFSET 1",
	"SELECT g, count(DISTINCT g), count(DISTINCT a), sum(DISTINCT g) FROM md GROUP BY g ORDER BY 1",
	"SELECT a % 3 AS k, count(DISTINCT a), count(DISTINCT b), bit_xor(DISTINCT d) FROM md GROUP BY 1 ORDER BY 1",
	"SELECT bit_xor(DISTINCT a), bit_xor(DISTINCT g), count(DISTINCT c) FROM md",
	"SELECT DISTINCT count(DISTINCT a) > 1 AS many, count(DISTINCT flag) FROM md GROUP BY g ORDER BY 1, 2",
	"SELECT count(DISTINCT a) FILTER (WHERE g > 1), sum(DISTINCT b) FILTER (WHERE flag), avg(DISTINCT c) FILTER (WHERE c < 1e300), count(*) FROM md",
	"SELECT h, count(DISTINCT (a, d)), count(DISTINCT s) FROM md GROUP BY h ORDER BY h",
	"SELECT g, count(DISTINCT a), count(DISTINCT b), count(DISTINCT c), count(DISTINCT d), count(DISTINCT s), count(DISTINCT h) FROM md GROUP BY g ORDER BY g",
	"SELECT coalesce(sum(DISTINCT a), 0) + count(DISTINCT b) AS t, max(d) FROM md WHERE g IS NULL",
	"SELECT md.g, count(DISTINCT g), count(DISTINCT a) FROM md GROUP BY md.g ORDER BY 1",
	"SELECT g, a, count(DISTINCT g), count(DISTINCT md.a), sum(d) FROM md GROUP BY g, a ORDER BY 1, 2",
	"SELECT g, flag, count(DISTINCT g), count(DISTINCT flag), count(*) FROM md GROUP BY g, flag ORDER BY 1, 2",
	"SELECT g, sum(DISTINCT iv), avg(DISTINCT iv), count(DISTINCT iv), count(DISTINCT a), sum(iv) FROM md GROUP BY g ORDER BY g",
	"SELECT sum(DISTINCT iv), count(DISTINCT s), avg(iv) FROM md",
	// Row values: their sets group by the fields; (a, d) and (d, a) share
	// one; ROW(NULL, NULL) counts.
	"SELECT count(DISTINCT (a, d)), count(DISTINCT (d, a)), count(DISTINCT ROW(a, s)), count(DISTINCT s), count(*) FROM md",
	"SELECT g, count(DISTINCT (g, a)), count(DISTINCT (a, h)), count(DISTINCT b), sum(DISTINCT a) FROM md GROUP BY g ORDER BY g",
	"SELECT flag, count(DISTINCT (h, s)) FILTER (WHERE g > 1), count(DISTINCT (s, h, b)), count(DISTINCT h) FROM md GROUP BY flag ORDER BY 1",
	// Columns written with and without the only table's name or alias.
	"SELECT m.g, count(DISTINCT g), count(DISTINCT m.a), sum(DISTINCT b) FROM md m GROUP BY m.g ORDER BY 1",
	"SELECT public.md.h, count(DISTINCT md.h), count(DISTINCT public.md.a), count(DISTINCT (md.s, s)) FROM public.md GROUP BY h ORDER BY 1",
	"SELECT g, md.flag, count(DISTINCT md.g), count(DISTINCT flag), count(DISTINCT a) FROM md GROUP BY md.g, flag ORDER BY 1, 2",
	"SELECT m.g AS k, count(DISTINCT g), count(DISTINCT (m.g, a)), count(DISTINCT a) FROM md AS m GROUP BY k ORDER BY k",
	// More values than grouping sets the proxy asks of the shards.
	"SELECT count(DISTINCT a)" + manyDistinct(16) + " FROM md",
}

// manyDistinct is n more DISTINCT aggregates of different values.
func manyDistinct(n int) string {
	var b strings.Builder
	for k := range n {
		fmt.Fprintf(&b, ", count(DISTINCT a + %d)", k+1)
	}
	return b.String()
}

// multiDistinctRefusals stay refused across shards.
var multiDistinctRefusals = map[int]string{
	len(multiDistinctQueries) - 1: diffErr("ERROR", "0A000", "DISTINCT aggregates of more than 16 different values (or FILTERs) are not supported across shards",
		"The query has 17; each costs every shard one more grouping of all its rows.", hintOneShardText),
}

// multiDistinctSeed reads MULTIDISTINCT_SEED or draws one, and logs it
// when the test fails.
func multiDistinctSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MULTIDISTINCT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MULTIDISTINCT_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (MULTIDISTINCT_SEED=%d replays it)", seed, seed)
		}
	})
	return seed
}

// multiDistinctRows is the INSERT of a seed's rows.
func multiDistinctRows(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	var rows []string
	for i := range 150 + rng.IntN(100) {
		rows = append(rows, fmt.Sprintf("(%d, %s, %s, %s, %s, %s, %s, %s, %s, %s)", i+1,
			pick("1", "2", "3", "4", "NULL"),
			pick("'a'", "'B'", "'b'", "'ä'", "''", "'a b'", "NULL"),
			pick("-2147483648", "2147483647", "0", "1", "2", "3", "5", "8", "NULL", "NULL"),
			pick("1.5", "-0.001", "999999999.999", "0", "2.25", "7", "NULL"),
			pick("0.5", "-1e308", "1e308", "'Infinity'", "'-Infinity'", "'NaN'", "3.25", "NULL"),
			pick("9223372036854775807", "-9223372036854775808", "7", "42", "-3", "NULL"),
			pick("'x'", "'y'", "'z,w'", "''", "NULL"),
			pick("true", "false", "NULL"),
			// No two of these are equal: DISTINCT would keep either
			// spelling of '1 mon' and '30 days'.
			pick("'1 day'", "'-2 mons 3 days'", "'04:05:06.5'", "'1 year'", "'-00:00:01'", "NULL")))
	}
	return "INSERT INTO md VALUES " + strings.Join(rows, ", ")
}

// multiDistinctRandom are queries drawn from the seed: a group key, two
// to four DISTINCT aggregates of different values or FILTERs, plain
// aggregates, now and then a WHERE or HAVING.
func multiDistinctRandom(rng *rand.Rand, n int) []string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	distinct := []string{"count(DISTINCT a)", "count(DISTINCT b)", "count(DISTINCT c)", "count(DISTINCT h)", "count(DISTINCT s)",
		"sum(DISTINCT a)", "sum(DISTINCT b)", "sum(DISTINCT d)", "sum(DISTINCT c)", "avg(DISTINCT a)", "avg(DISTINCT b)", "avg(DISTINCT d)",
		"count(DISTINCT a) FILTER (WHERE flag)", "sum(DISTINCT b) FILTER (WHERE g > 2)", "string_agg(DISTINCT s, ';')", "array_agg(DISTINCT b)",
		"bit_xor(DISTINCT a)", "count(DISTINCT d) FILTER (WHERE h <> '')"}
	plain := []string{"count(*)", "sum(a)", "max(h)", "min(c)", "bool_and(flag)", "sum(d)", "max(DISTINCT s)", "count(b)"}
	var out []string
	for range n {
		key := pick("", "g", "h", "g, flag", "a % 3", "s")
		var items []string
		if key != "" {
			items = append(items, key)
		}
		perm := rng.Perm(len(distinct))
		for _, i := range perm[:2+rng.IntN(3)] {
			items = append(items, distinct[i])
		}
		for range rng.IntN(3) {
			items = append(items, pick(plain...))
		}
		sql := "SELECT " + strings.Join(items, ", ") + " FROM md"
		if rng.IntN(4) == 0 {
			sql += pick(" WHERE g <> 2", " WHERE flag", " WHERE d > 0", " WHERE a IS NULL")
		}
		if key != "" {
			sql += " GROUP BY " + key
			if rng.IntN(4) == 0 {
				sql += pick(" HAVING count(DISTINCT a) > 2", " HAVING count(DISTINCT s) < 3", " HAVING sum(DISTINCT b) > 0")
			}
			nk := len(strings.Split(key, ","))
			var order []string
			for i := range nk {
				order = append(order, strconv.Itoa(i+1))
			}
			sql += " ORDER BY " + strings.Join(order, ", ")
		}
		out = append(out, sql)
	}
	return out
}

// TestMultiDistinctDiff: DISTINCT aggregates of several values answer as
// one PostgreSQL does over two and three shards, in every runner.
func TestMultiDistinctDiff(t *testing.T) {
	checkGoroutines(t)
	seed := multiDistinctSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x3d157))
	stmts := concat([]string{multiDistinctTable, multiDistinctRows(rng)}, multiDistinctQueries, multiDistinctRandom(rng, 12), []string{"DROP TABLE md"})
	refused := map[int]string{}
	for i, msg := range multiDistinctRefusals {
		refused[i+2] = msg
	}
	diffAll(t, newDiffEnv(t), []diffScript{{name: "DISTINCT aggregates of several values", stmts: stmts, refusedOnTwo: refused}})
}

// TestMultiDistinctBytes compares every byte of the answers in text and
// binary results, with parameters, on two and three shards, and the
// table column each result column comes from: the shards' statement is
// the client's with columns appended, not a set operation (whose result
// columns name no table column).
func TestMultiDistinctBytes(t *testing.T) {
	checkGoroutines(t)
	seed := multiDistinctSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x3d157))
	e := newDiffEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startProxy(t, e.proxyConfig("transaction", 2))
	ref := pgConnect(t, ctx, e.cl.DSN("ref"))
	conns := map[string]*pgconn.PgConn{"two": pgConnect(t, ctx, p.AppURL("two")), "three": pgConnect(t, ctx, p.AppURL("three"))}
	rows := multiDistinctRows(rng)
	for _, c := range []*pgconn.PgConn{ref, conns["two"], conns["three"]} {
		for _, sql := range []string{multiDistinctTable, rows} {
			if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	var queries []struct {
		sql    string
		params []string
	}
	for i, q := range rawQueries(append(multiDistinctQueries, multiDistinctRandom(rng, 12)...)) {
		if _, refused := multiDistinctRefusals[i]; !refused {
			queries = append(queries, q)
		}
	}
	queries = append(queries, []struct {
		sql    string
		params []string
	}{
		{"SELECT g, h, count(DISTINCT a), count(DISTINCT b) FROM md GROUP BY g, h HAVING count(DISTINCT a) > $1 ORDER BY g, h", []string{"1"}},
		{"SELECT count(DISTINCT a), sum(DISTINCT b), avg(DISTINCT c) FROM md WHERE g = $1", []string{"3"}},
		{"SELECT h, count(DISTINCT a), sum(DISTINCT d) FROM md GROUP BY h ORDER BY h LIMIT $1 OFFSET $2", []string{"3", "1"}},
	}...)
	for _, db := range []string{"two", "three"} {
		for _, q := range queries {
			for _, format := range []int16{0, 1} {
				want, err := rawResultOrigin(ctx, ref, q.sql, q.params, format)
				if err != nil {
					t.Fatalf("ref %s: %v", q.sql, err)
				}
				got, err := rawResultOrigin(ctx, conns[db], q.sql, q.params, format)
				if err != nil {
					t.Errorf("%s format %d %s: %v", db, format, q.sql, err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s format %d %s:\n got  %q\n want %q", db, format, q.sql, got, want)
				}
			}
		}
	}
}

// rawResultOrigin is rawResult with, for each field, whether it names a
// table column and which (table OIDs differ between databases).
func rawResultOrigin(ctx context.Context, c *pgconn.PgConn, sql string, params []string, format int16) ([]byte, error) {
	sd, err := c.Prepare(ctx, "", sql, nil)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, f := range sd.Fields {
		out = fmt.Appendf(out, "field %s table %t attnum %d\n", f.Name, f.TableOID != 0, f.TableAttributeNumber)
	}
	res, err := rawResult(ctx, c, sql, params, format)
	return append(out, res...), err
}
