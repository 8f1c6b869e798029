package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// recursiveFunc recurses until PostgreSQL's stack depth limit: its
// ErrorResponse carries one CONTEXT line per call, about 60 KB.
const recursiveFunc = "CREATE FUNCTION r(int) RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN r($1 + 1); END$$"

// largeErrors are statements whose ErrorResponse is larger than 32 KiB.
var largeErrors = []struct {
	name, sql string
}{
	{"RAISE of 100000 bytes", "DO $$BEGIN RAISE EXCEPTION '%', repeat('x', 100000); END$$"},
	{"stack depth limit exceeded", "SELECT r(1)"},
}

// sameError fails unless got is the error want is, as a client reads it:
// severity, SQLSTATE, message, detail, hint, and the first line of the
// context.
func sameError(t testing.TB, what string, got, want error) {
	t.Helper()
	g, w := pgErr(got), pgErr(want)
	if w == nil {
		t.Fatalf("%s: direct answer is %v, not a PostgreSQL error", what, want)
	}
	if g == nil {
		t.Fatalf("%s: got %s, want %s", what, errText(got), errText(want))
	}
	firstLine := func(s string) string { return strings.SplitN(s, "\n", 2)[0] }
	type fields struct{ Severity, Code, Message, Detail, Hint, Where string }
	gf := fields{g.Severity, g.Code, g.Message, g.Detail, g.Hint, firstLine(g.Where)}
	wf := fields{w.Severity, w.Code, w.Message, w.Detail, w.Hint, firstLine(w.Where)}
	if gf != wf {
		t.Fatalf("%s:\n got  %s\n want %s (as direct)", what, describePgErr(g), describePgErr(w))
	}
	if (g.Where == "") != (w.Where == "") {
		t.Fatalf("%s: context of %d bytes, want %d (as direct)", what, len(g.Where), len(w.Where))
	}
}

func describePgErr(e *pgconn.PgError) string {
	return fmt.Sprintf("%s %s message %q detail %q hint %q context %q (%d bytes)",
		e.Severity, e.Code, abbrev(e.Message, 60), e.Detail, e.Hint, abbrev(e.Where, 60), len(e.Where))
}

// TestIsoLargeErrors: an ErrorResponse larger than 32 KiB reaches the client
// exactly as PostgreSQL sent it; the client stays connected, a transaction
// is only aborted, and session state survives.
func TestIsoLargeErrors(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	ctx := context.Background()
	if err := cl.Exec(ctx, "app", recursiveFunc); err != nil {
		t.Fatal(err)
	}
	direct := simpleConn(t, cl.DSN("app"))
	def := directDefaults(t, cl, "app", "work_mem")
	for _, poolMode := range []string{"session", "transaction"} {
		t.Run(poolMode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, poolMode, 2, "app"))
			for _, le := range largeErrors {
				for _, mode := range execModes {
					t.Run(le.name+"/"+mode.String(), func(t *testing.T) {
						want := tryExec(direct, mode, le.sql)
						c := connect(t, p.AppURL("app"))
						execIn(t, c, mode, "SET work_mem = '7MB'")

						sameError(t, le.sql, tryExec(c, mode, le.sql), want)
						checkRow(t, "SELECT 1 after the error", row(t, c, mode, "SELECT 1"), "1")
						checkRow(t, "work_mem set before the error", row(t, c, mode, "SHOW work_mem"), "7MB")

						execIn(t, c, mode, "BEGIN")
						sameError(t, le.sql+" in a transaction", tryExec(c, mode, le.sql), want)
						if got := c.PgConn().TxStatus(); got != 'E' {
							t.Fatalf("transaction status after the error: %c, want E", got)
						}
						if err := tryExec(c, mode, "SELECT 1"); sqlstate(err) != wire.InFailedSQLTransaction {
							t.Fatalf("SELECT 1 in the aborted transaction: %s, want 25P02", errText(err))
						}
						execIn(t, c, mode, "ROLLBACK")
						if got := c.PgConn().TxStatus(); got != 'I' {
							t.Fatalf("transaction status after ROLLBACK: %c, want I", got)
						}
						checkRow(t, "work_mem after ROLLBACK", row(t, c, mode, "SHOW work_mem"), "7MB")
						c.Close(ctx)

						// Nothing of the failed client reaches the next one.
						n := connect(t, p.AppURL("app"))
						checkRow(t, "next client's work_mem", row(t, n, mode, "SHOW work_mem"), def["work_mem"])
					})
				}
			}
		})
	}
}

// TestIsoLargeErrorSimpleQuery: a large error in a multi-statement simple
// Query ends that Query as with PostgreSQL: the statements before it ran,
// those after it did not.
func TestIsoLargeErrorSimpleQuery(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	ctx := context.Background()
	if err := cl.Exec(ctx, "app", recursiveFunc); err != nil {
		t.Fatal(err)
	}
	direct := simpleConn(t, cl.DSN("app"))
	for _, poolMode := range []string{"session", "transaction"} {
		t.Run(poolMode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, poolMode, 1, "app"))
			c := simpleConn(t, p.AppURL("app"))
			for _, le := range largeErrors {
				q := "SET work_mem = '6MB'; " + le.sql + "; SET work_mem = '9MB'"
				_, werr := direct.PgConn().Exec(ctx, q).ReadAll()
				_, gerr := c.PgConn().Exec(ctx, q).ReadAll()
				sameError(t, q, gerr, werr)
				checkRow(t, "work_mem after "+le.name, row(t, c, simple, "SHOW work_mem"), value(t, direct, simple, "SHOW work_mem"))
			}
		})
	}
}
