package executor

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

type copyRow struct {
	raw, key string
	null     bool
}

func splitAll(t *testing.T, f CopyFormat, chunks ...string) (rows []copyRow, all []string) {
	t.Helper()
	s := NewCopySplitter(f)
	s.Row = func(raw, key []byte) error {
		rows = append(rows, copyRow{raw: string(raw), key: string(key), null: key == nil})
		return nil
	}
	s.All = func(raw []byte) error { all = append(all, string(raw)); return nil }
	for _, c := range chunks {
		if err := s.Feed([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	return rows, all
}

func TestCopySplitText(t *testing.T) {
	f, _ := NewCopyFormat("text", "", "", "", "", false, 1)
	rows, all := splitAll(t, f, "a\t1\tx\nb\t", "2\ty\\\nz\n", "c\t\\N\tq\n\\.\n")
	want := []copyRow{{"a\t1\tx\n", "1", false}, {"b\t2\ty\\\nz\n", "2", false}, {"c\t\\N\tq\n", "", true}}
	if !reflect.DeepEqual(rows, want) || !reflect.DeepEqual(all, []string{"\\.\n"}) {
		t.Fatalf("rows %+v all %q", rows, all)
	}
}

func TestCopySplitCSV(t *testing.T) {
	f, _ := NewCopyFormat("csv", ";", "", "", "", true, 0)
	rows, all := splitAll(t, f, "id;note\n", "\"4\";\"multi\nline; with \"\"quotes\"\"\"\n5;plain\n", ";nokey")
	want := []copyRow{
		{"\"4\";\"multi\nline; with \"\"quotes\"\"\"\n", "4", false},
		{"5;plain\n", "5", false},
		{";nokey\n", "", true},
	}
	if !reflect.DeepEqual(rows, want) || !reflect.DeepEqual(all, []string{"id;note\n"}) {
		t.Fatalf("rows %+v all %q", rows, all)
	}
}

func TestCopySplitBinary(t *testing.T) {
	var data []byte
	data = append(data, copySignature...)
	data = append(data, 0, 0, 0, 0, 0, 0, 0, 0)
	row := func(id int64, name string) []byte {
		r := binary.BigEndian.AppendUint16(nil, 2)
		r = binary.BigEndian.AppendUint32(r, 8)
		r = binary.BigEndian.AppendUint64(r, uint64(id))
		r = binary.BigEndian.AppendUint32(r, uint32(len(name)))
		return append(r, name...)
	}
	r1, r2 := row(7, "seven"), row(8, "eight")
	data = append(data, r1...)
	data = append(data, r2...)
	data = append(data, 0xff, 0xff)
	f, _ := NewCopyFormat("binary", "", "", "", "", false, 0)
	// Feed byte by byte: boundaries must not matter.
	var chunks []string
	for _, b := range data {
		chunks = append(chunks, string([]byte{b}))
	}
	rows, all := splitAll(t, f, chunks...)
	if len(rows) != 2 || rows[0].raw != string(r1) || rows[1].raw != string(r2) || rows[0].key != string(r1[6:14]) {
		t.Fatalf("rows %+v", rows)
	}
	if len(all) != 2 || all[1] != "\xff\xff" {
		t.Fatalf("all %q", all)
	}
}

func FuzzCopySplit(f *testing.F) {
	f.Add([]byte("a\t1\n\\.\n"), uint8(0))
	f.Add([]byte("\"x\",\"y\"\"\"\n"), uint8(1))
	f.Add(append(append([]byte{}, copySignature...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 'x', 0xff, 0xff), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		format := []string{"text", "csv", "binary"}[kind%3]
		cf, err := NewCopyFormat(format, "", "", "", "", kind&4 != 0, int(kind%3))
		if err != nil {
			return
		}
		s := NewCopySplitter(cf)
		total := 0
		s.Row = func(raw, key []byte) error { total += len(raw); return nil }
		s.All = func(raw []byte) error { total += len(raw); return nil }
		for len(data) > 0 {
			n := min(len(data), 7)
			if s.Feed(data[:n]) != nil {
				return
			}
			data = data[n:]
		}
		s.Finish()
	})
}

// TestCopySplitRowErrors: a row the splitter cannot route (its key field
// missing, a binary row of the wrong width) fails with PostgreSQL's
// message and CONTEXT, its line numbered as PostgreSQL numbers it (the
// header counts; a quoted newline in CSV counts too, except in the first
// line).
func TestCopySplitRowErrors(t *testing.T) {
	long := strings.Repeat("é", 60) // 120 bytes: cut at 100, on a character boundary
	for _, tc := range []struct {
		format string
		header bool
		data   string
		msg    string
		where  string
	}{
		{"text", false, "a\t1\nb\n", `missing data for column "id"`, `COPY accounts, line 2: "b"`},
		{"text", false, "a\t1\r\nb\r\n", `missing data for column "id"`, `COPY accounts, line 2: "b"`},
		{"csv", true, "email,id\n\"x\ny\",1\nb\n", `missing data for column "id"`, `COPY accounts, line 4: "b"`},
		{"csv", false, "\"x\ny\",1\nb\n", `missing data for column "id"`, `COPY accounts, line 2: "b"`},
		{"text", false, long + "\n", `missing data for column "id"`, `COPY accounts, line 1: "` + strings.Repeat("é", 50) + `..."`},
		{"binary", false, string(copySignature) + "\x00\x00\x00\x00\x00\x00\x00\x00" + "\x00\x01\x00\x00\x00\x01x",
			`row field count is 1, expected 2`, `COPY accounts, line 1`},
	} {
		f, err := NewCopyFormat(tc.format, "", "", "", "", tc.header, 1)
		if err != nil {
			t.Fatal(err)
		}
		f.Table, f.KeyName, f.Fields = "accounts", "id", 2
		s := NewCopySplitter(f)
		s.Row = func(raw, key []byte) error { return nil }
		s.All = func(raw []byte) error { return nil }
		err = s.Feed([]byte(tc.data))
		if err == nil {
			err = s.Finish()
		}
		e, ok := wire.AsError(err)
		if !ok {
			t.Fatalf("%s %q: %v, want a server error", tc.format, tc.data, err)
		}
		var where string
		for _, m := range e.More {
			if m.Type == 'W' {
				where = m.Value
			}
		}
		if e.Code != wire.BadCopyFileFormat || e.Message != tc.msg || where != tc.where {
			t.Errorf("%s %q: %s %q CONTEXT %q; want 22P04 %q CONTEXT %q", tc.format, tc.data, e.Code, e.Message, where, tc.msg, tc.where)
		}
	}
}
