package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// avg across shards: shards return sum(x) in its column and count(x) in a
// hidden one; the merger adds both per group and divides as numeric_div
// (or float8 division) does.

type avgState struct {
	sum   decimal
	fsum  float64
	count int64
	float bool
	null  bool
	fold  bool // a server computes the avg (fold.go): only count
}

func (m *Merger) initAvg(g *group) error {
	for _, a := range m.spec.Aggs {
		if a.Kind != AggAvg {
			continue
		}
		if g.avg == nil {
			g.avg = map[int]*avgState{}
		}
		st := &avgState{null: true, float: m.cols[a.Col].OID == oidFloat8 || m.cols[a.Col].OID == oidFloat4, fold: m.folded(a.Col)}
		g.avg[a.Col] = st
		if err := m.addAvg(st, a, g.cols); err != nil {
			return err
		}
	}
	return nil
}

func (m *Merger) addAvg(st *avgState, a Agg, cols [][]byte) error {
	s, c := cols[a.SumCol], cols[a.CountCol]
	if c == nil {
		return nil
	}
	n, err := m.intValue(a.CountCol, c)
	if err != nil {
		return err
	}
	st.count += n
	if s == nil || st.fold {
		return nil
	}
	st.null = false
	if st.float {
		f, err := m.floatValue(a.SumCol, s)
		if err != nil {
			return err
		}
		st.fsum = accumFloat(st.fsum, f)
		return nil
	}
	d, err := m.decimalOf(m.sums[a.SumCol], s)
	if err != nil {
		return err
	}
	if st.sum.unscaled == nil && st.sum.special == 0 {
		st.sum = d
	} else {
		st.sum = st.sum.add(d)
	}
	return nil
}

func (m *Merger) finishAvg(g *group) error {
	for _, a := range m.spec.Aggs {
		if a.Kind != AggAvg {
			continue
		}
		st := g.avg[a.Col]
		if st.fold {
			continue // set by fold
		}
		if st.null || st.count == 0 {
			g.cols[a.Col] = nil
			continue
		}
		bin := m.cols[a.Col].Format == 1
		if st.float {
			f := st.fsum / float64(st.count)
			if bin {
				g.cols[a.Col] = binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
			} else {
				g.cols[a.Col] = []byte(formatFloat8(f))
			}
			continue
		}
		q := divideNumeric(st.sum, decimal{unscaled: big.NewInt(st.count)})
		if bin {
			g.cols[a.Col] = encodeBinaryNumeric(q)
		} else {
			g.cols[a.Col] = []byte(q.String())
		}
	}
	return nil
}

// avgOID is the type of avg(x) for a sum(x) of type oid: numeric over
// integers and numeric, float8 over floats.
func avgOID(oid uint32) uint32 {
	switch oid {
	case oidFloat4, oidFloat8:
		return oidFloat8
	case oidInt2, oidInt4, oidInt8, oidNumeric:
		return oidNumeric
	}
	return oid
}

// retypeAvg makes an avg column, which shards return as sum(x), the type
// of avg(x) — numeric, or float8 over floats — before the merger orders
// or compares it: its combined values are avg's. The shards' type stays
// in sums for reading their sums.
func (m *Merger) retypeAvg(col int) error {
	if col < 0 || col >= len(m.cols) {
		return fmt.Errorf("merge: column %d out of range", col)
	}
	if m.sums == nil {
		m.sums = map[int]Column{}
	}
	if _, done := m.sums[col]; done {
		return nil
	}
	switch c := m.cols[col]; c.OID {
	case oidInt2, oidInt4, oidInt8, oidNumeric, oidFloat4, oidFloat8:
		m.sums[col] = c
		m.cols[col].OID = avgOID(c.OID)
		return nil
	case oidInterval:
		m.sums[col] = c // avg(interval) is an interval (fold.go)
		return nil
	}
	return wire.Errorf(wire.FeatureNotSupported, "cannot combine avg() of type OID %d across shards", m.cols[col].OID)
}

// divideNumeric divides like PostgreSQL's numeric_div: the result scale
// comes from select_div_scale (at least 16 significant digits), rounded
// half away from zero.
func divideNumeric(a, b decimal) decimal {
	if a.special != 0 {
		return a
	}
	// Weight and first base-10000 digit of each operand.
	w1, f1 := numericWeight(a)
	w2, f2 := numericWeight(b)
	qweight := w1 - w2
	if f1 <= f2 {
		qweight--
	}
	rscale := int32(16 - qweight*4)
	rscale = max(rscale, a.scale, b.scale, 0)
	rscale = min(rscale, 1000)
	// q = a / b at rscale: (a.unscaled × 10^(rscale - a.scale + b.scale)) / b.unscaled
	num := new(big.Int).Set(a.unscaled)
	shift := int64(rscale) - int64(a.scale) + int64(b.scale)
	if shift >= 0 {
		num.Mul(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
	}
	den := new(big.Int).Set(b.unscaled)
	if shift < 0 {
		den.Mul(den, new(big.Int).Exp(big.NewInt(10), big.NewInt(-shift), nil))
	}
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	// Round half away from zero.
	r2 := new(big.Int).Abs(r)
	r2.Mul(r2, big.NewInt(2))
	if r2.Cmp(new(big.Int).Abs(den)) >= 0 {
		if (num.Sign() < 0) != (den.Sign() < 0) {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return decimal{unscaled: q, scale: rscale}
}

// numericWeight returns the base-10000 weight and first digit of d as
// PostgreSQL's NumericVar holds them.
func numericWeight(d decimal) (weight int, first int) {
	u := new(big.Int).Abs(d.unscaled)
	if u.Sign() == 0 {
		return 0, 0
	}
	s := u.String()
	// digits before the decimal point
	intDigits := len(s) - int(d.scale)
	// weight: index of the first base-10000 group relative to the point.
	if intDigits > 0 {
		weight = (intDigits - 1) / 4
		lead := intDigits - weight*4
		first, _ = strconv.Atoi(s[:lead])
		return weight, first
	}
	// Pure fraction: leading zeros after the point.
	zeros := -intDigits
	weight = -(zeros/4 + 1)
	groupStart := (-weight - 1) * 4 // zeros consumed before the first group
	digitsInGroup := 4 - (zeros - groupStart)
	if digitsInGroup > len(s) {
		first, _ = strconv.Atoi(s)
		for i := len(s); i < digitsInGroup; i++ {
			first *= 10
		}
		return weight, first
	}
	first, _ = strconv.Atoi(s[:digitsInGroup])
	return weight, first
}
