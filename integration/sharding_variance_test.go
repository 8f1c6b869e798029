package integration

import (
	"fmt"
	"strings"
	"testing"
)

// stddev and variance across shards (router/variance.go,
// executor/variance.go), over table sv, which the sharded databases shard
// by shard_key, compared with one PostgreSQL in every runner and result
// format. Integers and numerics (mixed display scales, negatives, large
// and tiny values, NULLs) must answer byte for byte. Float answers may
// differ in their last digits when a group's rows are on several shards
// (docs/routing.md, Limits): groups 0 to 3 compare them rounded. Groups
// 7 to 9 (floatGroupRows) compare them exactly: a group whose rows are
// all on one shard answers that shard's own result, and groups whose
// arithmetic is exact in any order combine exactly.
//
// Groups: 0 to 3 spread over every shard, 4 one row, 5 only NULLs, 6
// NaN and infinities, 7 to 9 float groups.

const varianceTable = `CREATE TABLE sv (shard_key bigint, grp int, i int, b bigint, n numeric, r real, d double precision)`

const varianceRows = `INSERT INTO sv SELECT k, k % 4,
	CASE WHEN k % 7 = 0 THEN NULL ELSE (k * 37) % 101 - 50 END,
	CASE WHEN k % 9 = 0 THEN NULL ELSE (k * 1234567890123457) * CASE WHEN k % 2 = 0 THEN -1 ELSE 1 END END,
	CASE WHEN k % 11 = 0 THEN NULL
		WHEN k = 13 THEN 1e30 + 0.5
		WHEN k = 17 THEN -0.00000000000000000001
		ELSE round((k * 1.234567)::numeric * CASE WHEN k % 3 = 0 THEN -1 ELSE 1 END, k % 6) END,
	CASE WHEN k % 5 = 0 THEN NULL ELSE (k % 6) * 0.5 END,
	CASE WHEN k % 8 = 0 THEN NULL ELSE (k % 3) * 2.0 - 1 END
	FROM generate_series(1, 40) k;
	INSERT INTO sv VALUES (101, 4, 7, 8, 9.25, 1.5, 2.5),
		(102, 5, NULL, NULL, NULL, NULL, NULL), (103, 5, NULL, NULL, NULL, NULL, NULL), (104, 5, NULL, NULL, NULL, NULL, NULL),
		(105, 6, 1, 1, 'NaN', 'Infinity', 1), (106, 6, 2, 2, 3.5, 1, '-Infinity'), (107, 6, 3, 3, 'Infinity', 2, 'NaN'),
		(108, 6, 4, 4, '-Infinity', 3, 4)`

var varianceQueries = []string{
	"SELECT stddev(i), stddev_samp(b), stddev_pop(n), variance(i), var_samp(n), var_pop(b) FROM sv WHERE grp < 6",
	"SELECT stddev_pop(i), var_pop(i), stddev(b), variance(b), stddev(n), variance(n), var_pop(n) FROM sv WHERE grp < 6",
	"SELECT grp, stddev(i), variance(n), var_pop(b), stddev_pop(n), var_samp(i) FROM sv GROUP BY grp ORDER BY grp",
	"SELECT grp, round(stddev(d)::numeric, 10), round(stddev_pop(d)::numeric, 10), round(variance(d)::numeric, 10), round(var_pop(d)::numeric, 10), " +
		"round(stddev(r)::numeric, 10), round(var_pop(r)::numeric, 10) FROM sv WHERE grp < 7 GROUP BY grp ORDER BY grp",
	"SELECT grp, stddev(d), stddev_pop(d), variance(d), var_pop(d), stddev(r), var_samp(r), stddev_pop(r) FROM sv WHERE grp > 3 GROUP BY grp ORDER BY grp",
	"SELECT grp, stddev(n), stddev(d), var_samp(r) FROM sv WHERE grp = 6 GROUP BY grp",
	"SELECT round(stddev(d)::numeric, 10), round(var_pop(r)::numeric, 10), round(stddev_pop(d)::numeric, 10) FROM sv WHERE grp < 6",
	"SELECT grp, count(*) FROM sv WHERE grp > 6 GROUP BY grp HAVING stddev(d) > 1 ORDER BY stddev(d) DESC",
	"SELECT grp, count(*) FROM sv GROUP BY grp HAVING stddev(n) > 10 ORDER BY grp",
	"SELECT grp, count(*) FROM sv GROUP BY grp HAVING variance(i) IS NULL OR var_pop(b) < 1e30 ORDER BY grp",
	"SELECT grp, var_pop(n) FROM sv GROUP BY grp ORDER BY var_pop(n) DESC NULLS LAST, grp",
	"SELECT grp, count(i) FROM sv GROUP BY grp ORDER BY stddev(b) NULLS FIRST, grp LIMIT 4",
	"SELECT grp, stddev(n) FILTER (WHERE shard_key % 2 = 0) AS even, var_samp(i) FILTER (WHERE false) AS none, variance(b) FILTER (WHERE i > 0) FROM sv GROUP BY grp ORDER BY 1",
	"SELECT grp, round(stddev(n), 2), coalesce(variance(i), 0), stddev(b) / nullif(avg(b), 0), round(stddev(d)::numeric, 9), stddev(i)::float8 FROM sv GROUP BY grp ORDER BY grp",
	"SELECT round(var_pop(n) * 2, 4) AS v, count(*) FROM sv WHERE grp < 4",
	"SELECT stddev(n), var_pop(d), variance(i), stddev_pop(b) FROM sv WHERE false",
	"SELECT grp, stddev(n) FROM sv WHERE false GROUP BY grp",
	"SELECT stddev(n), stddev_pop(n), var_samp(i), var_pop(i), stddev(d), stddev_pop(d), var_pop(r) FROM sv WHERE n = 9.25",
	"SELECT grp, stddev(n), var_pop(i), count(DISTINCT i) FROM sv GROUP BY grp ORDER BY grp",
	"SELECT grp, variance(n), stddev(b), count(DISTINCT i), count(DISTINCT b % 3) FROM sv GROUP BY grp ORDER BY grp",
	"SELECT grp, variance(i), string_agg(shard_key::text, ',' ORDER BY shard_key) FROM sv GROUP BY grp ORDER BY grp",
	"SELECT grp, stddev(n), var_samp(i) FROM sv GROUP BY ROLLUP (grp) ORDER BY grp NULLS FIRST",
	"SELECT DISTINCT stddev(n) IS NULL AS none FROM sv GROUP BY grp ORDER BY 1",
	"SELECT grp, stddev(i::numeric(10,3)), variance(n::numeric(40,2)), stddev(i::smallint), var_pop(b::numeric / 7) FROM sv WHERE grp < 6 GROUP BY grp ORDER BY grp",
	"SELECT stddev(grp::text) FROM sv",
	"SELECT variance(interval '1 day') FROM sv",
}

var varianceRefusals = diffScript{
	name: "stddev and variance refusals",
	stmts: []string{
		varianceTable, varianceRows,
		"SELECT stddev(DISTINCT n) FROM sv",
		"DROP TABLE sv",
	},
	refusedOnTwo: map[int]string{
		2: refusal("stddev(DISTINCT …) is not supported across shards",
			"Compute it over a subquery that returns each value once (SELECT stddev(x) FROM (SELECT DISTINCT x …) s), or route the statement to one shard with /* shard: N */ or SET shardgate.shard."),
	},
}

// floatGroupRows are the rows of groups 7 to 9, placed by their keys on
// the two- and three-shard databases: group 7 on shard 0 of both, with
// floats whose accumulator rounds; group 8 two rows on different shards
// of both, small integers, whose Sxx is exact in any order; group 9 equal
// values on every shard.
func floatGroupRows() string {
	var one, apart []int64
	for k := int64(1000); len(one) < 6 || len(apart) < 2; k++ {
		switch {
		case hashShard(k, 2) == 0 && hashShard(k, 3) == 0 && len(one) < 6:
			one = append(one, k)
		case len(apart) == 1 && hashShard(k, 2) != hashShard(apart[0], 2) && hashShard(k, 3) != hashShard(apart[0], 3):
			apart = append(apart, k)
		case len(apart) == 0:
			apart = append(apart, k)
		}
	}
	var rows []string
	for i, k := range one {
		rows = append(rows, fmt.Sprintf("(%d, 7, %d, NULL, NULL, %g, %s)", k, i, float64(i)/3, []string{"0.1", "0.7", "1e10/3", "-2.5e-3", "1/7.0", "123.456"}[i]))
	}
	rows = append(rows, fmt.Sprintf("(%d, 8, 1, 1, 1, 1.5, -3)", apart[0]), fmt.Sprintf("(%d, 8, 2, 2, 2, 4, 6)", apart[1]))
	for k := int64(2000); k < 2006; k++ {
		rows = append(rows, fmt.Sprintf("(%d, 9, 5, 5, 5.50, 0.25, -0.75)", k))
	}
	return "INSERT INTO sv VALUES " + strings.Join(rows, ", ")
}

// TestShardedVarianceDiff: stddev and variance answer as one PostgreSQL
// does over two and three shards, in every runner and result format.
func TestShardedVarianceDiff(t *testing.T) {
	checkGoroutines(t)
	scripts := []diffScript{
		{name: "stddev and variance", stmts: concat([]string{varianceTable, varianceRows, floatGroupRows()}, varianceQueries, []string{"DROP TABLE sv"})},
		varianceRefusals,
	}
	diffAll(t, newDiffEnv(t), scripts)
}
