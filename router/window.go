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
// is refused — unless the query's GROUP BY holds the sharding key too:
// then each group is on one shard, each shard's groups and windows are
// complete, and the query runs whole on every shard (HAVING included) and
// merges as a plain one.

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
	if rw := b.resolvedWindow(fc); rw != nil && len(rw.PartitionClause) == 0 && b.isKey != nil {
		if f, ok := proxyWindowFunc(fc, rw); ok {
			b.proxyWins = append(b.proxyWins, proxyWindow{fc: fc, order: rw.OrderClause, f: f})
			return nil
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

// completeGroups lets a grouped query with window functions run as a plain
// one when its GROUP BY holds the sharding key, and refuses it otherwise.
func (b *mergeBuilder) completeGroups() error {
	if !b.groupedByKey() {
		return unsupported(hintWindow, "window functions over groups that do not hold the sharding key are not supported across shards")
	}
	b.grouped, b.complete = false, true
	b.distinctArgs, b.collectOrder, b.subgroups = nil, nil, nil
	return nil
}

// groupedByKey reports whether an item of GROUP BY is the sharding key: a
// column, or the position of a select list item that is one.
func (b *mergeBuilder) groupedByKey() bool {
	if b.isKey == nil {
		return false
	}
	for _, g := range b.sel.GroupClause {
		if p, ok := b.position(g); ok && p >= 0 && p < len(b.sel.TargetList) {
			if rt := b.sel.TargetList[p].GetResTarget(); rt != nil {
				g = rt.Val
			}
		}
		if b.isKey(g) {
			return true
		}
	}
	return false
}
