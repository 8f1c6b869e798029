package router

import (
	"reflect"
	"slices"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestRouteInsert(t *testing.T) {
	s3, s2, s1 := intShard(3), intShard(2), intShard(1)
	runRouteCases(t, newTestRouter(t, nil), []routeCase{
		{name: "constant", sql: "INSERT INTO accounts (id, name) VALUES (3, 'a')", kind: Direct, shards: shards(s3), write: true},
		{name: "parameters", sql: "INSERT INTO accounts (id, name) VALUES ($1, $2)", params: params(2, "x"), kind: Direct, shards: shards(s2), write: true},
		{name: "key not first", sql: "INSERT INTO accounts (name, id) VALUES ($1, $2) RETURNING id", params: params("x", 3), kind: Direct, shards: shards(s3), write: true},
		{name: "binary parameter", sql: "INSERT INTO accounts (id) VALUES ($1)", params: params(int8Binary(3)), formats: []int16{1}, kind: Direct, shards: shards(s3), write: true},
		{name: "cast", sql: "INSERT INTO accounts (id) VALUES ($1::int8)", params: params(1), kind: Direct, shards: shards(s1), write: true},
		{name: "string constant", sql: "INSERT INTO accounts (id) VALUES ('2')", kind: Direct, shards: shards(s2), write: true},
		{name: "NULL", sql: "INSERT INTO accounts (id) VALUES (NULL)", kind: Direct, shards: []int{0}, write: true},
		{name: "NULL parameter", sql: "INSERT INTO accounts (id) VALUES ($1)", params: params(nil), kind: Direct, shards: []int{0}, write: true},
		{name: "rows on one shard", sql: "INSERT INTO accounts (id) VALUES ($1), ($2)", params: params(3, 3), kind: Direct, shards: shards(s3), write: true},
		{name: "rows on two shards", sql: "INSERT INTO accounts (id) VALUES ($1), ($2), ($3)", params: params(2, 3, 2), kind: Multi, shards: shards(s2, s3), write: true},
		{name: "rows everywhere", sql: "INSERT INTO accounts (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c')", kind: All, shards: all, write: true},
		{name: "text key", sql: "INSERT INTO users (email) VALUES ('test_value')", kind: Direct, shards: shards(textShard("test_value")), write: true},
		{name: "list key", sql: "INSERT INTO regions (code, name) VALUES ('ca', 'Canada')", kind: Direct, shards: []int{0}, write: true},
		{name: "range key", sql: "INSERT INTO events (day) VALUES (99)", kind: Direct, shards: []int{0}, write: true},
		{name: "ON CONFLICT", sql: "INSERT INTO accounts (id, n) VALUES (3, 1) ON CONFLICT (id) DO UPDATE SET n = accounts.n + 1", kind: Direct, shards: shards(s3), write: true},
		{name: "ON CONFLICT keeps key", sql: "INSERT INTO accounts (id) VALUES (3) ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id", kind: Direct, shards: shards(s3), write: true},
		{name: "ON CONFLICT same key", sql: "INSERT INTO accounts (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET id = $1", params: params(3), kind: Direct, shards: shards(s3), write: true},
		{name: "ON CONFLICT moves key", sql: "INSERT INTO accounts (id) VALUES (3) ON CONFLICT (id) DO UPDATE SET id = 2", code: wire.FeatureNotSupported, msg: "sharding key"},
		{name: "in WITH", sql: "WITH x AS (INSERT INTO accounts (id) VALUES (3) RETURNING *) SELECT * FROM x", kind: Direct, shards: shards(s3), write: true},
		{name: "in WITH across shards", sql: "WITH x AS (INSERT INTO accounts (id) VALUES (3), (2) RETURNING *) SELECT * FROM x", code: wire.FeatureNotSupported, msg: "WITH query over sharded table accounts"},
		{name: "subquery in VALUES", sql: "INSERT INTO accounts (id, n) VALUES (3, (SELECT count(*) FROM orders WHERE account_id = 3))", kind: Direct, shards: shards(s3), write: true},
		{name: "subquery in VALUES elsewhere", sql: "INSERT INTO accounts (id, n) VALUES (3, (SELECT count(*) FROM orders))", code: wire.FeatureNotSupported, msg: "subquery over sharded table orders"},
		{name: "pinned schema", sql: "INSERT INTO tenant_a.items VALUES (1)", kind: Direct, shards: []int{1}, write: true},
		{name: "no column list", sql: "INSERT INTO accounts VALUES (1, 'a')", code: wire.FeatureNotSupported, msg: "without a column list"},
		{name: "no key column", sql: "INSERT INTO accounts (name) VALUES ('a')", code: wire.FeatureNotSupported, msg: `does not set its sharding column "id"`},
		{name: "DEFAULT", sql: "INSERT INTO accounts (id) VALUES (DEFAULT)", code: wire.FeatureNotSupported, msg: "row 1 of INSERT into sharded table accounts: its sharding key is DEFAULT"},
		{name: "DEFAULT VALUES", sql: "INSERT INTO accounts DEFAULT VALUES", code: wire.FeatureNotSupported, msg: "DEFAULT VALUES"},
		{name: "expression", sql: "INSERT INTO accounts (id) VALUES (1), (1 + 1)", code: wire.FeatureNotSupported, msg: "row 2 of INSERT into sharded table accounts: its sharding key is an expression"},
		{name: "fraction", sql: "INSERT INTO accounts (id) VALUES (1.5)", code: wire.FeatureNotSupported, msg: "not an integer"},
		{name: "other cast", sql: "INSERT INTO accounts (id) VALUES ('1'::text)", code: wire.FeatureNotSupported, msg: "cast"},
		{name: "SELECT", sql: "INSERT INTO accounts (id) SELECT id FROM accounts", kind: All, shards: all, write: true},
		{name: "SELECT in WITH", sql: "WITH x AS (INSERT INTO accounts (id) SELECT 1 RETURNING *) SELECT * FROM x", code: wire.FeatureNotSupported, msg: "INSERT … SELECT into sharded table accounts inside WITH query"},
		{name: "SELECT with hint", sql: "INSERT INTO accounts (id) SELECT id FROM accounts", hints: Hints{Shard: intp(1)}, kind: Direct, shards: []int{1}, write: true},
		{name: "bad constant", sql: "INSERT INTO accounts (id) VALUES ('abc')", code: wire.InvalidTextRepresentation, msg: `invalid input syntax for type bigint: "abc"`},
		{name: "out of range", sql: "INSERT INTO events (day) VALUES (3000000000)", code: wire.NumericValueOutOfRange, msg: "out of range for type integer"},
		{name: "bad parameter", sql: "INSERT INTO accounts (id) VALUES ($1)", params: params("abc"), code: wire.InvalidTextRepresentation, msg: "invalid input syntax"},
		{name: "bad binary parameter", sql: "INSERT INTO accounts (id) VALUES ($1)", params: params([]byte{1, 2, 3}), formats: []int16{1}, code: wire.InvalidBinaryRepresentation, msg: "incorrect binary data format"},
		{name: "missing parameter", sql: "INSERT INTO accounts (id) VALUES ($1)", code: wire.UndefinedParameter, msg: "there is no parameter $1"},
		{name: "unmapped list value", sql: "INSERT INTO regions (code) VALUES ('zz')", code: wire.CheckViolation, msg: `no shard of table "regions" holds sharding key zz`},
		{name: "unmapped list parameter", sql: "INSERT INTO regions (code) VALUES ($1)", params: params("zz"), code: wire.CheckViolation, msg: "no shard"},
		{name: "too few values", sql: "INSERT INTO accounts (name, id) VALUES ('a')", code: wire.SyntaxError, msg: "more target columns"},
	})
	runRouteCases(t, newTestRouter(t, testCatalog), []routeCase{
		{name: "catalog column order", sql: "INSERT INTO accounts VALUES (1, 'a')", kind: Direct, shards: shards(s1), write: true},
		{name: "catalog column order, key missing", sql: "INSERT INTO notes VALUES (1, 'a')", kind: OmniWrite, shards: all, write: true},
	})
}

func TestInsertRows(t *testing.T) {
	r := newTestRouter(t, nil)
	s, err := r.Analyze("INSERT INTO accounts (id, name) VALUES ($1, $2), ($3, $4), ($5, 'x') ON CONFLICT (id) DO UPDATE SET name = $6 RETURNING id")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := s.Route(params(2, "a", 3, "b", 2, "c"), nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	s2, s3 := intShard(2), intShard(3)
	want := map[int][]int{s2: {0, 2}, s3: {1}}
	if !reflect.DeepEqual(plan.InsertRows, want) || plan.Kind != Multi {
		t.Fatalf("got %v rows %v, want Multi rows %v", plan, plan.InsertRows, want)
	}
	for _, tc := range []struct {
		rows   []int
		sql    string
		params []int
	}{
		{[]int{0, 2}, "INSERT INTO accounts (id, name) VALUES ($1, $2), ($3, 'x') ON CONFLICT (id) DO UPDATE SET name = $4 RETURNING id", []int{0, 1, 4, 5}},
		{[]int{1}, "INSERT INTO accounts (id, name) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET name = $3 RETURNING id", []int{2, 3, 5}},
	} {
		sql, ps, err := s.InsertSQL(tc.rows)
		if err != nil {
			t.Fatal(err)
		}
		if sql != tc.sql || !slices.Equal(ps, tc.params) {
			t.Errorf("rows %v:\n got %s %v\nwant %s %v", tc.rows, sql, ps, tc.sql, tc.params)
		}
	}
	if _, _, err := s.InsertSQL([]int{3}); err == nil {
		t.Error("InsertSQL of a row that does not exist succeeded")
	}
	sel, _ := r.Analyze("SELECT 1")
	if _, _, err := sel.InsertSQL([]int{0}); err == nil {
		t.Error("InsertSQL of a SELECT succeeded")
	}
}

func TestRouteCopy(t *testing.T) {
	r := newTestRouter(t, nil)
	runRouteCases(t, r, []routeCase{
		{name: "sharded", sql: "COPY accounts (id, name) FROM STDIN", kind: All, shards: all, write: true},
		{name: "omni", sql: "COPY countries FROM STDIN", kind: OmniWrite, shards: all, write: true},
		{name: "pinned", sql: "COPY tenant_a.items FROM STDIN", kind: Direct, shards: []int{1}, write: true},
		{name: "out", sql: "COPY accounts TO STDOUT", kind: All, shards: all},
		{name: "omni out", sql: "COPY countries TO STDOUT", kind: OmniRead, shards: all},
		{name: "query out", sql: "COPY (SELECT * FROM accounts WHERE id = 3) TO STDOUT", kind: Direct, shards: shards(intShard(3))},
		{name: "query out fan-out", sql: "COPY (SELECT id FROM accounts WHERE balance > 0) TO STDOUT", kind: All, shards: all},
		{name: "query out merged", sql: "COPY (SELECT * FROM accounts ORDER BY id) TO STDOUT", kind: All, shards: all},
		{name: "query out merged to a file", sql: "COPY (SELECT * FROM accounts ORDER BY id) TO '/tmp/x'", code: wire.FeatureNotSupported, msg: "COPY of a query"},
		{name: "no column list", sql: "COPY accounts FROM STDIN", code: wire.FeatureNotSupported, msg: "without a column list"},
		{name: "no key column", sql: "COPY accounts (name) FROM STDIN", code: wire.FeatureNotSupported, msg: "does not include its sharding column"},
		{name: "server file", sql: "COPY accounts (id) FROM '/tmp/x'", code: wire.FeatureNotSupported, msg: "from a file"},
		{name: "hint", sql: "COPY accounts (id) FROM STDIN", hints: Hints{Shard: intp(2)}, kind: Direct, shards: []int{2}, write: true},
	})
	for _, tc := range []struct {
		sql    string
		copy   Copy
		values map[string]int // field → shard
	}{
		{"COPY accounts (name, id) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'n', QUOTE '''', ESCAPE '\\')",
			Copy{Format: "csv", Header: true, Delimiter: ";", Null: "n", Quote: "'", Escape: `\`, Column: 1, Table: "accounts", KeyName: "id", Fields: 2},
			map[string]int{"3": intShard(3), "2": intShard(2), "": -1}},
		{"COPY accounts (id) FROM STDIN (FORMAT binary)", Copy{Format: "binary", Column: 0, Table: "accounts", KeyName: "id", Fields: 1},
			map[string]int{string(int8Binary(3)): intShard(3)}},
		{"COPY accounts (id) FROM STDIN CSV HEADER", Copy{Format: "csv", Header: true, Column: 0, Table: "accounts", KeyName: "id", Fields: 1}, nil},
	} {
		plan, err := route(r, tc.sql, nil, nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		got := *plan.Copy
		got.key = nil
		if !reflect.DeepEqual(got, tc.copy) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.sql, got, tc.copy)
		}
		for v, want := range tc.values {
			shard, err := plan.Copy.Shard([]byte(v))
			if want < 0 {
				if err == nil {
					t.Errorf("%s: Shard(%q) = %d, want an error", tc.sql, v, shard)
				}
				continue
			}
			if err != nil || shard != want {
				t.Errorf("%s: Shard(%q) = %d, %v, want %d", tc.sql, v, shard, err, want)
			}
		}
		if shard, err := plan.Copy.Shard(nil); err != nil || shard != 0 {
			t.Errorf("%s: Shard(NULL) = %d, %v, want 0", tc.sql, shard, err)
		}
	}
}
