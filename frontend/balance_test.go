package frontend

import (
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestIsReadOnlyBegin(t *testing.T) {
	for sql, want := range map[string]bool{
		"BEGIN READ ONLY":                                  true,
		"begin transaction read only":                      true,
		"START TRANSACTION READ ONLY":                      true,
		"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY": true,
		"BEGIN":            false,
		"BEGIN READ WRITE": false,
		"BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY": false,
		"BEGIN READ ONLY; INSERT INTO t VALUES (1)":    false,
		"COMMIT": false,
	} {
		if got := isReadOnlyBegin(sql); got != want {
			t.Errorf("isReadOnlyBegin(%q) = %v, want %v", sql, got, want)
		}
	}
}

func TestExtendedSQL(t *testing.T) {
	c := &client{stmts: map[string]*stmt{}}
	parse := []byte("s1\x00SELECT 1\x00\x00\x00")
	if sql, ok := c.extendedSQL('P', parse); !ok || sql != "SELECT 1" {
		t.Fatalf("Parse: %q %v", sql, ok)
	}
	msg := wire.FinishMessage(append([]byte{'P', 0, 0, 0, 0}, parse...), 0)
	c.stmts["s1"] = &stmt{name: "sg_1", parse: msg}
	if sql, ok := c.extendedSQL('B', []byte("\x00s1\x00\x00\x00\x00\x00\x00\x00")); !ok || sql != "SELECT 1" {
		t.Fatalf("Bind of a named statement: %q %v", sql, ok)
	}
	c.unnamed = []byte("\x00SELECT 2\x00\x00\x00")
	if sql, ok := c.extendedSQL('B', []byte("\x00\x00\x00\x00\x00\x00\x00\x00")); !ok || sql != "SELECT 2" {
		t.Fatalf("Bind of the unnamed statement: %q %v", sql, ok)
	}
	if _, ok := c.extendedSQL('B', []byte("\x00nope\x00\x00\x00")); ok {
		t.Fatal("Bind of an unknown statement gave a text")
	}
	if _, ok := c.extendedSQL('E', []byte("\x00\x00\x00\x00\x00")); ok {
		t.Fatal("Execute gave a text")
	}
}
