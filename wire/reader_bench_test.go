package wire

import (
	"bytes"
	"testing"
)

// loopReader serves stream over and over, as a connection that never runs
// dry, so that the Reader refills its buffer across message boundaries as
// it does on a socket.
type loopReader struct {
	stream []byte
	off    int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.stream[l.off:])
	l.off = (l.off + n) % len(l.stream)
	return n, nil
}

// BenchmarkReaderNext measures Reader.Next over the answers a server
// sends, with the buffer size the pool gives server connections (32 KiB,
// pool/server.go). Each iteration reads one copy of the stream; SetBytes
// makes the MB/s figure the relay's read throughput.
//
//   - rows: a SELECT's answer, RowDescription, 100 DataRows of about 100
//     bytes, CommandComplete and ReadyForQuery: every message is served
//     from the buffer.
//   - small: CommandComplete and ReadyForQuery, the whole answer to an
//     INSERT or a SET, the round trip of pgbench's simple transactions.
//   - large: one 100 000-byte DataRow, larger than the buffer, read into
//     the Reader's separate slice (reused between messages), then
//     CommandComplete and ReadyForQuery.
func BenchmarkReaderNext(b *testing.B) {
	row := AppendDataRow(nil, [][]byte{
		[]byte("42"), []byte("2024-05-01 12:34:56.789+00"), bytes.Repeat([]byte("a"), 48), nil, []byte("t"),
	})
	rows := AppendRowDescription(nil, []Field{
		{Name: "id", OID: OIDInt8, Size: 8}, {Name: "at", OID: 1184, Size: 8},
		{Name: "name", OID: OIDText, Size: -1}, {Name: "note", OID: OIDText, Size: -1}, {Name: "ok", OID: OIDBool, Size: 1},
	})
	for range 100 {
		rows = append(rows, row...)
	}
	rows = AppendCommandComplete(rows, "SELECT 100")
	rows = AppendReadyForQuery(rows, 'I')

	small := AppendCommandComplete(nil, "INSERT 0 1")
	small = AppendReadyForQuery(small, 'I')

	large := AppendDataRow(nil, [][]byte{bytes.Repeat([]byte("x"), 100_000)})
	large = AppendCommandComplete(large, "SELECT 1")
	large = AppendReadyForQuery(large, 'I')

	for _, tc := range []struct {
		name   string
		stream []byte
		msgs   int // messages in one copy of stream
	}{
		{"rows", rows, 103},
		{"small", small, 2},
		{"large", large, 3},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := NewReader(&loopReader{stream: tc.stream}, 32<<10, 1<<30)
			b.SetBytes(int64(len(tc.stream)))
			b.ReportAllocs()
			for b.Loop() {
				for range tc.msgs {
					if _, _, _, err := r.Next(); err != nil {
						b.Fatal(err)
					}
				}
			}
			// The stream must still be at a message boundary.
			if typ, _, _, err := r.Next(); err != nil || typ != tc.stream[0] {
				b.Fatalf("after the loop: type %q, error %v; want %q", typ, err, tc.stream[0])
			}
		})
	}
}
