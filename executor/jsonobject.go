package executor

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// json_object_agg and jsonb_object_agg across shards: each shard returns
// its group's partial object, and the merge combines them.
//
// json_object_agg writes "{ " key " : " value, ", " between pairs, and
// " }" (json.c's json_object_agg_transfn and finalfn): the combined
// object is the partial objects' pairs one after another, in the order
// the shards' partials come, which PostgreSQL leaves open too.
//
// jsonb_object_agg keeps one value per key, the last one given (in an
// order PostgreSQL leaves open without ORDER BY), and jsonb sorts the keys
// by their length, then their bytes. The merge reads each partial's
// top-level pairs (jsonb's text output: {"k": v, …}, binary: a version
// byte before it), keeps the value of the last partial that has a key, and
// writes the pairs in jsonb's key order, each key and value as the shard
// wrote it.

// appendJSONObject appends partial json object v's pairs to cur's.
func appendJSONObject(cur, v []byte) ([]byte, error) {
	const open, close = "{ ", " }"
	if !bytes.HasPrefix(cur, []byte(open)) || !bytes.HasSuffix(cur, []byte(close)) ||
		!bytes.HasPrefix(v, []byte(open)) || !bytes.HasSuffix(v, []byte(close)) || len(v) < len(open)+len(close) {
		return nil, fmt.Errorf("merge: malformed partial json object")
	}
	out := append(cur[:len(cur)-len(close)], ", "...)
	return append(out, v[len(open):]...), nil
}

// jsonbPair is one top-level pair of a jsonb object: its key's decoded
// string (for order and equality) and the text of key and value.
type jsonbPair struct {
	key       string
	keyText   []byte
	valueText []byte
}

// mergeJSONBObjects merges partial jsonb object v into cur (binary: each
// with its version byte).
func mergeJSONBObjects(cur, v []byte, binary bool) ([]byte, error) {
	head := 0
	if binary {
		if len(cur) == 0 || len(v) == 0 || cur[0] != 1 || v[0] != 1 {
			return nil, fmt.Errorf("merge: malformed partial jsonb object")
		}
		head = 1
	}
	a, err := jsonbPairs(cur[head:])
	if err != nil {
		return nil, err
	}
	b, err := jsonbPairs(v[head:])
	if err != nil {
		return nil, err
	}
	pairs := a
	for _, p := range b {
		i, found := slices.BinarySearchFunc(pairs, p, compareJSONBKeys)
		if found {
			pairs[i] = p // the later value wins
			continue
		}
		pairs = slices.Insert(pairs, i, p)
	}
	out := make([]byte, 0, len(cur)+len(v))
	if binary {
		out = append(out, 1)
	}
	out = append(out, '{')
	for i, p := range pairs {
		if i > 0 {
			out = append(out, ", "...)
		}
		out = append(out, p.keyText...)
		out = append(out, ": "...)
		out = append(out, p.valueText...)
	}
	return append(out, '}'), nil
}

// compareJSONBKeys orders keys as jsonb stores them: shorter first, then
// by their bytes.
func compareJSONBKeys(x, y jsonbPair) int {
	if len(x.key) != len(y.key) {
		return len(x.key) - len(y.key)
	}
	return bytes.Compare([]byte(x.key), []byte(y.key))
}

// jsonbPairs reads the top-level pairs of jsonb's text output of an object,
// {"k": v, "k2": v2}, which lists the keys in jsonb's order.
func jsonbPairs(b []byte) ([]jsonbPair, error) {
	malformed := fmt.Errorf("merge: malformed partial jsonb object")
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, malformed
	}
	body := b[1 : len(b)-1]
	var pairs []jsonbPair
	for i := 0; i < len(body); {
		if len(pairs) > 0 {
			if !bytes.HasPrefix(body[i:], []byte(", ")) {
				return nil, malformed
			}
			i += 2
		}
		end, key, err := jsonString(body, i)
		if err != nil {
			return nil, err
		}
		p := jsonbPair{key: key, keyText: body[i:end]}
		if !bytes.HasPrefix(body[end:], []byte(": ")) {
			return nil, malformed
		}
		i = end + 2
		if end, err = jsonValueEnd(body, i); err != nil {
			return nil, err
		}
		p.valueText = body[i:end]
		pairs = append(pairs, p)
		i = end
	}
	return pairs, nil
}

// jsonString reads the JSON string that starts at b[i] and returns the
// offset after it and its decoded value.
func jsonString(b []byte, i int) (int, string, error) {
	malformed := fmt.Errorf("merge: malformed JSON string")
	if i >= len(b) || b[i] != '"' {
		return 0, "", malformed
	}
	var out []byte
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, string(out), nil
		case c != '\\':
			out = append(out, c)
			continue
		}
		j++
		if j >= len(b) {
			return 0, "", malformed
		}
		switch b[j] {
		case '"', '\\', '/':
			out = append(out, b[j])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, ok := jsonUnicode(b, j+1)
			if !ok {
				return 0, "", malformed
			}
			out = utf8.AppendRune(out, r)
			j += n
		default:
			return 0, "", malformed
		}
	}
	return 0, "", malformed
}

// jsonUnicode reads the hex digits of \uXXXX at b[i:] (a surrogate pair
// takes a second \uXXXX) and returns the rune and the bytes read after
// the u.
func jsonUnicode(b []byte, i int) (rune, int, bool) {
	hex := func(k int) (rune, bool) {
		if k+4 > len(b) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[k:k+4]), 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex(i)
	if !ok {
		return 0, 0, false
	}
	if utf16.IsSurrogate(r) && i+10 <= len(b) && b[i+4] == '\\' && b[i+5] == 'u' {
		if r2, ok := hex(i + 6); ok {
			return utf16.DecodeRune(r, r2), 10, true
		}
	}
	return r, 4, true
}

// jsonValueEnd returns the offset after the JSON value that starts at
// b[i]: a string, an object or array (to its matching bracket, strings
// inside skipped), or a scalar (up to the next ", " at this level or the
// end).
func jsonValueEnd(b []byte, i int) (int, error) {
	malformed := fmt.Errorf("merge: malformed JSON value")
	if i >= len(b) {
		return 0, malformed
	}
	switch b[i] {
	case '"':
		end, _, err := jsonString(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, err := jsonString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, malformed
	}
	j := i
	for j < len(b) && b[j] != ',' {
		j++
	}
	return j, nil
}
