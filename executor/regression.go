package executor

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// corr, covar_pop, covar_samp and the regr_ aggregates across shards.
// PostgreSQL computes them from one transition state of (y, x),
// float8_regr_accum's N, Sx, Sxx, Sy, Syy and Sxy (Youngs–Cramer: Sxx, Syy
// and Sxy are sums of products of deviations from the means). Shards
// return the client's call and, in hidden columns, their state
// (router/regression.go): regr_count (N), regr_avgx (Sx/N), regr_avgy
// (Sy/N), regr_sxx, regr_syy and regr_sxy. regr_count adds up as a count
// (AggCount).
//
// A group whose rows are all on one shard keeps that shard's own answer.
// Otherwise the shards' states combine as float8_regr_combine combines
// those of parallel workers, with its overflow errors, and finish as the
// call's final function does (float8_corr, float8_regr_slope, …). The
// last digits may then differ from one server's, as they differ between a
// serial and a parallel plan on one server: the rows are added in another
// order, and avg·N rounds once more.

// Regression are the hidden columns of the state of a corr, covar_ or
// regr_ aggregate (router.Regression).
type Regression struct {
	Count, AvgX, AvgY, SXX, SYY, SXY int
}

func regressionOf(r router.Regression, idx func(router.Column) (int, error)) (Regression, error) {
	var out Regression
	for _, c := range []struct {
		from router.Column
		to   *int
	}{{r.Count, &out.Count}, {r.AvgX, &out.AvgX}, {r.AvgY, &out.AvgY}, {r.SXX, &out.SXX}, {r.SYY, &out.SYY}, {r.SXY, &out.SXY}} {
		var err error
		if *c.to, err = idx(c.from); err != nil {
			return Regression{}, err
		}
	}
	return out, nil
}

// regressionKinds are the executor's kinds of the router's corr, covar_
// and regr_ aggregates (regr_count is AggCount).
var regressionKinds = map[router.AggFunc]AggKind{
	router.AggCorr: AggCorr, router.AggCovarPop: AggCovarPop, router.AggCovarSamp: AggCovarSamp,
	router.AggRegrAvgX: AggRegrAvgX, router.AggRegrAvgY: AggRegrAvgY, router.AggRegrIntercept: AggRegrIntercept,
	router.AggRegrR2: AggRegrR2, router.AggRegrSlope: AggRegrSlope, router.AggRegrSXX: AggRegrSXX,
	router.AggRegrSXY: AggRegrSXY, router.AggRegrSYY: AggRegrSYY,
}

// isRegression reports whether k is computed from float8_regr_accum's
// state.
func isRegression(k AggKind) bool {
	return k >= AggCorr && k <= AggRegrSYY
}

// regrState is a group's combined state of one corr, covar_ or regr_
// column: float8_regr_accum's, the number of partials with rows, and the
// client's column of the first of them.
type regrState struct {
	n, sx, sxx, sy, syy, sxy float64
	parts                    int
	only                     []byte
}

// initRegressions starts the corr, covar_ and regr_ columns of a new
// group with its first row.
func (m *Merger) initRegressions(g *group) error {
	for _, a := range m.spec.Aggs {
		if !isRegression(a.Kind) {
			continue
		}
		if m.cols[a.Col].OID != oidFloat8 {
			return wire.Errorf(wire.FeatureNotSupported, "cannot combine %v() of type OID %d across shards", a.Kind, m.cols[a.Col].OID)
		}
		if g.regressions == nil {
			g.regressions = map[int]*regrState{}
		}
		st := &regrState{}
		g.regressions[a.Col] = st
		if err := m.addRegression(st, a, g.cols); err != nil {
			return err
		}
	}
	return nil
}

// addRegression adds a row's state (a shard's partial) to st.
func (m *Merger) addRegression(st *regrState, a Agg, cols [][]byte) error {
	if st == nil {
		return fmt.Errorf("merge: %v column %d has no state", a.Kind, a.Col)
	}
	r := a.Regression
	if cols[r.Count] == nil {
		return nil // no row of the shard in a tagged merge
	}
	count, err := m.intValue(r.Count, cols[r.Count])
	if err != nil || count == 0 {
		return err
	}
	var v [5]float64
	for i, col := range []int{r.AvgX, r.AvgY, r.SXX, r.SYY, r.SXY} {
		if cols[col] == nil {
			return fmt.Errorf("merge: %v column %d: a count of %d without its state", a.Kind, a.Col, count)
		}
		if v[i], err = m.floatValue(col, cols[col]); err != nil {
			return err
		}
		if math.IsNaN(v[i]) && m.cols[col].Format != 1 {
			v[i] = pgNaN // as float8in reads "NaN"
		}
	}
	n := float64(count)
	p := regrState{n: n, sx: v[0] * n, sy: v[1] * n, sxx: v[2], syy: v[3], sxy: v[4]}
	st.parts++
	if st.parts == 1 {
		p.parts, p.only = 1, copyValue(cols[a.Col])
		*st = p
		return nil
	}
	return st.combine(&p)
}

// pgNaN is PostgreSQL's get_float8_nan(): positive, quiet.
var pgNaN = math.Float64frombits(0x7ff8000000000000)

// combine adds state p to st as float8_regr_combine does (state 1 is st,
// state 2 p; neither is empty): finite sums that add up to an infinity
// fail with 22003. Its additions keep the left NaN operand, as compiled
// for x86-64 (addFloat): a NaN's sign bit, which the binary format shows,
// then mostly is the one a server gives, though not always, since it
// depends on the order in which the rows are added.
func (st *regrState) combine(p *regrState) error {
	n := st.n + p.n
	sx := addFloat(st.sx, p.sx)
	if math.IsInf(sx, 0) && !math.IsInf(st.sx, 0) && !math.IsInf(p.sx, 0) {
		return floatOverflow()
	}
	tmpX := st.sx/st.n - p.sx/p.n
	sxx := addFloat(addFloat(st.sxx, p.sxx), st.n*p.n*tmpX*tmpX/n)
	if math.IsInf(sxx, 0) && !math.IsInf(st.sxx, 0) && !math.IsInf(p.sxx, 0) {
		return floatOverflow()
	}
	sy := addFloat(st.sy, p.sy)
	if math.IsInf(sy, 0) && !math.IsInf(st.sy, 0) && !math.IsInf(p.sy, 0) {
		return floatOverflow()
	}
	tmpY := st.sy/st.n - p.sy/p.n
	syy := addFloat(addFloat(st.syy, p.syy), st.n*p.n*tmpY*tmpY/n)
	if math.IsInf(syy, 0) && !math.IsInf(st.syy, 0) && !math.IsInf(p.syy, 0) {
		return floatOverflow()
	}
	sxy := addFloat(addFloat(st.sxy, p.sxy), st.n*p.n*tmpX*tmpY/n)
	if math.IsInf(sxy, 0) && !math.IsInf(st.sxy, 0) && !math.IsInf(p.sxy, 0) {
		return floatOverflow()
	}
	st.n, st.sx, st.sxx, st.sy, st.syy, st.sxy = n, sx, sxx, sy, syy, sxy
	return nil
}

// finishRegressions writes each corr, covar_ and regr_ column of a group.
func (m *Merger) finishRegressions(g *group) {
	for _, a := range m.spec.Aggs {
		if !isRegression(a.Kind) {
			continue
		}
		if st := g.regressions[a.Col]; st != nil {
			g.cols[a.Col] = st.result(a.Kind, m.cols[a.Col].Format == 1)
		}
	}
	g.regressions = nil
}

// result is the column's value: NULL without rows, the one shard's own
// answer, or the combined state finished.
func (st *regrState) result(k AggKind, bin bool) []byte {
	switch {
	case st.parts == 0:
		return nil
	case st.parts == 1:
		return st.only
	}
	f, ok := st.final(k)
	if !ok {
		return nil
	}
	if bin {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
	}
	return []byte(formatFloat8(f))
}

// final computes aggregate k from the state as PostgreSQL 15's final
// functions do (float8_corr, float8_regr_slope, …); ok is false for NULL:
// no rows (N < 1), fewer than two for covar_samp, a vertical line (Sxx = 0)
// for corr, regr_r2, regr_slope and regr_intercept, a horizontal one
// (Syy = 0) for corr. They check no overflow: an infinity is returned.
func (st *regrState) final(k AggKind) (float64, bool) {
	n := st.n
	if n < 1 {
		return 0, false
	}
	switch k {
	case AggRegrSXX:
		return st.sxx, true
	case AggRegrSYY:
		return st.syy, true
	case AggRegrSXY:
		return st.sxy, true
	case AggRegrAvgX:
		return st.sx / n, true
	case AggRegrAvgY:
		return st.sy / n, true
	case AggCovarPop:
		return st.sxy / n, true
	case AggCovarSamp:
		if n < 2 {
			return 0, false
		}
		return st.sxy / (n - 1), true
	case AggCorr:
		if st.sxx == 0 || st.syy == 0 {
			return 0, false
		}
		return st.sxy / math.Sqrt(st.sxx*st.syy), true
	case AggRegrR2:
		switch {
		case st.sxx == 0:
			return 0, false
		case st.syy == 0:
			return 1, true
		}
		return (st.sxy * st.sxy) / (st.sxx * st.syy), true
	case AggRegrSlope:
		if st.sxx == 0 {
			return 0, false
		}
		return st.sxy / st.sxx, true
	case AggRegrIntercept:
		if st.sxx == 0 {
			return 0, false
		}
		return (st.sy - st.sx*st.sxy/st.sxx) / n, true
	}
	return 0, false
}
