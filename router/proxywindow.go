package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Window functions the proxy computes.
//
// A window not partitioned by the sharding key needs rows of several
// shards. Two kinds still run, because the merged stream of the shards'
// rows is all they need, one row at a time:
//
//   - row_number(), rank() and dense_rank() over one window ordering of
//     the whole result, OVER (ORDER BY k …) or OVER (): the shards return
//     their rows sorted by k (the query's ORDER BY must begin with the
//     window's, or be absent: then the window's is the merge's), and the
//     proxy numbers the merged rows, counting a row's rank from the rows
//     before its peers (rows equal by k);
//   - count, sum, min and max over the whole result, OVER (): each shard
//     computes its rows' total in every row, and the proxy, which reads
//     the first row of every shard before it sends one, combines the
//     shards' totals as it combines aggregates, into every row;
//   - ntile(n) and percent_rank() over the same orderings as rank(): each
//     shard also returns its row count, count(*) OVER (), in a hidden
//     column, and the proxy, which knows the whole count from the shards'
//     first rows, deals the merged rows into n buckets as PostgreSQL's
//     window_ntile does, or divides a row's rank as window_percent_rank;
//   - lead(x[, n]) and cume_dist() over the same orderings: the merge
//     holds a row back until the row n after it came (lead), or the last
//     of its peers (cume_dist: the rows up to it over every row, counted
//     as for percent_rank), n rows or a run of peers at most;
//   - first_value(x), last_value(x) and nth_value(x, n) over such an
//     ordered window with the default frame (the rows up to the row's
//     last peer): the first row's x, the last peer's (held back as for
//     cume_dist), the n-th row's once the frame reaches it;
//   - the same running, OVER (ORDER BY k) with the default frame (RANGE
//     UNBOUNDED PRECEDING: the row's peers included): each shard computes
//     its running value in every row, and the proxy combines, for a row
//     of key k, every shard's value at k: a shard's next row's when that
//     row is a peer (its value counts all the shard's peers), else its
//     last sent row's (a shard none of whose rows came yet adds nothing).
//
// Each such call must be a whole select list item (the proxy replaces the
// item's value); the shards compute it too (their values are replaced),
// so that the RowDescription and the shards' errors are PostgreSQL's.
// PostgreSQL computes windows before DISTINCT, ORDER BY and LIMIT: the
// shards get LIMIT limit + offset, and number and total the rows before
// it; DISTINCT and GROUP BY with such windows are refused.

// Window function kinds the proxy computes (Window.Func), besides the
// aggregates (AggCount, AggSum, AggMin, AggMax) as totals.
const (
	WinRowNumber AggFunc = 100 + iota
	WinRank
	WinDenseRank
	WinLag
	WinNtile
	WinPercentRank
	WinLead
	WinCumeDist
	WinFirstValue
	WinLastValue
	WinNthValue
)

// maxLagOffset bounds lag's offset: the merge keeps that many rows' values.
const maxLagOffset = 10000

// Window is a select list item whose window function the proxy computes.
type Window struct {
	Column Column
	Func   AggFunc
	// Running: an aggregate OVER (ORDER BY …), over the rows up to the
	// row's last peer, not over every row.
	Running bool
	// Unordered: a ranking function OVER (), over a window without ORDER
	// BY, whose every row is a peer (rank 1, percent_rank 0, cume_dist
	// 1), while another window orders the merge.
	Unordered bool
	// Arg and Offset: lag(arg, offset), arg a hidden column in the
	// window column's result format (Merge.HiddenFormats). For ntile(n)
	// and percent_rank(), Arg is the hidden count(*) OVER () of each
	// shard, and Offset ntile's n.
	Arg    Column
	Offset int
}

// proxyWindow is a window call checkWindow accepts for the proxy.
type proxyWindow struct {
	fc      *pg_query.FuncCall
	order   []*pg_query.Node // the window's ORDER BY (SortBy nodes)
	f       AggFunc
	running bool // an aggregate over an ordered window
}

// lagOffset is the offset of lag(x[, offset]): a constant from 0 to
// maxLagOffset, or false.
func lagOffset(fc *pg_query.FuncCall) (int, bool) {
	switch len(fc.Args) {
	case 1:
		return 1, true
	case 2:
		n, ok := intConst(fc.Args[1])
		return int(n), ok && n >= 0 && n <= maxLagOffset
	}
	return 0, false
}

// proxyWindowFunc reports how the proxy computes a window call over w
// (w resolved: no PARTITION BY, no reference to another window), or false.
func proxyWindowFunc(fc *pg_query.FuncCall, w *pg_query.WindowDef) (AggFunc, bool) {
	if fc.AggFilter != nil || fc.AggDistinct || len(fc.AggOrder) > 0 || fc.AggWithinGroup || fc.FuncVariadic {
		return 0, false
	}
	switch name := funcName(fc); name {
	case "row_number", "rank", "dense_rank":
		if len(fc.Args) > 0 {
			return 0, false
		}
		return map[string]AggFunc{"row_number": WinRowNumber, "rank": WinRank, "dense_rank": WinDenseRank}[name], true
	case "percent_rank":
		if len(fc.Args) > 0 {
			return 0, false
		}
		return WinPercentRank, true
	case "ntile":
		// A constant number of buckets: the proxy deals the rows.
		if len(fc.Args) != 1 {
			return 0, false
		}
		// (Not above 0, the shards fail with PostgreSQL's 22014.)
		if n, ok := intConst(fc.Args[0]); !ok || n < -1<<31 || n > 1<<31-1 {
			return 0, false
		}
		return WinNtile, true
	case "lag", "lead":
		// The value of a row before (after), by a constant offset,
		// without a default: the merge keeps the last rows' values (holds
		// the rows back until the one after comes).
		if _, ok := lagOffset(fc); !ok {
			return 0, false
		}
		if name == "lead" {
			return WinLead, true
		}
		return WinLag, true
	case "cume_dist":
		if len(fc.Args) > 0 {
			return 0, false
		}
		return WinCumeDist, true
	case "first_value", "last_value", "nth_value":
		// Over an ordered window with the default frame (the rows up
		// to the row's last peer); nth_value's n a constant.
		if len(w.OrderClause) == 0 || w.FrameOptions&frameNonDefault != 0 {
			return 0, false
		}
		if name == "nth_value" {
			if len(fc.Args) != 2 {
				return 0, false
			}
			if n, ok := intConst(fc.Args[1]); !ok || n < -1<<31 || n > 1<<31-1 {
				return 0, false
			}
			return WinNthValue, true
		}
		if len(fc.Args) != 1 {
			return 0, false
		}
		return map[string]AggFunc{"first_value": WinFirstValue, "last_value": WinLastValue}[name], true
	case "count", "sum", "min", "max":
		// Over the whole result (no ORDER BY) or running (ORDER BY),
		// with the default frame only.
		if w.FrameOptions&frameNonDefault != 0 {
			return 0, false
		}
		if fc.AggStar != (len(fc.Args) == 0) || fc.AggStar && name != "count" {
			return 0, false
		}
		return mergeable[name], true
	}
	return 0, false
}

// frameNonDefault is PostgreSQL's FRAMEOPTION_NONDEFAULT.
const frameNonDefault = 0x1

// resolvedWindow returns the window a call runs over, following OVER w;
// nil when it refers to another window's definition (OVER (w ORDER BY
// …)), which the proxy does not compute.
func (b *mergeBuilder) resolvedWindow(fc *pg_query.FuncCall) *pg_query.WindowDef {
	w := fc.Over
	if w.Name != "" && w.Refname == "" {
		w = b.namedWindow(w.Name)
	}
	if w == nil || w.Refname != "" {
		return nil
	}
	return w
}

// proxyWindows checks the window calls the proxy computes and records them
// in the Merge. It runs after orderBy: the query's ORDER BY must begin
// with every ordered window's keys. (reject has refused them with
// aggregates, GROUP BY or DISTINCT.)
func (b *mergeBuilder) proxyWindows() error {
	if len(b.proxyWins) == 0 {
		return nil
	}
	refuse := func(fc *pg_query.FuncCall, why string) error {
		return unsupported(hintWindow, "window function %s() over a window not partitioned by the sharding key is not supported across shards%s", funcName(fc), why)
	}
	var order []*pg_query.Node
	for _, pw := range b.proxyWins {
		col := -1
		for i, t := range b.targets {
			if t.val != nil && t.val.GetFuncCall() == pw.fc {
				col = i
			}
		}
		if col < 0 {
			return refuse(pw.fc, " other than as a whole select list item")
		}
		for _, r := range b.orderRefs {
			if r == (ref{'t', col}) {
				return refuse(pw.fc, " in ORDER BY")
			}
		}
		if len(pw.order) > 0 {
			if order != nil && !sameExprs(order, pw.order) {
				return refuse(pw.fc, " ordered differently from another window")
			}
			order = pw.order
		}
		b.windowRefs = append(b.windowRefs, ref{'t', col})
		w := Window{Func: pw.f, Running: len(pw.order) > 0 && pw.f < WinRowNumber, Unordered: len(pw.order) == 0 && peerRanked(pw.f)}
		argRef := ref{kind: 0}
		switch pw.f {
		case WinNthValue:
			n, _ := intConst(pw.fc.Args[1])
			w.Offset = int(n)
		case WinLag, WinLead:
			w.Offset, _ = lagOffset(pw.fc)
		}
		if pw.f == WinLag || pw.f == WinLead || pw.f == WinFirstValue || pw.f == WinLastValue || pw.f == WinNthValue {
			// Its own hidden column (not one shared with an ORDER BY
			// key), in the window column's format.
			b.hidden = append(b.hidden, proto.Clone(pw.fc.Args[0]).(*pg_query.Node))
			argRef = ref{'h', len(b.hidden) - 1}
			if b.hiddenLike == nil {
				b.hiddenLike = map[int]ref{}
			}
			b.hiddenLike[argRef.i] = ref{'t', col}
		}
		if pw.f == WinNtile || pw.f == WinPercentRank || pw.f == WinCumeDist {
			if pw.f == WinNtile {
				n, _ := intConst(pw.fc.Args[0])
				w.Offset = int(n)
			}
			// Each shard's row count, which the proxy adds up.
			b.hidden = append(b.hidden, countOverAll())
			argRef = ref{'h', len(b.hidden) - 1}
		}
		b.lagArgs = append(b.lagArgs, argRef)
		b.m.Windows = append(b.m.Windows, w)
	}
	if len(order) == 0 {
		return nil
	}
	if len(b.sel.SortClause) == 0 {
		// The window's order is the merge's, and the shards'.
		b.sel = proto.Clone(b.sel).(*pg_query.SelectStmt)
		b.sel.SortClause = order
		b.addedOrder = true
		if err := b.orderBy(); err != nil {
			return err
		}
		b.m.WindowOrder = len(b.m.OrderBy)
		return nil
	}
	if len(order) > len(b.orderRefs) {
		return refuse(b.proxyWins[0].fc, " unless ORDER BY begins with the window's ORDER BY")
	}
	for i, n := range order {
		s := n.GetSortBy()
		if s.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(s.UseOp) > 0 {
			return rejectf("ORDER BY … USING")
		}
		r, err := b.sortRef(s.Node, "ORDER BY")
		if err != nil {
			return err
		}
		if b.column(r) != b.column(b.orderRefs[i]) || sortKey(s) != b.m.OrderBy[i] {
			return refuse(b.proxyWins[0].fc, " unless ORDER BY begins with the window's ORDER BY")
		}
	}
	b.m.WindowOrder = len(order)
	return nil
}

// countOverAll is pg_catalog.count(*) OVER (): the shard's row count, in
// every row.
func countOverAll() *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
		Funcname: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("count")},
		AggStar:  true,
		Over:     &pg_query.WindowDef{FrameOptions: frameDefaults, Location: -1},
		Location: -1,
	}}}
}

// frameDefaults is PostgreSQL's FRAMEOPTION_DEFAULTS (RANGE UNBOUNDED
// PRECEDING AND CURRENT ROW), the frame of a window that names none.
const frameDefaults = 0x02 | 0x20 | 0x400

// peerRanked reports whether window function f ranks a row by its peers,
// so that over a window without ORDER BY every row gets the same value.
func peerRanked(f AggFunc) bool {
	switch f {
	case WinRank, WinDenseRank, WinPercentRank, WinCumeDist:
		return true
	}
	return false
}
