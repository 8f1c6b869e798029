package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// group is one GROUP BY group (or DISTINCT row) being combined.
type group struct {
	cols   [][]byte // the first row's values, owned copies; aggregates updated in place
	avg    map[int]*avgState
	arrays map[int]*arrayState // array_agg columns being built (collect.go)
	// partials are the partial sums of folded columns (fold.go).
	partials map[int][][]byte
	// moments are the stddev and variance columns being combined
	// (variance.go).
	moments map[int]*momentState
	// regressions are the corr, covar_ and regr_ columns being combined
	// (regression.go).
	regressions map[int]*regrState
}

// aggregate reads every row, combines partial aggregates per group, and
// sends the groups (sorted by ORDER BY when given). Memory is bounded by
// the number of groups, not rows.
func (m *Merger) aggregate(sources []Rows) error {
	keyCols := m.spec.GroupBy
	grouped := len(m.spec.Aggs) > 0 || len(m.spec.GroupBy) > 0 || len(m.spec.Having) > 0 || m.spec.Outer != nil
	distinctOn := len(m.spec.DistinctOn) > 0 && !grouped
	if !distinctOn && !grouped && len(keyCols) == 0 {
		keyCols = make([]int, m.visible)
		for i := range keyCols {
			keyCols[i] = i
		}
	}
	// An aggregate without GROUP BY over no rows: shards each answered
	// one row, so there is always one group.
	var order []*group
	var err error
	switch {
	case len(m.spec.SortedBy) > 0 && len(m.spec.OrderBy) == 0 && len(m.spec.DistinctOn) == 0 &&
		!(grouped && m.spec.Distinct) && m.spec.Outer == nil && len(m.folds) == 0:
		// The shards' rows arrive by group and nothing reorders the
		// groups: each is sent once complete, so the merge holds one
		// group at a time (a grouped string_agg holds one group's
		// string, not the whole answer).
		_, err = m.collectSorted(sources, m.emitGroup)
		return err
	case len(m.spec.SortedBy) > 0:
		order, err = m.collectSorted(sources, nil)
	default:
		order, err = m.collect(sources, keyCols, distinctOn)
	}
	if err != nil {
		return err
	}
	if len(order) == 0 && len(m.spec.GroupBy) == 0 && len(m.spec.Aggs) > 0 {
		// Shards that group more finely than the query (by a separator)
		// return no row for no rows; the aggregate still has one.
		g, err := m.emptyGroup()
		if err != nil {
			return err
		}
		order = append(order, g)
	}
	if err = m.fold(order); err != nil {
		return err
	}
	if order, err = m.finish(order); err != nil {
		return err
	}
	if m.spec.Outer != nil {
		if order, err = m.evalOuter(order); err != nil {
			return err
		}
	}
	if grouped && m.spec.Distinct {
		order = m.distinctGroups(order)
	}
	return m.emitGroups(order)
}

// emitGroup completes group g and sends it unless HAVING drops it.
func (m *Merger) emitGroup(g *group) error {
	kept, err := m.finish([]*group{g})
	if err != nil || len(kept) == 0 {
		return err
	}
	_, err = m.emit(kept[0].cols)
	return err
}

// finish completes each group's avg columns and drops the groups that
// fail the HAVING conditions.
func (m *Merger) finish(order []*group) ([]*group, error) {
	kept := order[:0]
	for _, g := range order {
		if err := m.finishAvg(g); err != nil {
			return nil, err
		}
		if err := m.finishMoments(g); err != nil {
			return nil, err
		}
		m.finishRegressions(g)
		m.finishArrays(g)
		ok, err := m.having(g.cols)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, g)
		}
	}
	return kept, nil
}

// distinctGroups keeps the first of the groups whose visible columns are
// equal: SELECT DISTINCT of a grouped query, which applies to its output
// rows.
func (m *Merger) distinctGroups(order []*group) []*group {
	seen := map[string]bool{}
	cols := make([]int, m.visible)
	for i := range cols {
		cols[i] = i
	}
	var key []byte
	kept := order[:0]
	for _, g := range order {
		key = m.appendKey(key[:0], g.cols, cols)
		if !seen[string(key)] {
			seen[string(key)] = true
			kept = append(kept, g)
		}
	}
	return kept
}

// collect reads every shard's rows into groups by keyCols, combining the
// aggregates of each group's rows, in the order groups first appear; with
// distinctOn (DISTINCT ON without aggregates) every row is a group of its
// own, deduplicated after sorting.
func (m *Merger) collect(sources []Rows, keyCols []int, distinctOn bool) ([]*group, error) {
	groups := map[string]*group{}
	var order []*group
	var cols [][]byte
	var key []byte
	for _, src := range sources {
		for {
			b, err := src.Next()
			if err != nil {
				return nil, err
			}
			if b == nil {
				break
			}
			if cols, err = SplitRow(b, cols); err != nil {
				return nil, err
			}
			if distinctOn {
				order = append(order, newGroup(cols))
				continue
			}
			key = m.appendKey(key[:0], cols, keyCols)
			g := groups[string(key)]
			if g == nil {
				g = newGroup(cols)
				groups[string(key)] = g
				order = append(order, g)
				if err := m.initGroup(g); err != nil {
					return nil, err
				}
				continue
			}
			if err := m.combine(g, cols, true, 0); err != nil {
				return nil, err
			}
		}
	}
	return order, nil
}

// newGroup returns a group whose values are copies of cols.
func newGroup(cols [][]byte) *group {
	g := &group{cols: make([][]byte, len(cols))}
	for i, v := range cols {
		if v != nil {
			g.cols[i] = append([]byte{}, v...)
		}
	}
	return g
}

// emitGroups sorts the finished groups, applies DISTINCT ON, and writes
// them out.
func (m *Merger) emitGroups(order []*group) error {
	if len(m.spec.OrderBy) > 0 {
		var serr error
		sort.SliceStable(order, func(i, j int) bool {
			c, err := m.compareRows(order[i].cols, order[j].cols)
			if err != nil && serr == nil {
				serr = err
			}
			return c < 0
		})
		if serr != nil {
			return serr
		}
	}
	if len(m.spec.DistinctOn) > 0 {
		seen := map[string]bool{}
		var key []byte
		kept := order[:0]
		for _, g := range order {
			key = m.appendKey(key[:0], g.cols, m.spec.DistinctOn)
			if !seen[string(key)] {
				seen[string(key)] = true
				kept = append(kept, g)
			}
		}
		order = kept
	}
	for _, g := range order {
		// next, not emit: after the Limit, FETCH … WITH TIES sends
		// the groups tied with the last one sent.
		more, err := m.next(g.cols)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// combine folds a row's partial aggregates into its group; with fresh
// false (a DISTINCT value the group has seen), only those that are not
// Distinct; in a tagged merge (tagged.go), only those of the row's tag.
func (m *Merger) combine(g *group, cols [][]byte, fresh bool, tag int64) error {
	for _, a := range m.spec.Aggs {
		if a.Distinct && !fresh || m.spec.Tagged != nil && a.Tag != tag {
			continue
		}
		v := cols[a.Col]
		cur := g.cols[a.Col]
		if f := m.foldOf(a.Col); f != nil {
			if a.Kind == AggAvg {
				if err := m.addAvg(g.avg[a.Col], a, cols); err != nil {
					return err
				}
			}
			if err := m.addPartial(g, f, v); err != nil {
				return err
			}
			continue
		}
		switch a.Kind {
		case AggAvg:
			if err := m.addAvg(g.avg[a.Col], a, cols); err != nil {
				return err
			}
			continue
		case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
			if err := m.addMoments(g.moments[a.Col], a, cols); err != nil {
				return err
			}
			continue
		case AggCorr, AggCovarPop, AggCovarSamp, AggRegrAvgX, AggRegrAvgY, AggRegrIntercept, AggRegrR2, AggRegrSlope,
			AggRegrSXX, AggRegrSXY, AggRegrSYY:
			if err := m.addRegression(g.regressions[a.Col], a, cols); err != nil {
				return err
			}
			continue
		case AggArrayAgg:
			st := g.arrays[a.Col]
			if st == nil {
				return fmt.Errorf("merge: array_agg column %d has no state", a.Col)
			}
			if err := st.add(v, m.cols[a.Col]); err != nil {
				return err
			}
			continue
		}
		if v == nil {
			continue
		}
		if cur == nil {
			g.cols[a.Col] = append([]byte{}, v...)
			continue
		}
		var out []byte
		var err error
		switch a.Kind {
		case AggCount, AggSum, AggMin, AggMax:
			out, err = m.foldPartial(a.Kind, a.Col, cur, v)
		case AggBoolAnd, AggBoolOr:
			x, y := boolValue(cur), boolValue(v)
			r := x && y
			if a.Kind == AggBoolOr {
				r = x || y
			}
			out = encodeBool(r, m.cols[a.Col].Format == 1)
		case AggStringAgg:
			out, err = m.appendString(cur, cols[a.SepCol], v, m.cols[a.Col], m.cols[a.SepCol])
		case AggJSONAgg, AggJSONBAgg:
			out, err = appendJSON(cur, v, a.Kind == AggJSONAgg && boolValue(cols[a.StructCol]), m.cols[a.Col])
		case AggJSONObjectAgg:
			out, err = appendJSONObject(cur, v)
		case AggJSONBObjectAgg:
			out, err = mergeJSONBObjects(cur, v, m.cols[a.Col].Format == 1)
		case AggBitAnd, AggBitOr, AggBitXor:
			out, err = bitOp(a.Kind, cur, v, m.cols[a.Col])
		default:
			err = fmt.Errorf("merge: aggregate %v not supported", a.Kind)
		}
		if err != nil {
			return err
		}
		g.cols[a.Col] = out
	}
	return nil
}

// foldPartial combines two non-NULL partial counts, sums, minimums or maximums
// of column col; the result may be cur itself, or a new copy.
func (m *Merger) foldPartial(kind AggKind, col int, cur, v []byte) ([]byte, error) {
	switch kind {
	case AggCount, AggSum:
		return m.add(col, cur, v)
	case AggMin, AggMax:
		c, err := m.cmp[col](v, cur)
		if err != nil {
			return nil, err
		}
		if kind == AggMin && c < 0 || kind == AggMax && c > 0 {
			return append([]byte{}, v...), nil
		}
		return cur, nil
	}
	return nil, fmt.Errorf("merge: aggregate %v cannot be folded", kind)
}

func boolValue(b []byte) bool { return len(b) == 1 && (b[0] == 't' || b[0] == 1) }

func encodeBool(v, bin bool) []byte {
	switch {
	case bin && v:
		return []byte{1}
	case bin:
		return []byte{0}
	case v:
		return []byte{'t'}
	}
	return []byte{'f'}
}

// add sums two partial counts or sums of a column's type.
func (m *Merger) add(col int, a, b []byte) ([]byte, error) {
	c := m.cols[col]
	bin := c.Format == 1
	switch c.OID {
	case oidInt8, oidInt4, oidInt2:
		x, err := m.intValue(col, a)
		if err != nil {
			return nil, err
		}
		y, err := m.intValue(col, b)
		if err != nil {
			return nil, err
		}
		s := x + y
		if (s > x) != (y > 0) {
			return nil, wire.Errorf(wire.NumericValueOutOfRange, "bigint out of range")
		}
		if bin {
			return binary.BigEndian.AppendUint64(nil, uint64(s)), nil
		}
		return strconv.AppendInt(nil, s, 10), nil
	case oidNumeric:
		x, err := m.decimalValue(col, a)
		if err != nil {
			return nil, err
		}
		y, err := m.decimalValue(col, b)
		if err != nil {
			return nil, err
		}
		if bin {
			return encodeBinaryNumeric(x.add(y)), nil
		}
		return []byte(x.add(y).String()), nil
	case oidFloat4, oidFloat8:
		x, err := m.floatValue(col, a)
		if err != nil {
			return nil, err
		}
		y, err := m.floatValue(col, b)
		if err != nil {
			return nil, err
		}
		if bin {
			if c.OID == oidFloat4 {
				return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(addFloat(x, y)))), nil
			}
			return binary.BigEndian.AppendUint64(nil, math.Float64bits(addFloat(x, y))), nil
		}
		if c.OID == oidFloat4 {
			return []byte(strconv.FormatFloat(float64(float32(addFloat(x, y))), 'g', -1, 32)), nil
		}
		return []byte(formatFloat8(addFloat(x, y))), nil
	}
	return nil, wire.Errorf(wire.FeatureNotSupported, "cannot add partial aggregates of type OID %d across shards", c.OID)
}

// addFloat adds as PostgreSQL's float8pl and float4pl (sum) do, and
// accumFloat as float8_accum (avg) does, in builds for x86-64: a NaN
// operand is the result, sum's left one first and avg's right one first,
// as their compiled additions give it (PostgreSQL 15 answers so), so that
// a sum's NaN has PostgreSQL's bits in the binary format: Infinity +
// -Infinity gives the machine's default NaN, negative on x86, while a NaN
// read from 'NaN' is positive. Go's own x + y puts the operands in an
// order of its choosing.
func addFloat(x, y float64) float64 {
	switch {
	case math.IsNaN(x):
		return x
	case math.IsNaN(y):
		return y
	}
	return x + y
}

func accumFloat(x, y float64) float64 {
	if math.IsNaN(y) {
		return y
	}
	return addFloat(x, y)
}

func (m *Merger) intValue(col int, b []byte) (int64, error) {
	if m.cols[col].Format == 1 {
		return binaryInt(b)
	}
	return strconv.ParseInt(string(b), 10, 64)
}

func (m *Merger) floatValue(col int, b []byte) (float64, error) {
	if m.cols[col].Format == 1 {
		return binaryFloat(b)
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !isRangeErr(err) {
		return 0, err
	}
	return f, nil
}

func (m *Merger) decimalValue(col int, b []byte) (decimal, error) {
	return m.decimalOf(m.cols[col], b)
}

// decimalOf reads an integer or numeric value of a column of type c.
func (m *Merger) decimalOf(c Column, b []byte) (decimal, error) {
	switch {
	case c.OID == oidNumeric && c.Format == 1:
		return decodeBinaryNumeric(b)
	case c.OID == oidNumeric:
		return parseDecimal(string(b))
	}
	var n int64
	var err error
	if c.Format == 1 {
		n, err = binaryInt(b)
	} else {
		n, err = strconv.ParseInt(string(b), 10, 64)
	}
	if err != nil {
		return decimal{}, err
	}
	return decimal{unscaled: big.NewInt(n)}, nil
}

// formatFloat8 prints like PostgreSQL's float8out with the default
// extra_float_digits (shortest exact representation).
func formatFloat8(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	exp := 0
	if f != 0 {
		exp = int(math.Floor(math.Log10(math.Abs(f))))
	}
	if exp < -4 || exp >= 15 {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		return s
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// appendKey appends the values of columns idx of a row as a map key: each
// length-prefixed, NULL as a length no value has, so that distinct rows
// never share a key and NULLs group together (as GROUP BY and DISTINCT
// treat them).
func (m *Merger) appendKey(key []byte, cols [][]byte, idx []int) []byte {
	for _, c := range idx {
		if cols[c] == nil {
			key = append(key, 0xff, 0xff, 0xff, 0xff)
			continue
		}
		v := groupValue(m.cols[c].OID, m.cols[c].Format, cols[c])
		key = binary.BigEndian.AppendUint32(key, uint32(len(v)))
		key = append(key, v...)
	}
	return key
}
