package executor_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// distinctRows is one shard's answer to SELECT count(DISTINCT a),
// count(DISTINCT b) … as the shards run it, made as it is read (into one
// buffer), so that the input takes no memory and the process's peak is
// the merge's: rows of tag 1, one per a of the shard, sorted; then
// (two values) rows of tag 2, one per b; then the row of tag 3. With one
// value the shard groups by a alone: its rows have no tag. Shard s holds
// the a in [0, na) with a % 5 != s and the b in [0, nb) with b % 7 != s,
// so that most values are on both shards.
type distinctRows struct {
	shard, na, nb int
	two           bool
	tag, v        int
	buf           []byte
}

func (r *distinctRows) Next() ([]byte, error) {
	for {
		switch {
		case r.tag == 1 && r.v >= r.na:
			if !r.two {
				return nil, nil
			}
			r.tag, r.v = 2, 0
		case r.tag == 2 && r.v >= r.nb:
			r.tag = 3
			return r.row([]byte("0"), []byte("0"), nil, nil), nil
		case r.tag == 3:
			return nil, nil
		}
		v := r.v
		r.v++
		switch {
		case r.tag == 1 && v%5 != r.shard:
			if !r.two {
				return r.row([]byte("1"), nil, benchTextInt(v), nil), nil
			}
			return r.row([]byte("1"), []byte("0"), benchTextInt(v), nil), nil
		case r.tag == 2 && v%7 != r.shard:
			return r.row([]byte("0"), []byte("1"), nil, benchTextInt(v)), nil
		}
	}
}

// row is the DataRow body (count_a, count_b, a, b, tag), or (count_a, a)
// with one value.
func (r *distinctRows) row(ca, cb, a, b []byte) []byte {
	if !r.two {
		r.buf = wire.AppendDataRow(r.buf[:0], [][]byte{ca, a})
	} else {
		r.buf = wire.AppendDataRow(r.buf[:0], [][]byte{ca, cb, a, b, []byte(strconv.Itoa(r.tag))})
	}
	return r.buf[5:]
}

// BenchmarkMergeDistinctValues merges two shards' answers to
// count(DISTINCT a) (one value: shards group by a) and to
// count(DISTINCT a), count(DISTINCT b) (two values: grouping sets tagged
// by GROUPING(a, b)) over 300 000 values of a and 400 000 of b, most on
// both shards — what 1M rows of distinct pairs give. Each iteration
// merges every row; allocations per op and the process's peak RSS
// (/usr/bin/time -v … -benchtime=1x) show the memory: one row per shard
// and one group, as for one value, never the values.
func BenchmarkMergeDistinctValues(b *testing.B) {
	const na, nb = 300000, 400000
	run := func(b *testing.B, two bool, spec executor.Spec, cols []executor.Column) {
		want := "300000"
		if two {
			want += ",400000"
		}
		b.ReportAllocs()
		for b.Loop() {
			srcs := []executor.Rows{&distinctRows{shard: 0, na: na, nb: nb, two: two, tag: 1}, &distinctRows{shard: 1, na: na, nb: nb, two: two, tag: 1}}
			var out countingSink
			m, err := executor.NewMerger(spec, cols, &out)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := m.Run(srcs); err != nil || n != 1 {
				b.Fatalf("sent %d rows: %v", n, err)
			}
			if got := out.String(); got != want {
				b.Fatalf("got %s, want %s", got, want)
			}
		}
	}
	b.Run("one", func(b *testing.B) {
		cols := []executor.Column{{Name: "count", OID: benchOIDInt8}, {Name: "a", OID: 23}}
		run(b, false, executor.Spec{Limit: -1, Visible: 1, SortedBy: []executor.SortKey{{Col: 1}},
			Aggs: []executor.Agg{{Col: 0, Kind: executor.AggCount, Distinct: true}}}, cols)
	})
	b.Run("two", func(b *testing.B) {
		cols := []executor.Column{{Name: "count", OID: benchOIDInt8}, {Name: "count", OID: benchOIDInt8},
			{Name: "a", OID: 23}, {Name: "b", OID: 23}, {Name: "grouping", OID: 23}}
		run(b, true, executor.Spec{Limit: -1, Visible: 2, SortedBy: []executor.SortKey{{Col: 4}, {Col: 2}, {Col: 3}},
			Tagged: &executor.Tagging{Col: 4, Plain: 3, Values: map[int64]int{1: 2, 2: 3}},
			Aggs: []executor.Agg{{Col: 0, Kind: executor.AggCount, Distinct: true, Tag: 1},
				{Col: 1, Kind: executor.AggCount, Distinct: true, Tag: 2}}}, cols)
	})
}

// countingSink keeps the DataRows merged.
type countingSink struct{ buf []byte }

func (s *countingSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	return len(p), nil
}

// String returns the values of the first row, joined by commas.
func (s *countingSink) String() string {
	if len(s.buf) < 7 || s.buf[0] != 'D' {
		return "no row"
	}
	var vals []string
	cols, err := executor.SplitRow(s.buf[5:], nil)
	if err != nil {
		return err.Error()
	}
	for _, c := range cols {
		vals = append(vals, string(c))
	}
	return strings.Join(vals, ",")
}
