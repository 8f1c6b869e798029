package executor

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// arrayElem maps the built-in array types the merge orders to their
// element types (pg_type.typarray).
var arrayElem = map[uint32]uint32{
	1000: oidBool, 1001: oidBytea, 1002: oidChar, 1003: oidName, 1005: oidInt2, 1007: oidInt4,
	1009: oidText, 1014: oidBPChar, 1015: oidVarchar, 1016: oidInt8, 1021: oidFloat4,
	1022: oidFloat8, 1028: oidOID, 1040: oidMacaddr, 775: oidMacaddr8, 1041: oidInet,
	651: oidCidr, 1182: oidDate, 1183: oidTime, 1115: oidTimestamp, 1185: oidTimestamptz,
	1187: oidInterval, 1270: oidTimetz, 1231: oidNumeric, 1561: oidBit, 1563: oidVarbit,
	2951: oidUUID, 791: oidMoney,
}

// array is an array value split into its elements (nil for NULL), in
// storage order, with its dimensions and lower bounds.
type array struct {
	elems        [][]byte
	dims, lbound []int
}

// arrayComparator orders arrays as array_cmp does
// (src/backend/utils/adt/arrayfuncs.c): element by element in storage
// order, with NULL above every value and equal to NULL; then the array
// with fewer elements first, then fewer dimensions, then smaller
// dimensions, then smaller lower bounds.
func arrayComparator(elem uint32, format int16, cmp compareFunc) compareFunc {
	decode := func(b []byte) (array, error) { return textArray(b) }
	if format == 1 {
		decode = func(b []byte) (array, error) { return binaryArray(b, elem) }
	}
	return func(a, b []byte) (int, error) {
		x, err := decode(a)
		if err != nil {
			return 0, err
		}
		y, err := decode(b)
		if err != nil {
			return 0, err
		}
		for i := 0; i < min(len(x.elems), len(y.elems)); i++ {
			p, q := x.elems[i], y.elems[i]
			switch {
			case p == nil && q == nil:
				continue
			case p == nil:
				return 1, nil
			case q == nil:
				return -1, nil
			}
			c, err := cmp(p, q)
			if err != nil || c != 0 {
				return c, err
			}
		}
		if c := cmpInt64(int64(len(x.elems)), int64(len(y.elems))); c != 0 {
			return c, nil
		}
		if c := cmpInt64(int64(len(x.dims)), int64(len(y.dims))); c != 0 {
			return c, nil
		}
		for i := range x.dims {
			if c := cmpInt64(int64(x.dims[i]), int64(y.dims[i])); c != 0 {
				return c, nil
			}
		}
		for i := range x.lbound {
			if c := cmpInt64(int64(x.lbound[i]), int64(y.lbound[i])); c != 0 {
				return c, nil
			}
		}
		return 0, nil
	}
}

// binaryArray decodes array_send: int32 dimensions, int32 has-nulls flag,
// element type, per dimension int32 size and lower bound, then each
// element as int32 length (-1 for NULL) and its binary value.
func binaryArray(b []byte, elem uint32) (array, error) {
	bad := fmt.Errorf("invalid binary array")
	if len(b) < 12 {
		return array{}, bad
	}
	ndim := int(int32(binary.BigEndian.Uint32(b)))
	if ndim < 0 || ndim > 6 || binary.BigEndian.Uint32(b[8:]) != elem || len(b) < 12+8*ndim {
		return array{}, bad
	}
	var a array
	n := 1
	if ndim == 0 {
		n = 0
	}
	for i := 0; i < ndim; i++ {
		d := int(int32(binary.BigEndian.Uint32(b[12+8*i:])))
		if d < 0 || d > len(b) {
			return array{}, bad
		}
		a.dims = append(a.dims, d)
		a.lbound = append(a.lbound, int(int32(binary.BigEndian.Uint32(b[16+8*i:]))))
		n *= d
	}
	rest := b[12+8*ndim:]
	for i := 0; i < n; i++ {
		if len(rest) < 4 {
			return array{}, bad
		}
		l := int32(binary.BigEndian.Uint32(rest))
		rest = rest[4:]
		if l < 0 {
			a.elems = append(a.elems, nil)
			continue
		}
		if int(l) > len(rest) {
			return array{}, bad
		}
		a.elems = append(a.elems, rest[:l:l])
		rest = rest[l:]
	}
	return a, nil
}

// textArray reads array_out text: an optional "[lo:hi]…=" decoration
// (written when a lower bound is not 1), then nested braces of elements
// separated by commas; an element is NULL, a quoted string with
// backslash escapes, or unquoted text.
func textArray(b []byte) (array, error) {
	s := string(b)
	var a array
	var explicit [][2]int
	if strings.HasPrefix(s, "[") {
		deco, rest, ok := strings.Cut(s, "=")
		if !ok {
			return array{}, fmt.Errorf("invalid array %q", s)
		}
		for _, r := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(deco, "["), "]"), "][") {
			lo, hi, ok := strings.Cut(r, ":")
			l, ok1 := signed(lo)
			h, ok2 := signed(hi)
			if !ok || !ok1 || !ok2 {
				return array{}, fmt.Errorf("invalid array %q", s)
			}
			explicit = append(explicit, [2]int{int(l), int(h)})
		}
		s = rest
	}
	p := arrayParser{s: s}
	if err := p.value(0, &a); err != nil {
		return array{}, fmt.Errorf("invalid array %q: %w", b, err)
	}
	if p.i != len(p.s) {
		return array{}, fmt.Errorf("invalid array %q", b)
	}
	if len(a.elems) == 0 {
		return array{}, nil // '{}': no dimensions
	}
	a.dims = p.dims
	for range a.dims {
		a.lbound = append(a.lbound, 1)
	}
	if explicit != nil {
		if len(explicit) != len(a.dims) {
			return array{}, fmt.Errorf("invalid array %q", b)
		}
		for i, r := range explicit {
			a.lbound[i] = r[0]
		}
	}
	return a, nil
}

type arrayParser struct {
	s    string
	i    int
	dims []int // elements counted at each depth, from the first sub-array
}

// value reads one brace-enclosed level at depth d.
func (p *arrayParser) value(d int, a *array) error {
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return fmt.Errorf("expected '{'")
	}
	p.i++
	if d >= len(p.dims) {
		p.dims = append(p.dims, 0)
	}
	n := 0
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		if p.i < len(p.s) && p.s[p.i] == '{' {
			if err := p.value(d+1, a); err != nil {
				return err
			}
		} else {
			e, err := p.element()
			if err != nil {
				return err
			}
			a.elems = append(a.elems, e)
		}
		n++
		if p.i >= len(p.s) {
			return fmt.Errorf("unterminated")
		}
		c := p.s[p.i]
		p.i++
		if c == '}' {
			break
		}
		if c != ',' {
			return fmt.Errorf("expected ',' or '}'")
		}
	}
	p.dims[d] = n
	return nil
}

// element reads one element; nil is NULL.
func (p *arrayParser) element() ([]byte, error) {
	if p.i < len(p.s) && p.s[p.i] == '"' {
		var out []byte
		for p.i++; p.i < len(p.s); p.i++ {
			switch c := p.s[p.i]; c {
			case '\\':
				p.i++
				if p.i >= len(p.s) {
					return nil, fmt.Errorf("unterminated escape")
				}
				out = append(out, p.s[p.i])
			case '"':
				p.i++
				if out == nil {
					out = []byte{}
				}
				return out, nil
			default:
				out = append(out, c)
			}
		}
		return nil, fmt.Errorf("unterminated quote")
	}
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != ',' && p.s[p.i] != '}' {
		p.i++
	}
	e := p.s[start:p.i]
	if strings.EqualFold(e, "NULL") {
		return nil, nil
	}
	if e == "" {
		return nil, fmt.Errorf("empty element")
	}
	return []byte(e), nil
}
