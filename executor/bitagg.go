package executor

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// bit_and, bit_or and bit_xor across shards: the shards' partial results
// combine with the aggregate's operator, as its transition function
// combines values. Integers keep their width; bit strings must have one
// length, as bitand, bitor and bitxor require.

// bitOp combines two partial results of a bit aggregate of column col.
func bitOp(k AggKind, x, y []byte, col Column) ([]byte, error) {
	switch col.OID {
	case oidInt2, oidInt4, oidInt8:
		return intBitOp(k, x, y, col)
	case oidBit, oidVarbit:
		if col.Format == 1 {
			return binaryBitOp(k, x, y)
		}
		return textBitOp(k, x, y)
	}
	return nil, wire.Errorf(wire.FeatureNotSupported, "%v of type OID %d is not supported across shards", k, col.OID)
}

func apply(k AggKind, a, b uint64) uint64 {
	switch k {
	case AggBitAnd:
		return a & b
	case AggBitOr:
		return a | b
	}
	return a ^ b
}

func intBitOp(k AggKind, x, y []byte, col Column) ([]byte, error) {
	if col.Format == 0 {
		a, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("merge: %v partial %q: %w", k, x, err)
		}
		b, err := strconv.ParseInt(string(y), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("merge: %v partial %q: %w", k, y, err)
		}
		return strconv.AppendInt(nil, int64(apply(k, uint64(a), uint64(b))), 10), nil
	}
	if len(x) != len(y) || (len(x) != 2 && len(x) != 4 && len(x) != 8) {
		return nil, fmt.Errorf("merge: malformed %v partial", k)
	}
	out := make([]byte, len(x))
	for i := range x {
		out[i] = byte(apply(k, uint64(x[i]), uint64(y[i])))
	}
	return out, nil
}

// bitSizeError is the error of bitand, bitor and bitxor for bit strings
// of different lengths.
func bitSizeError(k AggKind) error {
	op := map[AggKind]string{AggBitAnd: "AND", AggBitOr: "OR", AggBitXor: "XOR"}[k]
	return wire.Errorf(wire.StringDataLengthMismatch, "cannot %s bit strings of different sizes", op)
}

// textBitOp combines bit strings written as 0s and 1s.
func textBitOp(k AggKind, x, y []byte) ([]byte, error) {
	if len(x) != len(y) {
		return nil, bitSizeError(k)
	}
	out := make([]byte, len(x))
	for i := range x {
		a, b := x[i]-'0', y[i]-'0'
		if a > 1 || b > 1 {
			return nil, fmt.Errorf("merge: malformed %v partial", k)
		}
		out[i] = '0' + byte(apply(k, uint64(a), uint64(b)))
	}
	return out, nil
}

// binaryBitOp combines bit strings in bit_send's form: int32 length in
// bits, then the bits, the last byte padded with zeros (which every
// operator keeps zero).
func binaryBitOp(k AggKind, x, y []byte) ([]byte, error) {
	if len(x) < 4 || len(y) < 4 {
		return nil, fmt.Errorf("merge: malformed %v partial", k)
	}
	if binary.BigEndian.Uint32(x) != binary.BigEndian.Uint32(y) || len(x) != len(y) {
		return nil, bitSizeError(k)
	}
	out := append([]byte{}, x[:4]...)
	for i := 4; i < len(x); i++ {
		out = append(out, byte(apply(k, uint64(x[i]), uint64(y[i]))))
	}
	return out, nil
}
