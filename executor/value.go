package executor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/wire"
)

// PostgreSQL type OIDs the merge understands (pg_type.dat).
const (
	oidBool        = 16
	oidBytea       = 17
	oidChar        = 18
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOID         = 26
	oidFloat4      = 700
	oidFloat8      = 701
	oidUnknown     = 705
	oidBPChar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
	oidCidr        = 650
	oidMacaddr8    = 774
	oidMoney       = 790
	oidMacaddr     = 829
	oidInet        = 869
	oidInterval    = 1186
	oidTimetz      = 1266
	oidBit         = 1560
	oidVarbit      = 1562
	oidJSON        = 114
	oidJSONB       = 3802
)

// compareFunc orders two non-NULL values of one column.
type compareFunc func(a, b []byte) (int, error)

// comparator returns the ordering of a type in a format (0 text, 1
// binary), or an error naming the type when the proxy cannot order it
// exactly like PostgreSQL. Text types come out in byte order (the C
// collation); orderedComparator applies another collation.
func comparator(oid uint32, format int16) (compareFunc, error) {
	bin := format == 1
	pick := func(text, binary compareFunc) (compareFunc, error) {
		if bin {
			return binary, nil
		}
		return text, nil
	}
	switch oid {
	case oidInt2, oidInt4, oidInt8, oidOID:
		return pick(cmpTextInt, cmpBinaryInt)
	case oidFloat4, oidFloat8:
		return pick(cmpTextFloat, cmpBinaryFloat)
	case oidNumeric:
		return pick(cmpTextNumeric, cmpBinaryNumeric)
	case oidText, oidVarchar, oidName, oidBPChar:
		t := &textCompare{bpchar: oid == oidBPChar}
		return t.compareFunc(), nil
	case oidUnknown:
		return cmpBytes, nil
	case oidChar:
		return pick(cmpTextChar, cmpBytes)
	case oidBytea:
		// The binary format is the bytes; text is hex or escape.
		return pick(cmpTextBytea, cmpBytes)
	case oidUUID, oidBool, oidMacaddr, oidMacaddr8:
		// uuid: 16 bytes, or lower-case hex in fixed places; bool: 0 < 1,
		// 'f' < 't'; macaddr and macaddr8 (macaddr_cmp compares the
		// bytes in order): 6 or 8 bytes, or lower-case hex in fixed
		// places. Byte order is their order in both formats.
		return cmpBytes, nil
	case oidBit, oidVarbit:
		return pick(cmpBytes, cmpBinaryBit)
	case oidInet, oidCidr:
		return pick(cmpTextInet, cmpBinaryInet)
	case oidInterval:
		return pick(cmpTextInterval, cmpBinaryInterval)
	case oidDate:
		return pick(textOrder(textDate), cmpBinaryInt)
	case oidTime:
		return pick(textOrder(parseISOTime), cmpBinaryInt)
	case oidTimestamp:
		return pick(textOrder(func(s string) (int64, error) { return textTimestamp(s, false) }), cmpBinaryInt)
	case oidTimestamptz:
		return pick(textOrder(func(s string) (int64, error) { return textTimestamp(s, true) }), cmpBinaryInt)
	case oidTimetz:
		return pick(cmpTextTimetz, cmpBinaryTimetz)
	case oidMoney:
		if bin {
			return cmpBinaryInt, nil // cash_cmp over the int64
		}
		return nil, wire.Errorf(wire.FeatureNotSupported,
			"cannot merge money values in text format across shards: their text depends on lc_monetary (ask for the binary format, or cast to numeric)")
	}
	if elem, ok := arrayElem[oid]; ok {
		f, err := comparator(elem, format)
		if err != nil {
			return nil, err
		}
		return arrayComparator(elem, format, f), nil
	}
	return nil, wire.Errorf(wire.FeatureNotSupported,
		"cannot merge results across shards: ordering or aggregating values of type OID %d is not supported", oid)
}

func cmpBytes(a, b []byte) (int, error) { return bytes.Compare(a, b), nil }

func cmpBinaryNumeric(a, b []byte) (int, error) {
	x, err := decodeBinaryNumeric(a)
	if err != nil {
		return 0, err
	}
	y, err := decodeBinaryNumeric(b)
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}

// isTextType reports whether values of oid order by collation.
func isTextType(oid uint32) bool {
	switch oid {
	case oidText, oidVarchar, oidBPChar, oidName:
		return true
	}
	return false
}

func cmpInt64(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func binaryInt(b []byte) (int64, error) {
	switch len(b) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	case 8:
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("invalid binary integer of %d bytes", len(b))
}

func cmpBinaryInt(a, b []byte) (int, error) {
	x, err := binaryInt(a)
	if err != nil {
		return 0, err
	}
	y, err := binaryInt(b)
	if err != nil {
		return 0, err
	}
	return cmpInt64(x, y), nil
}

func cmpTextInt(a, b []byte) (int, error) {
	x, err := strconv.ParseInt(string(a), 10, 64)
	if err != nil {
		return 0, err
	}
	y, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, err
	}
	return cmpInt64(x, y), nil
}

// cmpFloat orders like PostgreSQL: NaN equals NaN and sorts above every
// other value, including Infinity.
func cmpFloat(x, y float64) int {
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn && yn:
		return 0
	case xn:
		return 1
	case yn:
		return -1
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func binaryFloat(b []byte) (float64, error) {
	switch len(b) {
	case 4:
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b))), nil
	case 8:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("invalid binary float of %d bytes", len(b))
}

func cmpBinaryFloat(a, b []byte) (int, error) {
	x, err := binaryFloat(a)
	if err != nil {
		return 0, err
	}
	y, err := binaryFloat(b)
	if err != nil {
		return 0, err
	}
	return cmpFloat(x, y), nil
}

func cmpTextFloat(a, b []byte) (int, error) {
	x, err := strconv.ParseFloat(string(a), 64)
	if err != nil && !isRangeErr(err) {
		return 0, err
	}
	y, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !isRangeErr(err) {
		return 0, err
	}
	return cmpFloat(x, y), nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func cmpTextNumeric(a, b []byte) (int, error) {
	x, err := parseDecimal(string(a))
	if err != nil {
		return 0, err
	}
	y, err := parseDecimal(string(b))
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}

// decimal is an exact decimal number: unscaled × 10^-scale, or a special
// value (NaN, ±Infinity), as PostgreSQL's numeric.
type decimal struct {
	unscaled *big.Int
	scale    int32
	special  int8 // 0 finite, 1 +Inf, -1 -Inf, 2 NaN
}

func parseDecimal(s string) (decimal, error) {
	switch strings.ToLower(s) {
	case "nan":
		return decimal{special: 2}, nil
	case "infinity", "+infinity", "inf":
		return decimal{special: 1}, nil
	case "-infinity", "-inf":
		return decimal{special: -1}, nil
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(s[i+1:], 10, 32)
		if err != nil {
			return decimal{}, fmt.Errorf("invalid numeric %q", s)
		}
		mant, exp = s[:i], e
	}
	scale := int32(0)
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		scale = int32(len(mant) - i - 1)
		mant = mant[:i] + mant[i+1:]
	}
	u, ok := new(big.Int).SetString(mant, 10)
	if !ok {
		return decimal{}, fmt.Errorf("invalid numeric %q", s)
	}
	d := decimal{unscaled: u, scale: scale - int32(exp)}
	if d.scale < 0 {
		d.unscaled.Mul(d.unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-d.scale)), nil))
		d.scale = 0
	}
	return d, nil
}

// rescale returns the unscaled value at scale s (s >= d.scale).
func (d decimal) rescale(s int32) *big.Int {
	if s == d.scale {
		return d.unscaled
	}
	return new(big.Int).Mul(d.unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(s-d.scale)), nil))
}

func (d decimal) cmp(e decimal) int {
	// NaN > +Inf > finite > -Inf
	rank := func(x decimal) int {
		switch x.special {
		case 2:
			return 3
		case 1:
			return 2
		case -1:
			return 0
		}
		return 1
	}
	if r1, r2 := rank(d), rank(e); r1 != r2 || r1 != 1 {
		return cmpInt64(int64(r1), int64(r2))
	}
	s := max(d.scale, e.scale)
	return d.rescale(s).Cmp(e.rescale(s))
}

func (d decimal) add(e decimal) decimal {
	if d.special != 0 || e.special != 0 {
		switch {
		case d.special == 2 || e.special == 2:
			return decimal{special: 2}
		case d.special != 0 && e.special != 0 && d.special != e.special:
			return decimal{special: 2} // Inf + -Inf
		case d.special != 0:
			return d
		}
		return e
	}
	s := max(d.scale, e.scale)
	return decimal{unscaled: new(big.Int).Add(d.rescale(s), e.rescale(s)), scale: s}
}

func (d decimal) String() string {
	switch d.special {
	case 2:
		return "NaN"
	case 1:
		return "Infinity"
	case -1:
		return "-Infinity"
	}
	s := d.unscaled.String()
	if d.scale == 0 {
		return s
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for int32(len(s)) <= d.scale {
		s = "0" + s
	}
	s = s[:int32(len(s))-d.scale] + "." + s[int32(len(s))-d.scale:]
	if neg {
		s = "-" + s
	}
	return s
}

// decodeBinaryNumeric decodes PostgreSQL's binary numeric: int16 ndigits,
// int16 weight, uint16 sign, int16 dscale, then base-10000 digits.
func decodeBinaryNumeric(b []byte) (decimal, error) {
	if len(b) < 8 {
		return decimal{}, fmt.Errorf("invalid binary numeric")
	}
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int32(int16(binary.BigEndian.Uint16(b[6:])))
	switch sign {
	case 0xC000:
		return decimal{special: 2}, nil
	case 0xD000:
		return decimal{special: 1}, nil
	case 0xF000:
		return decimal{special: -1}, nil
	}
	if ndigits < 0 || len(b) < 8+2*ndigits {
		return decimal{}, fmt.Errorf("invalid binary numeric")
	}
	u := new(big.Int)
	tenK := big.NewInt(10000)
	for i := 0; i < ndigits; i++ {
		u.Mul(u, tenK)
		u.Add(u, big.NewInt(int64(binary.BigEndian.Uint16(b[8+2*i:]))))
	}
	// The digits represent u × 10000^(weight-ndigits+1).
	exp4 := weight - ndigits + 1
	d := decimal{unscaled: u}
	if exp4 >= 0 {
		u.Mul(u, new(big.Int).Exp(tenK, big.NewInt(int64(exp4)), nil))
	} else {
		d.scale = int32(-exp4 * 4)
	}
	if sign == 0x4000 {
		u.Neg(u)
	}
	// Bring the scale to dscale (drop trailing zero digits beyond it).
	if d.scale > dscale {
		q := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.scale-dscale)), nil)
		d.unscaled = new(big.Int).Quo(d.unscaled, q)
		d.scale = dscale
	} else if d.scale < dscale {
		d.unscaled = d.rescale(dscale)
		d.scale = dscale
	}
	return d, nil
}

// encodeBinaryNumeric is the inverse of decodeBinaryNumeric.
func encodeBinaryNumeric(d decimal) []byte {
	out := make([]byte, 8, 16)
	switch d.special {
	case 2:
		binary.BigEndian.PutUint16(out[4:], 0xC000)
		return out
	case 1:
		// PostgreSQL sends dscale 32 with infinities (numeric_send).
		binary.BigEndian.PutUint16(out[4:], 0xD000)
		binary.BigEndian.PutUint16(out[6:], 32)
		return out
	case -1:
		binary.BigEndian.PutUint16(out[4:], 0xF000)
		binary.BigEndian.PutUint16(out[6:], 32)
		return out
	}
	u := new(big.Int).Set(d.unscaled)
	sign := uint16(0)
	if u.Sign() < 0 {
		sign = 0x4000
		u.Neg(u)
	}
	// Align the scale to a multiple of 4 digits.
	scale := d.scale
	pad := (4 - scale%4) % 4
	if pad > 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(pad)), nil))
	}
	var digits []uint16
	tenK := big.NewInt(10000)
	m := new(big.Int)
	for u.Sign() > 0 {
		u.QuoRem(u, tenK, m)
		digits = append([]uint16{uint16(m.Int64())}, digits...)
	}
	fracGroups := int((scale + pad) / 4)
	weight := len(digits) - fracGroups - 1
	// Trim trailing zero groups (PostgreSQL strips them).
	for len(digits) > 0 && digits[len(digits)-1] == 0 {
		digits = digits[:len(digits)-1]
	}
	if len(digits) == 0 {
		weight = 0
		sign = 0
	}
	binary.BigEndian.PutUint16(out[0:], uint16(len(digits)))
	binary.BigEndian.PutUint16(out[2:], uint16(int16(weight)))
	binary.BigEndian.PutUint16(out[4:], sign)
	binary.BigEndian.PutUint16(out[6:], uint16(scale))
	for _, g := range digits {
		out = binary.BigEndian.AppendUint16(out, g)
	}
	return out
}
