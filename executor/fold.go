package executor

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/wire"
)

// Folds: sum and avg of interval and money across shards.
//
// The proxy adds numbers itself (aggregate.go), but not intervals, which
// PostgreSQL adds field by field (interval_pl, with its own overflow check)
// and writes in the session's IntervalStyle, nor money, whose text depends
// on lc_monetary. A group keeps the shards' partial sums instead, as they
// sent them — at most one per shard, since the shards group as the query
// does — and once every shard is read, one shard's server adds them with
// PostgreSQL's own sum over the partials, in the same session, so that
// the value, its text, NULLs and errors (22008 interval out of range,
// 22003 money out of range) are PostgreSQL's:
//
//	SELECT (SELECT pg_catalog.sum(v) FROM pg_catalog.unnest($1::pg_catalog.interval[]) AS u(v))
//
// The partials travel as one array parameter in the shards' format. avg(x)
// is PostgreSQL 15's interval_avg: the sum divided (interval_div) by the
// total count as float8, NULL when the count is 0; the proxy adds the
// counts. A group with one partial sum and no avg keeps it as it is.
//
// Shards that group more finely than the query (DISTINCT aggregates,
// ordered collecting ones) would send one partial per finer group, which
// the proxy would have to hold: such queries are refused.

// foldCol is a column whose partial sums a server adds.
type foldCol struct {
	col   int
	avg   bool   // avg(x): the sum is divided by the count (avgState)
	array uint32 // the array type of the partials
	elem  uint32
}

// foldTypes are the element types folded, with their array types.
var foldTypes = map[uint32]uint32{oidInterval: 1187, oidMoney: 791}

// planFolds finds the sum and avg columns the proxy cannot add itself.
func (m *Merger) planFolds() error {
	for _, a := range m.spec.Aggs {
		if a.Kind != AggSum && a.Kind != AggAvg {
			continue
		}
		c := m.cols[a.Col]
		if a.Kind == AggAvg {
			c = m.sums[a.Col]
		}
		arr, ok := foldTypes[c.OID]
		if !ok {
			continue
		}
		if len(m.spec.SortedBy) > 0 {
			return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
				Message: fmt.Sprintf("%s() of type OID %d is not supported across shards together with DISTINCT or ordered aggregates", a.Kind, c.OID),
				Hint:    "Compute the DISTINCT or ordered aggregate in a separate query, or route the query to one shard."}
		}
		m.folds = append(m.folds, foldCol{col: a.Col, avg: a.Kind == AggAvg, array: arr, elem: c.OID})
	}
	return nil
}

// folded reports whether column col is added by a server.
func (m *Merger) folded(col int) bool {
	for _, f := range m.folds {
		if f.col == col {
			return true
		}
	}
	return false
}

// addPartial keeps a partial sum of a folded column.
func (g *group) addPartial(col int, v []byte) {
	if v == nil {
		return
	}
	if g.partials == nil {
		g.partials = map[int][][]byte{}
	}
	g.partials[col] = append(g.partials[col], append([]byte{}, v...))
}

// initFolds moves a new group's first values of folded columns into its
// partials.
func (m *Merger) initFolds(g *group) {
	for _, f := range m.folds {
		g.addPartial(f.col, g.cols[f.col])
		g.cols[f.col] = nil
	}
}

// needsFold reports whether a server must compute a group's folded
// columns; otherwise finishFold sets them.
func (m *Merger) needsFold(g *group) bool {
	for _, f := range m.folds {
		if f.avg && g.avg[f.col].count > 0 || !f.avg && len(g.partials[f.col]) > 1 {
			return true
		}
	}
	return false
}

// finishFold sets the folded columns of a group no server computes: the
// one partial sum or NULL.
func (m *Merger) finishFold(g *group) {
	for _, f := range m.folds {
		if p := g.partials[f.col]; !f.avg && len(p) == 1 {
			g.cols[f.col] = p[0]
		}
	}
	g.partials = nil
}

// fold computes the folded columns of every group, on one server.
func (m *Merger) fold(groups []*group) error {
	if len(m.folds) == 0 {
		return nil
	}
	var todo []*group
	for _, g := range groups {
		if m.needsFold(g) {
			todo = append(todo, g)
		} else {
			m.finishFold(g)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if m.spec.Eval == nil {
		return wire.Errorf(wire.FeatureNotSupported, "sum() and avg() of interval or money are not supported across shards here")
	}
	q := m.foldQuery()
	var args [][]byte
	_, err := m.spec.Eval.Eval(q, len(todo), func(i int) [][]byte {
		args = args[:0]
		for _, f := range m.folds {
			args = append(args, m.partialArray(f, todo[i].partials[f.col]))
			if f.avg {
				args = append(args, countParam(todo[i].avg[f.col].count))
			}
		}
		return args
	}, func(i int, values [][]byte) error {
		if len(values) != len(m.folds) || i < 0 || i >= len(todo) {
			return wire.Errorf(wire.InternalError, "merge: unexpected row from the statement that adds partial sums")
		}
		for k, f := range m.folds {
			todo[i].cols[f.col] = nil
			if v := values[k]; v != nil {
				todo[i].cols[f.col] = append(make([]byte, 0, len(v)), v...)
			}
		}
		todo[i].partials = nil
		return nil
	})
	return err
}

// foldQuery is the statement that adds the partial sums of one group.
func (m *Merger) foldQuery() OuterQuery {
	var q OuterQuery
	var sql strings.Builder
	sql.WriteString("SELECT ")
	for k, f := range m.folds {
		if k > 0 {
			sql.WriteString(", ")
		}
		typ := map[uint32]string{oidInterval: "interval", oidMoney: "money"}[f.elem]
		q.ParamOIDs = append(q.ParamOIDs, f.array)
		q.ParamFormats = append(q.ParamFormats, m.cols[f.col].Format)
		sum := fmt.Sprintf("(SELECT pg_catalog.sum(v) FROM pg_catalog.unnest($%d::pg_catalog.%s[]) AS u(v))", len(q.ParamOIDs), typ)
		if f.avg {
			q.ParamOIDs = append(q.ParamOIDs, oidInt8)
			q.ParamFormats = append(q.ParamFormats, 0)
			sum = fmt.Sprintf("%s OPERATOR(pg_catalog./) $%d::pg_catalog.int8::pg_catalog.float8", sum, len(q.ParamOIDs))
		}
		sql.WriteString(sum)
		q.ResultFormats = append(q.ResultFormats, m.cols[f.col].Format)
	}
	q.SQL = sql.String()
	return q
}

// countParam is an avg's total count as an int8 parameter in text, NULL
// when it is 0 (avg is then NULL, where a division would fail).
func countParam(n int64) []byte {
	if n == 0 {
		return nil
	}
	return strconv.AppendInt(nil, n, 10)
}

// partialArray is the array parameter of a folded column's partial sums,
// in the column's format: array_in's text with every element quoted, or
// array_send's binary. No partial is NULL.
func (m *Merger) partialArray(f foldCol, partials [][]byte) []byte {
	if len(partials) == 0 {
		return nil
	}
	if m.cols[f.col].Format == 0 {
		out := []byte{'{'}
		for i, p := range partials {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, '"')
			for _, c := range p {
				if c == '"' || c == '\\' {
					out = append(out, '\\')
				}
				out = append(out, c)
			}
			out = append(out, '"')
		}
		return append(out, '}')
	}
	out := binary.BigEndian.AppendUint32(nil, 1) // dimensions
	out = binary.BigEndian.AppendUint32(out, 0)  // no NULL
	out = binary.BigEndian.AppendUint32(out, f.elem)
	out = binary.BigEndian.AppendUint32(out, uint32(len(partials)))
	out = binary.BigEndian.AppendUint32(out, 1) // lower bound
	for _, p := range partials {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}
