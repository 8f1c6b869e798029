package executor

import (
	"encoding/binary"
	"strconv"
)

// Set operations with INTERSECT or EXCEPT across shards (router/union.go:
// setOpMerge). Each shard sends the rows of every query of the operation,
// each with its query's number (1, 2, …) in the last column, sorted by
// every visible column (OrderBy) so that equal rows meet in the merge; the
// merge counts each run of equal rows per query, computes from the counts
// how often the operation keeps the row (Spec.SetSteps, the operation's
// tree in postfix order) and sends the run's row that often, before OFFSET
// and LIMIT.

// SetOpKind is a set operation the merge computes.
type SetOpKind uint8

const (
	SetIntersect SetOpKind = iota + 1
	SetIntersectAll
	SetExcept
	SetExceptAll
	SetUnion
	SetUnionAll
)

// SetStep is one step of Spec.SetSteps: the count of query Leaf (0-based)
// when Op is 0, else operation Op over the two counts before it.
type SetStep struct {
	Op   SetOpKind
	Leaf int
}

// setOpState is the run of equal rows being counted.
type setOpState struct {
	row    [][]byte // the run's first row, a copy; nil before the first
	counts []int64  // per query
	stack  []int64  // keep's
}

// setOpRow counts a row into its run, or sends the run before it and
// starts its own.
func (m *Merger) setOpRow(cols [][]byte) (bool, error) {
	st := &m.setop
	if st.row != nil {
		c, err := m.compareRows(st.row, cols)
		if err != nil {
			return false, err
		}
		if c == 0 {
			return true, m.countSetOp(cols)
		}
		if more, err := m.flushSetOp(); err != nil || !more {
			return more, err
		}
	}
	st.row = cloneRow(st.row, cols)
	clear(st.counts)
	return true, m.countSetOp(cols)
}

// countSetOp adds the row to the run's count of its query, whose number
// the last column holds, as text or as a binary int4.
func (m *Merger) countSetOp(cols [][]byte) error {
	st := &m.setop
	v := cols[len(cols)-1]
	var q int64
	if m.cols[len(m.cols)-1].Format == 1 && len(v) == 4 {
		q = int64(int32(binary.BigEndian.Uint32(v)))
	} else {
		var err error
		if q, err = strconv.ParseInt(string(v), 10, 32); err != nil {
			return err
		}
	}
	if q < 1 || q > 1<<16 {
		return strconv.ErrRange
	}
	if int(q) > len(st.counts) {
		st.counts = append(st.counts, make([]int64, int(q)-len(st.counts))...)
	}
	st.counts[q-1]++
	return nil
}

// keep is how often the set operation keeps a row whose queries have it
// counts times.
func (st *setOpState) keep(steps []SetStep) int64 {
	st.stack = st.stack[:0]
	for _, s := range steps {
		if s.Op == 0 {
			var n int64
			if s.Leaf < len(st.counts) {
				n = st.counts[s.Leaf]
			}
			st.stack = append(st.stack, n)
			continue
		}
		k := len(st.stack)
		if k < 2 {
			return 0
		}
		l, r := st.stack[k-2], st.stack[k-1]
		st.stack = st.stack[:k-1]
		st.stack[k-2] = setOpCount(s.Op, l, r)
	}
	if len(st.stack) != 1 {
		return 0
	}
	return st.stack[0]
}

// setOpCount is how often operation op keeps a row that its left side
// has l times and its right side r times.
func setOpCount(op SetOpKind, l, r int64) int64 {
	switch op {
	case SetIntersect:
		if l > 0 && r > 0 {
			return 1
		}
	case SetIntersectAll:
		return min(l, r)
	case SetExcept:
		if l > 0 && r == 0 {
			return 1
		}
	case SetExceptAll:
		return max(l-r, 0)
	case SetUnion:
		if l > 0 || r > 0 {
			return 1
		}
	case SetUnionAll:
		return l + r
	}
	return 0
}

// flushSetOp sends the run's row as many times as the operation keeps it.
func (m *Merger) flushSetOp() (bool, error) {
	st := &m.setop
	if st.row == nil {
		return true, nil
	}
	n := st.keep(m.spec.SetSteps)
	clear(st.counts)
	for ; n > 0; n-- {
		if more, err := m.nextRow(st.row); err != nil || !more {
			return more, err
		}
	}
	return true, nil
}
