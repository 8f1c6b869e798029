package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFileIsUpToDate regenerates wire/codes_gen.go in memory and
// compares it with the committed file.
func TestGeneratedFileIsUpToDate(t *testing.T) {
	tab, err := parseTable(errcodesTxt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tab.generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "codes_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("wire/codes_gen.go is out of date: run go generate ./wire")
	}
}

func TestConstName(t *testing.T) {
	tests := []struct {
		sqlstate, condition, want string
	}{
		{"42P01", "undefined_table", "UndefinedTable"},
		{"26000", "invalid_sql_statement_name", "InvalidSQLStatementName"},
		{"08001", "sqlclient_unable_to_establish_sqlconnection", "SQLClientUnableToEstablishSQLConnection"},
		{"2200L", "not_an_xml_document", "NotAnXMLDocument"},
		{"22031", "invalid_argument_for_sql_json_datetime_function", "InvalidArgumentForSQLJSONDatetimeFunction"},
		{"HV000", "fdw_error", "FDWError"},
		{"58030", "io_error", "IOError"},
		{"P0000", "plpgsql_error", "PLpgSQLError"},
		{"22001", "string_data_right_truncation", "StringDataRightTruncation"},
		{"01004", "string_data_right_truncation", "WarningStringDataRightTruncation"},
		{"01000", "warning", "Warning"},
		{"2F000", "sql_routine_exception", "SQLRoutineException"},
		{"2F002", "modifying_sql_data_not_permitted", "SQLRoutineModifyingSQLDataNotPermitted"},
		{"38002", "modifying_sql_data_not_permitted", "ExternalRoutineModifyingSQLDataNotPermitted"},
		{"39000", "external_routine_invocation_exception", "ExternalRoutineInvocationException"},
		{"39001", "invalid_sqlstate_returned", "ExternalRoutineInvocationInvalidSQLStateReturned"},
		{"39004", "null_value_not_allowed", "ExternalRoutineInvocationNullValueNotAllowed"},
	}
	for _, tc := range tests {
		t.Run(tc.sqlstate, func(t *testing.T) {
			if got := constName(tc.sqlstate, tc.condition); got != tc.want {
				t.Errorf("constName(%q, %q) = %s, want %s", tc.sqlstate, tc.condition, got, tc.want)
			}
		})
	}
}

// TestParseTableRejects checks that the generator refuses an errcodes.txt
// it would have to guess about.
func TestParseTableRejects(t *testing.T) {
	const head = "# postgresql-version: 99\nSection: Class 22 - Data Exception\n"
	tests := []struct {
		name, src, err string
	}{
		{"name collision", head + "22001 E ERRCODE_A one\n22002 E ERRCODE_B one\n", "both get the name One"},
		{"code named twice", head + "22001 E ERRCODE_A one\n22001 E ERRCODE_B two\n", "two condition names"},
		{"code without name", head + "22001 E ERRCODE_A\n", "no condition name"},
		{"no version", "Section: Class 22 - Data Exception\n22001 E ERRCODE_A one\n", "postgresql-version"},
		{"bad line", head + "2200 E ERRCODE_A one\n", "cannot parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseTable([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestListLiterals(t *testing.T) {
	tab, err := parseTable(errcodesTxt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := "package p\n\nvar (\n\ta = \"42P01\"\n\tb = \"SELECT 1\"\n\tc = `25P02`\n\td = \"12345\"\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := listLiterals(&out, tab, []string{dir}); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "p.go") + ":4:6: \"42P01\" wire.UndefinedTable\n" +
		filepath.Join(dir, "p.go") + ":6:6: `25P02` wire.InFailedSQLTransaction\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
