package executor

import (
	"fmt"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// DISTINCT aggregates of several values. Each shard groups its rows by
// grouping sets — the query's groups alone, and with each DISTINCT value —
// and tags each row with GROUPING() of the values (router/multidistinct.go).
// Its rows arrive sorted by the group key, the tag, then the values: a
// group is one run of rows, each tag one run in it, and each value of a
// tag one run in that. An aggregate reads only the rows of its tag
// (Agg.Tag), a Distinct one the first row of each value of its set, the
// others every row. Memory is as for one value: one row per shard, one
// entry per group.

// Tagging says how the rows of shards grouping by several grouping sets
// are told apart.
type Tagging struct {
	Col   int // the tag column (int4)
	Plain int64
	// Values maps each other tag to the column of the value its rows are
	// grouped by too, and More to the further columns of a row value's
	// set (a, b), whose rows are grouped by each.
	Values map[int64]int
	More   map[int64][]int
}

// distinctRun follows, within a group, the run of rows of one DISTINCT
// value (of one tag, when tagged), so that a Distinct aggregate folds
// once per value.
type distinctRun struct {
	m     *Merger
	value int    // the DISTINCT value's column, -1 when there is none
	last  []byte // the run's value: nil (NULL) or buf
	buf   []byte
	tag   int64 // the run's tag, when tagged
	plain bool  // the group has rows of the query's groups alone
	// more are the further columns of a row value's set, and lastMore
	// their values in the run (each in its bufMore).
	more     []int
	lastMore [][]byte
	bufMore  [][]byte
}

// newDistinctRun returns the run tracker of a sorted merge: for one
// DISTINCT value, the last key of SortedBy.
func (m *Merger) newDistinctRun(keys []int) *distinctRun {
	r := &distinctRun{m: m, value: -1}
	if m.spec.Tagged != nil {
		return r
	}
	for _, a := range m.spec.Aggs {
		if a.Distinct {
			r.value = keys[len(keys)-1]
		}
	}
	return r
}

// start begins a group with its first row.
func (r *distinctRun) start(cols [][]byte) error {
	if r.m.spec.Tagged != nil {
		tag, col, err := r.m.rowTag(cols)
		if err != nil {
			return err
		}
		r.tag, r.value = tag, col
		r.more = r.m.spec.Tagged.More[tag]
		r.plain = tag == r.m.spec.Tagged.Plain
	}
	if r.value >= 0 {
		r.keep(cols)
	}
	return nil
}

// next reports whether a further row of the group starts a new value
// (fresh), and makes its tag the run's.
func (r *distinctRun) next(cols [][]byte) (fresh bool, err error) {
	if r.m.spec.Tagged != nil {
		tag, col, err := r.m.rowTag(cols)
		if err != nil {
			return false, err
		}
		if tag != r.tag {
			r.tag, r.value = tag, col
			r.more = r.m.spec.Tagged.More[tag]
			r.plain = r.plain || tag == r.m.spec.Tagged.Plain
			if col >= 0 {
				r.keep(cols)
			}
			return true, nil
		}
	}
	if r.value < 0 {
		return false, nil
	}
	seen, err := r.m.sameValue(r.value, r.last, cols[r.value])
	for k := 0; err == nil && seen && k < len(r.more); k++ {
		seen, err = r.m.sameValue(r.more[k], r.lastMore[k], cols[r.more[k]])
	}
	if err != nil || seen {
		return false, err
	}
	r.keep(cols)
	return true, nil
}

// keep makes row cols' value the run's, in the run's own buffers: a row's
// values last only until the next row of its shard.
func (r *distinctRun) keep(cols [][]byte) {
	r.last = keepIn(&r.buf, cols[r.value])
	for len(r.bufMore) < len(r.more) {
		r.bufMore = append(r.bufMore, nil)
		r.lastMore = append(r.lastMore, nil)
	}
	for k, c := range r.more {
		r.lastMore[k] = keepIn(&r.bufMore[k], cols[c])
	}
}

// keepIn copies v into *buf and returns the copy, nil for NULL.
func keepIn(buf *[]byte, v []byte) []byte {
	if v == nil {
		return nil
	}
	if *buf == nil {
		*buf = make([]byte, 0, 64) // never nil: an empty value is not NULL
	}
	*buf = append((*buf)[:0], v...)
	return *buf
}

// end checks a tagged group g (nil: none) once its rows are read: each
// shard that has rows of a group has one of the query's groups alone.
// Without any, the shards grouped a value as part of the group key, and
// every tag was that of a value's set.
func (r *distinctRun) end(g *group) error {
	if g == nil || r.m.spec.Tagged == nil || r.plain {
		return nil
	}
	return collidedTags(r.tag)
}

func collidedTags(tag int64) error {
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
		Message: "DISTINCT aggregates of a value that is also a GROUP BY expression are not supported across shards",
		Detail:  "A shard tagged a row " + strconv.FormatInt(tag, 10) + ", the tag of no grouping set.",
		Hint:    "Write the DISTINCT value as the GROUP BY writes it, or route the query to one shard."}
}

// rowTag reads a row's tag and the column of the value of its set (-1
// for the query's groups alone). A tag of no set means that the shards
// grouped a value as part of the group key (written otherwise than the
// GROUP BY item it equals), which the proxy cannot merge.
func (m *Merger) rowTag(cols [][]byte) (int64, int, error) {
	t := m.spec.Tagged
	if t.Col < 0 || t.Col >= len(cols) || cols[t.Col] == nil {
		return 0, 0, fmt.Errorf("merge: row without its grouping set tag")
	}
	tag, err := m.intValue(t.Col, cols[t.Col])
	if err != nil {
		return 0, 0, fmt.Errorf("merge: grouping set tag: %w", err)
	}
	if tag == t.Plain {
		return tag, -1, nil
	}
	if col, ok := t.Values[tag]; ok {
		return tag, col, nil
	}
	return 0, 0, collidedTags(tag)
}

// newTaggedGroup starts a group of a tagged merge with its first row:
// the group's aggregates start empty (counts 0, the others NULL), and the
// row is combined into those of its tag.
func (m *Merger) newTaggedGroup(cols [][]byte) (*group, error) {
	g := newGroup(cols)
	for _, a := range m.spec.Aggs {
		g.cols[a.Col] = nil
		switch a.Kind {
		case AggCount:
			g.cols[a.Col] = m.zeroCount(a.Col)
		case AggAvg:
			g.cols[a.CountCol] = nil
		case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
			g.cols[a.Moments.Count] = nil
		}
		if isRegression(a.Kind) {
			g.cols[a.Regression.Count] = nil
		}
	}
	if err := m.initGroup(g); err != nil {
		return nil, err
	}
	tag, _, err := m.rowTag(cols)
	if err != nil {
		return nil, err
	}
	return g, m.combine(g, cols, true, tag)
}
