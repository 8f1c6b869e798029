package router

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// GROUPING SETS, ROLLUP and CUBE across shards.
//
// Every shard groups its rows by each of the query's grouping sets, as
// the client's statement says; a group of one set is then spread over the
// shards as a plain group is, and its partial aggregates merge the same
// way. What the merge must not do is combine groups of two sets that look
// alike: (a = 1, b = NULL) of the set (a, b) and (a = 1) of the set (a),
// whose b is NULL because the set does not group by b. So the shards also
// return GROUPING(every column of every set) as a hidden column, which is
// part of the group key: it is a different number for each set, because
// each set groups by different columns.
//
//	SELECT a, b, sum(x) FROM t GROUP BY ROLLUP (a, b)
//	  shards: SELECT a, b, sum(x), GROUPING(a, b) AS __shardgate_1
//	  FROM t GROUP BY ROLLUP (a, b)
//	  key: a, b, __shardgate_1
//
// Two sets that group by the same columns — GROUPING SETS ((a), (a)),
// ROLLUP (a, a), GROUP BY a, ROLLUP (a) — give PostgreSQL two equal groups
// each, which GROUPING cannot tell apart; they are refused (GROUP BY
// DISTINCT, which drops the repeated sets, runs). The empty set () is the
// query's total: every shard returns its row (also without rows), and the
// merge combines them into one, as PostgreSQL returns one.
//
// GROUPING(…) in the select list, HAVING or ORDER BY is a column the
// grouping determines: shards compute it, the same for every group of a
// set on every shard.

const hintRepeatedSet = "Name each grouping set once (GROUP BY DISTINCT drops the repeated ones), or constrain the sharding key to one shard."

// maxSetColumns is GROUPING's limit of arguments.
const maxSetColumns = 31

// hasGroupingSets reports whether GROUP BY holds GROUPING SETS, ROLLUP,
// CUBE or ().
func hasGroupingSets(sel *pg_query.SelectStmt) bool {
	return slices.ContainsFunc(sel.GroupClause, func(n *pg_query.Node) bool { return n.GetGroupingSet() != nil })
}

// groupingSets expands a GROUP BY with grouping sets as PostgreSQL does:
// the columns every set names, each once (a row (a, b) is its fields, as
// in PostgreSQL's flatten_grouping_sets), and each set as the bits of its
// columns. It refuses a GROUP BY whose sets PostgreSQL repeats.
type groupingSets struct {
	cols []*pg_query.Node
	sets []uint32
	// same is what two columns are compared as: a position or output
	// name is the select list item it names, and a column qualified by
	// the query's only table is the unqualified one, as PostgreSQL
	// resolves them to one.
	same []*pg_query.Node
	// resolve and names make same (mergeBuilder.resolveGroup,
	// onlyTable).
	resolve func(*pg_query.Node) *pg_query.Node
	names   [][]string
}

// maxGroupingSets is PostgreSQL's own limit (parse_agg.c), which it
// checks before a shard would.
const maxGroupingSets = 4096

func expandGroupingSets(sel *pg_query.SelectStmt, resolve func(*pg_query.Node) *pg_query.Node) (*groupingSets, error) {
	g := &groupingSets{resolve: resolve, names: onlyTable(sel)}
	sets := []uint32{0}
	for _, item := range sel.GroupClause {
		s, err := g.item(item)
		if err != nil {
			return nil, err
		}
		var product []uint32
		for _, a := range sets {
			for _, b := range s {
				product = append(product, a|b)
			}
			if len(product) > maxGroupingSets {
				return nil, rejectf("more than %d grouping sets", maxGroupingSets)
			}
		}
		sets = product
	}
	if sel.GroupDistinct {
		slices.Sort(sets)
		sets = slices.Compact(sets)
	} else {
		sorted := slices.Clone(sets)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) < len(sets) {
			return nil, unsupported(hintRepeatedSet, "a GROUP BY that repeats a grouping set is not supported across shards")
		}
	}
	g.sets = sets
	return g, nil
}

// item returns the sets of one GROUP BY item or one element of GROUPING
// SETS (…).
func (g *groupingSets) item(n *pg_query.Node) ([]uint32, error) {
	gs := n.GetGroupingSet()
	if gs == nil {
		u, err := g.unit(n)
		return []uint32{u}, err
	}
	switch gs.Kind {
	case pg_query.GroupingSetKind_GROUPING_SET_EMPTY:
		return []uint32{0}, nil
	case pg_query.GroupingSetKind_GROUPING_SET_ROLLUP, pg_query.GroupingSetKind_GROUPING_SET_CUBE:
		units := make([]uint32, len(gs.Content))
		for i, c := range gs.Content {
			u, err := g.unit(c)
			if err != nil {
				return nil, err
			}
			units[i] = u
		}
		if gs.Kind == pg_query.GroupingSetKind_GROUPING_SET_ROLLUP {
			sets := make([]uint32, 0, len(units)+1)
			for i := len(units); i >= 0; i-- {
				var s uint32
				for _, u := range units[:i] {
					s |= u
				}
				sets = append(sets, s)
			}
			return sets, nil
		}
		if len(units) > 12 {
			return nil, rejectf("CUBE of more than 12 elements") // PostgreSQL's limit
		}
		sets := make([]uint32, 0, 1<<len(units))
		for m := (1 << len(units)) - 1; m >= 0; m-- {
			var s uint32
			for i, u := range units {
				if m&(1<<i) != 0 {
					s |= u
				}
			}
			sets = append(sets, s)
		}
		return sets, nil
	case pg_query.GroupingSetKind_GROUPING_SET_SETS:
		var sets []uint32
		for _, c := range gs.Content {
			s, err := g.item(c)
			if err != nil {
				return nil, err
			}
			sets = append(sets, s...)
		}
		return sets, nil
	}
	return nil, rejectf("this kind of grouping set")
}

// unit returns the columns of an element of ROLLUP or CUBE, or of a set:
// one expression, or the fields of a row (a, b).
func (g *groupingSets) unit(n *pg_query.Node) (uint32, error) {
	if r := n.GetRowExpr(); r != nil && r.RowFormat == pg_query.CoercionForm_COERCE_IMPLICIT_CAST {
		var u uint32
		for _, a := range r.Args {
			b, err := g.unit(a)
			if err != nil {
				return 0, err
			}
			u |= b
		}
		return u, nil
	}
	if n.GetGroupingSet() != nil {
		// PostgreSQL's grammar allows no set inside ROLLUP or CUBE;
		// the shards give its error.
		return 0, rejectf("a grouping set inside ROLLUP or CUBE")
	}
	same := g.resolve(n)
	if g.names != nil {
		same = unqualified(same, g.names)
	}
	for i, c := range g.same {
		if sameExpr(c, same) {
			return 1 << i, nil
		}
	}
	if len(g.cols) == maxSetColumns {
		return 0, rejectf("grouping sets over more than %d columns", maxSetColumns)
	}
	g.cols = append(g.cols, n)
	g.same = append(g.same, same)
	return 1 << (len(g.cols) - 1), nil
}

// groupingTag returns GROUPING(args…), the number that tells the sets'
// groups apart.
func groupingTag(args []*pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_GroupingFunc{GroupingFunc: &pg_query.GroupingFunc{Args: args, Location: -1}}}
}

// groupColumns returns the expressions GROUP BY items name: plain items
// as they are, and every column of GROUPING SETS, ROLLUP and CUBE.
func groupColumns(items []*pg_query.Node) []*pg_query.Node {
	var out []*pg_query.Node
	for _, n := range items {
		gs := n.GetGroupingSet()
		if gs == nil {
			out = append(out, n)
			continue
		}
		for _, c := range gs.Content {
			if r := c.GetRowExpr(); r != nil && r.RowFormat == pg_query.CoercionForm_COERCE_IMPLICIT_CAST {
				out = append(out, groupColumns(r.Args)...)
			} else {
				out = append(out, groupColumns([]*pg_query.Node{c})...)
			}
		}
	}
	return out
}
