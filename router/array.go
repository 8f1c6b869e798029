package router

import (
	"unsafe"

	"github.com/shardgate/shardgate/router/sharding"
)

// eachArrayElement calls fn with each non-NULL element of an array value in
// PostgreSQL's text or binary format, decoded as key type t. It returns
// false when the value is not an array of t, or when fn does: then the
// router cannot route by it. NULL elements are skipped, as = ANY never
// matches them.
func eachArrayElement(t sharding.Type, value []byte, format int16, fn func(sharding.Key) bool) bool {
	if value == nil {
		return true // = ANY(NULL) matches nothing
	}
	if format == 1 {
		return eachBinaryElement(value, func(elem []byte) bool {
			k, err := decodeKey(t, elem, 1)
			return err == nil && fn(k)
		})
	}
	return eachTextElement(value, func(elem []byte) bool {
		k, err := sharding.ParseKey(t, unsafe.String(unsafe.SliceData(elem), len(elem)))
		return err == nil && fn(k)
	})
}

// eachBinaryElement walks the array_send format: ndim, has-null flag,
// element type, (size, lower bound) per dimension, then each element as a
// length (-1 for NULL) and its bytes.
func eachBinaryElement(b []byte, fn func([]byte) bool) bool {
	ndim, ok := int32At(b, 0)
	if !ok || ndim < 0 || ndim > 6 { // MAXDIM
		return false
	}
	n := int64(1)
	if ndim == 0 {
		n = 0
	}
	off := 12
	for d := 0; d < int(ndim); d++ {
		size, ok := int32At(b, off)
		if !ok || size < 0 {
			return false
		}
		n *= int64(size)
		if n > int64(len(b)) { // each element takes at least 4 bytes
			return false
		}
		off += 8
	}
	for ; n > 0; n-- {
		size, ok := int32At(b, off)
		if !ok {
			return false
		}
		off += 4
		if size == -1 {
			continue
		}
		if size < 0 || off+int(size) > len(b) {
			return false
		}
		if !fn(b[off : off+int(size)]) {
			return false
		}
		off += int(size)
	}
	return off == len(b)
}

// eachTextElement walks the array_in format: an optional dimension
// decoration ("[1:3]="), braces nested once per dimension, elements
// separated by commas, each quoted ("…" with backslash escapes) or bare
// (backslash escapes, surrounding whitespace dropped, NULL in any case
// meaning NULL).
func eachTextElement(b []byte, fn func([]byte) bool) bool {
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == '[' {
		for i < len(b) && b[i] != '=' {
			i++
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '{' {
		return false
	}
	depth := 0
	var buf []byte
	for i < len(b) {
		switch c := b[i]; {
		case c == '{':
			depth++
			i++
		case c == '}':
			depth--
			i++
			if depth == 0 {
				return skipSpace(b, i) == len(b)
			}
		case c == ',' || isArraySpace(c):
			i++
		default:
			var null bool
			buf, i, null = textElement(b, i, buf[:0])
			if i < 0 {
				return false
			}
			if !null && !fn(buf) {
				return false
			}
		}
	}
	return false
}

// textElement reads one element starting at b[i] into buf. It returns the
// index after it (-1 when malformed) and whether it is an unquoted NULL.
func textElement(b []byte, i int, buf []byte) ([]byte, int, bool) {
	if b[i] == '"' {
		for i++; i < len(b); i++ {
			switch b[i] {
			case '\\':
				i++
				if i >= len(b) {
					return buf, -1, false
				}
				buf = append(buf, b[i])
			case '"':
				return buf, i + 1, false
			default:
				buf = append(buf, b[i])
			}
		}
		return buf, -1, false
	}
	escaped := false
	end := 0 // length of buf up to the last character that is not trailing space
	for ; i < len(b); i++ {
		c := b[i]
		if c == ',' || c == '}' || c == '{' {
			break
		}
		if c == '\\' {
			i++
			if i >= len(b) {
				return buf, -1, false
			}
			buf = append(buf, b[i])
			escaped = true
			end = len(buf)
			continue
		}
		if c == '"' {
			return buf, -1, false
		}
		buf = append(buf, c)
		if !isArraySpace(c) {
			end = len(buf)
		}
	}
	buf = buf[:end]
	null := !escaped && len(buf) == 4 &&
		(buf[0]|0x20) == 'n' && (buf[1]|0x20) == 'u' && (buf[2]|0x20) == 'l' && (buf[3]|0x20) == 'l'
	return buf, i, null
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isArraySpace(b[i]) {
		i++
	}
	return i
}

// isArraySpace is array_isspace: the C-locale isspace.
func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
