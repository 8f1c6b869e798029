package router

import (
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
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

// SELECT EXISTS (subquery) [AS name], with no FROM, is the same with one
// boolean: whether the merged subquery yields a row (SQLAlchemy's
// exists()).

// counted is the subquery of SELECT count(*) FROM (subquery) s or SELECT
// EXISTS (subquery), and the answer's column name.
type counted struct {
	sub    *pg_query.Node // the subquery's SELECT
	name   string
	exists bool
}

// countOver recognizes SELECT count(*) [AS name] FROM (subquery) s and
// SELECT EXISTS (subquery) [AS name] with nothing else around the
// subquery; nil when sel is neither.
func countOver(sel *pg_query.SelectStmt) *counted {
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED ||
		sel.WithClause != nil || len(sel.TargetList) != 1 ||
		sel.WhereClause != nil || len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.WindowClause) > 0 ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.DistinctClause) > 0 ||
		len(sel.LockingClause) > 0 || sel.IntoClause != nil || len(sel.ValuesLists) > 0 {
		return nil
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt == nil {
		return nil
	}
	if sl := rt.Val.GetSubLink(); sl != nil && len(sel.FromClause) == 0 {
		if sl.SubLinkType != pg_query.SubLinkType_EXISTS_SUBLINK || sl.Subselect.GetSelectStmt() == nil {
			return nil
		}
		name := rt.Name
		if name == "" {
			name = "exists"
		}
		return &counted{sub: sl.Subselect, name: name, exists: true}
	}
	if len(sel.FromClause) != 1 {
		return nil
	}
	name, rs := countFrom(sel, rt)
	if rs == nil {
		return nil
	}
	return &counted{sub: rs.Subquery, name: name}
}

// countFrom recognizes the count(*) FROM (subquery) s of countOver.
func countFrom(sel *pg_query.SelectStmt, rt *pg_query.ResTarget) (string, *pg_query.RangeSubselect) {
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

// buildCountMerge is the Merge of SELECT count(*) FROM (subquery) s or
// SELECT EXISTS (subquery): the subquery's own merge, its SQL sent to the
// shards, counted.
func buildCountMerge(c *counted, version int32, isKey func(*pg_query.Node) bool) (*Merge, error) {
	sub := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: unusedOutputs(c.sub.GetSelectStmt(), c.exists)}}
	m, err := buildMerge(sub.GetSelectStmt(), version, isKey)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = &Merge{}
	}
	if m.Rewritten == "" {
		if m.Rewritten, err = deparse(version, sub); err != nil {
			return nil, err
		}
	}
	m.CountName, m.Exists = c.name, c.exists
	return m, nil
}

// unusedOutputs returns a copy of a counted subquery whose select list
// items that PostgreSQL does not compute for the count are placeholders
// of themselves (CASE WHEN false THEN item END): its planner replaces a
// subquery's outputs that nothing reads (remove_unused_subquery_outputs),
// so SELECT count(*) FROM (SELECT g, max(x) / 0 FROM t GROUP BY g) s
// counts the groups without dividing by zero. An item stays when
// PostgreSQL keeps it: the subquery has DISTINCT, a set operation or
// window clauses; ORDER BY or GROUP BY names it (by position, by its name,
// or written alike); or it calls a function that could return a set or
// be volatile (one not known as neither: plainFuncs). A placeholder, not
// NULL, keeps the item's aggregates in the statement, which therefore
// stays an aggregate query of one row without GROUP BY. Under EXISTS,
// PostgreSQL drops the select list of a query without aggregates, GROUP
// BY or HAVING (simplify_EXISTS_query) and computes all of any other.
func unusedOutputs(sel *pg_query.SelectStmt, exists bool) *pg_query.SelectStmt {
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED ||
		len(sel.DistinctClause) > 0 || len(sel.WindowClause) > 0 {
		return sel
	}
	if exists && (len(sel.GroupClause) > 0 || sel.HavingClause != nil || slices.ContainsFunc(sel.TargetList, func(n *pg_query.Node) bool {
		return findAggregate(n) != nil
	})) {
		return sel
	}
	out := proto.Clone(sel).(*pg_query.SelectStmt)
	for i, n := range out.TargetList {
		rt := n.GetResTarget()
		if rt == nil || rt.Val == nil || rt.Val.GetColumnRef() != nil || rt.Val.GetAConst() != nil ||
			referenced(sel, i, rt) || !removable(rt.Val) {
			continue
		}
		rt.Val = placeholder(rt.Val)
	}
	return out
}

// referenced reports whether ORDER BY or GROUP BY of sel names its select
// list item i (rt): by position, by the item's name, or written alike.
func referenced(sel *pg_query.SelectStmt, i int, rt *pg_query.ResTarget) bool {
	var keys []*pg_query.Node
	for _, s := range sel.SortClause {
		if sb := s.GetSortBy(); sb != nil {
			keys = append(keys, sb.Node)
		}
	}
	keys = append(keys, groupColumns(sel.GroupClause)...)
	for _, k := range keys {
		if c := k.GetAConst(); c != nil {
			if iv := c.GetIval(); iv != nil && int(iv.Ival) == i+1 {
				return true
			}
			continue
		}
		if f := columnRef(k); len(f) == 1 && rt.Name != "" && f[0] == rt.Name {
			return true
		}
		if sameExpr(k, rt.Val) {
			return true
		}
	}
	return false
}

// removable reports whether PostgreSQL's planner may drop an unused
// subquery output n: it calls no function but aggregates and functions
// known to return no set and to be immutable or stable.
func removable(n *pg_query.Node) bool {
	ok := true
	walk(n, func(x *pg_query.Node) bool {
		if f := x.GetFuncCall(); f != nil && ok {
			if f.Over != nil || !isAggregate(f) && !plainFuncs[funcName(f)] {
				ok = false
			}
		}
		if x.GetSubLink() != nil {
			ok = false // a subquery may call anything
		}
		return ok
	})
	return ok
}

// plainFuncs are built-in functions that return no set and are not
// volatile: the ones ORMs wrap aggregates in.
var plainFuncs = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`abs ceil ceiling floor round trunc sqrt cbrt exp ln log power pow sign mod div
		width_bucket scale greatest least coalesce nullif lower upper length char_length character_length octet_length
		concat concat_ws substr substring left right lpad rpad btrim ltrim rtrim trim replace reverse initcap md5
		to_char to_number date_trunc date_part extract age justify_days justify_hours justify_interval
		array_length cardinality array_to_string jsonb_build_object json_build_object jsonb_build_array json_build_array
		format numeric float8 int4 int8 text`) {
		plainFuncs[f] = true
	}
}
