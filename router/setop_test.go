package router

import "testing"

var setOpCases = []mergeCase{
	{name: "INTERSECT", sql: "SELECT id FROM accounts INTERSECT SELECT account_id FROM orders",
		want: &Merge{SetOp: SetIntersect, SetSteps: pair(SetIntersect), OrderBy: []SortKey{{Column: 0}}, HiddenColumns: 1,
			Rewritten: "SELECT DISTINCT * FROM (SELECT id, 1 AS __shardgate_q FROM accounts UNION ALL SELECT account_id, 2 AS __shardgate_q FROM orders) __shardgate_s ORDER BY 1 ASC NULLS LAST, 2 ASC NULLS LAST"}},
	{name: "EXCEPT ALL ordered and limited", sql: "SELECT name AS n, id FROM accounts WHERE id > 3 EXCEPT ALL SELECT name, id FROM accounts WHERE balance > 0 ORDER BY n DESC LIMIT $1 OFFSET 2",
		want: &Merge{SetOp: SetExceptAll, SetSteps: pair(SetExceptAll), OrderBy: []SortKey{{Column: 0, Desc: true, NullsFirst: true}, {Column: 1}}, Limit: param(1), Offset: c("2"), HiddenColumns: 1,
			Rewritten: "SELECT * FROM (SELECT name AS n, id, 1 AS __shardgate_q FROM accounts WHERE id > 3 UNION ALL SELECT name, id, 2 AS __shardgate_q FROM accounts WHERE balance > 0) __shardgate_s ORDER BY 1 DESC NULLS FIRST, 2 ASC NULLS LAST, 3 ASC NULLS LAST LIMIT CASE WHEN false THEN $1::bigint END"}},
	{name: "INTERSECT of star", sql: "SELECT * FROM accounts INTERSECT SELECT * FROM accounts WHERE id > 2",
		want: &Merge{SetOp: SetIntersect, SetSteps: pair(SetIntersect), OrderAll: true, HiddenColumns: 1,
			Rewritten: "SELECT DISTINCT ON (__shardgate_s) * FROM (SELECT *, 1 AS __shardgate_q FROM accounts UNION ALL SELECT *, 2 AS __shardgate_q FROM accounts WHERE id > 2) __shardgate_s ORDER BY __shardgate_s"}},
	{name: "EXCEPT ALL of star with ORDER BY", sql: "SELECT * FROM accounts EXCEPT ALL SELECT * FROM accounts ORDER BY id", msg: "EXCEPT ALL of a select list with * and ORDER BY"},
	// INTERSECT binds tighter than UNION and EXCEPT, which go left to
	// right: the shards' tree keeps the client's shape, every operation a
	// UNION ALL, and the steps compute the operations in that shape.
	{name: "three queries", sql: "SELECT id FROM accounts INTERSECT SELECT id FROM accounts EXCEPT SELECT account_id FROM orders",
		want: &Merge{SetOp: SetExcept, SetSteps: []SetStep{{Leaf: 0}, {Leaf: 1}, {Op: SetIntersect}, {Leaf: 2}, {Op: SetExcept}}, OrderBy: []SortKey{{Column: 0}}, HiddenColumns: 1,
			Rewritten: "SELECT DISTINCT * FROM ((SELECT id, 1 AS __shardgate_q FROM accounts UNION ALL SELECT id, 2 AS __shardgate_q FROM accounts) UNION ALL SELECT account_id, 3 AS __shardgate_q FROM orders) __shardgate_s ORDER BY 1 ASC NULLS LAST, 2 ASC NULLS LAST"}},
	{name: "UNION of an INTERSECT", sql: "SELECT id FROM accounts UNION ALL SELECT id FROM accounts INTERSECT ALL SELECT account_id FROM orders ORDER BY 1 DESC",
		want: &Merge{SetOp: SetUnionAll, SetSteps: []SetStep{{Leaf: 0}, {Leaf: 1}, {Leaf: 2}, {Op: SetIntersectAll}, {Op: SetUnionAll}}, OrderBy: []SortKey{{Column: 0, Desc: true, NullsFirst: true}}, HiddenColumns: 1,
			Rewritten: "SELECT * FROM (SELECT id, 1 AS __shardgate_q FROM accounts UNION ALL (SELECT id, 2 AS __shardgate_q FROM accounts UNION ALL SELECT account_id, 3 AS __shardgate_q FROM orders)) __shardgate_s ORDER BY 1 DESC NULLS FIRST, 2 ASC NULLS LAST"}},
	{name: "UNION under UNION ALL", sql: "SELECT id FROM accounts UNION ALL (SELECT id FROM accounts UNION SELECT account_id FROM orders)",
		want: &Merge{SetOp: SetUnionAll, SetSteps: []SetStep{{Leaf: 0}, {Leaf: 1}, {Leaf: 2}, {Op: SetUnion}, {Op: SetUnionAll}}, OrderBy: []SortKey{{Column: 0}}, HiddenColumns: 1,
			Rewritten: "SELECT * FROM (SELECT id, 1 AS __shardgate_q FROM accounts UNION ALL (SELECT id, 2 AS __shardgate_q FROM accounts UNION ALL SELECT account_id, 3 AS __shardgate_q FROM orders)) __shardgate_s ORDER BY 1 ASC NULLS LAST, 2 ASC NULLS LAST"}},
	{name: "an inner ORDER BY", sql: "SELECT id FROM accounts INTERSECT (SELECT id FROM accounts ORDER BY id LIMIT 2)", msg: "INTERSECT"},
}

// pair is the steps of one operation of two queries.
func pair(op SetOp) []SetStep { return []SetStep{{Leaf: 0}, {Leaf: 1}, {Op: op}} }

func TestMergeSetOps(t *testing.T) { testMerge(t, setOpCases) }
