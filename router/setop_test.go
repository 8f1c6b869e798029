package router

import "testing"

var setOpCases = []mergeCase{
	{name: "INTERSECT", sql: "SELECT id FROM accounts INTERSECT SELECT account_id FROM orders",
		want: &Merge{SetOp: SetIntersect, OrderBy: []SortKey{{Column: 0}}, HiddenColumns: 1,
			Rewritten: "SELECT DISTINCT * FROM (SELECT id, 1 AS __shardgate_q FROM accounts UNION ALL SELECT account_id, 2 AS __shardgate_q FROM orders) __shardgate_s ORDER BY 1 ASC NULLS LAST, 2 ASC NULLS LAST"}},
	{name: "EXCEPT ALL ordered and limited", sql: "SELECT name AS n, id FROM accounts WHERE id > 3 EXCEPT ALL SELECT name, id FROM accounts WHERE balance > 0 ORDER BY n DESC LIMIT $1 OFFSET 2",
		want: &Merge{SetOp: SetExceptAll, OrderBy: []SortKey{{Column: 0, Desc: true, NullsFirst: true}, {Column: 1}}, Limit: param(1), Offset: c("2"), HiddenColumns: 1,
			Rewritten: "SELECT * FROM (SELECT name AS n, id, 1 AS __shardgate_q FROM accounts WHERE id > 3 UNION ALL SELECT name, id, 2 AS __shardgate_q FROM accounts WHERE balance > 0) __shardgate_s ORDER BY 1 DESC NULLS FIRST, 2 ASC NULLS LAST, 3 ASC NULLS LAST LIMIT CASE WHEN false THEN $1::bigint END"}},
	{name: "INTERSECT of star", sql: "SELECT * FROM accounts INTERSECT SELECT * FROM accounts WHERE id > 2",
		want: &Merge{SetOp: SetIntersect, OrderAll: true, HiddenColumns: 1,
			Rewritten: "SELECT DISTINCT ON (__shardgate_s) * FROM (SELECT *, 1 AS __shardgate_q FROM accounts UNION ALL SELECT *, 2 AS __shardgate_q FROM accounts WHERE id > 2) __shardgate_s ORDER BY __shardgate_s"}},
	{name: "EXCEPT ALL of star with ORDER BY", sql: "SELECT * FROM accounts EXCEPT ALL SELECT * FROM accounts ORDER BY id", msg: "EXCEPT ALL of a select list with * and ORDER BY"},
	{name: "three queries", sql: "SELECT id FROM accounts INTERSECT SELECT id FROM accounts EXCEPT SELECT account_id FROM orders", msg: "EXCEPT"},
}

func TestMergeSetOps(t *testing.T) { testMerge(t, setOpCases) }
