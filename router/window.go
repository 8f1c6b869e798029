package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Window functions across shards.
//
// A window whose PARTITION BY holds the sharding key of the sharded
// table the query reads has each of its partitions on one shard: rows of
// one partition have one key. Every shard then computes the window
// functions of its rows completely, and the rows combine as those of a
// plain query (merged by ORDER BY, cut by LIMIT and OFFSET). Any other
// window, or a window over grouped rows, needs rows of several shards and
// is refused.

const hintWindow = "Partition every window by the sharding key (PARTITION BY key, …), or constrain the sharding key to one shard."

// checkWindow accepts a window function call whose window is partitioned
// by the sharding key: its own PARTITION BY, or that of the named window
// it refers to.
func (b *mergeBuilder) checkWindow(fc *pg_query.FuncCall) error {
	w := fc.Over
	if w.Name != "" && w.Refname == "" {
		w = b.namedWindow(w.Name) // OVER w
	}
	for depth := 0; w != nil && len(w.PartitionClause) == 0 && w.Refname != "" && depth < len(b.sel.WindowClause); depth++ {
		w = b.namedWindow(w.Refname) // OVER (w ORDER BY …), WINDOW v AS (w …)
	}
	if w == nil {
		return nil // PostgreSQL rejects a window that does not exist
	}
	if b.isKey != nil {
		for _, p := range w.PartitionClause {
			if b.isKey(p) {
				return nil
			}
		}
	}
	return unsupported(hintWindow, "window function %s() over a window not partitioned by the sharding key is not supported across shards", funcName(fc))
}

// namedWindow returns the window of the WINDOW clause called name.
func (b *mergeBuilder) namedWindow(name string) *pg_query.WindowDef {
	for _, n := range b.sel.WindowClause {
		if w := n.GetWindowDef(); w != nil && w.Name == name {
			return w
		}
	}
	return nil
}
