package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// TestParseErrorFields parses the ErrorResponse PostgreSQL 15 sends when a
// prepared statement's result type changed: Routine is kept for
// classification, and every field reaches More in the server's order.
func TestParseErrorFields(t *testing.T) {
	body := []byte("SERROR\x00VERROR\x00C0A000\x00Mcached plan must not change result type\x00" +
		"Fplancache.c\x00L722\x00RRevalidateCachedQuery\x00\x00")
	got := ParseError(body)
	want := &Error{Severity: "ERROR", LocalSeverity: "ERROR", localOf: "ERROR", Code: FeatureNotSupported, Message: "cached plan must not change result type", Routine: "RevalidateCachedQuery",
		More: []ErrorField{{'F', "plancache.c"}, {'L', "722"}, {'R', "RevalidateCachedQuery"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", *got, *want)
	}
}

// TestAppendErrorBytes pins the bytes of a proxy-made ErrorResponse, and
// checks that a server's error is re-encoded with all its fields.
func TestAppendErrorBytes(t *testing.T) {
	e := &Error{Severity: "FATAL", Code: TooManyConnections, Message: "too many", Detail: "d", Hint: "h"}
	want := []byte("E\x00\x00\x00\x2aSFATAL\x00VFATAL\x00C53300\x00Mtoo many\x00Dd\x00Hh\x00\x00")
	if got := AppendError(nil, e); !bytes.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	server := []byte("SERROR\x00VERROR\x0023505\x00Mduplicate key\x00Dk\x00P7\x00spublic\x00tkv\x00nkv_pkey\x00Fnbtinsert.c\x00L664\x00R_bt_check_unique\x00\x00")
	server = bytes.Replace(server, []byte("\x0023505"), []byte("\x00C23505"), 1)
	got := AppendError(nil, ParseError(server))
	if !bytes.Equal(got[5:], server) {
		t.Fatalf("re-encoded %q, want %q", got[5:], server)
	}
	// With lc_messages = 'de_DE', PostgreSQL translates 'S' and not 'V':
	// the re-encoded error keeps both as they were.
	german := []byte("SFEHLER\x00VERROR\x00C42P01\x00MRelation \xc2\xbbt\xc2\xab existiert nicht\x00P15\x00Fparse_relation.c\x00L1392\x00RparserOpenTable\x00\x00")
	parsed := ParseError(german)
	if parsed.Severity != "ERROR" || parsed.LocalSeverity != "FEHLER" {
		t.Fatalf("severity %q, local %q, want ERROR and FEHLER", parsed.Severity, parsed.LocalSeverity)
	}
	if got := AppendError(nil, parsed); !bytes.Equal(got[5:], german) {
		t.Fatalf("re-encoded %q, want %q", got[5:], german)
	}
	// An error the proxy makes FATAL (it ends the session) is no longer
	// what FEHLER translated: both fields say FATAL.
	parsed.Severity = "FATAL"
	if got := AppendError(nil, parsed); !bytes.HasPrefix(got[5:], []byte("SFATAL\x00VFATAL\x00")) {
		t.Fatalf("re-encoded as FATAL: %q", got[5:])
	}
}

func TestAsError(t *testing.T) {
	direct := Errorf(UndefinedTable, "relation \"t\" does not exist")
	for _, c := range []struct {
		name string
		err  error
		want *Error
	}{
		{"nil", nil, nil},
		{"direct", direct, direct},
		{"wrapped", fmt.Errorf("shard 1: %w", direct), direct},
		{"other", errors.New("broken pipe"), nil},
	} {
		e, ok := AsError(c.err)
		if e != c.want || ok != (c.want != nil) {
			t.Errorf("%s: AsError = %v, %t; want %v, %t", c.name, e, ok, c.want, c.want != nil)
		}
	}
	// The hot paths check every exchange's error: nil and an *Error
	// itself must not allocate.
	var err error = direct
	if n := testing.AllocsPerRun(100, func() { AsError(nil); AsError(err) }); n != 0 {
		t.Errorf("AsError allocates %.0f times per call on nil and *Error", n)
	}
}
