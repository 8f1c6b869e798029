package integration

import (
	"fmt"
	"strings"
	"testing"
)

// corr, covar_pop, covar_samp and the regr_ aggregates across shards
// (router/regression.go, executor/regression.go), over table sr, which the
// sharded databases shard by shard_key, compared with one PostgreSQL in
// every runner and result format. regr_count is exact. The others may
// differ in their last digits when a group's rows are on several shards
// (docs/routing.md, Limits): groups 0 to 3 compare them rounded. Groups 4
// to 11 compare them exactly: a group whose rows are all on one shard
// answers that shard's own result, and groups whose arithmetic is exact
// in any order combine exactly. Group 12 holds NaN and infinities, whose
// NaN's sign bit may differ in the binary format: it compares text.
//
// Groups: 0 to 3 spread over every shard; 4 one row; 5 only NULLs; 6
// pairs with one side NULL; 7 on one shard; 8 two rows on different
// shards; 9 a vertical line (x equal), 10 a horizontal one (y equal), each
// two rows on different shards; 11 equal pairs on every shard; 12 NaN and
// infinities.

const regressionTable = `CREATE TABLE sr (shard_key bigint, grp int, y double precision, x double precision, i int, n numeric, r real)`

const regressionRows = `INSERT INTO sr SELECT k, k % 4,
	CASE WHEN k % 7 = 0 THEN NULL ELSE ((k * 37) % 101 - 50) / 4.0 END,
	CASE WHEN k % 5 = 0 THEN NULL ELSE (k % 13) * 1.5 - 3 + k / 8.0 END,
	CASE WHEN k % 9 = 0 THEN NULL ELSE (k * 7) % 23 - 11 END,
	CASE WHEN k % 11 = 0 THEN NULL ELSE round((k * 1.234567)::numeric, k % 4) END,
	CASE WHEN k % 6 = 0 THEN NULL ELSE (k % 6) * 0.5 END
	FROM generate_series(1, 40) k;
	INSERT INTO sr VALUES (101, 4, 2.5, 7, 3, 9.25, 1.5),
		(102, 5, NULL, NULL, NULL, NULL, NULL), (103, 5, NULL, NULL, NULL, NULL, NULL), (104, 5, NULL, NULL, NULL, NULL, NULL),
		(105, 6, 1, NULL, 1, NULL, 1), (106, 6, NULL, 2, NULL, 2, NULL), (107, 6, NULL, NULL, 3, 3, 3),
		(108, 12, 'NaN', 1, 1, 1, 1), (109, 12, 2, 'Infinity', 2, 2, 2), (110, 12, 3, 4, 3, 3, 3), (111, 12, '-Infinity', 5, 4, 4, 4)`

// apartKeys returns two keys from start up whose rows are on different
// shards of both the two- and the three-shard database.
func apartKeys(start int64) (int64, int64) {
	for k := start + 1; ; k++ {
		if hashShard(k, 2) != hashShard(start, 2) && hashShard(k, 3) != hashShard(start, 3) {
			return start, k
		}
	}
}

// regressionGroupRows are the rows of groups 7 to 11, placed by their
// keys on the two- and three-shard databases.
func regressionGroupRows() string {
	var one []int64
	for k := int64(1000); len(one) < 6; k++ {
		if hashShard(k, 2) == 0 && hashShard(k, 3) == 0 {
			one = append(one, k)
		}
	}
	var rows []string
	for i, k := range one {
		rows = append(rows, fmt.Sprintf("(%d, 7, %s, %s, %d, %d, %g)", k,
			[]string{"0.1", "0.7", "1e10/3", "-2.5e-3", "1/7.0", "123.456"}[i], []string{"1/3.0", "2.2", "-7.25", "1e-5", "3.3", "0.3"}[i], i, i, float64(i)/3))
	}
	for i, p := range [][2]string{{"1.5", "-3"}, {"4", "6"}, {"1", "2.5"}, {"3", "2.5"}, {"-4", "1"}, {"-4", "3"}} {
		a, b := apartKeys(int64(1200 + 100*(i/2)))
		k := a
		if i%2 == 1 {
			k = b
		}
		rows = append(rows, fmt.Sprintf("(%d, %d, %s, %s, %d, %d, %d)", k, 8+i/2, p[0], p[1], i, i, i))
	}
	for k := int64(2000); k < 2006; k++ {
		rows = append(rows, fmt.Sprintf("(%d, 11, 5, 5.5, 5, 5.50, 0.25)", k))
	}
	return "INSERT INTO sr VALUES " + strings.Join(rows, ", ")
}

// overflowRows are two rows of group 13 on different shards whose Sxx
// overflows when combined, as it does on one server.
func overflowRows() string {
	a, b := apartKeys(3000)
	return fmt.Sprintf("INSERT INTO sr VALUES (%d, 13, 0, 1e200, 0, 0, 0), (%d, 13, 0, -1e200, 0, 0, 0)", a, b)
}

// allRegressions are the twelve aggregates over (y, x).
const allRegressions = "corr(y, x), covar_pop(y, x), covar_samp(y, x), regr_avgx(y, x), regr_avgy(y, x), regr_count(y, x), " +
	"regr_intercept(y, x), regr_r2(y, x), regr_slope(y, x), regr_sxx(y, x), regr_sxy(y, x), regr_syy(y, x)"

// roundedRegressions are the same, rounded where the shards' rounding may
// show.
const roundedRegressions = "round(corr(y, x)::numeric, 10), round(covar_pop(y, x)::numeric, 8), round(covar_samp(y, x)::numeric, 8), " +
	"round(regr_avgx(y, x)::numeric, 10), round(regr_avgy(y, x)::numeric, 10), regr_count(y, x), round(regr_intercept(y, x)::numeric, 8), " +
	"round(regr_r2(y, x)::numeric, 10), round(regr_slope(y, x)::numeric, 10), round(regr_sxx(y, x)::numeric, 6), " +
	"round(regr_sxy(y, x)::numeric, 6), round(regr_syy(y, x)::numeric, 6)"

var regressionQueries = []string{
	"SELECT " + roundedRegressions + " FROM sr WHERE grp < 4",
	"SELECT grp, " + roundedRegressions + " FROM sr WHERE grp < 12 GROUP BY grp ORDER BY grp",
	"SELECT grp, " + allRegressions + " FROM sr WHERE grp BETWEEN 4 AND 11 GROUP BY grp ORDER BY grp",
	"SELECT " + allRegressions + " FROM sr WHERE grp = 4",
	"SELECT " + allRegressions + " FROM sr WHERE grp IN (5, 6)",
	"SELECT grp, corr(y, x)::text, regr_avgx(y, x)::text, regr_avgy(y, x)::text, regr_sxx(y, x)::text, regr_syy(y, x)::text, " +
		"regr_slope(y, x)::text, regr_intercept(y, x)::text, regr_count(y, x) FROM sr WHERE grp = 12 GROUP BY grp",
	"SELECT grp, round(corr(i, n)::numeric, 10), round(regr_slope(r, i)::numeric, 10), round(covar_samp(n, r)::numeric, 8), regr_count(i, n), " +
		"round(regr_sxy(n, i)::numeric, 4) FROM sr WHERE grp < 5 GROUP BY grp ORDER BY grp",
	"SELECT grp, count(*) FROM sr GROUP BY grp HAVING corr(y, x) > 0 ORDER BY grp",
	"SELECT grp, count(*) FROM sr WHERE grp < 12 GROUP BY grp HAVING regr_count(y, x) >= 2 AND regr_r2(y, x) IS NULL ORDER BY grp",
	"SELECT grp FROM sr WHERE grp < 12 GROUP BY grp HAVING regr_slope(y, x) < 0.5 OR regr_count(y, x) = 0 ORDER BY grp",
	"SELECT grp, regr_count(y, x) FROM sr WHERE grp < 12 GROUP BY grp ORDER BY regr_slope(y, x) NULLS FIRST, grp",
	"SELECT grp, round(regr_sxx(y, x)::numeric, 6) FROM sr WHERE grp < 12 GROUP BY grp ORDER BY round(regr_sxx(y, x)::numeric, 6) DESC NULLS LAST, grp LIMIT 5",
	"SELECT grp, round((corr(y, x) FILTER (WHERE shard_key % 2 = 0))::numeric, 10) AS even, regr_count(y, x) FILTER (WHERE false) AS none, " +
		"round((regr_sxx(y, x) FILTER (WHERE x > 3))::numeric, 6), covar_pop(y, x) FILTER (WHERE false), regr_count(y, x) FILTER (WHERE i > 0) " +
		"FROM sr WHERE grp < 12 GROUP BY grp ORDER BY 1",
	"SELECT grp, regr_avgx(y, x) FILTER (WHERE grp <> 7), covar_samp(y, x) FILTER (WHERE shard_key > 1000) FROM sr WHERE grp BETWEEN 4 AND 11 GROUP BY grp ORDER BY grp",
	"SELECT grp, round(coalesce(regr_slope(y, x), -1)::numeric, 9), regr_count(y, x) * 2 + count(*), " +
		"round((regr_sxy(y, x) / nullif(regr_sxx(y, x), 0))::numeric, 9), regr_r2(y, x) IS NULL, " +
		"round(regr_avgy(y, x)::numeric - avg(y)::numeric, 9) FROM sr WHERE grp < 12 GROUP BY grp ORDER BY grp",
	"SELECT round(regr_intercept(y, x)::numeric * 2, 6) AS v, regr_count(y, x) + 1 AS c FROM sr WHERE grp < 4",
	"SELECT corr(y, x), regr_count(y, x), regr_sxx(y, x), covar_samp(y, x) FROM sr WHERE false",
	"SELECT grp, regr_slope(y, x), regr_count(y, x) FROM sr WHERE false GROUP BY grp",
	"SELECT grp, round(corr(y, x)::numeric, 10), regr_count(y, x), count(DISTINCT i) FROM sr WHERE grp < 12 GROUP BY grp ORDER BY grp",
	"SELECT grp, round(regr_slope(y, x)::numeric, 10), regr_count(y, x), count(DISTINCT i), count(DISTINCT r) FROM sr WHERE grp < 12 GROUP BY grp ORDER BY grp",
	"SELECT grp, round(corr(y, x)::numeric, 10), regr_count(y, x) FROM sr WHERE grp < 12 GROUP BY ROLLUP (grp) ORDER BY grp NULLS FIRST",
	"SELECT corr(grp::text, grp::text) FROM sr",
	overflowRows(),
	"SELECT regr_sxx(y, x) FROM sr WHERE grp = 13",
	"SELECT regr_count(y, x), regr_avgy(y, x) FROM sr WHERE grp = 13",
}

var regressionRefusals = diffScript{
	name: "corr and regr_ refusals",
	stmts: []string{
		regressionTable, regressionRows,
		"SELECT corr(DISTINCT y, x) FROM sr",
		"SELECT regr_count(DISTINCT y, x) FROM sr",
		"DROP TABLE sr",
	},
	refusedOnTwo: map[int]string{
		2: refusal("corr(DISTINCT …) is not supported across shards", regressionDistinctHint),
		3: refusal("regr_count(DISTINCT …) is not supported across shards", regressionDistinctHint),
	},
}

const regressionDistinctHint = "Compute it over a subquery that returns each pair once (SELECT corr(y, x) FROM (SELECT DISTINCT y, x …) s), or route the statement to one shard with /* shard: N */ or SET shardgate.shard."

// TestShardedRegressionDiff: corr, covar_ and regr_ answer as one
// PostgreSQL does over two and three shards, in every runner and result
// format.
func TestShardedRegressionDiff(t *testing.T) {
	checkGoroutines(t)
	scripts := []diffScript{
		{name: "corr, covar and regr", stmts: concat([]string{regressionTable, regressionRows, regressionGroupRows()}, regressionQueries, []string{"DROP TABLE sr"})},
		regressionRefusals,
	}
	diffAll(t, newDiffEnv(t), scripts)
}
