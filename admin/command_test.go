package admin

import (
	"slices"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestAdminParse(t *testing.T) {
	tests := []struct {
		name  string
		sql   string
		words []string // nil: no command (empty)
		args  []string
		code  string // SQLSTATE of the error, "" for none
	}{
		{name: "show pools", sql: "SHOW POOLS", words: []string{"SHOW", "POOLS"}},
		{name: "lower case and semicolon", sql: "  show pools ; ", words: []string{"SHOW", "POOLS"}},
		{name: "mixed case", sql: "Show Clients;", words: []string{"SHOW", "CLIENTS"}},
		{name: "pause all", sql: "pause", words: []string{"PAUSE"}},
		{name: "pause db", sql: "PAUSE app;", words: []string{"PAUSE"}, args: []string{"app"}},
		{name: "quoted db", sql: `RESUME "my db"`, words: []string{"RESUME"}, args: []string{"my db"}},
		{name: "maintenance", sql: "maintenance on app", words: []string{"MAINTENANCE"}, args: []string{"on", "app"}},
		{name: "set equals", sql: "SET pool_size=5", words: []string{"SET"}, args: []string{"pool_size", "=", "5"}},
		{name: "set to quoted", sql: "SET checkout_timeout TO '1.5s'", words: []string{"SET"}, args: []string{"checkout_timeout", "TO", "1.5s"}},
		{name: "quote escape", sql: "KILL 'a''b'", words: []string{"KILL"}, args: []string{"a'b"}},
		{name: "empty", sql: " ; ", words: nil},
		{name: "unknown", sql: "SELECT 1", code: wire.SyntaxError},
		{name: "show unknown", sql: "SHOW TABLES", code: wire.SyntaxError},
		{name: "quoted keyword", sql: "'SHOW' POOLS", code: wire.SyntaxError},
		{name: "too many args", sql: "PAUSE a b", code: wire.SyntaxError},
		{name: "missing arg", sql: "KILL", code: wire.SyntaxError},
		{name: "two statements", sql: "SHOW POOLS; SHOW CLIENTS", code: wire.SyntaxError},
		{name: "unterminated", sql: "PAUSE 'app", code: wire.SyntaxError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := parse(tc.sql)
			if tc.code != "" {
				e, ok := wire.AsError(err)
				if !ok || e.Code != tc.code {
					t.Fatalf("parse(%q) = %v, %v; want SQLSTATE %s", tc.sql, x, err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tc.sql, err)
			}
			if tc.words == nil {
				if x != nil {
					t.Fatalf("parse(%q) = %v, want no command", tc.sql, x.spec.words)
				}
				return
			}
			if x == nil || !slices.Equal(x.spec.words, tc.words) || !slices.Equal(x.args, tc.args) {
				t.Fatalf("parse(%q) = %+v, want %v %v", tc.sql, x, tc.words, tc.args)
			}
		})
	}
}

func TestAdminUnknownCommandHint(t *testing.T) {
	_, err := parse("FROB")
	e, _ := wire.AsError(err)
	if e == nil {
		t.Fatal("no error")
	}
	for _, s := range specs {
		if !strings.Contains(e.Hint, s.usage) {
			t.Errorf("hint %q lacks %q", e.Hint, s.usage)
		}
	}
}

func TestAdminEncode(t *testing.T) {
	tests := []struct {
		typ    colType
		format int16
		in     string
		want   []byte
	}{
		{colText, wire.FormatText, "abc", []byte("abc")},
		{colText, wire.FormatBinary, "abc", []byte("abc")},
		{colInt, wire.FormatText, "42", []byte("42")},
		{colInt, wire.FormatBinary, "258", []byte{0, 0, 0, 0, 0, 0, 1, 2}},
		{colBool, wire.FormatBinary, "t", []byte{1}},
		{colBool, wire.FormatBinary, "f", []byte{0}},
		{colBool, wire.FormatText, "t", []byte("t")},
	}
	for _, tc := range tests {
		if got := encode(tc.typ, tc.format, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("encode(%d, %d, %q) = %v, want %v", tc.typ, tc.format, tc.in, got, tc.want)
		}
	}
}
