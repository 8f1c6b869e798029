package executor_test

import (
	"encoding/binary"
	"io"
	"strconv"
	"testing"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// PostgreSQL type OIDs of the benchmarks' columns (pg_type.dat).
const (
	benchOIDInt8    = 20
	benchOIDText    = 25
	benchOIDNumeric = 1700
)

// benchRows is one shard's result as the relay hands it to the Merger:
// DataRow bodies already in memory, so that the benchmarks measure the
// merge and not the making of its input.
type benchRows struct {
	bodies [][]byte
	i      int
}

func (r *benchRows) Next() ([]byte, error) {
	if r.i == len(r.bodies) {
		return nil, nil
	}
	r.i++
	return r.bodies[r.i-1], nil
}

// benchBody is the body of a DataRow holding values.
func benchBody(values ...[]byte) []byte {
	return wire.AppendDataRow(nil, values)[5:]
}

func benchTextInt(v int) []byte { return strconv.AppendInt(nil, int64(v), 10) }

func benchBinaryInt8(v int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// benchMerge runs spec over shards once per iteration (a new Merger, as
// each statement gets) and checks the number of rows sent. It reports the
// time per input row, the figure to compare across shapes.
func benchMerge(b *testing.B, spec executor.Spec, cols []executor.Column, shards [][][]byte, want int64) {
	srcs := make([]*benchRows, len(shards))
	rows := make([]executor.Rows, len(shards))
	in := 0
	for i, s := range shards {
		srcs[i] = &benchRows{bodies: s}
		rows[i] = srcs[i]
		in += len(s)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range srcs {
			s.i = 0
		}
		m, err := executor.NewMerger(spec, cols, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		n, err := m.Run(rows)
		if err != nil {
			b.Fatal(err)
		}
		if n != want {
			b.Fatalf("sent %d rows, want %d", n, want)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*in), "ns/row")
}

// sortedShards returns the rows (id, name) with ids 0 … shards×perShard-1
// dealt round-robin to the shards, so that each shard's result is sorted
// by id and a k-way merge takes from every shard in turn. bin selects the
// binary format of id, as pgx asks for it.
func sortedShards(shards, perShard int, bin bool) [][][]byte {
	out := make([][][]byte, shards)
	for i := range shards * perShard {
		id := benchTextInt(i)
		if bin {
			id = benchBinaryInt8(i)
		}
		out[i%shards] = append(out[i%shards], benchBody(id, []byte("name-"+strconv.Itoa(i))))
	}
	return out
}

// BenchmarkMergeOrdered is a cross-shard SELECT id, name … ORDER BY id over
// 4 shards × 1000 rows: the streaming k-way merge, which decodes every
// row's sort column and re-frames every row it sends. concat is the same
// rows without ORDER BY (streamed shard after shard), the merge's floor.
func BenchmarkMergeOrdered(b *testing.B) {
	const shards, perShard = 4, 1000
	textCols := []executor.Column{{Name: "id", OID: benchOIDInt8}, {Name: "name", OID: benchOIDText}}
	binCols := []executor.Column{{Name: "id", OID: benchOIDInt8, Format: 1}, {Name: "name", OID: benchOIDText}}
	byID := []executor.SortKey{{Col: 0}}
	b.Run("text", func(b *testing.B) {
		benchMerge(b, executor.Spec{OrderBy: byID, Limit: -1}, textCols, sortedShards(shards, perShard, false), shards*perShard)
	})
	b.Run("binary", func(b *testing.B) {
		benchMerge(b, executor.Spec{OrderBy: byID, Limit: -1}, binCols, sortedShards(shards, perShard, true), shards*perShard)
	})
	b.Run("concat", func(b *testing.B) {
		benchMerge(b, executor.Spec{Limit: -1}, textCols, sortedShards(shards, perShard, false), shards*perShard)
	})
}

// BenchmarkMergeLimit is SELECT … ORDER BY id LIMIT 10 OFFSET 10 over 4
// shards: each shard got LIMIT 20 (limit+offset) and answers 20 rows; the
// merge sends 10 and drains the rest, so the per-statement cost (the
// Merger, the heap) weighs more than the per-row cost.
func BenchmarkMergeLimit(b *testing.B) {
	const shards, limit, offset = 4, 10, 10
	cols := []executor.Column{{Name: "id", OID: benchOIDInt8}, {Name: "name", OID: benchOIDText}}
	spec := executor.Spec{OrderBy: []executor.SortKey{{Col: 0}}, Limit: limit, Offset: offset}
	benchMerge(b, spec, cols, sortedShards(shards, limit+offset, false), limit)
}

// BenchmarkMergeAggregate combines partial aggregates over 4 shards.
//
//   - grouped: SELECT g, count(*), sum(x) … GROUP BY g ORDER BY g with
//     x an integer (sum is bigint), 100 groups present on every shard:
//     each shard row is looked up by its group key and its count and sum
//     added as int8.
//   - numeric: the same with x a bigint, whose sum is numeric and added
//     as an exact decimal.
//   - total: SELECT count(*), sum(x) without GROUP BY: one row per shard.
func BenchmarkMergeAggregate(b *testing.B) {
	const shards, groups = 4, 100
	aggs := []executor.Agg{{Col: 1, Kind: executor.AggCount}, {Col: 2, Kind: executor.AggSum}}
	grouped := func(sumOID uint32) ([]executor.Column, [][][]byte) {
		cols := []executor.Column{{Name: "g", OID: benchOIDText}, {Name: "count", OID: benchOIDInt8}, {Name: "sum", OID: sumOID}}
		in := make([][][]byte, shards)
		for s := range shards {
			for g := range groups {
				in[s] = append(in[s], benchBody([]byte("group-"+strconv.Itoa(g)), benchTextInt(1000+g), benchTextInt(123456789*(s+1)+g)))
			}
		}
		return cols, in
	}
	spec := executor.Spec{GroupBy: []int{0}, OrderBy: []executor.SortKey{{Col: 0}}, Aggs: aggs, Limit: -1}
	b.Run("grouped", func(b *testing.B) {
		cols, in := grouped(benchOIDInt8)
		benchMerge(b, spec, cols, in, groups)
	})
	b.Run("numeric", func(b *testing.B) {
		cols, in := grouped(benchOIDNumeric)
		benchMerge(b, spec, cols, in, groups)
	})
	b.Run("total", func(b *testing.B) {
		cols := []executor.Column{{Name: "count", OID: benchOIDInt8}, {Name: "sum", OID: benchOIDInt8}}
		in := make([][][]byte, shards)
		for s := range shards {
			in[s] = [][]byte{benchBody(benchTextInt(1000*(s+1)), benchTextInt(987654*(s+1)))}
		}
		total := []executor.Agg{{Col: 0, Kind: executor.AggCount}, {Col: 1, Kind: executor.AggSum}}
		benchMerge(b, executor.Spec{Aggs: total, Limit: -1}, cols, in, 1)
	})
}

// BenchmarkMergeCollect is SELECT g, string_agg(t, ',' ORDER BY y),
// array_agg(y ORDER BY y) … GROUP BY g over 4 shards × 1000 rows in 10
// groups: each shard row is one (g, y) with its partials, sorted by g
// then y, and the k-way merge appends each partial to its group's.
func BenchmarkMergeCollect(b *testing.B) {
	const shards, perShard, groups = 4, 1000, 10
	cols := []executor.Column{{Name: "g", OID: benchOIDText}, {Name: "string_agg", OID: benchOIDText},
		{Name: "array_agg", OID: 1007}, {Name: "sep", OID: benchOIDText}, {Name: "y", OID: 23}}
	in := make([][][]byte, shards)
	per := shards * perShard / groups
	for i := range shards * perShard {
		g, y := i/per, i%per
		in[y%shards] = append(in[y%shards], benchBody([]byte("group-"+strconv.Itoa(g)), []byte("value-"+strconv.Itoa(i)),
			[]byte("{"+strconv.Itoa(y)+"}"), []byte(","), benchTextInt(y)))
	}
	spec := executor.Spec{GroupBy: []int{0}, Visible: 3, Limit: -1,
		SortedBy: []executor.SortKey{{Col: 0}, {Col: 4}},
		Aggs:     []executor.Agg{{Col: 1, Kind: executor.AggStringAgg, SepCol: 3}, {Col: 2, Kind: executor.AggArrayAgg}}}
	benchMerge(b, spec, cols, in, groups)
}
