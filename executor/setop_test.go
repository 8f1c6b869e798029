package executor

import "testing"

// TestSetOpSteps: the count a set operation keeps a row, from the counts
// of its queries, for trees of each operation.
func TestSetOpSteps(t *testing.T) {
	leaf := func(i int) SetStep { return SetStep{Leaf: i} }
	op := func(k SetOpKind) SetStep { return SetStep{Op: k} }
	cases := []struct {
		name   string
		steps  []SetStep
		counts []int64
		want   int64
	}{
		{"INTERSECT, both", []SetStep{leaf(0), leaf(1), op(SetIntersect)}, []int64{3, 2}, 1},
		{"INTERSECT, one side", []SetStep{leaf(0), leaf(1), op(SetIntersect)}, []int64{3, 0}, 0},
		{"INTERSECT ALL", []SetStep{leaf(0), leaf(1), op(SetIntersectAll)}, []int64{3, 2}, 2},
		{"EXCEPT", []SetStep{leaf(0), leaf(1), op(SetExcept)}, []int64{3, 0}, 1},
		{"EXCEPT, on the right", []SetStep{leaf(0), leaf(1), op(SetExcept)}, []int64{3, 1}, 0},
		{"EXCEPT ALL", []SetStep{leaf(0), leaf(1), op(SetExceptAll)}, []int64{3, 1}, 2},
		{"EXCEPT ALL, more on the right", []SetStep{leaf(0), leaf(1), op(SetExceptAll)}, []int64{1, 3}, 0},
		{"UNION", []SetStep{leaf(0), leaf(1), op(SetUnion)}, []int64{0, 2}, 1},
		{"UNION ALL", []SetStep{leaf(0), leaf(1), op(SetUnionAll)}, []int64{4, 2}, 6},
		// a INTERSECT b EXCEPT c
		{"(a ∩ b) − c", []SetStep{leaf(0), leaf(1), op(SetIntersect), leaf(2), op(SetExcept)}, []int64{1, 1, 0}, 1},
		{"(a ∩ b) − c, in c", []SetStep{leaf(0), leaf(1), op(SetIntersect), leaf(2), op(SetExcept)}, []int64{1, 1, 1}, 0},
		// a UNION ALL (b INTERSECT ALL c)
		{"a + min(b, c)", []SetStep{leaf(0), leaf(1), leaf(2), op(SetIntersectAll), op(SetUnionAll)}, []int64{2, 5, 3}, 5},
		// (a UNION b) EXCEPT ALL (c UNION ALL d)
		{"distinct union minus all", []SetStep{leaf(0), leaf(1), op(SetUnion), leaf(2), leaf(3), op(SetUnionAll), op(SetExceptAll)}, []int64{2, 2, 0, 0}, 1},
		{"a query with no row here", []SetStep{leaf(0), leaf(1), op(SetUnionAll)}, []int64{2}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := setOpState{counts: tc.counts}
			if got := st.keep(tc.steps); got != tc.want {
				t.Errorf("keep = %d, want %d", got, tc.want)
			}
		})
	}
}
