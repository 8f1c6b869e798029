package executor

import (
	"container/heap"
	"encoding/binary"
	"fmt"
)

// DISTINCT aggregates: count(DISTINCT x), sum(DISTINCT x), avg(DISTINCT
// x). Each shard groups by x within the query's groups and returns its
// rows sorted by Spec.SortedBy, the group key then x (router/distinct.go).
// collectSorted merges the shards' streams in that order, so that a group
// arrives as one run of rows and each x of it as one run within: a
// Distinct aggregate folds the first row of each x, the others every row.
// Memory is one row per shard while merging, and one entry per group
// after, as for any grouped query: never a set of the values.

// collectSorted reads every shard's sorted rows into groups, in order.
func (m *Merger) collectSorted(sources []Rows, done func(*group) error) ([]*group, error) {
	keys := make([]int, len(m.spec.SortedBy))
	for i, k := range m.spec.SortedBy {
		if k.Col < 0 || k.Col >= len(m.cols) {
			return nil, fmt.Errorf("merge: column %d out of range", k.Col)
		}
		keys[i] = k.Col
	}
	if err := m.buildComparators(keys); err != nil {
		return nil, err
	}
	run := m.newDistinctRun(keys)
	h := &sortedHeap{m: m}
	for i, src := range sources {
		c := &cursor{src: src, idx: i}
		ok, err := c.advance()
		if err != nil {
			return nil, err
		}
		if ok {
			h.cur = append(h.cur, c)
		}
	}
	heap.Init(h)
	var order []*group
	var g *group
	for h.Len() > 0 {
		if h.err != nil {
			return nil, h.err
		}
		c := h.cur[0]
		same, err := m.equal(m.spec.GroupBy, g, c.cols)
		if err != nil {
			return nil, err
		}
		if !same {
			if err := run.end(g); err != nil {
				return nil, err
			}
			if done != nil && g != nil {
				if err := done(g); err != nil {
					return nil, err
				}
			}
			if g, err = m.startSorted(c.cols, run); err != nil {
				return nil, err
			}
			if done == nil {
				order = append(order, g)
			}
		} else if err := m.nextSorted(g, c.cols, run); err != nil {
			return nil, err
		}
		ok, err := c.advance()
		if err != nil {
			return nil, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	if h.err != nil {
		return nil, h.err
	}
	if err := run.end(g); err != nil {
		return nil, err
	}
	if g == nil && len(m.spec.GroupBy) == 0 {
		// An aggregate without GROUP BY has one row, even over no rows;
		// shards grouping by the DISTINCT value return none.
		var err error
		if g, err = m.emptyGroup(); err != nil {
			return nil, err
		}
		if done == nil {
			order = append(order, g)
		}
	}
	if done != nil && g != nil {
		return nil, done(g)
	}
	return order, nil
}

// startSorted starts a group with its first row.
func (m *Merger) startSorted(cols [][]byte, run *distinctRun) (*group, error) {
	if err := run.start(cols); err != nil {
		return nil, err
	}
	if m.spec.Tagged != nil {
		return m.newTaggedGroup(cols)
	}
	g := newGroup(cols)
	return g, m.initGroup(g)
}

// nextSorted combines a further row of group g.
func (m *Merger) nextSorted(g *group, cols [][]byte, run *distinctRun) error {
	fresh, err := run.next(cols)
	if err != nil {
		return err
	}
	return m.combine(g, cols, fresh, run.tag)
}

// equal reports whether row cols has the values of group g in columns
// idx, as the columns' types compare (NULLs equal); false without g.
func (m *Merger) equal(idx []int, g *group, cols [][]byte) (bool, error) {
	if g == nil {
		return false, nil
	}
	for _, c := range idx {
		if same, err := m.sameValue(c, g.cols[c], cols[c]); err != nil || !same {
			return false, err
		}
	}
	return true, nil
}

// sameValue reports whether two values of column col are equal as its
// type compares them (1.0 = 1.00), NULL equal to NULL as in GROUP BY.
func (m *Merger) sameValue(col int, x, y []byte) (bool, error) {
	switch {
	case x == nil && y == nil:
		return true, nil
	case x == nil || y == nil:
		return false, nil
	}
	if m.cmp[col] == nil {
		return false, fmt.Errorf("merge: column %d has no comparator", col) // SortedBy builds them
	}
	d, err := m.cmp[col](x, y)
	return d == 0, err
}

func copyValue(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// emptyGroup is the one group of an aggregate without GROUP BY over no
// rows: counts 0, every other aggregate NULL, as PostgreSQL's.
func (m *Merger) emptyGroup() (*group, error) {
	g := &group{cols: make([][]byte, len(m.cols))}
	for _, a := range m.spec.Aggs {
		if a.Kind == AggCount {
			g.cols[a.Col] = m.zeroCount(a.Col)
		}
	}
	return g, m.initGroup(g)
}

// zeroCount is a count of 0 in column col's format.
func (m *Merger) zeroCount(col int) []byte {
	if m.cols[col].Format == 1 {
		return binary.BigEndian.AppendUint64(nil, 0)
	}
	return []byte("0")
}

// sortedHeap merges the shards' rows in Spec.SortedBy order, as the
// shards' ORDER BY sorts them; ties go to the lower shard.
type sortedHeap struct {
	m   *Merger
	cur []*cursor
	err error
}

func (h *sortedHeap) Len() int { return len(h.cur) }
func (h *sortedHeap) Less(i, j int) bool {
	a, b := h.cur[i], h.cur[j]
	c, err := h.m.compareBy(h.m.spec.SortedBy, a.cols, b.cols)
	if err != nil && h.err == nil {
		h.err = err
	}
	if c != 0 {
		return c < 0
	}
	return a.idx < b.idx
}
func (h *sortedHeap) Swap(i, j int) { h.cur[i], h.cur[j] = h.cur[j], h.cur[i] }
func (h *sortedHeap) Push(x any)    { h.cur = append(h.cur, x.(*cursor)) }
func (h *sortedHeap) Pop() any {
	c := h.cur[len(h.cur)-1]
	h.cur = h.cur[:len(h.cur)-1]
	return c
}
