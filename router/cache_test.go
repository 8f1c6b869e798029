package router

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shardgate/shardgate/config"
)

func TestAnalyzeCaches(t *testing.T) {
	r := newTestRouter(t, nil)
	const sql = "SELECT * FROM accounts WHERE id = $1"
	s1, err := r.Analyze(sql)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := r.Analyze(sql)
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 {
		t.Error("Analyze of the same text returned two Statements")
	}
	if n := r.parses.Load(); n != 1 {
		t.Errorf("%d parses, want 1", n)
	}
	if _, err := r.Analyze(sql + " "); err != nil {
		t.Fatal(err)
	}
	if n := r.parses.Load(); n != 2 {
		t.Errorf("%d parses after another text, want 2", n)
	}
	// Errors are not cached: the catalog may know the table next time.
	for range 2 {
		if _, err := r.Analyze("SELEKT 1"); err == nil {
			t.Fatal("no syntax error")
		}
	}
	if n := r.parses.Load(); n != 4 {
		t.Errorf("%d parses after two failures, want 4", n)
	}
	long := "SELECT 1 /*" + strings.Repeat("x", maxCachedSQL) + "*/"
	for range 2 {
		if _, err := r.Analyze(long); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.parses.Load(); n != 6 {
		t.Errorf("%d parses after a long text twice, want 6", n)
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	r := newTestRouter(t, nil)
	r.cache = newCache(2)
	analyze := func(sql string) *Statement {
		t.Helper()
		s, err := r.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := analyze("SELECT 1")
	analyze("SELECT 2")
	if analyze("SELECT 1") != a { // a is now the most recent
		t.Fatal("SELECT 1 was not cached")
	}
	analyze("SELECT 3") // evicts SELECT 2
	if n := r.parses.Load(); n != 3 {
		t.Fatalf("%d parses, want 3", n)
	}
	if analyze("SELECT 1") != a {
		t.Error("SELECT 1 was evicted")
	}
	analyze("SELECT 2")
	if n := r.parses.Load(); n != 4 {
		t.Errorf("%d parses, want 4: SELECT 2 should have been evicted", n)
	}
	if n := r.cache.len(); n != 2 {
		t.Errorf("cache holds %d statements, want 2", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	r := newTestRouter(t, nil)
	r.cache = newCache(8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				sql := fmt.Sprintf("SELECT * FROM accounts WHERE id = $1 AND %d = %d", i%16, g%2)
				s, err := r.Analyze(sql)
				if err != nil {
					t.Error(err)
					return
				}
				p, err := s.Route(params(3), nil, Hints{})
				if err != nil || p.Shards[0] != intShard(3) {
					t.Errorf("%s: %v %v", sql, p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestOneShardPassesThrough(t *testing.T) {
	r, err := New(&config.Database{Name: "one", Shards: make([]config.Shard, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"SELECT * FROM accounts ORDER BY 1", "SELEKT garbage", "BEGIN"} {
		s, err := r.Analyze(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		p, err := s.Route(nil, nil, Hints{})
		if err != nil || p.Kind != Direct || p.Shards[0] != 0 || p.Merge != nil {
			t.Fatalf("%s: %v %v, want Direct [0]", sql, p, err)
		}
	}
	if n := r.parses.Load(); n != 0 {
		t.Errorf("%d parses, want none", n)
	}
	// With a replica the router must tell reads from writes.
	r, err = New(&config.Database{Name: "one", Shards: []config.Shard{{Replicas: []config.Replica{{Host: "r"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for sql, write := range map[string]bool{"SELECT * FROM t": false, "UPDATE t SET x = 1": true} {
		p, err := route(r, sql, nil, nil, Hints{})
		if err != nil || p.Shards[0] != 0 || p.Write != write {
			t.Errorf("%s: %v %v, want shard 0 write=%v", sql, p, err, write)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Database)
		msg  string
	}{
		{"no shards", func(db *config.Database) { db.Shards = nil }, "no shards"},
		{"bad type", func(db *config.Database) { db.ShardedTables[0].Type = "float" }, `sharded table "accounts": sharding: unknown key type "float"`},
		{"bad function", func(db *config.Database) { db.ShardedTables[1].Function = "modulo" }, `sharded table "orders": unknown sharding function "modulo"`},
		{"bad list value", func(db *config.Database) { db.ShardedTables[4].Type = "bigint" }, `sharded table "regions": sharding: list value "ca"`},
		{"mapping to missing shard", func(db *config.Database) { db.ShardedTables[4].Mapping[1].Shard = 5 }, `sharded table "regions": mapping to shard 5`},
		{"overlapping ranges", func(db *config.Database) { db.ShardedTables[5].Mapping[1].From = strp("50") }, `sharded table "events": sharding: ranges 0 and 1 overlap`},
		{"column rule", func(db *config.Database) { db.ShardedTables[7].Type = "" }, `sharded_tables[7] (column "tenant_id")`},
		{"schema shard", func(db *config.Database) { db.ShardedSchemas[0].Shard = 3 }, `sharded schema "tenant_a": shard 3 does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testDB()
			tc.edit(db)
			_, err := New(db, nil)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
}
