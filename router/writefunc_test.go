package router

import (
	"testing"

	"github.com/shardgate/shardgate/config"
)

// TestWriteFunctions checks that reads calling functions that change state
// (sequences, advisory locks) and locking reads are writes: on a database
// with replicas they must run on the primary.
func TestWriteFunctions(t *testing.T) {
	db := &config.Database{Name: "app", Shards: []config.Shard{{Host: "a", Replicas: []config.Replica{{Host: "b"}}}}}
	r, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	for sql, write := range map[string]bool{
		"SELECT 1":                                              false,
		"SELECT * FROM t WHERE id = 1":                          false,
		"SELECT nextval('s')":                                   true,
		"SELECT pg_catalog.setval('s', 5)":                      true,
		"SELECT id FROM t WHERE x = (SELECT nextval('s'))":      true,
		"SELECT pg_advisory_lock(1)":                            true,
		"SELECT * FROM t FOR UPDATE":                            true,
		"SELECT * FROM t FOR SHARE":                             true,
		"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d": true,
		"INSERT INTO t VALUES (1)":                              true,
	} {
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		p, err := st.Route(nil, nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if p.Write != write {
			t.Errorf("%s: Write = %v, want %v", sql, p.Write, write)
		}
	}
}
