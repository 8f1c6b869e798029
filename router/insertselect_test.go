package router

import (
	"slices"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestRouteInsertSelect(t *testing.T) {
	s3 := intShard(3)
	tenant := []string{"tenant_a"}
	for _, tc := range []struct {
		name    string
		sql     string
		params  [][]byte
		path    []string
		catalog bool

		source    Kind  // where the SELECT runs
		shards    []int // … on which shards
		merge     bool  // the SELECT's rows need a merge
		query     string
		key       int
		untyped   []Column
		prefix    string
		suffix    string
		code, msg string
	}{
		{name: "generate_series", sql: "INSERT INTO accounts (id, name) SELECT g, 'user ' || g FROM generate_series(1, 100) g",
			source: Any, shards: all, query: "SELECT g, 'user ' || g FROM generate_series(1, 100) g", key: 0,
			prefix: "INSERT INTO accounts (id, name) VALUES "},
		{name: "key second", sql: "INSERT INTO accounts (name, id) SELECT 'x', g FROM generate_series(1, 3) g",
			source: Any, shards: all, key: 1, untyped: []Column{0}, prefix: "INSERT INTO accounts (name, id) VALUES "},
		{name: "untyped literals", sql: "INSERT INTO accounts (id, name, country, balance) SELECT 1, 'a', NULL, 2.5",
			source: Any, shards: all, untyped: []Column{1, 2}},
		{name: "untyped after star", sql: "INSERT INTO accounts (id, name, country) SELECT *, 'x' FROM countries",
			source: OmniRead, shards: all, untyped: []Column{-1}},
		{name: "UNION resolves literals", sql: "INSERT INTO accounts (id, name) SELECT 1, 'a' UNION ALL SELECT 2, 'b'",
			source: Any, shards: all},
		{name: "from an omni table", sql: "INSERT INTO accounts (id, name) SELECT length(code), name FROM countries",
			source: OmniRead, shards: all},
		{name: "from a sharded table", sql: "INSERT INTO accounts (id, name) SELECT account_id + 1000, 'o' FROM orders",
			source: All, shards: all, untyped: []Column{1}},
		{name: "from itself", sql: "INSERT INTO accounts (id, name) SELECT id + 1000, name FROM accounts",
			source: All, shards: all},
		{name: "from one shard", sql: "INSERT INTO accounts (id) SELECT account_id FROM orders WHERE account_id = $1", params: params(3),
			source: Direct, shards: shards(s3)},
		{name: "merged", sql: "INSERT INTO accounts (id) SELECT account_id FROM orders ORDER BY account_id LIMIT 10",
			source: All, shards: all, merge: true},
		{name: "aggregate", sql: "INSERT INTO accounts (id, balance) SELECT account_id, sum(amount) FROM orders GROUP BY account_id",
			source: All, shards: all, merge: true},
		{name: "WITH before INSERT", sql: "WITH w AS (SELECT 5 AS n) INSERT INTO accounts (id) SELECT n FROM w",
			source: Any, shards: all, query: "WITH w AS (SELECT 5 AS n) SELECT n FROM w"},
		{name: "WITH before SELECT", sql: "INSERT INTO accounts (id) WITH w AS (SELECT 5 AS n) SELECT n FROM w",
			source: Any, shards: all, query: "WITH w AS (SELECT 5 AS n) SELECT n FROM w"},
		{name: "ON CONFLICT DO NOTHING", sql: "INSERT INTO accounts AS a (id) SELECT 1 ON CONFLICT (id) DO NOTHING",
			source: Any, shards: all, prefix: "INSERT INTO accounts AS a (id) VALUES ", suffix: " ON CONFLICT (id) DO NOTHING"},
		{name: "OVERRIDING", sql: "INSERT INTO accounts (id) OVERRIDING SYSTEM VALUE SELECT 1",
			source: Any, shards: all, prefix: "INSERT INTO accounts (id) OVERRIDING SYSTEM VALUE VALUES "},
		{name: "catalog column order", sql: "INSERT INTO accounts SELECT 7, 'x'", catalog: true,
			source: Any, shards: all, key: 0, untyped: []Column{1}, prefix: "INSERT INTO accounts VALUES "},
		{name: "column rule", sql: "INSERT INTO invoices (id, tenant_id) SELECT g, 5 FROM generate_series(1, 3) g",
			source: Any, shards: all, key: 1, prefix: "INSERT INTO invoices (id, tenant_id) VALUES "},
		{name: "qualified target, unqualified source on a sharded schema path", sql: "INSERT INTO public.accounts (id) SELECT 1 FROM countries", path: tenant,
			source: Direct, shards: []int{1}},

		{name: "RETURNING", sql: "INSERT INTO accounts (id) SELECT 1 RETURNING id", code: wire.FeatureNotSupported, msg: "RETURNING"},
		{name: "ON CONFLICT DO UPDATE", sql: "INSERT INTO accounts (id) SELECT 1 ON CONFLICT (id) DO UPDATE SET name = 'x'", code: wire.FeatureNotSupported, msg: "ON CONFLICT DO UPDATE"},
		{name: "ON CONFLICT parameter", sql: "INSERT INTO accounts (id) SELECT 1 ON CONFLICT (id) WHERE id > $1 DO NOTHING", params: params(1), code: wire.FeatureNotSupported, msg: "parameter in ON CONFLICT"},
		{name: "data-modifying WITH", sql: "WITH d AS (DELETE FROM orders RETURNING account_id) INSERT INTO accounts (id) SELECT account_id FROM d", code: wire.FeatureNotSupported, msg: "data-modifying WITH query"},
		{name: "two WITH clauses", sql: "WITH a AS (SELECT 1 AS n) INSERT INTO accounts (id) WITH b AS (SELECT 2 AS n) SELECT n FROM a, b", code: wire.FeatureNotSupported, msg: "WITH clauses before both"},
		{name: "key not selected", sql: "INSERT INTO accounts (name) SELECT 'x'", code: wire.FeatureNotSupported, msg: `does not set its sharding column "id"`},
		{name: "part of the key", sql: "INSERT INTO accounts (id[1]) SELECT 1", code: wire.FeatureNotSupported, msg: "a part of its sharding column"},
		{name: "no column list", sql: "INSERT INTO accounts SELECT 1", code: wire.FeatureNotSupported, msg: "without a column list"},
		{name: "SELECT that cannot run across shards", sql: "INSERT INTO accounts (id) SELECT a.id FROM accounts a JOIN orders o ON o.id = a.id", code: wire.FeatureNotSupported, msg: "not joined on their sharding keys"},
		{name: "SELECT whose merge is refused", sql: "INSERT INTO accounts (id, name) SELECT account_id, xmlagg(note::xml) FROM orders GROUP BY account_id", code: wire.FeatureNotSupported, msg: "xmlagg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *Router
			if tc.catalog {
				r = newTestRouter(t, testCatalog)
			} else {
				r = newTestRouter(t, nil)
			}
			plan, err := route(r, tc.sql, tc.params, nil, Hints{SearchPath: tc.path})
			if tc.code != "" {
				if err == nil {
					t.Fatalf("got plan %v, want error %s", plan, tc.code)
				}
				if got := errCode(err); got != tc.code || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %v (%s), want %s mentioning %q", err, got, tc.code, tc.msg)
				}
				if e, _ := wire.AsError(err); tc.code == wire.FeatureNotSupported && e.Hint == "" {
					t.Errorf("refusal %q has no hint", e.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			is := plan.InsertSelect
			if plan.Kind != All || !slices.Equal(plan.Shards, all) || !plan.Write || is == nil {
				t.Fatalf("plan %v (InsertSelect %v), want All %v write with InsertSelect", plan, is, all)
			}
			src := is.Source
			if src.Kind != tc.source || !slices.Equal(src.Shards, tc.shards) || (src.Merge != nil) != tc.merge {
				t.Fatalf("source %v (merge %v), want %v %v merge=%v", src, src.Merge, tc.source, tc.shards, tc.merge)
			}
			if tc.query != "" && is.Query != tc.query {
				t.Errorf("query %q, want %q", is.Query, tc.query)
			}
			if is.Key != tc.key || !slices.Equal(is.Untyped, tc.untyped) {
				t.Errorf("key %d untyped %v, want %d %v", is.Key, is.Untyped, tc.key, tc.untyped)
			}
			if tc.prefix != "" && (is.Prefix != tc.prefix || is.Suffix != tc.suffix) {
				t.Errorf("INSERT %q … %q, want %q … %q", is.Prefix, is.Suffix, tc.prefix, tc.suffix)
			}
		})
	}
}

// TestRouteInsertSelectOther: INSERT … SELECT into tables that are not
// sharded, or routed by a hint, keeps its one-shard rules.
func TestRouteInsertSelectOther(t *testing.T) {
	runRouteCases(t, newTestRouter(t, nil), []routeCase{
		{name: "hint", sql: "/* shard: 2 */ INSERT INTO accounts (id) SELECT id FROM orders", kind: Direct, shards: []int{2}, write: true},
		{name: "session hint over a refusal", sql: "INSERT INTO accounts (id) SELECT 1 RETURNING id", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}, write: true},
		{name: "omni target", sql: "INSERT INTO countries SELECT 'x', 'y'", kind: OmniWrite, shards: all, write: true},
		{name: "omni target from a sharded table", sql: "INSERT INTO countries SELECT email, email FROM users", code: wire.FeatureNotSupported, msg: "writes omni table countries"},
		{name: "pinned target", sql: "INSERT INTO tenant_a.items SELECT 1", kind: Direct, shards: []int{1}, write: true},
		{name: "pinned target from a sharded table", sql: "INSERT INTO tenant_a.items SELECT id FROM accounts WHERE id = 2", code: wire.FeatureNotSupported, msg: "INSERT … SELECT over sharded table accounts"},
		{name: "sharded schema on search_path", sql: "INSERT INTO accounts (id) SELECT 1 FROM countries", hints: Hints{SearchPath: []string{"tenant_a"}}, kind: Direct, shards: []int{1}, write: true},
		{name: "with other statements", sql: "INSERT INTO accounts (id) SELECT 1; SELECT 1", kind: Parts},
	})
}

func TestInsertSelectKey(t *testing.T) {
	r := newTestRouter(t, nil)
	plan, err := route(r, "INSERT INTO accounts (id, name) SELECT g, 'x' FROM generate_series(1, 3) g", nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	is := plan.InsertSelect
	for _, tc := range []struct {
		ncols int
		oid   uint32
		code  string
	}{
		{2, oidInt4, ""},
		{2, oidInt8, ""},
		{2, oidInt2, ""},
		{2, oidUnknown, ""},
		{2, 1700, wire.FeatureNotSupported}, // numeric
		{2, oidText, wire.FeatureNotSupported},
		{0, oidInt4, wire.FeatureNotSupported}, // the key is left to its default
	} {
		err := is.CheckKey(tc.ncols, tc.oid, "some type")
		if got := ""; err != nil {
			got = errCode(err)
			if got != tc.code {
				t.Errorf("CheckKey(%d, %d): %v, want %q", tc.ncols, tc.oid, err, tc.code)
			}
		} else if tc.code != "" {
			t.Errorf("CheckKey(%d, %d) accepted, want %s", tc.ncols, tc.oid, tc.code)
		}
	}
	if s, err := is.Shard([]byte("3")); err != nil || s != intShard(3) {
		t.Errorf("Shard(3) = %d, %v; want %d", s, err, intShard(3))
	}
	if s, err := is.Shard(nil); err != nil || s != 0 {
		t.Errorf("Shard(NULL) = %d, %v; want 0", s, err)
	}
	if _, err := is.Shard([]byte("abc")); errCode(err) != wire.InvalidTextRepresentation {
		t.Errorf("Shard(abc): %v, want 22P02", err)
	}

	// A text key: an untyped literal key routes by its text too.
	plan, err = route(r, "INSERT INTO users (email) SELECT 'test_value'", nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	is = plan.InsertSelect
	if err := is.CheckKey(1, oidText, "text"); err != nil {
		t.Errorf("text key: %v", err)
	}
	if err := is.CheckKey(1, oidInt4, "integer"); err != nil {
		t.Errorf("untyped literal key: %v", err) // column 0 is untyped
	}
	if s, err := is.Shard([]byte("test_value")); err != nil || s != textShard("test_value") {
		t.Errorf("Shard(test_value) = %d, %v", s, err)
	}
}
