package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Collecting aggregates (string_agg, array_agg, json_agg, jsonb_agg),
// bit_and/bit_or/bit_xor and window functions partitioned by the sharding
// key, over table oa, which the two-shard database shards by shard_key.
// Rows 1 to 40 spread over both shards and every group; ord is unique, so
// that every ORDER BY inside an aggregate is a total order and one
// PostgreSQL's answer is the only right one.

const orderAggTable = `CREATE TABLE oa (shard_key bigint, grp int, ord int, t text, sep text, n numeric, u uuid,
	ts timestamptz, b bytea, bits bit(4), vb varbit, j jsonb, arr int[], tarr text[])`

const orderAggRows = `INSERT INTO oa SELECT i % 7, i % 3, i,
	CASE i % 8 WHEN 0 THEN 'a,b' WHEN 1 THEN '"q"' WHEN 2 THEN '' WHEN 3 THEN 'NULL' WHEN 4 THEN 'sp ace'
		WHEN 5 THEN 'back\slash' WHEN 6 THEN NULL ELSE 'plain' || i END,
	CASE WHEN i % 5 = 0 THEN NULL WHEN i % 2 = 0 THEN ';' ELSE ', ' END,
	i / 4.0, md5(i::text)::uuid, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 hour 1 second',
	decode(lpad(to_hex(i), 2, '0'), 'hex'), (i % 16)::bit(4), (i % 16)::bit(4)::varbit,
	jsonb_build_object('i', i, 'odd', i % 2 = 1, 'nested', jsonb_build_array(i, 'x')),
	ARRAY[i, NULLIF(i % 4, 0)], ARRAY[CASE WHEN i % 3 = 0 THEN NULL ELSE 'e{' || i || '}' END, 'x y']
	FROM generate_series(1, 40) i`

var orderAggScripts = []diffScript{
	{name: "string_agg", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT string_agg(t, ',' ORDER BY ord) FROM oa",
		"SELECT grp, string_agg(t, '|' ORDER BY ord DESC), count(*), sum(ord), min(t), max(ord), avg(ord), count(t), bool_and(ord > 2) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT grp, string_agg(t, sep ORDER BY ord) AS per_row_separators FROM oa GROUP BY grp ORDER BY grp",
		"SELECT string_agg(t, NULL ORDER BY ord DESC) FROM oa WHERE ord < 12",
		"SELECT string_agg(t, ',' ORDER BY ord) FILTER (WHERE ord % 2 = 0) AS even, string_agg(t, ',' ORDER BY ord) FILTER (WHERE ord > 100) AS none FROM oa",
		"SELECT string_agg(t, ',' ORDER BY ord), count(*), sum(ord) FROM oa WHERE ord < 0",
		"SELECT string_agg(t, ',' ORDER BY t NULLS FIRST, ord) AS by_text FROM oa",
		"SELECT string_agg(t, ',' ORDER BY t DESC NULLS LAST, ord DESC) AS by_text_desc, count(*) FROM oa",
		"SELECT grp, string_agg(b, ',' ORDER BY ord) AS b1, string_agg(b, '\\x2c00'::bytea ORDER BY ord) AS b2, string_agg(b, NULL ORDER BY ord) AS b3 FROM oa GROUP BY grp ORDER BY 1",
		"SELECT string_agg(b, '' ORDER BY ord) FROM oa WHERE ord > 100",
		"SET bytea_output = escape",
		"SELECT grp, string_agg(b, '\\x5c00'::bytea ORDER BY ord), string_agg(b || '\\x5c'::bytea, NULL ORDER BY ord) FROM oa GROUP BY grp ORDER BY 1",
		"RESET bytea_output",
		"SELECT ord, string_agg(t, ','), array_agg(t), json_agg(t), jsonb_agg(t) FROM oa GROUP BY ord ORDER BY ord LIMIT 9",
		"DROP TABLE oa",
	}},
	{name: "array_agg", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT array_agg(ord ORDER BY ord) FROM oa",
		"SELECT grp, array_agg(t ORDER BY ord) AS quoted FROM oa GROUP BY grp ORDER BY grp",
		"SELECT grp, array_agg(ord ORDER BY t DESC NULLS FIRST, ord) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT array_agg(n ORDER BY ord) AS numerics, array_agg(u ORDER BY ord) AS uuids, array_agg(ts ORDER BY ord) AS times FROM oa WHERE ord <= 10",
		"SELECT array_agg(arr ORDER BY ord) AS two_dim, array_agg(tarr ORDER BY ord) AS text_two_dim FROM oa WHERE ord <= 9",
		"SELECT array_agg('[2:3]={7,8}'::int[] ORDER BY ord) FROM oa WHERE ord <= 5",
		"SELECT array_agg(bits ORDER BY ord), array_agg(vb ORDER BY ord), array_agg(j ORDER BY ord) FROM oa WHERE grp = 2 AND ord < 20",
		"SELECT array_agg(ord ORDER BY ord) FILTER (WHERE t IS NULL), array_agg(ord ORDER BY ord) FILTER (WHERE false) FROM oa",
		"SELECT shard_key, array_agg(ord ORDER BY ord), array_agg(t ORDER BY ord) FILTER (WHERE grp = 1) FROM oa GROUP BY shard_key ORDER BY shard_key",
		"SELECT array_agg(ord ORDER BY ord) FROM oa WHERE ord < 0",
		"SELECT array_agg(CASE WHEN ord <= 2 THEN ARRAY[ord] ELSE ARRAY[ord, ord] END ORDER BY ord) FROM oa WHERE ord <= 4",
		"DROP TABLE oa",
	}},
	{name: "json_agg and jsonb_agg", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT json_agg(ord ORDER BY ord) AS ints, json_agg(t ORDER BY ord) AS texts FROM oa WHERE ord <= 12",
		"SELECT json_agg(t ORDER BY ord DESC NULLS LAST) AS texts FROM oa WHERE ord <= 12",
		"SELECT grp, json_agg(arr ORDER BY ord) AS arrays, json_agg(ROW(ord, t) ORDER BY ord) AS records FROM oa WHERE ord <= 15 GROUP BY grp ORDER BY grp",
		"SELECT json_agg(oa ORDER BY ord) FROM oa WHERE ord <= 6",
		"SELECT json_agg(CASE WHEN ord % 2 = 0 THEN arr END ORDER BY ord) AS arrays_and_nulls FROM oa WHERE ord <= 8",
		"SELECT json_agg(j ORDER BY ord) AS jsonb_values, json_agg(to_json(t) ORDER BY ord) AS json_values FROM oa WHERE ord <= 8",
		"SELECT json_agg_strict(t ORDER BY ord), jsonb_agg_strict(t ORDER BY ord) FROM oa WHERE ord <= 16",
		"SELECT jsonb_agg(j ORDER BY ord) AS objects, jsonb_agg(t ORDER BY ord) AS texts, jsonb_agg(n ORDER BY ord) AS numbers FROM oa WHERE grp = 1",
		"SELECT grp, jsonb_agg(oa ORDER BY ord) FILTER (WHERE ord < 7) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT json_agg(ord ORDER BY ord), jsonb_agg(ord ORDER BY ord) FROM oa WHERE false",
		"DROP TABLE oa",
	}},
	{name: "collecting aggregates with others and expressions", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT grp, array_length(array_agg(ord ORDER BY ord), 1) AS len, string_agg(t, ',' ORDER BY ord) || '!' AS bang, count(*) * 2 AS twice FROM oa GROUP BY grp HAVING count(*) > 5 ORDER BY grp",
		"SELECT grp, count(*) FROM oa GROUP BY grp HAVING string_agg(t, ',' ORDER BY ord) LIKE '%plain7%' ORDER BY grp",
		"SELECT grp, string_agg(t, ',' ORDER BY ord) AS s FROM oa GROUP BY grp ORDER BY s DESC",
		"SELECT (array_agg(ord ORDER BY ord))[1:3] AS top3, (array_agg(t ORDER BY ord))[2] AS second FROM oa",
		"SELECT 'all' AS scope, string_agg(t, ',' ORDER BY ord) FILTER (WHERE grp = 0) FROM oa WHERE ord > 30",
		"SELECT shard_key, count(DISTINCT grp), length(string_agg(t, ',')) AS len, array_length(array_agg(ord), 1) AS n FROM oa GROUP BY shard_key ORDER BY 1",
		"SELECT grp, array_agg(ord ORDER BY ord) FROM oa GROUP BY grp ORDER BY grp LIMIT 2 OFFSET 1",
		"SELECT DISTINCT count(*) % 2 AS parity, min(ord) FROM oa GROUP BY grp ORDER BY 1, 2",
		"SELECT string_agg(DISTINCT t, ','), array_agg(DISTINCT t ORDER BY t), count(DISTINCT t), json_agg(DISTINCT t), jsonb_agg(DISTINCT t) FROM oa",
		"SELECT grp, array_agg(DISTINCT shard_key), count(DISTINCT shard_key), count(*) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT grp, array_agg(DISTINCT n) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT grp, string_agg(DISTINCT b, '\\x00'::bytea) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT array_agg(DISTINCT ord) FROM oa WHERE ord < 0",
		"DROP TABLE oa",
	}},
	{name: "bit aggregates", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT bit_and(ord), bit_or(ord), bit_xor(ord), bit_and(ord::int2), bit_or(ord::int2), bit_xor(ord::int8 * 1000000000000) FROM oa",
		"SELECT grp, bit_and(bits), bit_or(bits), bit_xor(bits), bit_and(vb), bit_or(vb), bit_xor(vb) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT bit_and(ord) FILTER (WHERE ord % 2 = 1), bit_or(bits) FILTER (WHERE false) FROM oa",
		"SELECT bit_xor(-ord) FROM oa WHERE grp = 1",
		"DROP TABLE oa",
	}},
	{name: "window functions partitioned by the key", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT shard_key, ord, row_number() OVER (PARTITION BY shard_key ORDER BY ord), sum(ord) OVER w, lag(t) OVER w FROM oa WINDOW w AS (PARTITION BY shard_key ORDER BY ord) ORDER BY ord",
		"SELECT shard_key, grp, ord, rank() OVER (PARTITION BY grp, shard_key ORDER BY ord DESC) AS r FROM oa ORDER BY r, shard_key, grp LIMIT 5 OFFSET 2",
		"SELECT ord, count(*) OVER (PARTITION BY oa.shard_key) FROM oa ORDER BY ord DESC LIMIT 4",
		"SELECT ord, first_value(t) OVER (w ORDER BY ord ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM oa WINDOW w AS (PARTITION BY shard_key) ORDER BY ord LIMIT 6",
		"SELECT ord FROM oa ORDER BY row_number() OVER (PARTITION BY shard_key ORDER BY ord DESC), ord LIMIT 7",
		"SELECT shard_key, count(*), stddev(ord), string_agg(t, ',' ORDER BY ord), rank() OVER (PARTITION BY shard_key ORDER BY count(*)) FROM oa GROUP BY shard_key ORDER BY shard_key",
		"SELECT shard_key, grp, count(*), sum(count(*)) OVER (PARTITION BY shard_key ORDER BY grp) FROM oa GROUP BY 1, grp HAVING count(*) > 1 ORDER BY 1, 2 LIMIT 10 OFFSET 2",
		"DROP TABLE oa",
	}},
	// jsonb_object_agg merges the shards' partial objects, jsonb's key
	// order; json_object_agg's pairs come in the shards' order, which
	// PostgreSQL leaves open too: compared through jsonb or its length.
	{name: "json_object_agg and jsonb_object_agg over all shards", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT jsonb_object_agg(ord, t) FROM oa",
		"SELECT grp, jsonb_object_agg(coalesce(t, '~') || ord, n) FROM oa GROUP BY grp ORDER BY grp",
		"SELECT grp, jsonb_object_agg(ord, u) FILTER (WHERE ord % 5 = 0), jsonb_object_agg(ord * 100, j) FROM oa WHERE ord < 30 GROUP BY grp ORDER BY grp",
		`SELECT jsonb_object_agg(ord::text || 'x', arr), jsonb_object_agg(E'k\n\"' || ord, tarr) FROM oa WHERE ord % 3 = 1`,
		"SELECT json_object_agg(ord, t)::jsonb, length(json_object_agg(ord, u)::text) FROM oa",
		"SELECT grp, json_object_agg(ord, n)::jsonb AS o FROM oa GROUP BY grp HAVING count(*) > 1 ORDER BY grp",
		"SELECT jsonb_object_agg(ord, t), json_object_agg(ord, t) FROM oa WHERE ord < 0",
		"SELECT jsonb_object_agg(t, ord) FROM oa",
		"DROP TABLE oa",
	}},
	// Windows over the whole result that the proxy computes from the
	// merged rows (router/proxywindow.go).
	{name: "row numbers, ranks and totals over all shards", stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT ord, row_number() OVER (ORDER BY ord) FROM oa",
		"SELECT ord, grp, rank() OVER (ORDER BY grp DESC), dense_rank() OVER (ORDER BY grp DESC) FROM oa ORDER BY grp DESC, ord",
		"SELECT ord, row_number() OVER w, rank() OVER w, dense_rank() OVER w FROM oa WINDOW w AS (ORDER BY ord DESC) ORDER BY ord DESC LIMIT 4 OFFSET 3",
		"SELECT *, count(*) OVER () AS total FROM oa WHERE grp = 1 ORDER BY ord DESC LIMIT 5 OFFSET 2",
		"SELECT ord, sum(ord) OVER (), min(t) OVER (), max(n) OVER (), count(t) OVER (), sum(n) OVER (), max(ts) OVER () FROM oa ORDER BY ord LIMIT 3",
		"SELECT ord, count(*) OVER (), sum(ord) OVER () FROM oa WHERE ord < 0",
		"SELECT t, rank() OVER (ORDER BY t NULLS FIRST), count(*) OVER () FROM oa WHERE ord < 20 ORDER BY t NULLS FIRST",
		"SELECT ord, count(*) OVER () FROM oa WHERE ord = 7",
		"SELECT ord, sum(ord::int8 * 1000000000000) OVER () FROM oa ORDER BY ord DESC FETCH FIRST 2 ROWS ONLY",
		// ntile and percent_rank: the proxy counts the rows from each
		// shard's count(*) OVER ().
		"SELECT ord, ntile(4) OVER (ORDER BY ord), percent_rank() OVER (ORDER BY ord) FROM oa",
		"SELECT grp, ord, ntile(3) OVER w, percent_rank() OVER w, rank() OVER w FROM oa WINDOW w AS (ORDER BY grp DESC) ORDER BY grp DESC, ord LIMIT 7 OFFSET 2",
		"SELECT ord, ntile(100) OVER (ORDER BY ord DESC), percent_rank() OVER (ORDER BY ord DESC) FROM oa WHERE ord < 4 ORDER BY ord DESC",
		"SELECT ord, percent_rank() OVER (ORDER BY ord), ntile(1) OVER (ORDER BY ord) FROM oa WHERE ord = 7",
		"SELECT ord, ntile(2) OVER (ORDER BY ord), percent_rank() OVER () FROM oa WHERE ord < 0",
		"SELECT t, ntile(5) OVER (ORDER BY t NULLS FIRST), percent_rank() OVER (ORDER BY t NULLS FIRST) FROM oa WHERE ord < 20 ORDER BY t NULLS FIRST",
		"SELECT ord, ntile(4) OVER (ORDER BY ord), ntile(7) OVER (ORDER BY ord) FROM oa WHERE ord <= 10",
		"SELECT ord, ntile(0) OVER (ORDER BY ord) FROM oa",
		// Running aggregates: the default frame counts a row's peers,
		// which grp spreads over every shard.
		"SELECT ord, sum(ord) OVER (ORDER BY ord), count(*) OVER (ORDER BY ord) FROM oa",
		"SELECT grp, ord, sum(ord) OVER (ORDER BY grp), count(t) OVER (ORDER BY grp), min(t) OVER (ORDER BY grp), max(n) OVER (ORDER BY grp), rank() OVER (ORDER BY grp) FROM oa ORDER BY grp, ord",
		"SELECT ord, sum(n) OVER w, max(ts) OVER w, row_number() OVER w FROM oa WINDOW w AS (ORDER BY ord DESC) ORDER BY ord DESC LIMIT 5 OFFSET 3",
		"SELECT t, count(*) OVER (ORDER BY t NULLS FIRST), sum(ord) OVER (ORDER BY t NULLS FIRST) FROM oa WHERE ord < 20 ORDER BY t NULLS FIRST",
		"SELECT grp, sum(CASE WHEN ord > 30 THEN ord END) OVER (ORDER BY grp DESC), count(*) OVER (ORDER BY grp DESC) FROM oa WHERE ord > 25 ORDER BY grp DESC, ord FETCH FIRST 4 ROWS WITH TIES",
		"SELECT ord, sum(ord) OVER (ORDER BY grp DESC) FROM oa WHERE ord < 0",
		// lag: the merge keeps the last rows' values of a hidden copy of
		// the argument, in the window column's format.
		"SELECT ord, lag(ord) OVER (ORDER BY ord), lag(t, 3) OVER (ORDER BY ord), lag(n, 0) OVER (ORDER BY ord) FROM oa ORDER BY ord LIMIT 10 OFFSET 5",
		"SELECT grp, ord, lag(u) OVER w, lag(ts, 2) OVER w, lag(b) OVER w, lag(j) OVER w, lag(arr) OVER w, lag(bits) OVER w FROM oa WINDOW w AS (ORDER BY grp DESC, ord) ORDER BY grp DESC, ord",
		"SELECT t, ord, lag(t) OVER (ORDER BY t NULLS FIRST, ord) FROM oa WHERE ord < 15 ORDER BY t NULLS FIRST, ord",
		"SELECT ord, lag(ord, 100) OVER (ORDER BY ord DESC) FROM oa ORDER BY ord DESC LIMIT 3",
		// lead and cume_dist: the merge holds rows back until the row
		// after them, or their last peer, came.
		"SELECT ord, lead(ord) OVER (ORDER BY ord), lead(t, 3) OVER (ORDER BY ord), lead(n, 0) OVER (ORDER BY ord) FROM oa ORDER BY ord LIMIT 10 OFFSET 5",
		"SELECT grp, ord, lead(u) OVER w, lead(ts, 2) OVER w, lag(b) OVER w, lead(j) OVER w, lead(arr, 4) OVER w, cume_dist() OVER w FROM oa WINDOW w AS (ORDER BY grp DESC, ord) ORDER BY grp DESC, ord",
		"SELECT grp, ord, cume_dist() OVER (ORDER BY grp), percent_rank() OVER (ORDER BY grp), rank() OVER (ORDER BY grp) FROM oa ORDER BY grp, ord",
		"SELECT t, cume_dist() OVER (ORDER BY t NULLS FIRST) FROM oa WHERE ord < 20 ORDER BY t NULLS FIRST",
		"SELECT ord, lead(ord, 100) OVER (ORDER BY ord DESC), cume_dist() OVER (ORDER BY ord DESC) FROM oa ORDER BY ord DESC LIMIT 3",
		"SELECT ord, cume_dist() OVER (), lead(ord) OVER () FROM oa WHERE ord = 7",
		// A ranking function over no ORDER BY: every row is a peer,
		// whatever another window orders the merge by.
		"SELECT ord, rank() OVER (), dense_rank() OVER (), percent_rank() OVER (), cume_dist() OVER (), count(*) OVER (ORDER BY ord) FROM oa ORDER BY ord",
		// first_value, last_value and nth_value over the default frame:
		// the rows up to a row's last peer.
		"SELECT grp, ord, first_value(ord) OVER w, last_value(ord) OVER w, nth_value(t, 3) OVER w, nth_value(ord, 30) OVER w FROM oa WINDOW w AS (ORDER BY grp DESC, ord) ORDER BY grp DESC, ord",
		"SELECT grp, ord, last_value(grp * 10) OVER (ORDER BY grp), nth_value(grp, 20) OVER (ORDER BY grp), first_value(grp) OVER (ORDER BY grp), cume_dist() OVER (ORDER BY grp) FROM oa ORDER BY grp, ord",
		"SELECT ord, first_value(t) OVER (ORDER BY ord), last_value(u) OVER (ORDER BY ord), nth_value(ts, 2) OVER (ORDER BY ord) FROM oa ORDER BY ord LIMIT 5 OFFSET 3",
		"SELECT ord, nth_value(ord, 0) OVER (ORDER BY ord) FROM oa",
		"SELECT ord, last_value(ord) OVER (ORDER BY ord) FROM oa WHERE ord < 0",
		"SELECT ord, lead(ord) OVER (ORDER BY ord), cume_dist() OVER (ORDER BY ord) FROM oa WHERE ord < 0",
		"BEGIN",
		"DECLARE wc CURSOR FOR SELECT ord, row_number() OVER (ORDER BY ord), count(*) OVER (), sum(ord) OVER (ORDER BY ord) FROM oa",
		"FETCH 3 FROM wc",
		"MOVE 30 IN wc",
		"FETCH 20 FROM wc",
		"DECLARE wl CURSOR FOR SELECT ord, lead(ord, 2) OVER (ORDER BY ord), cume_dist() OVER (ORDER BY ord) FROM oa",
		"FETCH 3 FROM wl",
		"FETCH 40 FROM wl",
		"COMMIT",
		"DROP TABLE oa",
	}},
}

// orderAggRefusals are refused on the two-shard database with 0A000 and
// a hint, and answered by one PostgreSQL.
var orderAggRefusals = diffScript{
	name: "refused across shards",
	stmts: []string{
		orderAggTable, orderAggRows,
		"SELECT array_agg(DISTINCT t) FILTER (WHERE ord > 3) FROM oa",
		"SELECT array_agg(DISTINCT ord ORDER BY ord DESC) FROM oa",
		"SELECT string_agg(t, ',' ORDER BY ord), array_agg(ord ORDER BY t) FROM oa",
		"SELECT count(DISTINCT grp), array_agg(ord ORDER BY ord) FROM oa",
		"SELECT json_object_agg(ord, t ORDER BY ord) FROM oa",
		"SELECT mode() WITHIN GROUP (ORDER BY ord) FROM oa",
		"SELECT ord, lead(ord, 1, 0) OVER (ORDER BY ord) FROM oa",
		"SELECT ord, sum(ord) OVER (PARTITION BY grp) FROM oa",
		"SELECT ord, sum(ord) OVER w FROM oa WINDOW w AS (PARTITION BY grp)",
		"SELECT grp, count(*), row_number() OVER (PARTITION BY grp) FROM oa GROUP BY grp, shard_key",
		"SELECT sum(count(*)) OVER (PARTITION BY grp) FROM oa GROUP BY grp",
		"SELECT ord, sum(ord) OVER (ORDER BY ord ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM oa",
		"DROP TABLE oa",
	},
	refusedOnTwo: map[int]string{
		2:  refusal("array_agg(DISTINCT …) FILTER is not supported across shards", hintOneShardText),
		3:  refusal("array_agg(DISTINCT … ORDER BY) in an order other than the value's ascending one is not supported across shards", hintOneShardText),
		4:  refusal("aggregates with different ORDER BY is not supported across shards", hintOneShardText),
		5:  refusal("DISTINCT aggregates together with an aggregate's ORDER BY is not supported across shards", hintOneShardText),
		6:  refusal("json_object_agg() with DISTINCT, ORDER BY or other than two arguments is not supported across shards", hintOneShardText),
		7:  refusal("aggregate mode() is not supported across shards", hintOneShardText),
		8:  refusal("window function lead() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
		9:  refusal("window function sum() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
		10: refusal("window function sum() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
		11: refusal("window function row_number() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
		12: refusal("window function sum() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
		13: refusal("window function sum() over a window not partitioned by the sharding key is not supported across shards", hintWindowText),
	},
}

const (
	hintOneShardText = "Constrain the sharding key to one shard, or route the statement with /* shard: N */ or SET shardgate.shard."
	hintWindowText   = "Partition every window by the sharding key (PARTITION BY key, …), or constrain the sharding key to one shard."
)

func refusal(msg, hint string) string {
	return fmt.Sprintf("ERROR 0A000 %q detail \"\" hint %q", msg, hint)
}

// bitSizeScript ORs bit strings of different lengths that sit on different
// shards, so that only the proxy sees both: its error is PostgreSQL's.
func bitSizeScript() diffScript {
	k := [2]int64{-1, -1}
	for id := int64(0); k[0] < 0 || k[1] < 0; id++ {
		if s := hashShard(id, 2); k[s] < 0 {
			k[s] = id
		}
	}
	return diffScript{name: "bit strings of different sizes", stmts: []string{
		orderAggTable, orderAggRows,
		fmt.Sprintf("SELECT bit_or(CASE WHEN shard_key = %d THEN B'101' ELSE B'10' END::varbit) FROM oa WHERE shard_key IN (%d, %d)", k[0], k[0], k[1]),
		fmt.Sprintf("SELECT bit_and(CASE WHEN shard_key = %d THEN B'101' ELSE B'10' END::varbit) FROM oa WHERE shard_key IN (%d, %d)", k[1], k[0], k[1]),
		fmt.Sprintf("SELECT bit_xor(CASE WHEN shard_key = %d THEN B'1' ELSE B'10' END::varbit) FROM oa WHERE shard_key IN (%d, %d)", k[1], k[0], k[1]),
		"DROP TABLE oa",
	}}
}

// TestOrderAggDiff: collecting aggregates, bit aggregates and windows
// partitioned by the key answer as one PostgreSQL does, in every exec
// mode and both pool modes; what is refused is refused exactly.
func TestOrderAggDiff(t *testing.T) {
	checkGoroutines(t)
	scripts := append(append([]diffScript{}, orderAggScripts...), bitSizeScript(), orderAggRefusals)
	diffAll(t, newDiffEnv(t), scripts)
}

// orderAggRaw are statements whose every result byte, in text and in
// binary, must be PostgreSQL's: the RowDescription's fields (type OID,
// size, modifier, format) and each value.
var orderAggRaw = []string{
	"SELECT array_agg(ord ORDER BY ord) AS i, array_agg(t ORDER BY ord) AS t, array_agg(n ORDER BY ord) AS n FROM oa",
	"SELECT array_agg(u ORDER BY ord) AS u, array_agg(ts ORDER BY ord) AS ts, array_agg(arr ORDER BY ord) AS arr, array_agg(tarr ORDER BY ord) AS tarr FROM oa",
	"SELECT array_agg('[2:3]={7,8}'::int[] ORDER BY ord) FROM oa WHERE ord <= 5",
	"SELECT grp, string_agg(t, sep ORDER BY ord), string_agg(b, ',' ORDER BY ord), string_agg(b, NULL ORDER BY ord) FROM oa GROUP BY grp ORDER BY grp",
	"SELECT json_agg(oa ORDER BY ord) AS rows, json_agg(arr ORDER BY ord) AS arrays, jsonb_agg(j ORDER BY ord) AS objects FROM oa WHERE ord <= 10",
	"SELECT grp, bit_and(bits), bit_or(vb), bit_xor(ord::int2), bit_or(ord::int8), bit_and(ord) FROM oa GROUP BY grp ORDER BY grp",
	"SELECT array_agg(ord ORDER BY ord) FILTER (WHERE t IS NULL), array_agg(t ORDER BY ord) FILTER (WHERE false) FROM oa",
}

// orderAggParams are statements with parameters, run like orderAggRaw.
var orderAggParams = []struct {
	sql    string
	params []string
}{
	{"SELECT grp, string_agg(t, $1 ORDER BY ord) FROM oa GROUP BY grp ORDER BY grp", []string{" / "}},
	{"SELECT string_agg(b, $1::bytea ORDER BY ord DESC) FROM oa WHERE ord < $2", []string{`\x00ff`, "9"}},
	{"SELECT grp, array_agg(t ORDER BY ord) FROM oa GROUP BY grp ORDER BY grp LIMIT $1 OFFSET $2", []string{"1", "1"}},
	{"SELECT grp, count(*) FROM oa GROUP BY grp ORDER BY grp LIMIT $1", []string{"1"}},
	{"SELECT grp, string_agg(t, ',' ORDER BY ord) FROM oa GROUP BY grp HAVING count(*) > $1 AND max(ord) < $2 ORDER BY grp", []string{"13", "40"}},
	{"SELECT ord, row_number() OVER (PARTITION BY shard_key ORDER BY ord DESC) FROM oa ORDER BY ord LIMIT $1", []string{"5"}},
}

// TestOrderAggBytes compares the raw answers of orderAggRaw on the
// reference database and through the proxy on two shards, in both result
// formats.
func TestOrderAggBytes(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startProxy(t, e.proxyConfig("transaction", 2))
	ref := pgConnect(t, ctx, e.cl.DSN("ref"))
	two := pgConnect(t, ctx, p.AppURL("two"))
	for _, c := range []*pgconn.PgConn{ref, two} {
		for _, sql := range []string{orderAggTable, orderAggRows} {
			if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	for _, q := range append(rawQueries(orderAggRaw), orderAggParams...) {
		sql := q.sql
		for _, format := range []int16{0, 1} {
			want, err := rawResult(ctx, ref, sql, q.params, format)
			if err != nil {
				t.Fatalf("ref %s: %v", sql, err)
			}
			got, err := rawResult(ctx, two, sql, q.params, format)
			if err != nil {
				t.Errorf("format %d %s: %v", format, sql, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("format %d %s:\n got  %q\n want %q", format, sql, got, want)
			}
		}
	}
	for _, c := range []*pgconn.PgConn{ref, two} {
		if _, err := c.Exec(ctx, "DROP TABLE oa").ReadAll(); err != nil {
			t.Fatal(err)
		}
	}
}

func pgConnect(t *testing.T, ctx context.Context, url string) *pgconn.PgConn {
	t.Helper()
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func rawQueries(sqls []string) []struct {
	sql    string
	params []string
} {
	out := make([]struct {
		sql    string
		params []string
	}, len(sqls))
	for i, s := range sqls {
		out[i].sql = s
	}
	return out
}

// rawResult runs sql with text parameters params and every result column
// in format, and returns its fields and rows as bytes.
func rawResult(ctx context.Context, c *pgconn.PgConn, sql string, params []string, format int16) ([]byte, error) {
	sd, err := c.Prepare(ctx, "", sql, nil)
	if err != nil {
		return nil, err
	}
	formats := make([]int16, len(sd.Fields))
	for i := range formats {
		formats[i] = format
	}
	var args [][]byte
	for _, p := range params {
		args = append(args, []byte(p))
	}
	res := c.ExecPrepared(ctx, "", args, nil, formats).Read()
	if res.Err != nil {
		return nil, res.Err
	}
	var out []byte
	for _, f := range res.FieldDescriptions {
		out = fmt.Appendf(out, "field %s type %d size %d typmod %d format %d\n", f.Name, f.DataTypeOID, f.DataTypeSize, f.TypeModifier, f.Format)
	}
	for _, row := range res.Rows {
		for _, v := range row {
			if v == nil {
				out = append(out, "NULL|"...)
				continue
			}
			out = fmt.Appendf(out, "%d:%s|", len(v), v)
		}
		out = append(out, '\n')
	}
	return append(out, res.CommandTag.String()...), nil
}

// TestOrderAggCollation: the ORDER BY of a collecting aggregate, its
// DISTINCT value and the group key order text in the database's libc
// collation (en_US.UTF-8) across shards as PostgreSQL does.
func TestOrderAggCollation(t *testing.T) {
	e := newCollationEnv(t)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))
	for i, name := range collationNames {
		city := collationNames[(i*5)%len(collationNames)]
		for _, c := range []*pgx.Conn{e.ref, pc} {
			if _, err := c.Exec(ctx, "INSERT INTO people (id, name, city, c_name) VALUES ($1, $2, $3, $2)", int64(i+1), name, city); err != nil {
				t.Fatalf("row %d: %v", i+1, err)
			}
		}
	}
	for _, q := range []string{
		"SELECT string_agg(name, ',' ORDER BY name, id) FROM people",
		"SELECT array_agg(name ORDER BY name DESC, id DESC), count(*) FROM people",
		"SELECT string_agg(c_name, ',' ORDER BY c_name, id) FROM people",
		"SELECT city, array_agg(id ORDER BY lower(name), id) FROM people GROUP BY city ORDER BY city",
		"SELECT string_agg(DISTINCT name, '|'), count(DISTINCT name) FROM people",
		"SELECT jsonb_agg(name ORDER BY name COLLATE \"C\", id) FROM people",
	} {
		sameUserTypes(t, e, pc, q)
	}
}
