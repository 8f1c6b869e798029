package replication

import (
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"
)

// tupleBytes encodes a TupleData: each column as 'n', 'u' or 't' + value.
func tupleBytes(cols ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		switch c {
		case "NULL":
			b = append(b, 'n')
		case "TOAST":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
			b = append(b, c...)
		}
	}
	return b
}

// rowMessage encodes a pgoutput row change of relation 16384: typ, then
// each part as its tuple type byte and tuple.
func rowMessage(typ byte, parts ...any) []byte {
	b := binary.BigEndian.AppendUint32([]byte{typ}, 16384)
	for _, p := range parts {
		switch p := p.(type) {
		case byte:
			b = append(b, p)
		case []byte:
			b = append(b, p...)
		}
	}
	return b
}

var rowMessages = []struct {
	name string
	data []byte
}{
	{"insert", rowMessage('I', byte('N'), tupleBytes("1", "0", "hello"))},
	{"insert empty and null", rowMessage('I', byte('N'), tupleBytes("", "NULL", "x"))},
	{"update", rowMessage('U', byte('N'), tupleBytes("7", "42", "TOAST"))},
	{"update key changed", rowMessage('U', byte('K'), tupleBytes("7", "NULL", "NULL"), byte('N'), tupleBytes("8", "42", "y"))},
	{"update full", rowMessage('U', byte('O'), tupleBytes("7", "41", "y"), byte('N'), tupleBytes("7", "42", "y"))},
	{"delete key", rowMessage('D', byte('K'), tupleBytes("7", "NULL", "NULL"))},
	{"delete full", rowMessage('D', byte('O'), tupleBytes("7", "42", "y"))},
}

// TestDecodeRowChange checks decodeRowChange against pglogrepl.Parse.
func TestDecodeRowChange(t *testing.T) {
	for _, tc := range rowMessages {
		t.Run(tc.name, func(t *testing.T) {
			want, err := pglogrepl.Parse(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			data := append([]byte(nil), tc.data...)
			got, err := decodeRowChange(data)
			if err != nil {
				t.Fatal(err)
			}
			clear(data) // the result must not share the reader's buffer
			var wantNew, wantOld *pglogrepl.TupleData
			var kind changeKind
			var rel uint32
			switch m := want.(type) {
			case *pglogrepl.InsertMessage:
				kind, rel, wantNew = changeInsert, m.RelationID, m.Tuple
			case *pglogrepl.UpdateMessage:
				kind, rel, wantNew, wantOld = changeUpdate, m.RelationID, m.NewTuple, m.OldTuple
			case *pglogrepl.DeleteMessage:
				kind, rel, wantOld = changeDelete, m.RelationID, m.OldTuple
			}
			if got.kind != kind || got.relation != rel {
				t.Fatalf("kind %d relation %d, want %d %d", got.kind, got.relation, kind, rel)
			}
			sameTuple(t, "new", got.new, wantNew)
			sameTuple(t, "old", got.old, wantOld)
		})
	}
}

func sameTuple(t *testing.T, what string, got []*pglogrepl.TupleDataColumn, want *pglogrepl.TupleData) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s tuple: %d columns, want none", what, len(got))
		}
		return
	}
	if len(got) != len(want.Columns) {
		t.Fatalf("%s tuple: %d columns, want %d", what, len(got), len(want.Columns))
	}
	for i, w := range want.Columns {
		g := got[i]
		if g.DataType != w.DataType || g.Length != w.Length || string(g.Data) != string(w.Data) || (g.Data == nil) != (w.Data == nil) {
			t.Errorf("%s column %d: %c %d %q (nil %v), want %c %d %q (nil %v)", what, i,
				g.DataType, g.Length, g.Data, g.Data == nil, w.DataType, w.Length, w.Data, w.Data == nil)
		}
	}
}

// TestDecodeRowChangeTruncated: every prefix of a valid message, and a
// column length past the end, is an error, never a panic.
func TestDecodeRowChangeTruncated(t *testing.T) {
	for _, tc := range rowMessages {
		for n := range len(tc.data) {
			if _, err := decodeRowChange(tc.data[:n]); err == nil {
				t.Errorf("%s: prefix of %d of %d bytes decoded without an error", tc.name, n, len(tc.data))
			}
		}
	}
	bad := rowMessage('I', byte('N'), []byte{0, 1, 't', 0xff, 0xff, 0xff, 0xff, 'x'})
	if _, err := decodeRowChange(bad); err == nil {
		t.Error("a column longer than the message decoded without an error")
	}
	// A table without columns (pglogrepl refuses the 8-byte message).
	if c, err := decodeRowChange(rowMessage('I', byte('N'), tupleBytes())); err != nil || len(c.new) != 0 {
		t.Errorf("a row of no columns: %v, %v", c.new, err)
	}
	if _, err := decodeRowChange(rowMessage('I', byte('N'), []byte{0, 1, 'z'})); err == nil {
		t.Error("an unknown column type decoded without an error")
	}
}

// FuzzDecodeRowChange: decodeRowChange never panics (pglogrepl.Parse
// does on a short message), and every value it decodes has its length.
func FuzzDecodeRowChange(f *testing.F) {
	for _, tc := range rowMessages {
		f.Add(tc.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeRowChange(data)
		if err != nil {
			return
		}
		for _, v := range append(c.new, c.old...) {
			if int(v.Length) != len(v.Data) && v.DataType == pglogrepl.TupleDataTypeText {
				t.Fatalf("value of length %d holds %d bytes", v.Length, len(v.Data))
			}
		}
	})
}

// BenchmarkDecodeRowChange decodes bench/reshard.sh's changes (an UPDATE
// of one row, an INSERT of a 160-byte row) as the stream does, against
// pglogrepl.Parse.
func BenchmarkDecodeRowChange(b *testing.B) {
	filler := string(make([]byte, 160))
	msgs := [][]byte{
		rowMessage('U', byte('N'), tupleBytes("123456", "17", "TOAST")),
		rowMessage('I', byte('N'), tupleBytes("1000000123", "0", filler)),
	}
	b.Run("decodeRowChange", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := decodeRowChange(msgs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pglogrepl.Parse", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := pglogrepl.Parse(msgs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
