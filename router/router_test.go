package router

import (
	"slices"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// routeCase is one statement routed with parameters and hints, and either
// the plan or the error expected.
type routeCase struct {
	name    string
	sql     string
	params  [][]byte
	formats []int16
	hints   Hints
	kind    Kind
	shards  []int
	write   bool
	code    string // expected SQLSTATE from Analyze or Route
	msg     string // expected in the error message
}

var all = []int{0, 1, 2}

func runRouteCases(t *testing.T, r *Router, cases []routeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := route(r, tc.sql, tc.params, tc.formats, tc.hints)
			if tc.code != "" {
				if err == nil {
					t.Fatalf("%s: got plan %v, want error %s", tc.sql, plan, tc.code)
				}
				if got := errCode(err); got != tc.code {
					t.Fatalf("%s: error %v: code %s, want %s", tc.sql, err, got, tc.code)
				}
				if !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("%s: error %q does not mention %q", tc.sql, err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.sql, err)
			}
			if plan.Kind != tc.kind || !slices.Equal(plan.Shards, tc.shards) || plan.Write != tc.write {
				t.Fatalf("%s: got %v, want %v %v write=%v", tc.sql, plan, tc.kind, tc.shards, tc.write)
			}
		})
	}
}

func route(r *Router, sql string, params [][]byte, formats []int16, h Hints) (*Plan, error) {
	s, err := r.Analyze(sql)
	if err != nil {
		return nil, err
	}
	p, err := s.Route(params, formats, h)
	if err == nil && p.Merge != nil && p.Merge.ParseOnly {
		// The shards only parse the statement: when they accept it, the
		// client gets the refusal (probe.go).
		return nil, p.Merge.Probe
	}
	return p, err
}

// TestVectors checks the expected shards the other tests compute against
// PostgreSQL's own satisfies_hash_partition results (PEERS.md §1.4).
func TestVectors(t *testing.T) {
	for v, want := range map[int64]int{0: 2, 1: 2, 2: 0, 3: 1, 42: 0, -1: 2, 1000000: 0} {
		if got := intShard(v); got != want {
			t.Errorf("bigint %d: shard %d of 3, PostgreSQL says %d", v, got, want)
		}
	}
	if got := textShard("test_value"); got != 2 {
		t.Errorf("text test_value: shard %d of 3, PostgreSQL says 2", got)
	}
	if got := uuidShard("11111111-1111-1111-1111-111111111111"); got != 1 {
		t.Errorf("uuid 1111…: shard %d of 3, PostgreSQL says 1", got)
	}
}

func TestRouteWhere(t *testing.T) {
	r := newTestRouter(t, nil)
	s3, s2, s1 := intShard(3), intShard(2), intShard(1) // 1, 0, 2
	runRouteCases(t, r, []routeCase{
		{name: "constant", sql: "SELECT * FROM accounts WHERE id = 3", kind: Direct, shards: shards(s3)},
		{name: "reversed", sql: "SELECT * FROM accounts WHERE 3 = id", kind: Direct, shards: shards(s3)},
		{name: "parameter", sql: "SELECT * FROM accounts WHERE id = $1", params: params(2), kind: Direct, shards: shards(s2)},
		{name: "binary int8", sql: "SELECT * FROM accounts WHERE id = $1", params: params(int8Binary(3)), formats: []int16{1}, kind: Direct, shards: shards(s3)},
		{name: "binary int4", sql: "SELECT * FROM accounts WHERE id = $2 AND name = $1", params: params("x", int4Binary(2)), formats: []int16{0, 1}, kind: Direct, shards: shards(s2)},
		{name: "NULL parameter", sql: "SELECT * FROM accounts WHERE id = $1", params: params(nil), kind: Direct, shards: []int{0}},
		{name: "parameter cast", sql: "SELECT * FROM accounts WHERE id = $1::bigint", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "constant cast", sql: "SELECT * FROM accounts WHERE id = '3'::int", kind: Direct, shards: shards(s3)},
		{name: "string constant", sql: "SELECT * FROM accounts WHERE id = '2'", kind: Direct, shards: shards(s2)},
		{name: "cast to numeric, text", sql: "SELECT * FROM accounts WHERE id = $1::numeric", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "cast to numeric, binary", sql: "SELECT * FROM accounts WHERE id = $1::numeric", params: params(int8Binary(3)), formats: []int16{1}, kind: All, shards: all},
		{name: "cast to text", sql: "SELECT * FROM accounts WHERE id = $1::text", params: params(3), kind: All, shards: all},
		{name: "fraction", sql: "SELECT * FROM accounts WHERE id = 5.5", kind: All, shards: all},
		{name: "column cast", sql: "SELECT * FROM accounts WHERE id::text = '3'", kind: All, shards: all},
		{name: "IS NOT DISTINCT FROM", sql: "SELECT * FROM accounts WHERE id IS NOT DISTINCT FROM 3", kind: Direct, shards: shards(s3)},
		{name: "AND", sql: "SELECT * FROM accounts WHERE name = 'x' AND id = 3 AND balance > 0", kind: Direct, shards: shards(s3)},
		{name: "nested AND", sql: "SELECT * FROM accounts WHERE (name = 'x' AND (id = $1 AND true))", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "contradiction", sql: "SELECT * FROM accounts WHERE id = 1 AND id = 2", kind: Direct, shards: []int{0}},
		{name: "IN", sql: "SELECT * FROM accounts WHERE id IN (2, 3)", kind: Multi, shards: shards(s2, s3)},
		{name: "IN one shard", sql: "SELECT * FROM accounts WHERE id IN (3, 3)", kind: Direct, shards: shards(s3)},
		{name: "IN parameters", sql: "SELECT * FROM accounts WHERE id IN ($1, $2, $3)", params: params(1, 2, 3), kind: All, shards: all},
		{name: "IN with expression", sql: "SELECT * FROM accounts WHERE id IN (3, balance)", kind: All, shards: all},
		{name: "ANY parameter", sql: "SELECT * FROM accounts WHERE id = ANY($1)", params: params("{2,3}"), kind: Multi, shards: shards(s2, s3)},
		{name: "ANY binary array", sql: "SELECT * FROM accounts WHERE id = ANY($1)", params: params(int8Array(3, 3)), formats: []int16{1}, kind: Direct, shards: shards(s3)},
		{name: "ANY cast parameter", sql: "SELECT * FROM accounts WHERE id = ANY($1::bigint[])", params: params("{3}"), kind: Direct, shards: shards(s3)},
		{name: "ANY ARRAY", sql: "SELECT * FROM accounts WHERE id = ANY(ARRAY[1, 2])", kind: Multi, shards: shards(s1, s2)},
		{name: "ANY literal", sql: "SELECT * FROM accounts WHERE id = ANY('{2}'::bigint[])", kind: Direct, shards: shards(s2)},
		{name: "ANY NULL element", sql: "SELECT * FROM accounts WHERE id = ANY('{NULL,3}')", kind: Direct, shards: shards(s3)},
		{name: "ANY bad array", sql: "SELECT * FROM accounts WHERE id = ANY($1)", params: params("{1,"), kind: All, shards: all},
		{name: "OR of keys", sql: "SELECT * FROM accounts WHERE id = 3 OR id = 2", kind: Multi, shards: shards(s2, s3)},
		{name: "OR of AND", sql: "SELECT * FROM accounts WHERE (id = 3 AND x) OR (id = 2 AND y)", kind: Multi, shards: shards(s2, s3)},
		{name: "OR with other column", sql: "SELECT * FROM accounts WHERE id = 3 OR name = 'x'", kind: All, shards: all},
		{name: "NOT", sql: "SELECT * FROM accounts WHERE NOT (id = 3)", kind: All, shards: all},
		{name: "inequality", sql: "SELECT * FROM accounts WHERE id > 3", kind: All, shards: all},
		{name: "IS NULL", sql: "SELECT * FROM accounts WHERE id IS NULL", kind: All, shards: all},
		{name: "no WHERE", sql: "SELECT * FROM accounts", kind: All, shards: all},
		{name: "alias", sql: "SELECT * FROM accounts a WHERE a.id = 3", kind: Direct, shards: shards(s3)},
		{name: "alias unqualified column", sql: "SELECT * FROM accounts AS a WHERE id = 3", kind: Direct, shards: shards(s3)},
		{name: "table-qualified column", sql: "SELECT * FROM accounts WHERE accounts.id = 3", kind: Direct, shards: shards(s3)},
		{name: "schema-qualified", sql: "SELECT * FROM public.accounts WHERE public.accounts.id = 3", kind: Direct, shards: shards(s3)},
		{name: "qualified config entry", sql: "SELECT * FROM audit.log WHERE account_id = 2", kind: Direct, shards: shards(s2)},
		{name: "other table's column", sql: "SELECT * FROM accounts a, countries c WHERE c.id = 3", kind: All, shards: all},
		{name: "text key", sql: "SELECT * FROM users WHERE email = 'test_value'", kind: Direct, shards: shards(textShard("test_value"))},
		{name: "text key binary", sql: "SELECT * FROM users WHERE email = $1", params: params("a@b.c"), formats: []int16{1}, kind: Direct, shards: shards(textShard("a@b.c"))},
		{name: "uuid key", sql: "SELECT * FROM devices WHERE id = '11111111-1111-1111-1111-111111111111'", kind: Direct, shards: shards(uuidShard("11111111-1111-1111-1111-111111111111"))},
		{name: "list key", sql: "SELECT * FROM regions WHERE code = 'eu'", kind: Direct, shards: []int{1}},
		{name: "list keys", sql: "SELECT * FROM regions WHERE code IN ('us', 'eu', 'ca')", kind: Multi, shards: []int{0, 1}},
		{name: "unmapped list key", sql: "SELECT * FROM regions WHERE code = $1", params: params("zz"), kind: Direct, shards: []int{0}},
		{name: "range key", sql: "SELECT * FROM events WHERE day = 150", kind: Direct, shards: []int{1}},
		{name: "range default", sql: "SELECT * FROM events WHERE day = $1", params: params(500), kind: Direct, shards: []int{2}},
		{name: "bad parameter", sql: "SELECT * FROM accounts WHERE id = $1", params: params("abc"), kind: All, shards: all},
		{name: "missing parameter", sql: "SELECT * FROM accounts WHERE id = $2", params: params(1), kind: All, shards: all},
		{name: "FOR UPDATE", sql: "SELECT * FROM accounts WHERE id = 3 FOR UPDATE", kind: Direct, shards: shards(s3), write: true},
		{name: "subquery on same shard", sql: "SELECT * FROM accounts WHERE id = 3 AND EXISTS (SELECT 1 FROM orders o WHERE o.account_id = 3)", kind: Direct, shards: shards(s3)},
		{name: "subquery in FROM", sql: "SELECT * FROM (SELECT * FROM accounts WHERE id = $1) s", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "CTE", sql: "WITH a AS (SELECT * FROM accounts WHERE id = 2) SELECT * FROM a", kind: Direct, shards: shards(s2)},
		{name: "CTE named like a table", sql: "WITH accounts AS (SELECT 1 AS id) SELECT * FROM accounts", kind: Any, shards: all},
		{name: "subquery over omni", sql: "SELECT * FROM accounts WHERE country IN (SELECT code FROM countries)", kind: All, shards: all},
		{name: "semi-join on the key", sql: "SELECT * FROM accounts WHERE id IN (SELECT account_id FROM orders WHERE total > 0)", kind: All, shards: all},
		{name: "semi-join with key", sql: "SELECT * FROM accounts WHERE id IN (SELECT account_id FROM orders) AND id = 3", kind: Direct, shards: shards(s3)},
		{name: "= ANY subquery", sql: "SELECT * FROM accounts a WHERE a.id = ANY (SELECT o.account_id FROM orders o)", kind: All, shards: all},
		{name: "NOT IN subquery", sql: "SELECT * FROM accounts WHERE id NOT IN (SELECT account_id FROM orders)", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "IN subquery off key", sql: "SELECT * FROM accounts WHERE id IN (SELECT id FROM orders)", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "IN subquery under OR", sql: "SELECT * FROM accounts WHERE id IN (SELECT account_id FROM orders) OR id = 3", code: wire.FeatureNotSupported, msg: "subquery"},
		{name: "correlated in select list", sql: "SELECT a.id, (SELECT sum(total) FROM orders o WHERE o.account_id = a.id) FROM accounts a", kind: All, shards: all},
		{name: "correlated NOT EXISTS", sql: "SELECT * FROM accounts a WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id)", kind: All, shards: all},
		{name: "correlated key does not restrict outer", sql: "SELECT * FROM accounts a WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id AND o.account_id = 3)", kind: All, shards: all},
		{name: "correlated with outer key", sql: "SELECT * FROM accounts a WHERE a.id = $1 AND EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id)", params: params(2), kind: Direct, shards: shards(s2)},
		{name: "correlated under OR", sql: "SELECT * FROM accounts a WHERE EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id OR o.total > 0)", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "correlated, other sharded table inside", sql: "SELECT * FROM accounts a WHERE EXISTS (SELECT 1 FROM orders o JOIN users u ON u.email = o.email WHERE o.account_id = a.id)", code: wire.FeatureNotSupported, msg: "subquery over sharded table users"},
		{name: "LATERAL", sql: "SELECT * FROM accounts a, LATERAL (SELECT * FROM orders o WHERE o.account_id = a.id ORDER BY total DESC LIMIT 3) x", kind: All, shards: all},
		{name: "subquery in select list", sql: "SELECT (SELECT count(*) FROM orders) FROM accounts", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "scalar subquery without FROM", sql: "SELECT (SELECT max(id) FROM accounts)", code: wire.FeatureNotSupported, msg: "subquery over sharded table accounts"},
		{name: "subquery in FROM with LIMIT", sql: "SELECT max(id) FROM (SELECT * FROM accounts LIMIT 10) s", code: wire.FeatureNotSupported, msg: "subquery"},
		// SELECT count(*) FROM (subquery) s: the subquery merged on its
		// own, its rows counted (count.go).
		{name: "count of a subquery with LIMIT", sql: "SELECT count(*) FROM (SELECT * FROM accounts LIMIT 10) s", kind: All, shards: all},
		{name: "count of a grouped subquery", sql: "SELECT count(*) AS n FROM (SELECT country, count(*) FROM accounts GROUP BY country) s", kind: All, shards: all},
		{name: "count of a DISTINCT subquery", sql: "SELECT count(*) FROM (SELECT DISTINCT country FROM accounts) s", kind: All, shards: all},
		{name: "count of a DISTINCT subquery on one shard", sql: "SELECT count(*) FROM (SELECT DISTINCT country FROM accounts WHERE id = 3) s", kind: Direct, shards: shards(s3)},
		{name: "count of a subquery with expressions over aggregates", sql: "SELECT count(*) FROM (SELECT country, max(id) - min(id) FROM accounts GROUP BY country HAVING sum(balance) > 2 * count(*)) s", kind: All, shards: all},
		{name: "EXISTS across shards", sql: "SELECT EXISTS (SELECT 1 FROM accounts WHERE balance > 0) AS e", kind: All, shards: all},
		{name: "EXISTS on one shard", sql: "SELECT EXISTS (SELECT 1 FROM accounts WHERE id = 3)", kind: Direct, shards: shards(s3)},
		{name: "NOT EXISTS across shards", sql: "SELECT NOT EXISTS (SELECT 1 FROM accounts WHERE balance > 0)", code: wire.FeatureNotSupported, msg: "subquery"},
		{name: "count with a WHERE around the subquery", sql: "SELECT count(*) FROM (SELECT DISTINCT country FROM accounts) s WHERE country <> 'fr'", code: wire.FeatureNotSupported, msg: "subquery"},
		// A subquery in FROM, or a WITH query read once there, that only
		// filters and computes per row: each shard computes its own rows.
		{name: "CTE across shards", sql: "WITH a AS (SELECT * FROM accounts) SELECT * FROM a", kind: All, shards: all},
		{name: "subquery in FROM, all shards", sql: "SELECT count(*) FROM (SELECT id FROM accounts WHERE balance > 0) s", kind: All, shards: all},
		{name: "subquery in FROM over a co-located join", sql: "SELECT s.id FROM (SELECT a.id FROM accounts a JOIN orders o ON o.account_id = a.id) s", kind: All, shards: all},
		{name: "nested subqueries in FROM", sql: "SELECT count(*) FROM (SELECT * FROM (SELECT id FROM accounts WHERE id = 3) s1) s2", kind: Direct, shards: shards(s3)},
		{name: "CTE over a subquery", sql: "WITH a AS (SELECT * FROM (SELECT id FROM accounts) s) SELECT count(*) FROM a", kind: All, shards: all},
		{name: "subquery in FROM joined with omni", sql: "SELECT * FROM (SELECT * FROM accounts) s JOIN countries c ON c.code = s.country", kind: All, shards: all},
		{name: "key through a subquery in FROM", sql: "SELECT * FROM (SELECT * FROM accounts) s WHERE s.id = 3", kind: Direct, shards: shards(s3)},
		{name: "key column through a subquery in FROM", sql: "SELECT count(*) FROM (SELECT id, balance FROM accounts WHERE balance > 0) s WHERE id = $1", params: params(2), kind: Direct, shards: shards(s2)},
		{name: "keys inside and outside a subquery in FROM", sql: "SELECT * FROM (SELECT a.* FROM accounts a WHERE a.id IN (2, 3)) s WHERE s.id = 3", kind: Direct, shards: shards(s3)},
		{name: "semi-join through a subquery in FROM", sql: "SELECT * FROM (SELECT * FROM accounts) s WHERE s.id IN (SELECT account_id FROM orders)", kind: All, shards: all},
		{name: "join through a subquery in FROM", sql: "SELECT * FROM (SELECT id, country FROM accounts) s JOIN orders o ON o.account_id = s.id WHERE o.account_id = 2", kind: Direct, shards: shards(s2)},
		{name: "renamed key through a subquery in FROM", sql: "SELECT * FROM (SELECT id AS k FROM accounts) s JOIN orders o ON o.account_id = s.k", code: wire.FeatureNotSupported, msg: "not joined on their sharding keys"},
		{name: "subquery in FROM with aggregates", sql: "SELECT sum(n) FROM (SELECT country, count(*) AS n FROM accounts GROUP BY country) s", code: wire.FeatureNotSupported, msg: "subquery over sharded table accounts"},
		{name: "subquery in FROM with DISTINCT", sql: "SELECT count(country) FROM (SELECT DISTINCT country FROM accounts) s", code: wire.FeatureNotSupported, msg: "subquery over sharded table accounts"},
		{name: "subquery in FROM with a window", sql: "SELECT * FROM (SELECT id, row_number() OVER () FROM accounts) s", code: wire.FeatureNotSupported, msg: "subquery over sharded table accounts"},
		{name: "subquery in FROM on the NULL-extended side", sql: "SELECT * FROM countries c LEFT JOIN (SELECT * FROM accounts) s ON s.country = c.code", code: wire.FeatureNotSupported, msg: "subquery over sharded table accounts"},
		{name: "subquery in FROM of a subquery", sql: "SELECT * FROM accounts WHERE id IN (SELECT s.id FROM (SELECT id FROM orders) s)", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "CTE read twice", sql: "WITH a AS (SELECT * FROM accounts) SELECT * FROM a x JOIN a y ON x.id = y.id", code: wire.FeatureNotSupported, msg: "WITH query over sharded table accounts"},
		{name: "CTE read in a subquery", sql: "WITH a AS (SELECT * FROM accounts) SELECT * FROM countries WHERE code IN (SELECT country FROM a)", code: wire.FeatureNotSupported, msg: "WITH query over sharded table accounts"},
		{name: "recursive CTE", sql: "WITH RECURSIVE a AS (SELECT * FROM accounts) SELECT * FROM a", code: wire.FeatureNotSupported, msg: "WITH query over sharded table accounts"},
		{name: "CTE with aggregates", sql: "WITH a AS (SELECT count(*) AS n FROM accounts) SELECT * FROM a", code: wire.FeatureNotSupported, msg: "WITH query over sharded table accounts"},
		{name: "CTE of omni rows NULL-extending sharded", sql: "WITH c AS (SELECT * FROM countries) SELECT * FROM c LEFT JOIN accounts a ON a.country = c.code", code: wire.FeatureNotSupported, msg: "repeat them once per shard"},
		{name: "UNION across shards", sql: "SELECT id FROM accounts UNION SELECT account_id FROM orders", kind: All, shards: all},
		{name: "UNION with an omni query", sql: "SELECT country FROM accounts UNION SELECT code FROM countries", kind: All, shards: all},
		{name: "UNION ALL over UNION", sql: "SELECT id FROM accounts UNION SELECT account_id FROM orders UNION ALL SELECT id FROM accounts", kind: All, shards: all},
		{name: "UNION ALL over UNION with an omni query", sql: "SELECT id FROM accounts UNION SELECT 1 FROM countries UNION ALL SELECT id FROM accounts", code: wire.FeatureNotSupported, msg: "set operation with ALL that reads no sharded table"},
		// UNION ALL of queries that each filter per row: the shards' rows
		// of each add up.
		{name: "UNION ALL across shards", sql: "SELECT id FROM accounts WHERE balance > 0 UNION ALL SELECT account_id FROM orders", kind: All, shards: all},
		{name: "UNION ALL of keyed queries", sql: "SELECT id FROM accounts WHERE id = 3 UNION ALL SELECT id FROM accounts WHERE id = 2", kind: Multi, shards: shards(s2, s3)},
		{name: "UNION ALL of three", sql: "SELECT id FROM accounts UNION ALL SELECT account_id FROM orders UNION ALL SELECT id FROM accounts WHERE id = 3", kind: All, shards: all},
		{name: "UNION ALL of a co-located join", sql: "SELECT a.id FROM accounts a JOIN orders o ON o.account_id = a.id UNION ALL SELECT id FROM accounts", kind: All, shards: all},
		{name: "UNION ALL of a join off the keys", sql: "SELECT a.id FROM accounts a JOIN orders o ON o.id = a.id UNION ALL SELECT id FROM accounts", code: wire.FeatureNotSupported, msg: "not joined on their sharding keys"},
		{name: "UNION ALL with a constant query", sql: "SELECT id FROM accounts UNION ALL SELECT 1000", code: wire.FeatureNotSupported, msg: "UNION over sharded table"},
		{name: "UNION ALL with an omni query", sql: "SELECT country FROM accounts UNION ALL SELECT code FROM countries", code: wire.FeatureNotSupported, msg: "reads no sharded table"},
		{name: "UNION ALL with an omni query on one shard", sql: "SELECT country FROM accounts WHERE id = 3 UNION ALL SELECT code FROM countries", kind: Direct, shards: shards(s3)},
		{name: "UNION ALL with ORDER BY", sql: "SELECT id FROM accounts UNION ALL SELECT account_id FROM orders ORDER BY 1", kind: All, shards: all},
		{name: "UNION ALL with ORDER BY a name and LIMIT", sql: "SELECT id AS k FROM accounts UNION ALL SELECT account_id FROM orders ORDER BY k DESC LIMIT $1 OFFSET 2", params: params(3), kind: All, shards: all},
		{name: "UNION ALL ordered by an expression", sql: "SELECT id FROM accounts UNION ALL SELECT account_id FROM orders ORDER BY id + 1", code: wire.FeatureNotSupported, msg: "other than an output column"},
		{name: "UNION ALL with a LIMIT inside", sql: "(SELECT id FROM accounts UNION ALL SELECT account_id FROM orders LIMIT 2) UNION ALL SELECT id FROM accounts", code: wire.FeatureNotSupported, msg: "UNION over sharded table"},
		{name: "UNION ALL of grouped queries", sql: "SELECT count(*) FROM accounts UNION ALL SELECT count(*) FROM orders", code: wire.FeatureNotSupported, msg: "UNION over sharded table"},
		{name: "UNION on one shard", sql: "SELECT id FROM accounts WHERE id = 3 UNION ALL SELECT account_id FROM orders WHERE account_id = 3", kind: Direct, shards: shards(s3)},
	})
}

// int8Array is a one-dimensional int8[] in binary format.
func int8Array(vs ...int64) []byte {
	b := int4Binary(1)               // ndim
	b = append(b, int4Binary(0)...)  // no NULLs
	b = append(b, int4Binary(20)...) // int8
	b = append(b, int4Binary(int32(len(vs)))...)
	b = append(b, int4Binary(1)...) // lower bound
	for _, v := range vs {
		b = append(b, int4Binary(8)...)
		b = append(b, int8Binary(v)...)
	}
	return b
}

func TestRouteJoins(t *testing.T) {
	r := newTestRouter(t, nil)
	s3, s2 := intShard(3), intShard(2)
	runRouteCases(t, r, []routeCase{
		{name: "co-located with key", sql: "SELECT * FROM accounts a JOIN orders o ON o.account_id = a.id WHERE a.id = $1", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "key through equality", sql: "SELECT * FROM accounts a JOIN orders o ON o.account_id = a.id WHERE o.account_id = 2", kind: Direct, shards: shards(s2)},
		{name: "co-located fan-out", sql: "SELECT * FROM accounts a JOIN orders o ON o.account_id = a.id", kind: All, shards: all},
		{name: "comma join", sql: "SELECT * FROM accounts a, orders o WHERE a.id = o.account_id AND a.id = 3", kind: Direct, shards: shards(s3)},
		{name: "USING", sql: "SELECT * FROM accounts a JOIN accounts b USING (id) WHERE id = 3", kind: Direct, shards: shards(s3)},
		{name: "NATURAL", sql: "SELECT * FROM accounts a NATURAL JOIN accounts b", kind: All, shards: all},
		{name: "left join co-located", sql: "SELECT * FROM accounts a LEFT JOIN orders o ON o.account_id = a.id AND o.account_id = 3", kind: All, shards: all},
		{name: "left join key in WHERE", sql: "SELECT * FROM accounts a LEFT JOIN orders o ON o.account_id = a.id WHERE a.id = 3", kind: Direct, shards: shards(s3)},
		{name: "inner join under outer join", sql: "SELECT * FROM countries c LEFT JOIN (accounts a JOIN orders o ON o.account_id = a.id AND a.id = 3) ON true", code: wire.FeatureNotSupported, msg: "keeps the rows of countries"},
		// An outer join that keeps an omni table's rows and NULL-extends a
		// sharded table's would repeat the omni rows once per shard.
		{name: "omni left join sharded", sql: "SELECT * FROM countries c LEFT JOIN accounts a ON a.id = 1", code: wire.FeatureNotSupported, msg: "repeat them once per shard"},
		{name: "sharded right join omni", sql: "SELECT * FROM accounts a RIGHT JOIN countries c ON c.code = a.country", code: wire.FeatureNotSupported, msg: "keeps the rows of countries"},
		{name: "full join omni", sql: "SELECT * FROM accounts a FULL JOIN countries c ON c.code = a.country", code: wire.FeatureNotSupported, msg: "keeps the rows of countries"},
		{name: "function left join sharded", sql: "SELECT * FROM generate_series(1, 3) g LEFT JOIN accounts a ON a.id = g", code: wire.FeatureNotSupported, msg: "repeat them once per shard"},
		{name: "omni left join sharded on one shard", sql: "SELECT * FROM countries c LEFT JOIN accounts a ON a.country = c.code WHERE a.id = 3", kind: Direct, shards: shards(s3)},
		{name: "sharded left join omni", sql: "SELECT * FROM accounts a LEFT JOIN countries c ON c.code = a.country", kind: All, shards: all},
		{name: "omni joined to a co-located outer join", sql: "SELECT * FROM accounts a LEFT JOIN orders o ON o.account_id = a.id JOIN countries c ON c.code = a.country", kind: All, shards: all},
		{name: "full join co-located", sql: "SELECT * FROM accounts a FULL JOIN orders o ON o.account_id = a.id", kind: All, shards: all},
		{name: "both constrained", sql: "SELECT * FROM accounts a JOIN orders o ON o.id = a.id WHERE a.id = 3 AND o.account_id = 3", kind: Direct, shards: shards(s3)},
		{name: "both constrained apart", sql: "SELECT * FROM accounts a JOIN orders o ON o.id = a.id WHERE a.id = 3 AND o.account_id = 2", code: wire.FeatureNotSupported, msg: "not joined on their sharding keys"},
		{name: "not on the key", sql: "SELECT * FROM accounts a JOIN orders o ON o.id = a.id", code: wire.FeatureNotSupported, msg: "sharded tables accounts and orders are not joined on their sharding keys"},
		{name: "different functions", sql: "SELECT * FROM accounts a JOIN users u ON u.email = a.id::text", code: wire.FeatureNotSupported, msg: "not joined"},
		{name: "self join off key", sql: "SELECT * FROM accounts a JOIN accounts b ON a.parent = b.id", code: wire.FeatureNotSupported, msg: "not joined"},
		{name: "omni join", sql: "SELECT * FROM accounts a JOIN countries c ON c.code = a.country WHERE a.id = 3", kind: Direct, shards: shards(s3)},
		{name: "omni join fan-out", sql: "SELECT * FROM accounts a JOIN countries c ON c.code = a.country", kind: All, shards: all},
		{name: "UPDATE FROM", sql: "UPDATE orders o SET total = 0 FROM accounts a WHERE a.id = o.account_id AND a.id = 2", kind: Direct, shards: shards(s2), write: true},
	})
}

func TestRouteOmniAndAny(t *testing.T) {
	r := newTestRouter(t, nil)
	runRouteCases(t, r, []routeCase{
		{name: "omni read", sql: "SELECT * FROM countries WHERE code = 'fr'", kind: OmniRead, shards: all},
		{name: "qualified omni read", sql: "SELECT * FROM public.settings", kind: OmniRead, shards: all},
		{name: "omni write", sql: "INSERT INTO countries (code) VALUES ('fr')", kind: OmniWrite, shards: all, write: true},
		{name: "omni update", sql: "UPDATE settings SET v = 1", kind: OmniWrite, shards: all, write: true},
		{name: "omni delete", sql: "DELETE FROM countries WHERE code = $1", params: params("fr"), kind: OmniWrite, shards: all, write: true},
		{name: "catalog", sql: "SELECT * FROM pg_catalog.pg_class", kind: OmniRead, shards: all},
		{name: "unqualified catalog", sql: "SELECT oid FROM pg_type WHERE typname = 'int8'", kind: OmniRead, shards: all},
		{name: "information_schema", sql: "SELECT * FROM information_schema.tables", kind: OmniRead, shards: all},
		{name: "no table", sql: "SELECT 1", kind: Any, shards: all},
		{name: "function", sql: "SELECT now()", kind: Any, shards: all},
		{name: "VALUES", sql: "VALUES (1), (2)", kind: Any, shards: all},
		{name: "empty", sql: "  ", kind: Any, shards: all},
		{name: "omni write reading sharded", sql: "INSERT INTO countries SELECT country FROM accounts", code: wire.FeatureNotSupported, msg: "writes omni table countries"},
		{name: "omni update from sharded", sql: "UPDATE countries c SET n = 1 FROM accounts a WHERE a.country = c.code AND a.id = 3", code: wire.FeatureNotSupported, msg: "reads sharded table accounts"},
	})
}

func TestRouteSchemas(t *testing.T) {
	r := newTestRouter(t, nil)
	path := func(s ...string) Hints { return Hints{SearchPath: s} }
	runRouteCases(t, r, []routeCase{
		{name: "qualified", sql: "SELECT * FROM tenant_a.items WHERE id = 7", kind: Direct, shards: []int{1}},
		{name: "qualified write", sql: "INSERT INTO tenant_b.items VALUES (1)", kind: Direct, shards: []int{2}, write: true},
		{name: "search_path", sql: "SELECT * FROM items", hints: path("tenant_b", "public"), kind: Direct, shards: []int{2}},
		{name: "search_path wins over sharded_tables", sql: "SELECT * FROM accounts", hints: path("tenant_a"), kind: Direct, shards: []int{1}},
		{name: "search_path not first", sql: "SELECT * FROM countries", hints: path("public", "tenant_a"), kind: OmniRead, shards: all},
		{name: "search_path ignores catalogs", sql: "SELECT * FROM pg_class", hints: path("tenant_a"), kind: OmniRead, shards: all},
		{name: "join with omni", sql: "SELECT * FROM tenant_a.items i JOIN public.countries c ON true", kind: Direct, shards: []int{1}},
		{name: "two schemas", sql: "SELECT * FROM tenant_a.items, tenant_b.items", code: wire.FeatureNotSupported, msg: "not joined"},
		{name: "CREATE TABLE", sql: "CREATE TABLE tenant_a.t (id int)", kind: Direct, shards: []int{1}, write: true},
		{name: "CREATE TABLE on search_path", sql: "CREATE TABLE t (id int)", hints: path("tenant_b"), kind: Direct, shards: []int{2}, write: true},
		{name: "CREATE SCHEMA", sql: "CREATE SCHEMA tenant_b", kind: Direct, shards: []int{2}, write: true},
		{name: "DROP TABLE", sql: "DROP TABLE tenant_a.t", kind: Direct, shards: []int{1}, write: true},
		{name: "DROP SCHEMA", sql: "DROP SCHEMA tenant_b CASCADE", kind: Direct, shards: []int{2}, write: true},
		{name: "CREATE INDEX", sql: "CREATE INDEX ON tenant_a.t (id)", kind: Direct, shards: []int{1}, write: true},
		{name: "DDL across schemas", sql: "ALTER TABLE tenant_a.t ADD FOREIGN KEY (x) REFERENCES tenant_b.u (id)", code: wire.FeatureNotSupported, msg: "sharded schemas"},
	})
}

func TestRouteColumnRule(t *testing.T) {
	s3, s2 := intShard(3), intShard(2)
	runRouteCases(t, newTestRouter(t, nil), []routeCase{
		{name: "unqualified", sql: "SELECT * FROM invoices WHERE tenant_id = 3", kind: Direct, shards: shards(s3)},
		{name: "qualified", sql: "SELECT * FROM invoices i JOIN countries c ON true WHERE i.tenant_id = 2", kind: Direct, shards: shards(s2)},
		{name: "co-located", sql: "SELECT * FROM invoices i JOIN payments p ON p.tenant_id = i.tenant_id WHERE i.tenant_id = 3", kind: Direct, shards: shards(s3)},
		{name: "INSERT column list", sql: "INSERT INTO invoices (id, tenant_id) VALUES (1, 2)", kind: Direct, shards: shards(s2), write: true},
		{name: "unknown", sql: "SELECT * FROM invoices", kind: All, shards: all}, // a probe: TestRouteUnknownProbe
		{name: "unknown with hint", sql: "SELECT * FROM invoices", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}},
		{name: "listed omni", sql: "SELECT * FROM countries", kind: OmniRead, shards: all},
	})
	runRouteCases(t, newTestRouter(t, testCatalog), []routeCase{
		{name: "catalog sharded", sql: "SELECT * FROM invoices", kind: All, shards: all},
		{name: "catalog key", sql: "SELECT * FROM invoices WHERE tenant_id = $1", params: params(3), kind: Direct, shards: shards(s3)},
		{name: "catalog omni", sql: "SELECT * FROM notes", kind: OmniRead, shards: all},
		{name: "catalog omni write", sql: "UPDATE notes SET body = ''", kind: OmniWrite, shards: all, write: true},
		{name: "catalog unknown table", sql: "SELECT * FROM mystery", kind: All, shards: all},
	})
}

func TestRouteUpdateDelete(t *testing.T) {
	r := newTestRouter(t, nil)
	s3, s2 := intShard(3), intShard(2)
	runRouteCases(t, r, []routeCase{
		{name: "update by key", sql: "UPDATE accounts SET name = $1 WHERE id = $2", params: params("x", 3), kind: Direct, shards: shards(s3), write: true},
		{name: "update all", sql: "UPDATE accounts SET name = 'x'", kind: All, shards: all, write: true},
		{name: "update some", sql: "UPDATE accounts SET name = 'x' WHERE id IN (2, 3)", kind: Multi, shards: shards(s2, s3), write: true},
		{name: "delete by key", sql: "DELETE FROM accounts WHERE id = 2 RETURNING *", kind: Direct, shards: shards(s2), write: true},
		{name: "delete all", sql: "DELETE FROM accounts WHERE name = 'x'", kind: All, shards: all, write: true},
		{name: "delete USING omni", sql: "DELETE FROM accounts a USING countries c WHERE a.country = c.code AND a.id = $1", params: params(2), kind: Direct, shards: shards(s2), write: true},
		{name: "update key same shard", sql: "UPDATE accounts SET id = $1 WHERE id = $2", params: params(3, 3), kind: Direct, shards: shards(s3), write: true},
		{name: "update key moves row", sql: "UPDATE accounts SET id = $1 WHERE id = $2", params: params(2, 3), code: wire.FeatureNotSupported, msg: `sharding key column "id"`},
		{name: "update key constant", sql: "UPDATE accounts SET id = 5 WHERE name = 'x'", code: wire.FeatureNotSupported, msg: `cannot update sharding key column "id" on several shards`},
		{name: "update key expression", sql: "UPDATE accounts SET id = id + 1 WHERE id = 3", code: wire.FeatureNotSupported, msg: `cannot update sharding key column "id" of table accounts`},
		{name: "update key in WITH", sql: "WITH u AS (UPDATE accounts SET id = 3 WHERE id = 3 RETURNING *) SELECT * FROM u", code: wire.FeatureNotSupported, msg: `sharding key column "id"`},
		{name: "data-modifying WITH", sql: "WITH d AS (DELETE FROM accounts WHERE id = 3 RETURNING *) SELECT * FROM d", kind: Direct, shards: shards(s3), write: true},
		{name: "MERGE sharded", sql: "MERGE INTO accounts a USING countries c ON a.country = c.code WHEN MATCHED THEN DELETE", code: wire.FeatureNotSupported, msg: "MERGE into sharded table accounts"},
		{name: "MERGE sharded with hint", sql: "MERGE INTO accounts a USING countries c ON a.country = c.code WHEN MATCHED THEN DELETE", hints: Hints{Shard: intp(2)}, kind: Direct, shards: []int{2}, write: true},
		{name: "MERGE omni", sql: "MERGE INTO countries c USING settings s ON s.k = c.code WHEN MATCHED THEN DELETE", kind: OmniWrite, shards: all, write: true},
	})
}

func TestRouteHints(t *testing.T) {
	r := newTestRouter(t, nil)
	s3 := intShard(3)
	runRouteCases(t, r, []routeCase{
		{name: "comment shard", sql: "/* shard: 2 */ SELECT * FROM accounts", kind: Direct, shards: []int{2}},
		{name: "comment shard after", sql: "SELECT * FROM accounts WHERE id = 3 -- shard: 0", kind: Direct, shards: []int{0}},
		{name: "comment prefixed", sql: "SELECT 1 /* shardgate.shard = 1 */", kind: Direct, shards: []int{1}},
		{name: "comment sharding_key", sql: "/* sharding_key: 3 */ SELECT * FROM accounts", kind: Direct, shards: shards(s3)},
		{name: "comment quoted key", sql: "/* sharding_key: 'test_value' */ SELECT * FROM users", kind: Direct, shards: shards(textShard("test_value"))},
		{name: "comment key as schema", sql: "/* sharding_key: tenant_b */ SELECT * FROM items", kind: Direct, shards: []int{2}},
		{name: "comment shard out of range", sql: "/* shard: 3 */ SELECT 1", code: wire.InvalidParameterValue, msg: "shard 3 does not exist"},
		{name: "comment shard not a number", sql: "/* shard: x */ SELECT 1", code: wire.InvalidParameterValue, msg: "not a shard number"},
		{name: "comment bad key", sql: "/* sharding_key: abc */ SELECT * FROM accounts", code: wire.InvalidTextRepresentation, msg: "invalid input syntax for type bigint"},
		{name: "comment in string is not a hint", sql: "SELECT '/* shard: 2 */' FROM accounts WHERE id = 3", kind: Direct, shards: shards(s3)},
		{name: "comment on unparsable SQL", sql: "/* shard: 1 */ SELEKT 1", kind: Direct, shards: []int{1}, write: true},
		{name: "comment overrides join check", sql: "/* shard: 0 */ SELECT * FROM accounts a JOIN orders o ON o.id = a.id", kind: Direct, shards: []int{0}},
		{name: "comment beats SET", sql: "/* shard: 0 */ SELECT * FROM accounts", hints: Hints{Shard: intp(2)}, kind: Direct, shards: []int{0}},
		{name: "SET shard", sql: "SELECT * FROM accounts WHERE id = 3", hints: Hints{Shard: intp(2)}, kind: Direct, shards: []int{2}},
		{name: "SET shard write", sql: "UPDATE accounts SET x = 1", hints: Hints{Shard: intp(0)}, kind: Direct, shards: []int{0}, write: true},
		{name: "SET shard out of range", sql: "SELECT 1", hints: Hints{Shard: intp(-1)}, code: wire.InvalidParameterValue, msg: "shard -1 does not exist"},
		{name: "SET sharding_key", sql: "SELECT * FROM accounts", hints: Hints{ShardingKey: strp("3")}, kind: Direct, shards: shards(s3)},
		{name: "SET sharding_key text", sql: "SELECT * FROM users", hints: Hints{ShardingKey: strp("test_value")}, kind: Direct, shards: shards(textShard("test_value"))},
		{name: "SET sharding_key list", sql: "SELECT * FROM regions", hints: Hints{ShardingKey: strp("zz")}, code: wire.CheckViolation, msg: "no shard"},
		{name: "SET sharding_key without tables", sql: "SELECT 1", hints: Hints{ShardingKey: strp("3")}, code: wire.InvalidParameterValue, msg: "different sharding functions"},
		{name: "SET sharding_key omni table", sql: "SELECT * FROM countries, accounts", hints: Hints{ShardingKey: strp("3")}, kind: Direct, shards: shards(s3)},
		{name: "hint on omni write", sql: "INSERT INTO countries VALUES ('x')", hints: Hints{Shard: intp(1)}, code: wire.FeatureNotSupported, msg: "omni table countries must be written on every shard"},
		{name: "comment on omni write", sql: "/* shard: 1 */ DELETE FROM countries", code: wire.FeatureNotSupported, msg: "omni table countries"},
		{name: "hint on BEGIN", sql: "BEGIN", hints: Hints{Shard: intp(1)}, kind: Transaction, shards: all},
		{name: "hint and key update", sql: "UPDATE accounts SET id = $1 WHERE id = $2", params: params(2, 2), hints: Hints{Shard: intp(s3)}, code: wire.FeatureNotSupported, msg: "the new value belongs on shard"},
		{name: "comment and key update", sql: "/* shard: 0 */ UPDATE accounts SET id = $1", params: params(2), kind: Direct, shards: []int{0}, write: true},
		{name: "comment and key update elsewhere", sql: "/* shard: 0 */ UPDATE accounts SET id = $1", params: params(3), code: wire.FeatureNotSupported, msg: "the new value belongs on shard 1"},
		{name: "hint on DO", sql: "DO $$ BEGIN PERFORM 1; END $$", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}, write: true},
	})
}

func TestRouteControl(t *testing.T) {
	r := newTestRouter(t, nil)
	runRouteCases(t, r, []routeCase{
		{name: "BEGIN", sql: "BEGIN", kind: Transaction, shards: all},
		{name: "START TRANSACTION", sql: "START TRANSACTION ISOLATION LEVEL SERIALIZABLE", kind: Transaction, shards: all},
		{name: "COMMIT", sql: "COMMIT", kind: Transaction, shards: all},
		{name: "SAVEPOINT", sql: "SAVEPOINT a", kind: Transaction, shards: all},
		{name: "SET", sql: "SET search_path TO tenant_a", kind: Session, shards: all},
		{name: "SET shardgate", sql: "SET shardgate.shard = 1", kind: Session, shards: all},
		{name: "SHOW", sql: "SHOW search_path", kind: Session, shards: all},
		{name: "RESET", sql: "RESET ALL", kind: Session, shards: all},
		{name: "DISCARD", sql: "DISCARD ALL", kind: Session, shards: all},
		{name: "LISTEN", sql: "LISTEN jobs", kind: Session, shards: all},
		{name: "PREPARE", sql: "PREPARE p AS SELECT 1", code: wire.FeatureNotSupported, msg: "PREPARE and EXECUTE"},
		{name: "DO", sql: "DO $$ BEGIN PERFORM 1; END $$", code: wire.FeatureNotSupported, msg: "DO runs arbitrary code"},
		{name: "CALL", sql: "CALL p()", code: wire.FeatureNotSupported, msg: "CALL runs arbitrary code"},
		{name: "syntax error", sql: "SELEKT 1", code: wire.SyntaxError, msg: "syntax error"},
	})
}

func TestRouteDDL(t *testing.T) {
	r := newTestRouter(t, nil)
	runRouteCases(t, r, []routeCase{
		{name: "CREATE TABLE", sql: "CREATE TABLE t (id bigint PRIMARY KEY)", kind: All, shards: all, write: true},
		{name: "ALTER TABLE", sql: "ALTER TABLE accounts ADD COLUMN x int", kind: All, shards: all, write: true},
		{name: "CREATE INDEX", sql: "CREATE INDEX CONCURRENTLY i ON accounts (name)", kind: All, shards: all, write: true},
		{name: "DROP", sql: "DROP TABLE IF EXISTS accounts, orders", kind: All, shards: all, write: true},
		{name: "TRUNCATE", sql: "TRUNCATE accounts", kind: All, shards: all, write: true},
		{name: "VACUUM", sql: "VACUUM ANALYZE accounts", kind: All, shards: all, write: true},
		{name: "CREATE VIEW", sql: "CREATE VIEW v AS SELECT * FROM accounts", kind: All, shards: all, write: true},
		{name: "CREATE TABLE AS omni", sql: "CREATE TABLE c2 AS SELECT * FROM countries", kind: All, shards: all, write: true},
		{name: "CREATE TABLE AS sharded", sql: "CREATE TABLE a2 AS SELECT * FROM accounts", code: wire.FeatureNotSupported, msg: "CREATE TABLE AS over sharded table accounts"},
		{name: "SELECT INTO sharded", sql: "SELECT * INTO a2 FROM accounts", code: wire.FeatureNotSupported, msg: "SELECT INTO over sharded table accounts"},
		{name: "CREATE TABLE AS one shard", sql: "CREATE TABLE a2 AS SELECT * FROM accounts WHERE id = 3", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}, write: true},
		{name: "DECLARE one shard", sql: "DECLARE c CURSOR FOR SELECT * FROM accounts WHERE id = 3", kind: Direct, shards: shards(intShard(3))},
		{name: "DECLARE fan-out", sql: "DECLARE c CURSOR FOR SELECT * FROM accounts", code: wire.FeatureNotSupported, msg: "cursor"},
		{name: "FETCH", sql: "FETCH 10 FROM c", kind: Session, shards: all},
		{name: "CREATE TEMP TABLE", sql: "CREATE TEMP TABLE tt (x int)", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "CREATE TABLE pg_temp", sql: "CREATE TABLE pg_temp.tt (x int)", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "CREATE TEMP TABLE AS", sql: "CREATE TEMPORARY TABLE tt AS SELECT 1 AS y", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "SELECT INTO TEMP", sql: "SELECT 1 AS y INTO TEMP tt", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "CREATE TEMP VIEW", sql: "CREATE TEMP VIEW tv AS SELECT 1", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "CREATE TEMP SEQUENCE", sql: "CREATE TEMP SEQUENCE ts", code: wire.FeatureNotSupported, msg: "temporary tables"},
		{name: "CREATE TEMP TABLE on one shard", sql: "CREATE TEMP TABLE tt (x int)", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}, write: true},
	})
}

func TestRouteMultiStatement(t *testing.T) {
	r := newTestRouter(t, nil)
	s3, s2 := intShard(3), intShard(2)
	runRouteCases(t, r, []routeCase{
		{name: "transaction", sql: "BEGIN; UPDATE accounts SET x = 1 WHERE id = 3; COMMIT", kind: Parts},
		{name: "same shard", sql: "SELECT * FROM accounts WHERE id = 3; DELETE FROM orders WHERE account_id = $1", params: params(3), kind: Direct, shards: shards(s3), write: true},
		{name: "any with direct", sql: "SELECT 1; SELECT * FROM countries; SELECT * FROM accounts WHERE id = 2", kind: Direct, shards: shards(s2)},
		{name: "omni reads", sql: "SELECT 1; SELECT * FROM countries", kind: OmniRead, shards: all},
		// Each DDL statement on its own, so that the client gets the
		// answer of each (one shard's).
		{name: "DDL batch", sql: "CREATE TABLE a (id int); CREATE INDEX ON a (id)", kind: Parts},
		{name: "SET and a read", sql: "SET work_mem = '2MB'; SELECT * FROM accounts WHERE id = 3", kind: Parts},
		{name: "SETs only", sql: "SET work_mem = '2MB'; SET search_path = public", kind: Session, shards: all},
		{name: "control only", sql: "SET x = 1; BEGIN", kind: Parts},
		{name: "different shards", sql: "SELECT * FROM accounts WHERE id = 3; SELECT * FROM accounts WHERE id = 2", kind: Parts},
		{name: "fan-out", sql: "SELECT 1; SELECT * FROM accounts", kind: Parts},
		{name: "DDL and direct", sql: "CREATE TABLE a (id int); INSERT INTO accounts (id) VALUES (3)", kind: Parts},
		{name: "hint", sql: "/* shard: 1 */ SELECT * FROM accounts; UPDATE orders SET x = 1", kind: Direct, shards: []int{1}, write: true},
	})
}

func TestRouteExplain(t *testing.T) {
	r := newTestRouter(t, nil)
	s3 := intShard(3)
	runRouteCases(t, r, []routeCase{
		{name: "direct", sql: "EXPLAIN SELECT * FROM accounts WHERE id = 3", kind: Direct, shards: shards(s3)},
		{name: "fan-out shows one shard", sql: "EXPLAIN SELECT count(*) FROM accounts", kind: Direct, shards: []int{0}},
		{name: "write not run", sql: "EXPLAIN UPDATE accounts SET x = 1", kind: Direct, shards: []int{0}},
		{name: "analyze direct write", sql: "EXPLAIN ANALYZE UPDATE accounts SET x = 1 WHERE id = $1", params: params(3), kind: Direct, shards: shards(s3), write: true},
		{name: "analyze fan-out", sql: "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM accounts", code: wire.FeatureNotSupported, msg: "EXPLAIN ANALYZE"},
		{name: "analyze off", sql: "EXPLAIN (ANALYZE false) SELECT * FROM accounts", kind: Direct, shards: []int{0}},
		{name: "omni", sql: "EXPLAIN SELECT * FROM countries", kind: OmniRead, shards: all},
	})
}
