package executor

import (
	"encoding/binary"
	"fmt"
	"math"
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
// ordered collecting ones) send one partial per finer group, too many to
// hold. The proxy then adds them as it reads them, as interval_pl and
// cash_pl do — field by field for intervals, each field with its overflow
// check — into a binary sum, from the binary format or from an interval's
// text in any IntervalStyle (textInterval); the server only writes that
// sum in the session's format (and divides it for avg). Money in text,
// whose format the proxy cannot read, is refused there.

// foldCol is a column whose partial sums a server adds.
type foldCol struct {
	col   int
	avg   bool   // avg(x): the sum is divided by the count (avgState)
	array uint32 // the array type of the partials
	elem  uint32
	// acc: the partials are added as they come into one binary sum.
	acc bool
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
		acc := len(m.spec.SortedBy) > 0
		if acc && c.OID == oidMoney && c.Format == 0 {
			return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
				Message: "sum() of money in text format is not supported across shards together with DISTINCT or ordered aggregates",
				Hint:    "Ask for the binary result format, cast the sum to numeric, or route the query to one shard."}
		}
		m.folds = append(m.folds, foldCol{col: a.Col, avg: a.Kind == AggAvg, array: arr, elem: c.OID, acc: acc})
	}
	return nil
}

// foldOf returns the fold of column col, nil when the proxy adds it.
func (m *Merger) foldOf(col int) *foldCol {
	for i := range m.folds {
		if m.folds[i].col == col {
			return &m.folds[i]
		}
	}
	return nil
}

// folded reports whether column col is added by a server.
func (m *Merger) folded(col int) bool { return m.foldOf(col) != nil }

// addPartial keeps a partial sum v of a folded column, or adds it to the
// group's binary sum.
func (m *Merger) addPartial(g *group, f *foldCol, v []byte) error {
	if v == nil {
		return nil
	}
	if g.partials == nil {
		g.partials = map[int][][]byte{}
	}
	if !f.acc {
		g.partials[f.col] = append(g.partials[f.col], append([]byte{}, v...))
		return nil
	}
	b := v
	if m.cols[f.col].Format == 0 {
		iv, err := textInterval(string(v)) // money in text is refused
		if err != nil {
			return err
		}
		b = appendBinaryInterval(nil, iv)
	}
	cur := g.partials[f.col]
	if len(cur) == 0 {
		g.partials[f.col] = [][]byte{append([]byte{}, b...)}
		return nil
	}
	sum, err := addBinary(f.elem, cur[0], b)
	if err != nil {
		return err
	}
	cur[0] = sum
	return nil
}

// initFolds moves a new group's first values of folded columns into its
// partials.
func (m *Merger) initFolds(g *group) error {
	for i := range m.folds {
		f := &m.folds[i]
		if err := m.addPartial(g, f, g.cols[f.col]); err != nil {
			return err
		}
		g.cols[f.col] = nil
	}
	return nil
}

// needsFold reports whether a server must compute a group's folded
// columns; otherwise finishFold sets them.
func (m *Merger) needsFold(g *group) bool {
	for _, f := range m.folds {
		n := len(g.partials[f.col])
		if f.avg && g.avg[f.col].count > 0 || !f.avg && (n > 1 || n == 1 && f.acc && m.cols[f.col].Format == 0) {
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
		q.ParamFormats = append(q.ParamFormats, f.paramFormat(m.cols[f.col]))
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
	if f.paramFormat(m.cols[f.col]) == 0 {
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

// paramFormat is the format of the array of partials: the shards', or
// binary for a sum the proxy added.
func (f foldCol) paramFormat(c Column) int16 {
	if f.acc {
		return 1
	}
	return c.Format
}

// addBinary adds two binary sums as interval_pl and cash_pl do, with
// their overflow errors.
func addBinary(oid uint32, a, b []byte) ([]byte, error) {
	if oid == oidMoney {
		x, err := binaryInt(a)
		if err != nil {
			return nil, err
		}
		y, err := binaryInt(b)
		if err != nil {
			return nil, err
		}
		s, ok := addInt64(x, y)
		if !ok {
			return nil, wire.Errorf(wire.NumericValueOutOfRange, "money out of range")
		}
		return binary.BigEndian.AppendUint64(nil, uint64(s)), nil
	}
	x, err := binaryInterval(a)
	if err != nil {
		return nil, err
	}
	y, err := binaryInterval(b)
	if err != nil {
		return nil, err
	}
	months, ok1 := addInt32(x.months, y.months)
	days, ok2 := addInt32(x.days, y.days)
	usecs, ok3 := addInt64(x.usecs, y.usecs)
	if !ok1 || !ok2 || !ok3 {
		e := wire.Errorf(wire.DatetimeFieldOverflow, "interval out of range")
		switch {
		case !ok1: // PostgreSQL checks the months first, then the days
		case !ok2:
			e.At = wire.AtIntervalDays
		default:
			e.At = wire.AtIntervalTime
		}
		return nil, e
	}
	return appendBinaryInterval(nil, interval{months: months, days: days, usecs: usecs}), nil
}

// appendBinaryInterval appends interval_send's format.
func appendBinaryInterval(buf []byte, v interval) []byte {
	buf = binary.BigEndian.AppendUint64(buf, uint64(v.usecs))
	buf = binary.BigEndian.AppendUint32(buf, uint32(int32(v.days)))
	return binary.BigEndian.AppendUint32(buf, uint32(int32(v.months)))
}

// addInt64 adds with int8pl's overflow check.
func addInt64(x, y int64) (int64, bool) {
	s := x + y
	return s, (x >= 0) != (y >= 0) || (s >= 0) == (x >= 0)
}

// addInt32 adds two int32 values held in int64s, with int4pl's check.
func addInt32(x, y int64) (int64, bool) {
	s := x + y
	return s, s >= math.MinInt32 && s <= math.MaxInt32
}
