package executor

import (
	"fmt"
	"slices"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// Route says how a statement runs over shards.
type Route uint8

const (
	RouteOne       Route = iota // exactly one shard (shards[0])
	RouteRead                   // several shards, rows merged
	RouteWrite                  // several shards, tags added, RETURNING rows concatenated
	RouteOmniWrite              // every shard, one shard's answer
	RouteBegin                  // BEGIN / START TRANSACTION
	RouteCommit                 // COMMIT / END
	RouteRollback               // ROLLBACK / ABORT
	RouteSavepoint              // SAVEPOINT, RELEASE, ROLLBACK TO
	RouteCopy                   // COPY FROM STDIN split over several shards
	RouteLocal                  // answered by the proxy (the frontend)

	// RouteInsertSelect is INSERT … SELECT into a sharded table: its
	// SELECT read where Plan.InsertSelect says, each row sent to its
	// key's shard.
	RouteInsertSelect
	// RouteParts is a multi-statement text whose statements need
	// different shards: each of Plan.Parts is planned and run on its own.
	RouteParts
)

func (r Route) String() string {
	switch r {
	case RouteOne:
		return "one"
	case RouteRead:
		return "read"
	case RouteWrite:
		return "write"
	case RouteOmniWrite:
		return "omni-write"
	case RouteBegin:
		return "begin"
	case RouteCommit:
		return "commit"
	case RouteRollback:
		return "rollback"
	case RouteSavepoint:
		return "savepoint"
	case RouteCopy:
		return "copy"
	case RouteLocal:
		return "local"
	case RouteInsertSelect:
		return "insert-select"
	case RouteParts:
		return "parts"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// Plan is how one statement runs over the shards of a sharded database:
// the router's decision, made concrete for one client's statement.
type Plan struct {
	Kind   Route
	Shards []int  // the shards the statement runs on
	SQL    string // what to send (the client's text, or the router's rewrite)
	Write  bool   // the statement writes

	PerShard       map[int]string  // multi-row INSERT split: the statement for each shard
	PerShardParams map[int][]int   // … and which client parameter feeds each of its parameters
	Copy           *router.Copy    // RouteCopy: how to split the rows
	CopyOut        *router.CopyOut // RouteRead of COPY (query) TO STDOUT: its format (copyout.go)
	Merge          *router.Merge   // how to merge rows of several shards
	Params         [][]byte        // Bind parameters (LIMIT $n, HAVING … $n)
	Formats        []int16
	// ParamTypes are the parameter types of the client's Parse, for a
	// probe that only parses the statement (Merge.ParseOnly, probe.go).
	ParamTypes []uint32

	// InsertSelect is how RouteInsertSelect reads its rows and sends them
	// on.
	InsertSelect *router.InsertSelect
	Parts        []string // RouteParts: the statements, in order
}

// Spec turns the router's merge description into the executor's, now
// that the number of result columns is known.
func (p *Plan) Spec(ncols int) (Spec, error) {
	m := p.Merge
	spec := Spec{Limit: -1, Plan: p}
	if m == nil {
		return spec, nil
	}
	idx := func(c router.Column) (int, error) {
		i := c.Index(ncols)
		if i < 0 || i >= ncols {
			return 0, wire.Errorf(wire.InternalError, "merge column %d outside the %d result columns", c, ncols)
		}
		return i, nil
	}
	var err error
	for _, k := range m.OrderBy {
		var col int
		if col, err = idx(k.Column); err != nil {
			return spec, err
		}
		spec.OrderBy = append(spec.OrderBy, SortKey{Col: col, Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	if m.OrderAll {
		// Every visible column, in order, as the shards' sort by the
		// whole row gives them (NULLs last).
		for col := range ncols - m.HiddenColumns {
			if !slices.ContainsFunc(spec.OrderBy, func(k SortKey) bool { return k.Col == col }) {
				spec.OrderBy = append(spec.OrderBy, SortKey{Col: col})
			}
		}
	}
	if m.Limit != nil {
		n, ok, err := m.Limit.Int(p.Params, p.Formats)
		if err != nil {
			return spec, err
		}
		if ok {
			spec.Limit = n
		}
	}
	if m.Offset != nil {
		n, ok, err := m.Offset.Int(p.Params, p.Formats)
		if err != nil {
			return spec, err
		}
		if ok {
			spec.Offset = n
		}
	}
	for _, g := range m.GroupBy {
		var col int
		if col, err = idx(g); err != nil {
			return spec, err
		}
		spec.GroupBy = append(spec.GroupBy, col)
	}
	for _, a := range m.Aggregates {
		agg, err := aggOf(a, idx)
		if err != nil {
			return spec, err
		}
		spec.Aggs = append(spec.Aggs, agg)
	}
	for _, h := range m.Having {
		col, err := idx(h.Column)
		if err != nil {
			return spec, err
		}
		v, f := h.Value.Value(p.Params, p.Formats)
		spec.Having = append(spec.Having, Cond{Col: col, Op: h.Op, Value: v, Format: f, Param: h.Value.Param != 0})
	}
	spec.Distinct = m.Distinct
	spec.Dedup, spec.WithTies = m.Dedup, m.WithTies
	for _, w := range m.Windows {
		col, err := idx(w.Column)
		if err != nil {
			return spec, err
		}
		win := Window{Col: col, Unordered: w.Unordered}
		switch w.Func {
		case router.WinRowNumber:
			win.Kind = WinRowNumber
		case router.WinRank:
			win.Kind = WinRank
		case router.WinDenseRank:
			win.Kind = WinDenseRank
		case router.WinLag, router.WinLead, router.WinFirstValue, router.WinLastValue, router.WinNthValue:
			win.Kind = map[router.AggFunc]WindowKind{router.WinLag: WinLag, router.WinLead: WinLead,
				router.WinFirstValue: WinFirstValue, router.WinLastValue: WinLastValue, router.WinNthValue: WinNthValue}[w.Func]
			win.Offset = w.Offset
			if win.Arg, err = idx(w.Arg); err != nil {
				return spec, err
			}
		case router.WinNtile, router.WinPercentRank, router.WinCumeDist:
			win.Kind, win.Offset = WinNtile, w.Offset
			switch w.Func {
			case router.WinPercentRank:
				win.Kind = WinPercentRank
			case router.WinCumeDist:
				win.Kind = WinCumeDist
			}
			if win.Arg, err = idx(w.Arg); err != nil {
				return spec, err
			}
		default:
			a, err := aggOf(router.Aggregate{Column: w.Column, Func: w.Func}, idx)
			if err != nil {
				return spec, err
			}
			win.Kind, win.Agg = WinTotal, a.Kind
			if w.Running {
				win.Kind = WinRunning
			}
		}
		spec.Windows = append(spec.Windows, win)
	}
	spec.WindowOrder = m.WindowOrder
	setOps := map[router.SetOp]SetOpKind{router.SetIntersect: SetIntersect, router.SetIntersectAll: SetIntersectAll,
		router.SetExcept: SetExcept, router.SetExceptAll: SetExceptAll, router.SetUnion: SetUnion, router.SetUnionAll: SetUnionAll}
	spec.SetOp = setOps[m.SetOp]
	for _, s := range m.SetSteps {
		spec.SetSteps = append(spec.SetSteps, SetStep{Op: setOps[s.Op], Leaf: s.Leaf})
	}
	spec.Count, spec.Exists = m.CountName != "", m.Exists
	for _, d := range m.DistinctOn {
		col, err := idx(d)
		if err != nil {
			return spec, err
		}
		spec.DistinctOn = append(spec.DistinctOn, col)
	}
	if m.HiddenColumns > 0 {
		spec.Visible = ncols - m.HiddenColumns
	}
	if m.Outer != nil {
		if spec.Outer, err = outerOf(m.Outer, idx); err != nil {
			return spec, err
		}
	}
	if m.Tagged != nil {
		if spec.Tagged, err = taggingOf(m.Tagged, idx); err != nil {
			return spec, err
		}
	}
	for _, k := range m.SortedBy {
		col, err := idx(k.Column)
		if err != nil {
			return spec, err
		}
		spec.SortedBy = append(spec.SortedBy, SortKey{Col: col, Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	return spec, nil
}

// SQLFor is the statement text for shard i.
func (p *Plan) SQLFor(i int) string {
	if q, ok := p.PerShard[i]; ok {
		return q
	}
	return p.SQL
}

// aggOf is the executor's combination of one of the router's aggregates;
// idx maps a router column to its result column.
func aggOf(a router.Aggregate, idx func(router.Column) (int, error)) (Agg, error) {
	col, err := idx(a.Column)
	if err != nil {
		return Agg{}, err
	}
	agg := Agg{Col: col, Distinct: a.Distinct, Tag: a.Tag}
	switch a.Func {
	case router.AggCount:
		agg.Kind = AggCount
	case router.AggSum:
		agg.Kind = AggSum
	case router.AggMin:
		agg.Kind = AggMin
	case router.AggMax:
		agg.Kind = AggMax
	case router.AggBoolAnd:
		agg.Kind = AggBoolAnd
	case router.AggBoolOr:
		agg.Kind = AggBoolOr
	case router.AggAvg:
		agg.Kind = AggAvg
		agg.SumCol = col
		if agg.CountCol, err = idx(a.Count); err != nil {
			return Agg{}, err
		}
	case router.AggStringAgg:
		agg.Kind = AggStringAgg
		if agg.SepCol, err = idx(a.Sep); err != nil {
			return Agg{}, err
		}
	case router.AggArrayAgg:
		agg.Kind = AggArrayAgg
	case router.AggJSONAgg:
		agg.Kind = AggJSONAgg
		if agg.StructCol, err = idx(a.Structured); err != nil {
			return Agg{}, err
		}
	case router.AggJSONBAgg:
		agg.Kind = AggJSONBAgg
	case router.AggBitAnd:
		agg.Kind = AggBitAnd
	case router.AggBitOr:
		agg.Kind = AggBitOr
	case router.AggBitXor:
		agg.Kind = AggBitXor
	case router.AggStddevSamp, router.AggStddevPop, router.AggVarSamp, router.AggVarPop:
		agg.Kind = map[router.AggFunc]AggKind{router.AggStddevSamp: AggStddevSamp, router.AggStddevPop: AggStddevPop,
			router.AggVarSamp: AggVarSamp, router.AggVarPop: AggVarPop}[a.Func]
		if agg.Moments, err = momentsOf(a.Moments, idx); err != nil {
			return Agg{}, err
		}
	case router.AggRegrCount:
		agg.Kind = AggCount
	case router.AggJSONObjectAgg:
		agg.Kind = AggJSONObjectAgg
	case router.AggJSONBObjectAgg:
		agg.Kind = AggJSONBObjectAgg
	default:
		k, ok := regressionKinds[a.Func]
		if !ok {
			return Agg{}, wire.Errorf(wire.FeatureNotSupported, "aggregate %v cannot be combined across shards", a.Func)
		}
		agg.Kind = k
		if agg.Regression, err = regressionOf(a.Regression, idx); err != nil {
			return Agg{}, err
		}
	}
	return agg, nil
}

// taggingOf is the executor's form of the router's grouping set tags.
func taggingOf(t *router.Tagged, idx func(router.Column) (int, error)) (*Tagging, error) {
	col, err := idx(t.Column)
	if err != nil {
		return nil, err
	}
	out := &Tagging{Col: col, Plain: t.Plain, Values: map[int64]int{}}
	for _, s := range t.Sets {
		if out.Values[s.Tag], err = idx(s.Value); err != nil {
			return nil, err
		}
		for _, c := range s.More {
			k, err := idx(c)
			if err != nil {
				return nil, err
			}
			if out.More == nil {
				out.More = map[int64][]int{}
			}
			out.More[s.Tag] = append(out.More[s.Tag], k)
		}
	}
	return out, nil
}
