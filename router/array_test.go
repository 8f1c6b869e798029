package router

import (
	"slices"
	"testing"
)

func TestTextArray(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: malformed
	}{
		{"{1,2,3}", []string{"1", "2", "3"}},
		{" { 1 , 2 } ", []string{"1", "2"}},
		{"{}", []string{}},
		{`{"a b","c\"d",NULL,"NULL",nul,e\,f}`, []string{"a b", `c"d`, "NULL", "nul", "e,f"}},
		{"{{1,2},{3,4}}", []string{"1", "2", "3", "4"}},
		{"[1:2]={7,8}", []string{"7", "8"}},
		{"{1,2", nil},
		{"1,2", nil},
		{`{"a}`, nil},
		{"{1}x", nil},
		{`{a"b}`, nil},
	} {
		var got []string
		ok := eachTextElement([]byte(tc.in), func(e []byte) bool {
			got = append(got, string(e))
			return true
		})
		if tc.want == nil {
			if ok {
				t.Errorf("%s: parsed as %q, want malformed", tc.in, got)
			}
			continue
		}
		if !ok || !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
			t.Errorf("%s: got %q %v, want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestBinaryArray(t *testing.T) {
	withNull := int8Array(1, 2)
	// Replace the second element by a NULL: length -1 and no bytes.
	withNull = append(withNull[:len(withNull)-12], 0xff, 0xff, 0xff, 0xff)
	for _, tc := range []struct {
		name string
		in   []byte
		want int // elements, or -1 for malformed
	}{
		{"two", int8Array(1, 2), 2},
		{"empty", append(int4Binary(0), make([]byte, 8)...), 0},
		{"NULL element", withNull, 1},
		{"truncated", int8Array(1, 2)[:30], -1},
		{"trailing bytes", append(int8Array(1), 0), -1},
		{"negative dimension", append(int4Binary(-1), make([]byte, 8)...), -1},
		{"huge dimension", append(append(int4Binary(1), make([]byte, 8)...), 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1), -1},
		{"short", []byte{0, 0}, -1},
	} {
		n := 0
		ok := eachBinaryElement(tc.in, func([]byte) bool { n++; return true })
		if tc.want < 0 {
			if ok {
				t.Errorf("%s: parsed %d elements, want malformed", tc.name, n)
			}
			continue
		}
		if !ok || n != tc.want {
			t.Errorf("%s: %d elements %v, want %d", tc.name, n, ok, tc.want)
		}
	}
}
