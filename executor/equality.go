package executor

import (
	"fmt"
	"slices"
)

// EqualitySource tells the merge whether it may group text by its bytes.
// GROUP BY, DISTINCT and DISTINCT ON combine the shards' rows by the bytes
// of their keys (appendKey), which for text is PostgreSQL's equality only
// under a deterministic collation; under a nondeterministic one ("a" and
// "A" equal in a case-insensitive ICU collation) the shards' groups would
// not add up. The Sink of a merge implements it when it can read the
// shards' catalogs, as it implements OrderSource.
//
// CheckEquality returns nil when every column index in need is in a
// deterministic collation, or an error (0A000 with a hint) naming the one
// that is not, or whose collation it cannot tell. p and cols are as for
// OrderSource.
type EqualitySource interface {
	CheckEquality(p *Plan, cols []Column, need []int) error
}

// byteKeyColumns returns the text columns (and arrays of text) that the
// merge groups or deduplicates by bytes, following Run and aggregate.
func (m *Merger) byteKeyColumns() []int {
	s := m.spec
	grouped := len(s.Aggs) > 0 || len(s.GroupBy) > 0 || len(s.Having) > 0 || s.Outer != nil
	var keys []int
	switch {
	case len(s.SortedBy) > 0:
		// collectSorted compares groups with the columns' comparators,
		// which follow their collations: no bytes.
	case grouped:
		keys = append(keys, s.GroupBy...)
	case s.Distinct && len(s.DistinctOn) == 0, s.Dedup, s.SetOp != 0:
		// Dedup compares with the comparators, which follow the
		// collation; which of the strings a nondeterministic collation
		// says equal a UNION keeps is the server's choice, and such
		// merges are refused as DISTINCT's are.
		for i := range m.visible {
			keys = append(keys, i)
		}
	}
	if grouped && s.Distinct {
		for i := range m.visible {
			keys = addNeed(keys, i)
		}
	}
	for _, col := range s.DistinctOn {
		keys = addNeed(keys, col)
	}
	text := keys[:0]
	for _, col := range keys {
		if col >= 0 && col < len(m.cols) && NeedOf(m.cols[col].OID) == OrderCollation {
			text = append(text, col)
		}
	}
	return text
}

// checkEquality refuses a merge that would group text in a
// nondeterministic collation by its bytes. Columns whose collation the
// merge already has (it orders them too) are checked here; the others are
// asked of the sink when it is an EqualitySource. Without one the merge
// groups by bytes, as PostgreSQL does in every deterministic collation.
func (m *Merger) checkEquality() error {
	var ask []int
	for _, col := range m.byteKeyColumns() {
		coll, known := m.colls[col]
		switch {
		case !known:
			ask = append(ask, col)
		case !coll.Deterministic():
			return nondeterministicRefusal(m.cols[col], coll)
		}
	}
	src, ok := m.out.(EqualitySource)
	if len(ask) == 0 || !ok {
		return nil
	}
	return src.CheckEquality(m.spec.Plan, m.cols, slices.Clip(ask))
}

func nondeterministicRefusal(c Column, coll Collation) error {
	return refusal(fmt.Sprintf("cannot group column %q across shards in the nondeterministic collation %q", c.Name, coll),
		"the proxy groups and deduplicates text by its bytes, which is equality only in a deterministic collation; group by the column COLLATE \"C\" or another deterministic collation, or route the query to one shard")
}
