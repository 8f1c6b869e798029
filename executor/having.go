package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// HAVING conditions the merge evaluates itself: a comparison of a combined
// column with a constant or parameter.

// having evaluates the HAVING conditions on a combined row.
func (m *Merger) having(cols [][]byte) (bool, error) {
	for _, h := range m.spec.Having {
		v := cols[h.Col]
		if v == nil || h.Value == nil {
			return false, nil
		}
		c, err := m.cmp[h.Col](v, h.Value)
		if err != nil {
			return false, err
		}
		var ok bool
		switch h.Op {
		case "=":
			ok = c == 0
		case "<>", "!=":
			ok = c != 0
		case "<":
			ok = c < 0
		case "<=":
			ok = c <= 0
		case ">":
			ok = c > 0
		case ">=":
			ok = c >= 0
		default:
			return false, wire.Errorf(wire.FeatureNotSupported, "HAVING operator %s is not supported across shards", h.Op)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// checkHaving refuses a HAVING comparison the merge cannot make exactly as
// PostgreSQL would: an integer constant compared with a column that is not
// a number (PostgreSQL's operator would be another one, or none), or a
// parameter compared with a column of a type whose input the merge does not
// read (a bool parameter 'yes', a date for a timestamp). Numbers and text
// compare as the column's type.
func checkHaving(h Cond, col Column) error {
	numeric := false
	switch col.OID {
	case oidInt2, oidInt4, oidInt8, oidFloat4, oidFloat8, oidNumeric:
		numeric = true
	case oidText, oidVarchar, oidBPChar, oidName:
		if h.Param {
			return nil
		}
	}
	if numeric {
		return nil
	}
	what := "an integer constant"
	if h.Param {
		what = "a parameter"
	}
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
		Message: fmt.Sprintf("HAVING compares a column of type OID %d with %s across shards", col.OID, what),
		Hint:    "Write the constant as the column's type (HAVING max(d) > '2000-01-01'), which one shard evaluates; or route the query to one shard."}
}

// convertConst turns a HAVING value into col's format: a text constant
// into binary, or a binary parameter (which has the column's type: the
// shards type the parameter of max(x) > $1 as x's) into text.
func convertConst(v []byte, col Column) ([]byte, error) {
	if col.Format == 0 {
		return binaryText(v, col)
	}
	s := string(v)
	switch col.OID {
	case oidInt2, oidInt4, oidInt8:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, wire.Errorf(wire.InvalidTextRepresentation, "invalid input syntax for type bigint: \"%s\"", s)
		}
		return binary.BigEndian.AppendUint64(nil, uint64(n)), nil
	case oidFloat4, oidFloat8:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, wire.Errorf(wire.InvalidTextRepresentation, "invalid input syntax for type double precision: \"%s\"", s)
		}
		if col.OID == oidFloat4 {
			return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f))), nil
		}
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)), nil
	case oidNumeric:
		d, err := parseDecimal(s)
		if err != nil {
			return nil, wire.Errorf(wire.InvalidTextRepresentation, "invalid input syntax for type numeric: \"%s\"", s)
		}
		return encodeBinaryNumeric(d), nil
	case oidBool:
		return encodeBool(s == "t" || s == "true" || s == "on" || s == "1", true), nil
	case oidText, oidVarchar, oidName, oidBPChar, oidUUID:
		if col.OID == oidUUID {
			break
		}
		return v, nil
	}
	return nil, wire.Errorf(wire.FeatureNotSupported, "HAVING on a binary column of type OID %d is not supported across shards", col.OID)
}

// binaryText is the text form of v, a number in col's type's binary
// format.
func binaryText(v []byte, col Column) ([]byte, error) {
	bad := wire.Errorf(wire.InvalidBinaryRepresentation, "incorrect binary data format in bind parameter compared with a column of type OID %d", col.OID)
	switch col.OID {
	case oidInt2:
		if len(v) != 2 {
			return nil, bad
		}
		return strconv.AppendInt(nil, int64(int16(binary.BigEndian.Uint16(v))), 10), nil
	case oidInt4:
		if len(v) != 4 {
			return nil, bad
		}
		return strconv.AppendInt(nil, int64(int32(binary.BigEndian.Uint32(v))), 10), nil
	case oidInt8:
		if len(v) != 8 {
			return nil, bad
		}
		return strconv.AppendInt(nil, int64(binary.BigEndian.Uint64(v)), 10), nil
	case oidFloat4:
		if len(v) != 4 {
			return nil, bad
		}
		return strconv.AppendFloat(nil, float64(math.Float32frombits(binary.BigEndian.Uint32(v))), 'g', -1, 32), nil
	case oidFloat8:
		if len(v) != 8 {
			return nil, bad
		}
		return strconv.AppendFloat(nil, math.Float64frombits(binary.BigEndian.Uint64(v)), 'g', -1, 64), nil
	case oidNumeric:
		d, err := decodeBinaryNumeric(v)
		if err != nil {
			return nil, bad
		}
		return []byte(d.String()), nil
	}
	return nil, wire.Errorf(wire.FeatureNotSupported, "HAVING compares a column of type OID %d with a binary parameter across shards", col.OID)
}
