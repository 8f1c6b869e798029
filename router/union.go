package router

import (
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Set operations across shards: a top-level UNION ALL or UNION of queries
// that each filter per row over sharded tables (scope.go: unionAll).

// unionMerge is the Merge of a top-level UNION ALL (scope.go: unionAll)
// across shards: PostgreSQL answers the rows of its first query, then the
// second's, and so on (its Append runs them in turn), and so does each
// shard. Each query gets a hidden last column with its number, which
// the shards' streams are merged by: the client sees each query's rows
// after the one before, as from one server.
func unionMerge(sel *pg_query.SelectStmt, version int32) (*Merge, error) {
	if !unionAll(sel, true) {
		return setOpMerge(sel, version) // INTERSECT or EXCEPT in it, or a UNION under a UNION ALL
	}
	if !sel.All || len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil {
		return sortedUnionMerge(sel, version)
	}
	tagged := proto.Clone(sel).(*pg_query.SelectStmt)
	for k, leaf := range unionLeaves(tagged, nil) {
		leaf.TargetList = append(leaf.TargetList, pg_query.MakeResTargetNodeWithVal(pg_query.MakeAConstIntNode(int64(k+1), -1), -1))
	}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tagged}})
	if err != nil {
		return nil, err
	}
	return &Merge{OrderBy: []SortKey{{Column: -1}}, HiddenColumns: 1, Rewritten: sql}, nil
}

// sortedUnionMerge is the Merge of a UNION ALL with ORDER BY, LIMIT or
// OFFSET, or of a UNION: each shard sorts its rows of the union and
// returns at most LIMIT + OFFSET of them (FETCH FIRST LIMIT + OFFSET ROWS
// WITH TIES: those and the rows tied with the last); the proxy merges the
// sorted streams and applies OFFSET and LIMIT (and the ties). The ORDER
// BY items of a UNION name its output columns, by position or by name
// (PostgreSQL's rule); anything else is refused.
//
// A UNION's shards deduplicate their own rows; they sort them by the
// client's ORDER BY keys and then by every other output column, so that
// rows equal in every column come one after another in the merge, which
// keeps the first of them (Merge.Dedup). A shard's first LIMIT + OFFSET
// distinct rows hold its part of the first LIMIT + OFFSET distinct rows
// of the whole.
func sortedUnionMerge(sel *pg_query.SelectStmt, version int32) (*Merge, error) {
	what := "UNION ALL"
	if !sel.All {
		what = "UNION"
	}
	m, rest, err := setOpOrder(sel, what, !sel.All)
	if err != nil {
		return nil, err
	}
	m.Dedup = !sel.All
	shards := proto.Clone(sel).(*pg_query.SelectStmt)
	shardLimit(shards, m)
	if m.Dedup && m.OrderAll {
		// SELECT * FROM (union) __shardgate_u ORDER BY __shardgate_u
		// LIMIT …: the whole row sorts by every column in order.
		out := wrapped(shards, "__shardgate_u")
		out.LimitCount, out.LimitOffset, out.LimitOption = shards.LimitCount, shards.LimitOffset, shards.LimitOption
		shards.LimitCount, shards.LimitOffset, shards.LimitOption = nil, nil, pg_query.LimitOption_LIMIT_OPTION_DEFAULT
		out.SortClause = []*pg_query.Node{wholeRow("__shardgate_u")}
		shards = out
	} else if m.Dedup {
		if m.WithTies > 0 {
			shards = tiesThenSorted(shards, m.OrderBy)
		} else {
			shards.SortClause = append(shards.SortClause, rest...)
		}
	}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: shards}})
	if err != nil {
		return nil, err
	}
	m.Rewritten = sql
	return m, nil
}

// setOpOrder reads the ORDER BY, LIMIT and OFFSET of a set operation: the
// Merge's OrderBy, then, when every column must be sorted by (all), the
// other output columns in OrderBy and as ORDER BY items for the shards
// (rest).
func setOpOrder(sel *pg_query.SelectStmt, what string, all bool) (m *Merge, rest []*pg_query.Node, err error) {
	first := unionLeaves(sel, nil)[0]
	names := make([]string, len(first.TargetList))
	star := false
	for i, n := range first.TargetList {
		rt := n.GetResTarget()
		switch {
		case rt == nil:
		case all && isStar(rt.Val):
			// The columns cannot be counted: sorted by the whole row.
			// ORDER BY items could name columns the * expands to.
			if len(sel.SortClause) > 0 {
				return nil, nil, unsupported(fmt.Sprintf("Name the columns in the select list of the %s's first query, or route it to one shard.", what),
					"%s of a select list with * and ORDER BY is not supported across shards: the shards must sort by every output column", what)
			}
			star = true
		case rt.Name != "":
			names[i] = rt.Name
		case len(columnRef(rt.Val)) > 0:
			f := columnRef(rt.Val)
			names[i] = f[len(f)-1]
		}
	}
	m = &Merge{}
	used := make([]bool, len(names))
	for _, n := range sel.SortClause {
		s := n.GetSortBy()
		if s == nil || s.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(s.UseOp) > 0 {
			return nil, nil, rejectf("%s with ORDER BY … USING", what)
		}
		col := -1
		if p, ok := intConst(s.Node); ok && p >= 1 && int(p) <= len(names) {
			col = int(p) - 1
		} else if f := columnRef(s.Node); len(f) == 1 {
			col = slices.Index(names, f[0])
		}
		if col < 0 {
			return nil, nil, rejectf("%s ordered by an expression other than an output column", what)
		}
		k := sortKey(s)
		k.Column = Column(col)
		m.OrderBy = append(m.OrderBy, k)
		used[col] = true
	}
	if sel.LimitOption == pg_query.LimitOption_LIMIT_OPTION_WITH_TIES {
		m.WithTies = len(m.OrderBy)
	}
	if m.Limit, m.Offset, err = limitExprs(sel.LimitCount, sel.LimitOffset); err != nil {
		return nil, nil, err
	}
	if star {
		m.OrderAll = true
		return m, nil, nil
	}
	if all {
		for i, u := range used {
			if !u {
				m.OrderBy = append(m.OrderBy, SortKey{Column: Column(i)})
				rest = append(rest, pg_query.MakeSortByNode(pg_query.MakeAConstIntNode(int64(i+1), -1),
					pg_query.SortByDir_SORTBY_DEFAULT, pg_query.SortByNulls_SORTBY_NULLS_DEFAULT, -1))
			}
		}
	}
	return m, rest, nil
}

// shardLimit sets the LIMIT and OFFSET of the shards' statement out for
// a merge that applies m's: LIMIT limit + offset (FETCH FIRST … WITH TIES
// keeps its form) and no OFFSET. An OFFSET parameter without a LIMIT stays
// in the statement, typed as PostgreSQL types an OFFSET's, as OFFSET (CASE
// WHEN false THEN $1::int8 END), which is OFFSET NULL, no OFFSET: the
// shards' statement has the client's parameters.
func shardLimit(out *pg_query.SelectStmt, m *Merge) {
	switch {
	case out.LimitOffset == nil:
	case m.Limit != nil && m.Offset != nil:
		out.LimitCount = limitPlusOffset(m.Limit, m.Offset)
		out.LimitOffset = nil
	case hasParam(out.LimitOffset):
		out.LimitOffset = placeholder(int8Cast(out.LimitOffset))
	default:
		out.LimitOffset = nil
	}
}

// tiesThenSorted is the shards' statement of a UNION with FETCH … WITH
// TIES: ties are rows equal by the client's ORDER BY keys, not by every
// column the merge needs the rows sorted by, so the shard cuts its rows
// as the client wrote it, in a subquery, and sorts what it kept by every
// output column (keys, by position):
//
//	SELECT * FROM (union ORDER BY … FETCH FIRST n ROWS WITH TIES) __shardgate_u ORDER BY …
func tiesThenSorted(union *pg_query.SelectStmt, keys []SortKey) *pg_query.SelectStmt {
	out := wrapped(union, "__shardgate_u")
	out.SortClause = sortByPositions(keys)
	return out
}

// wrapped is SELECT * FROM (inner) alias.
func wrapped(inner *pg_query.SelectStmt, alias string) *pg_query.SelectStmt {
	return &pg_query.SelectStmt{
		TargetList: []*pg_query.Node{pg_query.MakeResTargetNodeWithVal(pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeAStarNode()}, -1), -1)},
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
			Alias:    &pg_query.Alias{Aliasname: alias},
		}}}},
		Op: pg_query.SetOperation_SETOP_NONE,
	}
}

// wholeRow is an ORDER BY (or DISTINCT ON) item of the whole row of alias:
// PostgreSQL compares rows column by column, each by its type's default
// ordering and its collation, NULLs after other values, as ORDER BY 1, 2,
// … does.
func wholeRow(alias string) *pg_query.Node {
	return pg_query.MakeSortByNode(pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(alias)}, -1),
		pg_query.SortByDir_SORTBY_DEFAULT, pg_query.SortByNulls_SORTBY_NULLS_DEFAULT, -1)
}

// sortByPositions is the ORDER BY of keys, by position: each Column is
// an output column's index.
func sortByPositions(keys []SortKey) []*pg_query.Node {
	var items []*pg_query.Node
	for _, k := range keys {
		dir, nulls := pg_query.SortByDir_SORTBY_ASC, pg_query.SortByNulls_SORTBY_NULLS_LAST
		if k.Desc {
			dir = pg_query.SortByDir_SORTBY_DESC
		}
		if k.NullsFirst {
			nulls = pg_query.SortByNulls_SORTBY_NULLS_FIRST
		}
		items = append(items, pg_query.MakeSortByNode(pg_query.MakeAConstIntNode(int64(k.Column)+1, -1), dir, nulls, -1))
	}
	return items
}

// setOpMerge is the Merge of a set operation (scope.go: setOpTree) with
// INTERSECT or EXCEPT in it, or a UNION under a UNION ALL, over queries
// that each filter per row over sharded tables. A row of one query may be
// on one shard and its equal of another query on another, so no shard can
// compute the operation: each returns the rows of every query, each with
// its query's number, sorted by the client's ORDER BY keys, then every
// other output column, then the number; the executor counts each run of
// equal rows per query and computes from the counts how often the
// operation keeps the row (Merge.SetSteps: INTERSECT keeps it once if
// every side has it, EXCEPT once if the left side has it and the right
// not, UNION once if either has it; with ALL min(l, r), l - r and l + r
// times). When no operation of the tree has ALL, only whether a query has
// a row counts, and the shards deduplicate their rows of each query first:
//
//	SELECT DISTINCT * FROM (SELECT a, b, 1 FROM t WHERE … UNION ALL
//	  SELECT c, d, 2 FROM u WHERE …) __shardgate_s ORDER BY 1, 2, 3
//
// The shards' tree has the client's shape with every operation made a
// UNION ALL, which gives the output columns the names, types and type
// modifiers of the client's operation (PostgreSQL resolves them node by
// node, whatever the operation). LIMIT and OFFSET are the proxy's: the
// shards return every row.
func setOpMerge(sel *pg_query.SelectStmt, version int32) (*Merge, error) {
	what := setOpName(sel)
	m := &Merge{SetOp: setOpKind(sel)}
	order, _, err := setOpOrder(sel, what, true)
	if err != nil {
		return nil, err
	}
	m.OrderBy, m.Limit, m.Offset, m.WithTies, m.OrderAll = order.OrderBy, order.Limit, order.Offset, order.WithTies, order.OrderAll
	m.HiddenColumns = 1
	width := len(unionLeaves(sel, nil)[0].TargetList) // the query number's column, 0-based
	tree := proto.Clone(sel).(*pg_query.SelectStmt)
	tree.SortClause, tree.LimitCount, tree.LimitOffset = nil, nil, nil
	tree.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	leaves := 0
	m.SetSteps = setOpSteps(tree, &leaves, nil)
	dedup := !setOpCounts(sel)
	out := wrapped(tree, "__shardgate_s")
	switch {
	case m.OrderAll:
		// By the whole row: every column in order, then the query's
		// number; DISTINCT ON (the row), as DISTINCT needs its ORDER BY
		// items in the select list.
		out.SortClause = []*pg_query.Node{wholeRow("__shardgate_s")}
		if dedup {
			out.DistinctClause = []*pg_query.Node{wholeRow("__shardgate_s").GetSortBy().Node}
		}
	default:
		if dedup {
			out.DistinctClause = []*pg_query.Node{{}}
		}
		keys := append(slices.Clone(m.OrderBy), SortKey{Column: Column(width)})
		out.SortClause = sortByPositions(keys)
	}
	// The client's LIMIT and OFFSET parameters stay, typed as
	// PostgreSQL types them, as LIMIT NULL and OFFSET NULL: none.
	for _, x := range []struct {
		from *pg_query.Node
		to   **pg_query.Node
	}{{sel.LimitCount, &out.LimitCount}, {sel.LimitOffset, &out.LimitOffset}} {
		if x.from != nil && hasParam(x.from) {
			*x.to = placeholder(int8Cast(x.from))
		}
	}
	out.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	if out.LimitCount != nil {
		out.LimitOption = pg_query.LimitOption_LIMIT_OPTION_COUNT
	}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: out}})
	if err != nil {
		return nil, err
	}
	m.Rewritten = sql
	return m, nil
}

// setOpSteps makes every operation of tree a UNION ALL and numbers its
// queries (a last column __shardgate_q, from 1, in *leaves order), and
// appends the tree's steps in postfix order to steps.
func setOpSteps(tree *pg_query.SelectStmt, leaves *int, steps []SetStep) []SetStep {
	if isLeafQuery(tree) {
		*leaves++
		tree.TargetList = append(tree.TargetList, pg_query.MakeResTargetNodeWithNameAndVal("__shardgate_q", pg_query.MakeAConstIntNode(int64(*leaves), -1), -1))
		return append(steps, SetStep{Leaf: *leaves - 1})
	}
	steps = setOpSteps(tree.Larg, leaves, steps)
	steps = setOpSteps(tree.Rarg, leaves, steps)
	steps = append(steps, SetStep{Op: setOpKind(tree)})
	tree.Op, tree.All = pg_query.SetOperation_SETOP_UNION, true
	return steps
}

// setOpKind is the SetOp of the operation at the top of sel.
func setOpKind(sel *pg_query.SelectStmt) SetOp {
	k := SetUnion
	switch sel.Op {
	case pg_query.SetOperation_SETOP_INTERSECT:
		k = SetIntersect
	case pg_query.SetOperation_SETOP_EXCEPT:
		k = SetExcept
	}
	if sel.All {
		k++ // SetIntersectAll, SetExceptAll, SetUnionAll
	}
	return k
}

// setOpName names the operation at the top of sel, for messages.
func setOpName(sel *pg_query.SelectStmt) string {
	what := map[pg_query.SetOperation]string{pg_query.SetOperation_SETOP_INTERSECT: "INTERSECT",
		pg_query.SetOperation_SETOP_EXCEPT: "EXCEPT"}[sel.Op]
	if what == "" {
		what = "UNION"
	}
	if sel.All {
		what += " ALL"
	}
	return what
}
