// Command gencodes writes wire/codes_gen.go, one constant per SQLSTATE of
// PostgreSQL's errcodes.txt (embedded from this directory), and lists the
// SQLSTATE string literals left in Go code.
//
// Usage:
//
//	go run ./internal/gencodes [-o codes_gen.go]    (go generate ./wire runs this)
//	go run ./wire/internal/gencodes -literals DIR…  (from the module root)
//
// A constant is named by CamelCasing PostgreSQL's condition name (the
// PL/pgSQL name, errcodes.txt's last column): each word gets an upper-case
// first letter, and the acronyms in the acronyms table are spelled the Go
// way, so invalid_sql_statement_name is InvalidSQLStatementName and
// invalid_sqlstate_returned is InvalidSQLStateReturned.
//
// Condition names are unique except in four classes that reuse names of
// other classes (string_data_right_truncation is 01004 and 22001,
// modifying_sql_data_not_permitted 2F002 and 38002, null_value_not_allowed
// 22004 and 39004, …). As PostgreSQL's own C macros do (ERRCODE_WARNING_…,
// ERRCODE_S_R_E_…, ERRCODE_E_R_E_…, ERRCODE_E_R_I_E_…), every code of these
// classes is prefixed by its class name, spelled out: Warning (01),
// SQLRoutine (2F), ExternalRoutine (38) and ExternalRoutineInvocation (39).
// A name that already starts with its prefix (the class's own 000 code, such
// as Warning or SQLRoutineException) is left alone. Prefixing whole classes
// rather than the colliding names only keeps the names stable when a later
// PostgreSQL adds a collision, and keeps every warning spelled Warning…. All
// other classes keep the plain name, so 22001 is StringDataRightTruncation
// and 01004 WarningStringDataRightTruncation.
//
// Lines without a condition name (ERRCODE_UNDEFINED_CURSOR and the like)
// are C aliases of codes that have one, so they get no constant of their
// own. The generator fails if two codes end up with one name or a code has
// no condition name at all: a new errcodes.txt that does that needs a
// decision here, not a guess.
//
// With -literals, gencodes walks the directories given, parses their Go
// files (tests included, generated files skipped) and prints, for each
// string literal that is exactly a known SQLSTATE, its position, the
// literal and the constant that replaces it:
//
//	frontend/query.go:42:17: "25P02" wire.InFailedSQLTransaction
//
// A listed literal may be data rather than a code (a five-digit number in
// a test, say); the tool finds them, a reader decides.
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
)

// errcodesTxt is PostgreSQL's errcodes.txt with a header naming its version.
//
//go:embed errcodes.txt
var errcodesTxt []byte

func main() {
	out := flag.String("o", "codes_gen.go", "file to write the constants to")
	literals := flag.Bool("literals", false, "list the SQLSTATE string literals in the directories given as arguments instead")
	flag.Parse()
	t, err := parseTable(errcodesTxt)
	if err != nil {
		fail(err)
	}
	if *literals {
		if flag.NArg() == 0 {
			fail(fmt.Errorf("-literals needs at least one directory"))
		}
		if err := listLiterals(os.Stdout, t, flag.Args()); err != nil {
			fail(err)
		}
		return
	}
	src, err := t.generate()
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gencodes:", err)
	os.Exit(1)
}
