package executor

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// orderSink is a Sink that answers OrderSource and EqualitySource with
// fixed collations, recording what it was asked.
type orderSink struct {
	strings.Builder
	coll   Collation
	asked  [][]int // CheckEquality's need, per call
	nondet bool    // CheckEquality refuses
}

func (s *orderSink) ColumnOrders(p *Plan, cols []Column, need []int) ([]ColumnOrder, error) {
	out := make([]ColumnOrder, len(need))
	for i := range out {
		out[i].Collation = s.coll
	}
	return out, nil
}

func (s *orderSink) CheckEquality(p *Plan, cols []Column, need []int) error {
	s.asked = append(s.asked, slices.Clone(need))
	if s.nondet {
		return errors.New("nondeterministic")
	}
	return nil
}

// TestEqualityNondeterministic checks that a merge groups text by its
// bytes only in deterministic collations: GROUP BY, DISTINCT and DISTINCT
// ON over text ask the sink, and a nondeterministic collation the merge
// orders by is refused with 0A000, while ORDER BY alone is merged.
func TestEqualityNondeterministic(t *testing.T) {
	cols := []Column{{Name: "name", OID: oidText}, {Name: "n", OID: oidInt8}}
	count := []Agg{{Col: 1, Kind: AggCount}}
	tests := []struct {
		name  string
		spec  Spec
		asked [][]int
	}{
		{"GROUP BY", Spec{GroupBy: []int{0}, Aggs: count, Limit: -1}, [][]int{{0}}},
		{"GROUP BY int", Spec{GroupBy: []int{1}, Aggs: []Agg{{Col: 0, Kind: AggMax}}, Limit: -1}, nil},
		{"DISTINCT", Spec{Distinct: true, Limit: -1}, [][]int{{0}}},
		{"DISTINCT ON", Spec{DistinctOn: []int{0}, OrderBy: []SortKey{{Col: 1}}, Limit: -1}, [][]int{{0}}},
		{"ORDER BY", Spec{OrderBy: []SortKey{{Col: 0}}, Limit: -1}, nil},
		{"DISTINCT aggregate", Spec{GroupBy: []int{0}, Aggs: []Agg{{Col: 1, Kind: AggCount, Distinct: true}}, SortedBy: []SortKey{{Col: 0}, {Col: 1}}, Limit: -1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &orderSink{}
			if _, err := NewMerger(tc.spec, cols, sink); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(sink.asked, tc.asked, slices.Equal) {
				t.Fatalf("asked %v, want %v", sink.asked, tc.asked)
			}
			sink.nondet = true
			_, err := NewMerger(tc.spec, cols, sink)
			if (err != nil) != (tc.asked != nil) {
				t.Fatalf("refusing source: %v", err)
			}
		})
	}
	if !ICUAvailable() {
		return
	}
	ci, err := ICUCollation("und-u-ks-level2", false)
	if err != nil {
		t.Fatal(err)
	}
	// Ordered and grouped: the merge knows the collation and refuses it
	// without asking.
	sink := &orderSink{coll: ci}
	_, err = NewMerger(Spec{GroupBy: []int{0}, Aggs: count, OrderBy: []SortKey{{Col: 0}}, Limit: -1}, cols, sink)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.FeatureNotSupported || len(sink.asked) != 0 {
		t.Fatalf("GROUP BY ORDER BY in a nondeterministic collation: %v (asked %v)", err, sink.asked)
	}
	// Ordered only: ties are unordered in PostgreSQL too.
	m, err := NewMerger(Spec{OrderBy: []SortKey{{Col: 0}}, Limit: -1}, cols, sink)
	if err != nil {
		t.Fatal(err)
	}
	n, err := m.Run([]Rows{&rowsOf{rows: [][]string{{"b", "1"}, {"C", "2"}}}, &rowsOf{rows: [][]string{{"a", "3"}, {"c", "4"}}}})
	if err != nil || n != 4 {
		t.Fatalf("merged %d rows: %v", n, err)
	}
	got := decode(t, []byte(sink.String()))
	if want := [][]string{{"a", "3"}, {"b", "1"}, {"C", "2"}, {"c", "4"}}; got[0][0] != "a" || got[1][0] != "b" || len(got) != len(want) {
		t.Fatalf("merged %v, want %v (C and c tie)", got, want)
	}
}
