package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// stddev and variance across shards. Shards return the client's call and,
// in hidden columns, the moments of its argument x in their group
// (router/variance.go): count(x), the exact sum(x::numeric) and
// sum(x::numeric * x::numeric), and avg(x) and var_pop(x). The type of the
// client's column says which are meant.
//
// numeric (x integer or numeric): the counts and exact sums add up to the
// N, sumX and sumX2 PostgreSQL's accumulator holds over all the rows, with
// the same display scales, and numericMoment finishes them as
// numeric_stddev_internal does, so that every digit and the display scale
// are PostgreSQL's.
//
// double precision (x real or double precision): PostgreSQL keeps N, Sx and
// Sxx (the Youngs–Cramer accumulator). A shard's Sx is avg(x)·N and its
// Sxx var_pop(x)·N; the shards' accumulators combine as float8_combine
// combines those of parallel workers, and finish as float8_var_pop,
// float8_var_samp, float8_stddev_pop and float8_stddev_samp do. A group
// whose rows are all on one shard keeps that shard's own answer. Otherwise
// the last digits may differ from one server's, as they differ between a
// serial and a parallel plan on one server: the rows are added in another
// order, and avg·N and var_pop·N round once more.

// Moments are the hidden columns of the moments of a stddev or variance
// aggregate's argument (router.Moments).
type Moments struct {
	Count, Sum, SumSq, Avg, VarPop int
}

func momentsOf(r router.Moments, idx func(router.Column) (int, error)) (Moments, error) {
	var out Moments
	for _, c := range []struct {
		from router.Column
		to   *int
	}{{r.Count, &out.Count}, {r.Sum, &out.Sum}, {r.SumSq, &out.SumSq}, {r.Avg, &out.Avg}, {r.VarPop, &out.VarPop}} {
		var err error
		if *c.to, err = idx(c.from); err != nil {
			return Moments{}, err
		}
	}
	return out, nil
}

// isMoment reports whether k is one of the stddev and variance kinds.
func isMoment(k AggKind) bool {
	switch k {
	case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
		return true
	}
	return false
}

// momentState is a group's combined moments of one stddev or variance
// column.
type momentState struct {
	float bool
	// numeric: n counts every value (NaN and infinities too, as
	// NA_TOTAL_COUNT does); sum and sumSq are nil until a shard has values.
	n          int64
	sum, sumSq *decimal
	// float: the combined accumulator, the number of partials with values,
	// and the client's column of the first of them.
	fn, sx, sxx float64
	parts       int
	only        []byte
}

// initMoments starts the stddev and variance columns of a new group with
// its first row.
func (m *Merger) initMoments(g *group) error {
	for _, a := range m.spec.Aggs {
		if !isMoment(a.Kind) {
			continue
		}
		switch m.cols[a.Col].OID {
		case oidNumeric, oidFloat8:
		default:
			return wire.Errorf(wire.FeatureNotSupported, "cannot combine %v() of type OID %d across shards", a.Kind, m.cols[a.Col].OID)
		}
		if g.moments == nil {
			g.moments = map[int]*momentState{}
		}
		st := &momentState{float: m.cols[a.Col].OID == oidFloat8}
		g.moments[a.Col] = st
		if err := m.addMoments(st, a, g.cols); err != nil {
			return err
		}
	}
	return nil
}

// addMoments adds a row's moments (a shard's partial) to st.
func (m *Merger) addMoments(st *momentState, a Agg, cols [][]byte) error {
	if st == nil {
		return fmt.Errorf("merge: %v column %d has no state", a.Kind, a.Col)
	}
	mo := a.Moments
	if cols[mo.Count] == nil {
		return nil // no row of the shard in a tagged merge
	}
	n, err := m.intValue(mo.Count, cols[mo.Count])
	if err != nil || n == 0 {
		return err
	}
	if st.float {
		return m.addFloatMoments(st, a, cols, n)
	}
	st.n += n
	for _, p := range []struct {
		col int
		to  **decimal
	}{{mo.Sum, &st.sum}, {mo.SumSq, &st.sumSq}} {
		if cols[p.col] == nil {
			return fmt.Errorf("merge: %v column %d: a count of %d without a sum", a.Kind, a.Col, n)
		}
		d, err := m.decimalOf(m.cols[p.col], cols[p.col])
		if err != nil {
			return err
		}
		if *p.to != nil {
			d = (*p.to).add(d)
		}
		*p.to = &d
	}
	return nil
}

// addFloatMoments combines a shard's float accumulator into st as
// float8_combine does (state 1 is st, state 2 the shard's).
func (m *Merger) addFloatMoments(st *momentState, a Agg, cols [][]byte, count int64) error {
	mo := a.Moments
	if cols[mo.Avg] == nil || cols[mo.VarPop] == nil {
		return fmt.Errorf("merge: %v column %d: a count of %d without avg and var_pop", a.Kind, a.Col, count)
	}
	avg, err := m.floatValue(mo.Avg, cols[mo.Avg])
	if err != nil {
		return err
	}
	varPop, err := m.floatValue(mo.VarPop, cols[mo.VarPop])
	if err != nil {
		return err
	}
	n2 := float64(count)
	sx2, sxx2 := avg*n2, varPop*n2
	st.parts++
	if st.parts == 1 {
		st.only = copyValue(cols[a.Col])
		st.fn, st.sx, st.sxx = n2, sx2, sxx2
		return nil
	}
	n1, sx1, sxx1 := st.fn, st.sx, st.sxx
	sx := sx1 + sx2
	if math.IsInf(sx, 0) && !math.IsInf(sx1, 0) && !math.IsInf(sx2, 0) {
		return floatOverflow()
	}
	tmp := sx1/n1 - sx2/n2
	sxx := sxx1 + sxx2 + n1*n2*tmp*tmp/(n1+n2)
	if math.IsInf(sxx, 0) && !math.IsInf(sxx1, 0) && !math.IsInf(sxx2, 0) {
		return floatOverflow()
	}
	st.fn, st.sx, st.sxx = n1+n2, sx, sxx
	return nil
}

func floatOverflow() error {
	return wire.Errorf(wire.NumericValueOutOfRange, "value out of range: overflow")
}

// finishMoments writes each stddev and variance column of a group.
func (m *Merger) finishMoments(g *group) error {
	for _, a := range m.spec.Aggs {
		if !isMoment(a.Kind) {
			continue
		}
		st := g.moments[a.Col]
		if st == nil {
			continue // finished
		}
		bin := m.cols[a.Col].Format == 1
		if st.float {
			g.cols[a.Col] = st.floatResult(a.Kind, bin)
			continue
		}
		d, ok := numericMoment(a.Kind, st.n, st.sum, st.sumSq)
		switch {
		case !ok:
			g.cols[a.Col] = nil
		case bin:
			g.cols[a.Col] = encodeBinaryNumeric(d)
		default:
			g.cols[a.Col] = []byte(d.String())
		}
	}
	g.moments = nil
	return nil
}

// floatResult is the float column's value: the one shard's own, or the
// combined accumulator finished as float.c's final functions do.
func (st *momentState) floatResult(k AggKind, bin bool) []byte {
	switch {
	case st.parts == 0:
		return nil
	case st.parts == 1:
		return st.only
	}
	n, f := st.fn, 0.0
	switch k {
	case AggVarPop, AggStddevPop:
		f = st.sxx / n
	default:
		f = st.sxx / (n - 1.0) // n >= 2: two partials with values
	}
	if k == AggStddevSamp || k == AggStddevPop {
		f = math.Sqrt(f)
	}
	if math.IsNaN(f) {
		// PostgreSQL's NaN here is get_float8_nan()'s, which the
		// accumulator stores for infinite inputs: positive, quiet.
		f = math.Float64frombits(0x7ff8000000000000)
	}
	if bin {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
	}
	return []byte(formatFloat8(f))
}

// numericMoment computes stddev or variance from the count n of non-NULL
// values and the exact sums of the values and of their squares, as
// PostgreSQL 15's numeric_stddev_internal does; ok is false for NULL.
func numericMoment(k AggKind, n int64, sum, sumSq *decimal) (d decimal, ok bool) {
	sample := k == AggStddevSamp || k == AggVarSamp
	if n == 0 || sample && n <= 1 || sum == nil || sumSq == nil {
		return decimal{}, false
	}
	if sum.special != 0 || sumSq.special != 0 {
		return decimal{special: 2}, true // any NaN or infinity
	}
	// rscale = dscale(sumX) × 2: N × sumX2 − sumX × sumX, exact, since
	// sumX2's display scale is twice sumX's.
	rscale := sum.scale * 2
	bn := big.NewInt(n)
	num := new(big.Int).Mul(bn, roundScale(*sumSq, rscale))
	num.Sub(num, new(big.Int).Mul(sum.unscaled, sum.unscaled))
	if num.Sign() <= 0 {
		// Roundoff cannot make it negative here, but a zero numerator
		// is "0" (const_zero), whatever the scales.
		return decimal{unscaled: new(big.Int)}, true
	}
	den := new(big.Int).Sub(bn, big.NewInt(1))
	if !sample {
		den.Set(bn)
	}
	den.Mul(den, bn)
	q := divideNumeric(decimal{unscaled: num, scale: rscale}, decimal{unscaled: den})
	if k == AggStddevSamp || k == AggStddevPop {
		q = sqrtNumeric(q)
	}
	return q, true
}

// roundScale returns d's unscaled value at scale s, rounded half away from
// zero when s is below d's scale (as mul_var rounds to its rscale).
func roundScale(d decimal, s int32) *big.Int {
	if s >= d.scale {
		return d.rescale(s)
	}
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.scale-s)), nil)
	q, r := new(big.Int).QuoRem(d.unscaled, p, new(big.Int))
	if r.Abs(r).Lsh(r, 1).Cmp(p) >= 0 {
		if d.unscaled.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

// sqrtNumeric is the square root of a non-negative d at d's scale, as
// sqrt_var computes it: the root truncated a digit or more beyond the
// scale, then rounded half up, which is the exact root correctly rounded.
func sqrtNumeric(d decimal) decimal {
	// floor(sqrt(d) × 10^(scale+1)) = isqrt(unscaled × 10^(scale+2))
	x := new(big.Int).Mul(d.unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.scale)+2), nil))
	s := x.Sqrt(x)
	s.Add(s, big.NewInt(5))
	s.Quo(s, big.NewInt(10))
	return decimal{unscaled: s, scale: d.scale}
}
