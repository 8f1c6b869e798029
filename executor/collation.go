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
//   - any other collation first says equal to equal bytes; a libc
//     collation then compares NUL-terminated copies with strcoll_l, an ICU
//     collation the UTF-8 strings with ucol_strcollUTF8
//     (collation_icu.go); a tie is broken by strcmp when the collation is
//     deterministic (every libc collation is: strings are equal only when
//     their bytes are), and stays a tie when it is not.
//
// The zero Collation is byte order.
type Collation struct {
	libc *libcLocale  // nil: not libc
	icu  *icuCollator // nil: not ICU
	// nondeterministic: equal under the collation is equal (no strcmp
	// tie-break), as pg_collation.collisdeterministic = false says.
	nondeterministic bool
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

// ICUCollation returns the collation of the ICU locale string locale (a
// pg_collation.colliculocale or pg_database.daticulocale such as "en-US"
// or "und-u-ks-level2"), deterministic or not, as PostgreSQL uses a
// collation or a database whose provider is ICU. It fails when the proxy
// is built without ICU.
func ICUCollation(locale string, deterministic bool) (Collation, error) {
	c, err := openICU(locale)
	if err != nil {
		return Collation{}, err
	}
	return Collation{icu: c, nondeterministic: !deterministic}, nil
}

// ICUAvailable reports whether the proxy was built with ICU.
func ICUAvailable() bool { return icuAvailable }

// String names the collation: "C" for byte order, else the locale.
func (c Collation) String() string {
	switch {
	case c.libc != nil:
		return c.libc.name
	case c.icu != nil:
		return c.icu.locale
	}
	return "C"
}

// ICUVersion returns the version of an ICU collation as PostgreSQL reports
// it (pg_collation_actual_version: u_versionToString of ucol_getVersion,
// such as "153.120"), or "" for any other collation.
func (c Collation) ICUVersion() string {
	if c.icu == nil {
		return ""
	}
	return c.icu.version
}

// Deterministic reports whether strings are equal in c only when their
// bytes are: false for a nondeterministic ICU collation, under which the
// merge cannot group or deduplicate by bytes.
func (c Collation) Deterministic() bool { return !c.nondeterministic }

// Compare orders a and b (-1, 0, +1). It allocates; the merge uses a
// textCompare, which reuses its buffer.
func (c Collation) Compare(a, b []byte) (int, error) {
	t := textCompare{coll: c}
	return t.compare(a, b)
}

// Sort sorts values in c's order (a stable insertion sort: for the few
// values the frontend's collation probe compares).
func (c Collation) Sort(values [][]byte) error {
	t := textCompare{coll: c}
	for i := 1; i < len(values); i++ {
		for j := i; j > 0; j-- {
			d, err := t.compare(values[j-1], values[j])
			if err != nil {
				return err
			}
			if d <= 0 {
				break
			}
			values[j-1], values[j] = values[j], values[j-1]
		}
	}
	return nil
}

// textCompare compares text values in a collation, keeping the buffer that
// holds the NUL-terminated copies strcoll_l needs. It belongs to one
// Merger (one goroutine).
type textCompare struct {
	coll   Collation
	bpchar bool // character(n): trailing spaces do not count (bpcharcmp's bcTruelen)
	buf    []byte
}

func (t *textCompare) compare(a, b []byte) (int, error) {
	if t.bpchar {
		a, b = bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")
	}
	if t.coll.libc == nil && t.coll.icu == nil {
		return bytes.Compare(a, b), nil
	}
	// varstr_cmp: "memcmp() can't tell us which of two unequal strings
	// sorts first, but it's a cheap way to tell if they're equal".
	if bytes.Equal(a, b) {
		return 0, nil
	}
	var r int
	if t.coll.icu != nil {
		var err error
		if r, err = t.coll.icu.strcoll(a, b); err != nil {
			return 0, err
		}
	} else {
		t.buf = append(t.buf[:0], a...)
		t.buf = append(t.buf, 0)
		n := len(t.buf)
		t.buf = append(t.buf, b...)
		t.buf = append(t.buf, 0)
		r = t.coll.libc.strcoll(t.buf[:n], t.buf[n:])
	}
	switch {
	case r < 0:
		return -1, nil
	case r > 0:
		return 1, nil
	case t.coll.nondeterministic:
		return 0, nil
	}
	// The tie-break of a deterministic collation: strcmp, which for
	// strings without NUL bytes (text has none) is bytes.Compare.
	return bytes.Compare(a, b), nil
}

func (t *textCompare) compareFunc() compareFunc { return t.compare }

// collationError is the refusal of a text column when the merge has no
// OrderSource to say how the shards sort it.
func collationError(col Column, coll string) error {
	return refusal(fmt.Sprintf("cannot order text column %q across shards in collation %q", col.Name, coll),
		"without the shards' catalog the proxy compares text in byte order only (the C collation); route the query to one shard")
}
