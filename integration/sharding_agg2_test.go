package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// sum and avg of interval and money across shards, over table ia, which
// the sharded databases shard by shard_key. Its 30 rows spread over every
// shard and every group but group 3, whose values are all NULL; intervals
// mix signs within and across months, days and microseconds.

const intervalAggTable = `CREATE TABLE ia (shard_key bigint, grp int, iv interval, m money)`

const intervalAggRows = `INSERT INTO ia SELECT i, i % 4,
	CASE WHEN i % 4 = 3 OR i % 6 = 0 THEN NULL
		ELSE make_interval(months => i % 5 - 2, days => 3 - i % 7, secs => i * 3723.25 * CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END) END,
	CASE WHEN i % 4 = 3 OR i % 5 = 0 THEN NULL
		ELSE (i * 1234.56 * CASE WHEN i % 3 = 0 THEN -1 ELSE 1 END)::numeric::money END
	FROM generate_series(1, 30) i`

// intervalAggQueries are run in each IntervalStyle.
var intervalAggQueries = []string{
	"SELECT sum(iv), avg(iv), sum(m), count(iv), count(m) FROM ia",
	"SELECT grp, sum(iv), avg(iv), sum(m), count(*) FROM ia GROUP BY grp ORDER BY grp",
	"SELECT shard_key % 3 AS k, avg(iv), sum(iv) FROM ia GROUP BY 1 ORDER BY 1",
	"SELECT grp, sum(iv), avg(iv), count(DISTINCT shard_key % 5) FROM ia GROUP BY grp ORDER BY grp",
}

func intervalAggScripts() []diffScript {
	styles := []string{}
	for _, style := range []string{"sql_standard", "postgres_verbose", "iso_8601"} {
		styles = append(styles, "SET IntervalStyle = "+style)
		styles = append(styles, intervalAggQueries...)
	}
	styles = append(styles, "RESET IntervalStyle")
	return []diffScript{
		{name: "sum and avg of interval and money", stmts: concat([]string{intervalAggTable, intervalAggRows}, intervalAggQueries, []string{
			"SELECT sum(iv), avg(iv), sum(m) FROM ia WHERE grp < 0",
			"SELECT grp, sum(iv), sum(m) FROM ia WHERE grp < 0 GROUP BY grp",
			"SELECT grp, avg(iv) FILTER (WHERE shard_key % 2 = 0) AS even, sum(m) FILTER (WHERE shard_key > 10) AS late, sum(iv) FILTER (WHERE false) AS none FROM ia GROUP BY grp ORDER BY grp",
			"SELECT grp, sum(iv) AS s FROM ia GROUP BY grp ORDER BY s DESC NULLS LAST",
			"SELECT grp, avg(iv) AS a FROM ia GROUP BY grp ORDER BY a NULLS FIRST LIMIT 2 OFFSET 1",
			"SELECT grp, sum(iv) * 2 AS twice, avg(iv) + interval '1 day' AS later, coalesce(sum(m), '0'::money) AS m0 FROM ia GROUP BY grp HAVING sum(iv) IS NOT NULL ORDER BY grp",
			"SELECT grp, count(*) FROM ia GROUP BY grp HAVING sum(iv) > interval '1 day' OR sum(m) < '0'::money ORDER BY grp",
			"SELECT DISTINCT sum(iv) IS NULL AS no_sum FROM ia GROUP BY grp ORDER BY 1",
			"SELECT avg(iv) FROM ia WHERE iv IS NULL",
			"SELECT avg(iv), sum(iv) FROM ia WHERE shard_key IN (1, 2, 4, 5, 7)",
			"SELECT sum(iv), avg(iv), count(DISTINCT grp) FROM ia",
			"SELECT sum(iv), avg(iv), count(DISTINCT grp) FROM ia WHERE false",
			"SELECT grp, sum(DISTINCT iv), avg(DISTINCT iv), count(DISTINCT iv) FROM ia GROUP BY grp ORDER BY grp",
			"SELECT grp, sum(iv), avg(iv), string_agg(shard_key::text, ',' ORDER BY shard_key) FROM ia GROUP BY grp ORDER BY grp",
		})},
		{name: "interval sums in every IntervalStyle", stmts: concat([]string{intervalAggTable, intervalAggRows}, styles)},
		intervalOverflowScript(),
	}
}

// intervalOverflowScript puts two rows on different shards of both
// sharded databases, so that each shard's sum is in range and only their
// total is not: the proxy's error is PostgreSQL's.
func intervalOverflowScript() diffScript {
	a, b := int64(-1), int64(-1)
	for id := int64(1); b < 0; id++ {
		switch {
		case a < 0:
			a = id
		case hashShard(id, 2) != hashShard(a, 2) && hashShard(id, 3) != hashShard(a, 3):
			b = id
		}
	}
	return diffScript{name: "interval and money overflow", stmts: []string{
		"CREATE TABLE io (shard_key bigint, mo interval, dd interval, us interval, edge interval, m money)",
		fmt.Sprintf(`INSERT INTO io VALUES
			(%d, '1500000000 mons', '1500000000 days', '1388888888 hours', '2147483000 mons -2147483000 days 9223372036000000 microseconds', '50000000000000000'),
			(%d, '1500000000 mons', '1500000000 days', '1388888888 hours', '647 mons -648 days 854775807 microseconds', '50000000000000000')`, a, b),
		"SELECT sum(mo) FROM io",
		"SELECT sum(dd) FROM io",
		"SELECT sum(us) FROM io",
		"SELECT avg(mo) FROM io",
		"SELECT sum(-dd) FROM io",
		"SELECT sum(m) FROM io",
		"SELECT sum(-m) FROM io",
		"SELECT sum(edge), avg(edge) FROM io",
		"SELECT sum(mo - interval '1500000000 mons'), sum(m - '50000000000000000'::money) FROM io",
		"SELECT shard_key, sum(mo), sum(m) FROM io GROUP BY shard_key ORDER BY shard_key",
		"SELECT sum(mo), count(DISTINCT shard_key) FROM io",
		"SELECT sum(us), array_agg(shard_key ORDER BY shard_key) FROM io",
		"SELECT sum(edge), avg(edge), count(DISTINCT shard_key) FROM io",
		"DROP TABLE io",
	}}
}

// intervalAggRefusals stay refused: with a DISTINCT aggregate the shards
// send a money sum per DISTINCT value, in a text the proxy cannot read.
var intervalAggRefusals = diffScript{
	name: "interval and money refusals",
	stmts: []string{
		intervalAggTable, intervalAggRows,
		"SELECT sum(m), count(DISTINCT grp) FROM ia",
		"DROP TABLE ia",
	},
	refusedOnTwo: map[int]string{
		2: refusal("sum() of money in text format is not supported across shards together with DISTINCT or ordered aggregates",
			"Ask for the binary result format, cast the sum to numeric, or route the query to one shard."),
	},
}

// TestAgg2IntervalDiff: sum(interval), avg(interval) and sum(money)
// answer as one PostgreSQL does over two and three shards, in every
// runner, IntervalStyle and result format, overflow errors included.
func TestAgg2IntervalDiff(t *testing.T) {
	checkGoroutines(t)
	scripts := intervalAggScripts()
	scripts[0].stmts = append(scripts[0].stmts, "DROP TABLE ia")
	scripts[1].stmts = append(scripts[1].stmts, "DROP TABLE ia")
	diffAll(t, newDiffEnv(t), append(scripts, intervalAggRefusals))
}

// TestAgg2IntervalBytes compares every byte of the answers, fields
// included, in text and binary result formats, on two and three shards.
func TestAgg2IntervalBytes(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startProxy(t, e.proxyConfig("transaction", 2))
	ref := pgConnect(t, ctx, e.cl.DSN("ref"))
	conns := map[string]*pgconn.PgConn{"two": pgConnect(t, ctx, p.AppURL("two")), "three": pgConnect(t, ctx, p.AppURL("three"))}
	for _, c := range []*pgconn.PgConn{ref, conns["two"], conns["three"]} {
		for _, sql := range []string{intervalAggTable, intervalAggRows} {
			if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	queries := append(rawQueries(intervalAggQueries), []struct {
		sql    string
		params []string
	}{
		{"SELECT grp, sum(iv) + interval '1 year -2 days', avg(iv), sum(m) FROM ia GROUP BY grp HAVING count(*) > $1 ORDER BY grp", []string{"3"}},
		{"SELECT sum(iv), avg(iv), sum(m) FROM ia WHERE grp = $1", []string{"-1"}},
		{"SELECT grp, sum(iv), avg(iv), count(DISTINCT iv) FROM ia GROUP BY grp ORDER BY grp", nil},
	}...)
	for _, db := range []string{"two", "three"} {
		for _, q := range queries {
			for _, format := range []int16{0, 1} {
				want, err := rawResult(ctx, ref, q.sql, q.params, format)
				if err != nil {
					t.Fatalf("ref %s: %v", q.sql, err)
				}
				got, err := rawResult(ctx, conns[db], q.sql, q.params, format)
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
	for _, c := range []*pgconn.PgConn{ref, conns["two"], conns["three"]} {
		if _, err := c.Exec(ctx, "DROP TABLE ia").ReadAll(); err != nil {
			t.Fatal(err)
		}
	}
}

// concat joins lists of statements into a new one.
func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
