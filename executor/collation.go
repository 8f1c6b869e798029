package executor

import (
	"bytes"
	"fmt"
)

// Collation is how the merge compares text, the way PostgreSQL 15's
// varstr_cmp does (src/backend/utils/adt/varlena.c):
//
//   - the C and POSIX collations compare bytes: memcmp over the shorter
//     length, then the shorter string first;
//   - a libc collation first says equal to equal bytes, then compares
//     NUL-terminated copies with strcoll_l, and breaks a tie with strcmp
//     (every libc collation is deterministic: strings are equal only when
//     their bytes are).
//
// The zero Collation is byte order. ICU collations are not implemented:
// the frontend refuses them before a merge gets one.
type Collation struct {
	libc *libcLocale // nil: byte order
}

// LibcCollation returns the collation of the libc locale name (an
// LC_COLLATE value such as "en_US.UTF-8"), as PostgreSQL uses a database
// or a collation whose provider is libc. "C" and "POSIX" are byte order.
// It fails when the locale is not installed on the proxy's machine.
func LibcCollation(name string) (Collation, error) {
	if name == "C" || name == "POSIX" {
		return Collation{}, nil
	}
	l, err := openLibcLocale(name)
	if err != nil {
		return Collation{}, err
	}
	return Collation{libc: l}, nil
}

// String names the collation: "C" for byte order, else the locale.
func (c Collation) String() string {
	if c.libc == nil {
		return "C"
	}
	return c.libc.name
}

// Compare orders a and b (-1, 0, +1). It allocates; the merge uses a
// textCompare, which reuses its buffer.
func (c Collation) Compare(a, b []byte) int {
	t := textCompare{coll: c}
	return t.compare(a, b)
}

// Sort sorts values in c's order (a stable insertion sort: for the few
// values the frontend's collation probe compares).
func (c Collation) Sort(values [][]byte) {
	t := textCompare{coll: c}
	for i := 1; i < len(values); i++ {
		for j := i; j > 0 && t.compare(values[j-1], values[j]) > 0; j-- {
			values[j-1], values[j] = values[j], values[j-1]
		}
	}
}

// textCompare compares text values in a collation, keeping the buffer that
// holds the NUL-terminated copies strcoll_l needs. It belongs to one
// Merger (one goroutine).
type textCompare struct {
	coll   Collation
	bpchar bool // character(n): trailing spaces do not count (bpcharcmp's bcTruelen)
	buf    []byte
}

func (t *textCompare) compare(a, b []byte) int {
	if t.bpchar {
		a, b = bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")
	}
	if t.coll.libc == nil {
		return bytes.Compare(a, b)
	}
	// varstr_cmp: "memcmp() can't tell us which of two unequal strings
	// sorts first, but it's a cheap way to tell if they're equal".
	if bytes.Equal(a, b) {
		return 0
	}
	t.buf = append(t.buf[:0], a...)
	t.buf = append(t.buf, 0)
	n := len(t.buf)
	t.buf = append(t.buf, b...)
	t.buf = append(t.buf, 0)
	r := t.coll.libc.strcoll(t.buf[:n], t.buf[n:])
	if r == 0 {
		// The tie-break of a deterministic collation: strcmp, which for
		// strings without NUL bytes is bytes.Compare.
		return bytes.Compare(a, b)
	}
	if r < 0 {
		return -1
	}
	return 1
}

func (t *textCompare) compareFunc() compareFunc {
	return func(a, b []byte) (int, error) { return t.compare(a, b), nil }
}

// collationError is the refusal of a text column when the merge has no
// OrderSource to say how the shards sort it.
func collationError(col Column, coll string) error {
	return refusal(fmt.Sprintf("cannot order text column %q across shards in collation %q", col.Name, coll),
		"without the shards' catalog the proxy compares text in byte order only (the C collation); route the query to one shard")
}
