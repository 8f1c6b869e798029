package executor

// INTERSECT and EXCEPT across shards (router/union.go: setOpMerge). Each
// shard sends the rows of both queries, each with its query's number (1
// or 2) in the last column, sorted by every visible column (OrderBy) so
// that equal rows meet in the merge; the merge counts each run of equal
// rows per query and sends the run's row as many times as the operation
// says, before OFFSET and LIMIT.

// SetOpKind is a set operation the merge computes.
type SetOpKind uint8

const (
	SetIntersect SetOpKind = iota + 1
	SetIntersectAll
	SetExcept
	SetExceptAll
)

// setOpState is the run of equal rows being counted.
type setOpState struct {
	row         [][]byte // the run's first row, a copy; nil before the first
	left, right int64
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
			st.count(cols)
			return true, nil
		}
		if more, err := m.flushSetOp(); err != nil || !more {
			return more, err
		}
	}
	st.row = cloneRow(st.row, cols)
	st.left, st.right = 0, 0
	st.count(cols)
	return true, nil
}

// count adds the row to the run's count of its query: the last column
// holds 1 or 2, as text or as a binary int4 (the last byte either way).
func (st *setOpState) count(cols [][]byte) {
	arm := cols[len(cols)-1]
	if len(arm) > 0 && arm[len(arm)-1]&0x0f == 2 {
		st.right++
	} else {
		st.left++
	}
}

// flushSetOp sends the run's row as many times as the operation keeps it.
func (m *Merger) flushSetOp() (bool, error) {
	st := &m.setop
	if st.row == nil {
		return true, nil
	}
	var n int64
	l, r := st.left, st.right
	switch m.spec.SetOp {
	case SetIntersect:
		if l > 0 && r > 0 {
			n = 1
		}
	case SetIntersectAll:
		n = min(l, r)
	case SetExcept:
		if l > 0 && r == 0 {
			n = 1
		}
	case SetExceptAll:
		n = max(l-r, 0)
	}
	st.left, st.right = 0, 0
	for ; n > 0; n-- {
		if more, err := m.nextRow(st.row); err != nil || !more {
			return more, err
		}
	}
	return true, nil
}
