package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// Collecting aggregates: string_agg, array_agg, json_agg, jsonb_agg. Each
// shard returns its partial result — over the rows of one shard, or of
// one value of the aggregate's ORDER BY keys when shards sort by them
// (router/collect.go) — and the merger appends each partial to its
// group's, in the order the rows arrive: shard after shard, or merged by
// Spec.SortedBy. The result is built in the format the shards used, text
// or binary, and ends as PostgreSQL's would: the same bytes. Memory is
// the group's result, as in PostgreSQL, and one row per shard.

// initGroup prepares a new group's avg and array_agg states from its
// first row.
func (m *Merger) initGroup(g *group) error {
	if err := m.initAvg(g); err != nil {
		return err
	}
	if err := m.initFolds(g); err != nil {
		return err
	}
	if err := m.initMoments(g); err != nil {
		return err
	}
	if err := m.initRegressions(g); err != nil {
		return err
	}
	for _, a := range m.spec.Aggs {
		if a.Kind != AggArrayAgg {
			continue
		}
		if g.arrays == nil {
			g.arrays = map[int]*arrayState{}
		}
		st := &arrayState{}
		g.arrays[a.Col] = st
		v := g.cols[a.Col]
		g.cols[a.Col] = nil
		if err := st.add(v, m.cols[a.Col]); err != nil {
			return err
		}
	}
	return nil
}

// finishArrays writes each array_agg state of a group into its column.
func (m *Merger) finishArrays(g *group) {
	for col, st := range g.arrays {
		g.cols[col] = st.value(m.cols[col])
	}
	g.arrays = nil
}

// appendString appends a partial string_agg value v, after its row's
// separator sep (none when NULL), to the group's cur, in the column's
// format: bytea text output in hex joins the digits after one \x; its
// escape output and every other form join as they are. The separator,
// a hidden column, may come in the other format than the aggregate.
func (m *Merger) appendString(cur, sep, v []byte, col, sepCol Column) ([]byte, error) {
	if col.OID == oidBytea && sep != nil {
		var err error
		if sep, err = byteaIn(sep, sepCol.Format, col.Format, bytes.HasPrefix(cur, []byte(`\x`))); err != nil {
			return nil, err
		}
	}
	if col.OID == oidBytea && col.Format == 0 && bytes.HasPrefix(cur, []byte(`\x`)) {
		v = bytes.TrimPrefix(v, []byte(`\x`))
	}
	cur = append(cur, sep...)
	return append(cur, v...), nil
}

// byteaIn converts a bytea value from format from to format to: in text,
// hex digits when hex (the digits only: they follow the first value's
// \x), else byteaout's escape form.
func byteaIn(v []byte, from, to int16, hex bool) ([]byte, error) {
	raw := v
	if from == 0 {
		var err error
		if raw, err = byteaRaw(v); err != nil {
			return nil, err
		}
	}
	switch {
	case to == 1:
		return raw, nil
	case hex:
		const digits = "0123456789abcdef"
		out := make([]byte, 0, 2*len(raw))
		for _, c := range raw {
			out = append(out, digits[c>>4], digits[c&15])
		}
		return out, nil
	}
	var out []byte
	for _, c := range raw {
		switch {
		case c == '\\':
			out = append(out, '\\', '\\')
		case c < 0x20 || c > 0x7e:
			out = append(out, '\\', '0'+c>>6, '0'+c>>3&7, '0'+c&7)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

var errMalformedBytea = errors.New("merge: malformed bytea")

// byteaRaw decodes byteaout's text: hex after \x, or the escape form.
func byteaRaw(v []byte) ([]byte, error) {
	bad := errMalformedBytea
	if h, ok := bytes.CutPrefix(v, []byte(`\x`)); ok {
		if len(h)%2 != 0 {
			return nil, bad
		}
		out := make([]byte, len(h)/2)
		for i := range out {
			n, err := strconv.ParseUint(string(h[2*i:2*i+2]), 16, 8)
			if err != nil {
				return nil, bad
			}
			out[i] = byte(n)
		}
		return out, nil
	}
	var out []byte
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] != '\\':
			out = append(out, v[i])
		case i+1 < len(v) && v[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(v):
			n, err := strconv.ParseUint(string(v[i+1:i+4]), 8, 8)
			if err != nil {
				return nil, bad
			}
			out = append(out, byte(n))
			i += 3
		default:
			return nil, bad
		}
	}
	return out, nil
}

// appendJSON appends a partial json_agg or jsonb_agg array v to the
// group's cur: its elements after cur's, separated by ", " — and by
// "\n " more before a json_agg element that is a non-null array or
// composite (structured), as json_agg_transfn writes; an empty partial
// (json_agg_strict over only NULLs) adds nothing. jsonb's binary form is a
// version byte, 1, then the text.
func appendJSON(cur, v []byte, structured bool, col Column) ([]byte, error) {
	head := 0
	if col.OID == oidJSONB && col.Format == 1 {
		head = 1
	}
	if len(cur) < head+2 || len(v) < head+2 || cur[len(cur)-1] != ']' || v[head] != '[' || v[len(v)-1] != ']' {
		return nil, fmt.Errorf("merge: malformed partial json array")
	}
	elems := v[head+1:]
	switch {
	case len(elems) == 1: // [] from json_agg_strict over only NULLs
		return cur, nil
	case len(cur) == head+2:
		return append(cur[:head], v[head:]...), nil
	}
	cur = append(cur[:len(cur)-1], ", "...)
	if structured && !bytes.HasPrefix(elems, []byte("null")) {
		cur = append(cur, "\n "...)
	}
	return append(cur, elems...), nil
}

// arrayState is an array_agg result being built from partial arrays:
// each partial's elements follow the previous ones along the first
// dimension, whose other dimensions must agree, as accumArrayResultArr
// requires of the arrays it stacks.
type arrayState struct {
	seen bool // a partial was not NULL
	// body is the elements: in text, each partial's text without its
	// outer braces, joined by the delimiter; in binary, the element data.
	body []byte
	n    int   // the first dimension
	dims []int // the other dimensions
	lbs  []int // their lower bounds
	// binary only
	hasNulls bool
	elem     uint32
}

// add appends a partial array (nil: NULL, skipped).
func (st *arrayState) add(v []byte, col Column) error {
	if v == nil {
		return nil
	}
	var n int
	var dims, lbs []int
	var body []byte
	var err error
	if col.Format == 1 {
		n, dims, lbs, body, err = st.binaryPartial(v)
	} else {
		n, dims, lbs, body, err = textPartial(v)
	}
	if err != nil {
		return err
	}
	if !st.seen {
		st.seen, st.dims, st.lbs = true, dims, lbs
	} else if !slices.Equal(st.dims, dims) || !slices.Equal(st.lbs, lbs) {
		return wire.Errorf(wire.ArraySubscriptError, "cannot accumulate arrays of different dimensionality")
	}
	if col.Format == 0 && st.n > 0 {
		st.body = append(st.body, arrayDelim(col.OID))
	}
	st.body = append(st.body, body...)
	st.n += n
	return nil
}

var errMalformedArray = errors.New("merge: malformed partial array")

// arrayDelim is the element delimiter of an array type's text form: ';'
// for box, ',' for every other built-in type.
func arrayDelim(oid uint32) byte {
	if oid == 1020 { // _box
		return ';'
	}
	return ','
}

// binaryPartial reads array_send's header: dimensions, has-nulls flag,
// element type, then size and lower bound per dimension.
func (st *arrayState) binaryPartial(v []byte) (n int, dims, lbs []int, body []byte, err error) {
	bad := errMalformedArray
	if len(v) < 12 {
		return 0, nil, nil, nil, bad
	}
	ndim := int(int32(binary.BigEndian.Uint32(v)))
	if ndim < 1 || ndim > 6 || len(v) < 12+8*ndim {
		return 0, nil, nil, nil, bad
	}
	elem := binary.BigEndian.Uint32(v[8:])
	if st.seen && elem != st.elem {
		return 0, nil, nil, nil, bad
	}
	st.elem = elem
	st.hasNulls = st.hasNulls || binary.BigEndian.Uint32(v[4:]) != 0
	n = int(int32(binary.BigEndian.Uint32(v[12:])))
	for i := 1; i < ndim; i++ {
		dims = append(dims, int(int32(binary.BigEndian.Uint32(v[12+8*i:]))))
		lbs = append(lbs, int(int32(binary.BigEndian.Uint32(v[16+8*i:]))))
	}
	return n, dims, lbs, v[12+8*ndim:], nil
}

// textPartial reads array_out's text: an optional "[lo:hi]…=" decoration
// (written when a lower bound is not 1), then braces. A one-dimensional
// array's elements cannot begin with '{' unquoted, so "{{" starts an
// array of arrays, whose dimensions the parser measures.
func textPartial(v []byte) (n int, dims, lbs []int, body []byte, err error) {
	bad := errMalformedArray
	s := v
	var deco []int // lower bounds from the decoration
	if len(s) > 0 && s[0] == '[' {
		i := bytes.IndexByte(s, '=')
		if i < 0 {
			return 0, nil, nil, nil, bad
		}
		for _, r := range bytes.Split(bytes.TrimSuffix(bytes.TrimPrefix(s[:i], []byte("[")), []byte("]")), []byte("][")) {
			lo, _, ok := bytes.Cut(r, []byte(":"))
			l, err := strconv.Atoi(string(lo))
			if !ok || err != nil {
				return 0, nil, nil, nil, bad
			}
			deco = append(deco, l)
		}
		s = s[i+1:]
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return 0, nil, nil, nil, bad
	}
	body = s[1 : len(s)-1]
	if len(s) > 2 && s[1] != '{' {
		if len(deco) > 1 {
			return 0, nil, nil, nil, bad
		}
		return 1, nil, nil, body, nil // one element of a partial's elements: counted only for decoration
	}
	a, perr := textArray(s)
	if perr != nil || len(a.dims) < 2 {
		return 0, nil, nil, nil, bad
	}
	n, dims = a.dims[0], a.dims[1:]
	lbs = make([]int, len(dims))
	for i := range lbs {
		lbs[i] = 1
	}
	if deco != nil {
		if len(deco) != len(a.dims) {
			return 0, nil, nil, nil, bad
		}
		copy(lbs, deco[1:])
	}
	return n, dims, lbs, body, nil
}

// value is the array built, nil when no partial was non-NULL.
func (st *arrayState) value(col Column) []byte {
	if !st.seen {
		return nil
	}
	if col.Format == 1 {
		ndim := 1 + len(st.dims)
		out := binary.BigEndian.AppendUint32(nil, uint32(ndim))
		flag := uint32(0)
		if st.hasNulls {
			flag = 1
		}
		out = binary.BigEndian.AppendUint32(out, flag)
		out = binary.BigEndian.AppendUint32(out, st.elem)
		out = binary.BigEndian.AppendUint32(out, uint32(st.n))
		out = binary.BigEndian.AppendUint32(out, 1)
		for i, d := range st.dims {
			out = binary.BigEndian.AppendUint32(out, uint32(d))
			out = binary.BigEndian.AppendUint32(out, uint32(int32(st.lbs[i])))
		}
		return append(out, st.body...)
	}
	var out []byte
	if slices.ContainsFunc(st.lbs, func(l int) bool { return l != 1 }) {
		out = fmt.Appendf(out, "[1:%d]", st.n)
		for i, d := range st.dims {
			out = fmt.Appendf(out, "[%d:%d]", st.lbs[i], st.lbs[i]+d-1)
		}
		out = append(out, '=')
	}
	out = append(out, '{')
	out = append(out, st.body...)
	return append(out, '}')
}
