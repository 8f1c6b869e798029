package replication

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/shardgate/shardgate/router/sharding"
)

// xlogData wraps pgoutput message data as the XLogData CopyData payload
// a walsender sends.
func xlogData(wal []byte) []byte {
	b := []byte{pglogrepl.XLogDataByteID}
	b = binary.BigEndian.AppendUint64(b, 0x1000)
	b = binary.BigEndian.AppendUint64(b, 0x2000)
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, wal...)
}

// beginMessage and commitMessage encode pgoutput's Begin and Commit.
func beginMessage(final pglogrepl.LSN, xid uint32) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'B'}, uint64(final))
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitMessage(commit, end pglogrepl.LSN) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'C', 0}, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

// BenchmarkReadRoute measures the WAL reader's own work per source
// transaction of bench/reshard.sh's load (an UPDATE of one row, an INSERT
// of a 160-byte row), without PostgreSQL: decoding the CopyData messages
// (Begin, Update, Insert, Commit), routing each row by its bigint key over
// two destination shards, and handing the ops over (to a function that
// drops them). One op is one source transaction.
func BenchmarkReadRoute(b *testing.B) {
	ctx := b.Context()
	rel := &relation{name: "public.accounts", ident: `"public"."accounts"`, cols: []string{"id", "balance", "filler"}, key: []int{0},
		rule: rule{place: placeSharded, column: "id", typ: sharding.Bigint, fn: sharding.Hash{Type: sharding.Bigint, Shards: 2}}}
	r := &reader{t: &Task{}, rels: map[uint32]*relation{16384: rel}, sent: make([]pglogrepl.LSN, 2),
		pending: make([][]change, 2), size: make([]int, 2), touched: make([]bool, 2)}
	// The appliers' work (apply.go) is not measured: the ops are dropped.
	var ops int
	r.deliverForTest = func(int, op) { ops++ }
	filler := string(make([]byte, 160))
	const txns = 4096
	var msgs [][]byte
	for i := range txns {
		lsn := pglogrepl.LSN(0x100000 + 0x100*uint64(i))
		msgs = append(msgs,
			xlogData(beginMessage(lsn+0x80, uint32(i))),
			xlogData(rowMessage('U', byte('N'), tupleBytes(strconv.Itoa(1+i*7919%327680), "17", "TOAST"))),
			xlogData(rowMessage('I', byte('N'), tupleBytes(strconv.Itoa(1000000000+i), "0", filler))),
			xlogData(commitMessage(lsn+0x80, lsn+0xa0)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for _, data := range msgs[4*(i%txns) : 4*(i%txns)+4] {
			if err := r.copyData(ctx, nil, data); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(ops)/float64(b.N), "ops/txn")
}
