package router

import pg_query "github.com/pganalyze/pg_query_go/v6"

// Tables the analysis cannot place.
//
// A table that only a column-only sharding rule could cover, and that
// neither the catalog (ColumnOrder) nor the statement shows to have the
// rule's column, is unknown: sharded or omni, reading it from all shards or
// from one could both be wrong. Most often it does not exist at all (a
// typo), and PostgreSQL answers 42P01 with the name's position. The
// catalog cannot tell that apart from a table the proxy's catalog session
// does not see — created in the client's open transaction, found through
// the client's search_path, or a catalog that is unreachable — so the
// router does not route on the catalog's word.
//
// Instead a SELECT that writes nothing runs on every shard as written,
// with a Merge whose only field is Probe: when the shards fail (a table
// that does not exist fails on each of them, at Parse in the extended
// protocol), the client gets their error, PostgreSQL's own; when they
// answer, the executor discards the rows and answers the 0A000 refusal,
// so a wrong answer is never sent. Any other statement (a write, whose
// effects could not be undone, INSERT … SELECT, which would write the
// rows) is refused with that 0A000 as before.

// probeUnknown decides what an unknown table of part p, the analysis of
// statement n, makes of it: a probe or a refusal.
func (a *analyzer) probeUnknown(p *part, n *pg_query.Node) {
	if a.unknown == nil || p.unroutable != nil {
		return
	}
	sel := n.GetSelectStmt()
	if sel == nil || p.write || sel.IntoClause != nil || p.fanout != nil {
		p.unroutable = a.unknown
		return
	}
	p.probe = &Plan{Kind: All, Shards: a.r.all, Merge: &Merge{Probe: a.unknown}}
}

// probePlan is the plan of a probe (probeUnknown): every shard, or the
// only one.
func (p *part) probePlan(r *Router, env *routeEnv) (*Plan, error) {
	if env.shards == 1 {
		return r.direct(0, false), nil
	}
	return p.probe, nil
}
