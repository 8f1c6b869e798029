package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// SELECT count(*) FROM (subquery) s.
//
// ORMs count the rows of a query by wrapping it: Django's .count() of a
// DISTINCT or sliced queryset (SELECT COUNT(*) AS "__count" FROM (SELECT
// DISTINCT … ) subquery), Laravel's paginate() of a grouped query, Rails'
// count of a distinct relation. The subquery's rows may need merging
// (DISTINCT, GROUP BY, ORDER BY … LIMIT), which a subquery in FROM cannot
// get across shards. For this one outer shape the proxy runs the subquery
// as a statement of its own, merges its rows as it would merge them for
// the client, and counts them as they stream by: the answer is exact and
// no row is held.

// countOver recognizes SELECT count(*) [AS name] FROM (subquery) s with
// nothing else around the subquery, and returns the column's name and the
// subquery's FROM item.
func countOver(sel *pg_query.SelectStmt) (string, *pg_query.RangeSubselect) {
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED ||
		sel.WithClause != nil || len(sel.TargetList) != 1 || len(sel.FromClause) != 1 ||
		sel.WhereClause != nil || len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.WindowClause) > 0 ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.DistinctClause) > 0 ||
		len(sel.LockingClause) > 0 || sel.IntoClause != nil {
		return "", nil
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt == nil {
		return "", nil
	}
	fc := rt.Val.GetFuncCall()
	if fc == nil || funcName(fc) != "count" || !fc.AggStar || fc.AggDistinct || fc.AggFilter != nil ||
		len(fc.AggOrder) > 0 || fc.Over != nil || fc.AggWithinGroup {
		return "", nil
	}
	rs := sel.FromClause[0].GetRangeSubselect()
	if rs == nil || rs.Lateral || rs.Subquery.GetSelectStmt() == nil {
		return "", nil
	}
	name := rt.Name
	if name == "" {
		name = "count" // as PostgreSQL names the column
	}
	return name, rs
}

// buildCountMerge is the Merge of SELECT count(*) FROM (subquery) s: the
// subquery's own merge, its SQL sent to the shards, counted.
func buildCountMerge(sub *pg_query.Node, name string, version int32, isKey func(*pg_query.Node) bool) (*Merge, error) {
	m, err := buildMerge(sub.GetSelectStmt(), version, isKey)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = &Merge{}
	}
	if m.Outer != nil {
		// Its rows are computed by an Outer statement, which describes
		// them itself.
		return nil, rejectf("SELECT count(*) over a subquery with expressions over aggregates")
	}
	if m.Rewritten == "" {
		if m.Rewritten, err = deparse(version, sub); err != nil {
			return nil, err
		}
	}
	m.CountName = name
	return m, nil
}
