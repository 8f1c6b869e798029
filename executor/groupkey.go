package executor

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"strconv"
)

// groupValue is v as GROUP BY and DISTINCT compare it: values that
// PostgreSQL's equality operator of the type calls equal have the same
// group value even when their bytes differ, as they may between shards —
// numeric 1.0 and 1.00, float -0 and 0, char(n) with trailing blanks,
// interval '1 day' and '24 hours'. Other types compare by their bytes
// (text under a deterministic collation is equal only when its bytes are).
// A value that does not decode keeps its bytes.
func groupValue(oid uint32, format int16, v []byte) []byte {
	switch oid {
	case oidNumeric:
		var d decimal
		var err error
		if format == 1 {
			d, err = decodeBinaryNumeric(v)
		} else {
			d, err = parseDecimal(string(v))
		}
		if err != nil {
			return v
		}
		return numericKey(d)
	case oidFloat4, oidFloat8:
		var f float64
		var err error
		if format == 1 {
			f, err = binaryFloat(v)
		} else {
			f, err = strconv.ParseFloat(string(v), 64)
			if isRangeErr(err) {
				err = nil // ±Inf for an out-of-range text, as ParseFloat returns
			}
		}
		if err != nil {
			return v
		}
		switch {
		case math.IsNaN(f):
			f = math.NaN() // every NaN is equal to every other
		case f == 0:
			f = 0 // -0 = 0
		}
		return binary.BigEndian.AppendUint64([]byte{'F'}, math.Float64bits(f))
	case oidBPChar:
		return bytes.TrimRight(v, " ")
	case oidInterval:
		var iv interval
		var err error
		if format == 1 {
			iv, err = binaryInterval(v)
		} else {
			iv, err = textInterval(string(v))
		}
		if err != nil {
			return v
		}
		days, rest := iv.span()
		k := binary.BigEndian.AppendUint64([]byte{'I'}, uint64(days))
		return binary.BigEndian.AppendUint64(k, uint64(rest))
	}
	return v
}

// numericKey is d without the trailing fractional zeros of its scale.
func numericKey(d decimal) []byte {
	if d.special != 0 || d.unscaled == nil {
		return []byte{'S', byte(d.special)}
	}
	u, scale := new(big.Int).Set(d.unscaled), d.scale
	ten, r := big.NewInt(10), new(big.Int)
	for scale > 0 {
		q, rem := new(big.Int).QuoRem(u, ten, r)
		if rem.Sign() != 0 {
			break
		}
		u, scale = q, scale-1
	}
	k := append([]byte{'N'}, u.String()...)
	return strconv.AppendInt(append(k, 'e'), int64(scale), 10)
}
