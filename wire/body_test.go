package wire

import (
	"bytes"
	"testing"
)

func TestBody(t *testing.T) {
	// The messages are PostgreSQL 15's answers to the same short fields.
	tests := []struct {
		name string
		body string
		read func(d *Body) any
		want any
		err  string // "" for no error
	}{
		{"byte", "S", func(d *Body) any { return d.Byte() }, byte('S'), ""},
		{"byte empty", "", func(d *Body) any { return d.Byte() }, byte(0), "no data left in message"},
		{"uint16", "\x01\x02", func(d *Body) any { return d.Uint16() }, uint16(0x102), ""},
		{"uint16 short", "\x01", func(d *Body) any { return d.Uint16() }, uint16(0), "insufficient data left in message"},
		{"int32", "\xff\xff\xff\xff", func(d *Body) any { return d.Int32() }, int32(-1), ""},
		{"int32 short", "\x00\x00\x00", func(d *Body) any { return d.Int32() }, int32(0), "insufficient data left in message"},
		{"cstring", "ab\x00", func(d *Body) any { return string(d.CString()) }, "ab", ""},
		{"cstring unterminated", "ab", func(d *Body) any { return string(d.CString()) }, "", "invalid string in message"},
		{"bytes", "abc", func(d *Body) any { return string(d.Bytes(2)) }, "ab", ""},
		{"bytes short", "abc", func(d *Body) any { return string(d.Bytes(4)) }, "", "insufficient data left in message"},
		{"bytes negative", "abc", func(d *Body) any { return string(d.Bytes(-2)) }, "", "insufficient data left in message"},
		{"end", "", func(d *Body) any { d.End(); return nil }, nil, ""},
		{"end trailing", "x", func(d *Body) any { d.End(); return nil }, nil, "invalid message format"},
		{"first error sticks", "a", func(d *Body) any {
			d.Uint16()
			return d.Byte() // there is a byte, but the body failed already
		}, byte(0), "insufficient data left in message"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewBody([]byte(tc.body))
			if got := tc.read(&d); got != tc.want {
				t.Errorf("read %#v, want %#v", got, tc.want)
			}
			err := d.Err()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			e, ok := AsError(err)
			if !ok || e.Code != ProtocolViolation || e.Severity != "ERROR" || e.Message != tc.err {
				t.Fatalf("error %v, want ERROR 08P01 %q", err, tc.err)
			}
			if len(d.Rest()) != 0 {
				t.Errorf("a failed body still has %q to read", d.Rest())
			}
		})
	}
}

func TestBodyBytesCannotGrow(t *testing.T) {
	d := NewBody([]byte("abcd"))
	b := d.Bytes(2)
	b = append(b, 'x')
	if !bytes.Equal(d.Rest(), []byte("cd")) {
		t.Fatalf("appending to a field overwrote the rest of the body: %q", d.Rest())
	}
}

func TestBodyEmptyBytesAreNotNil(t *testing.T) {
	d := NewBody(nil)
	if b := d.Bytes(0); b == nil || d.Err() != nil {
		t.Fatalf("Bytes(0) = %#v, %v; want an empty slice", b, d.Err())
	}
}
