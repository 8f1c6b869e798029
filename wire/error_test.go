package wire

import (
	"bytes"
	"testing"
)

// TestParseErrorRoutine parses the ErrorResponse PostgreSQL 15 sends when a
// prepared statement's result type changed: its fields are in the order the
// server sends them, and the ones wire does not keep (F, L) are skipped.
func TestParseErrorRoutine(t *testing.T) {
	body := []byte("SERROR\x00VERROR\x00C0A000\x00Mcached plan must not change result type\x00" +
		"Fplancache.c\x00L722\x00RRevalidateCachedQuery\x00\x00")
	got := ParseError(body)
	want := Error{Severity: "ERROR", Code: FeatureNotSupported, Message: "cached plan must not change result type", Routine: "RevalidateCachedQuery"}
	if *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
	}
}

// TestAppendErrorBytes pins the bytes of a proxy-made ErrorResponse, and
// checks that Routine, which only servers set, is never sent.
func TestAppendErrorBytes(t *testing.T) {
	e := &Error{Severity: "FATAL", Code: TooManyConnections, Message: "too many", Detail: "d", Hint: "h"}
	want := []byte("E\x00\x00\x00\x2aSFATAL\x00VFATAL\x00C53300\x00Mtoo many\x00Dd\x00Hh\x00\x00")
	if got := AppendError(nil, e); !bytes.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	withRoutine := *e
	withRoutine.Routine = "ProcessStartupPacket"
	if got := AppendError(nil, &withRoutine); !bytes.Equal(got, want) {
		t.Fatalf("with a Routine: got %q, want %q", got, want)
	}
}
