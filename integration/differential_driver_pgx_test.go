package integration

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The pgx runners of the differential harness: every pgx exec mode, and a
// row-limited Execute path written on pgproto3 (the way JDBC runs a
// statement with a fetch size). They see the wire protocol's messages
// themselves, so they compare every RowDescription field's name, type OID,
// typmod and format code, and every value's bytes as received.

// diffPgxRunners are every pgx exec mode and the row-limited path.
func diffPgxRunners() []diffRunner {
	var out []diffRunner
	for _, mode := range execModes {
		out = append(out, diffRunner{name: mode.String(), run: func(t testing.TB, url string, stmts []string, between func()) []stmtResult {
			return runPgxScript(t, url, mode, stmts, between)
		}})
	}
	return append(out, diffRunner{name: "row-limited Execute", run: runFetchScript})
}

// diffField is a RowDescription field as the harness compares it: name,
// type OID, typmod and format code. (The table OID and column number are
// left out: they differ between databases by nature.)
func diffField(name string, oid uint32, typmod int32, format int16) string {
	return fmt.Sprintf("%s:%d:%d:%d", name, oid, typmod, format)
}

// diffRow renders a row's values exactly as they arrived: NULL, a
// text-format value quoted, a binary-format value in hex.
func diffRow(values [][]byte, formats []int16) string {
	cells := make([]string, len(values))
	for i, v := range values {
		switch {
		case v == nil:
			cells[i] = "NULL"
		case i < len(formats) && formats[i] == pgx.BinaryFormatCode:
			cells[i] = `\x` + hex.EncodeToString(v)
		default:
			cells[i] = strconv.Quote(string(v))
		}
	}
	return strings.Join(cells, "|")
}

// pgFields renders pgconn's field descriptions and returns their formats.
func pgFields(fds []pgconn.FieldDescription) (fields []string, formats []int16) {
	for _, f := range fds {
		fields = append(fields, diffField(f.Name, f.DataTypeOID, f.TypeModifier, f.Format))
		formats = append(formats, f.Format)
	}
	return fields, formats
}

func runPgxScript(t testing.TB, url string, mode pgx.QueryExecMode, stmts []string, between func()) []stmtResult {
	t.Helper()
	conn, err := tryConnect(url, mode, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var out []stmtResult
	for _, sql := range stmts {
		out = append(out, pgxStmt(conn, mode, sql))
		if conn.IsClosed() {
			break
		}
		if between != nil {
			between()
		}
	}
	return out
}

func pgxStmt(conn *pgx.Conn, mode pgx.QueryExecMode, sql string) stmtResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if mode == pgx.QueryExecModeSimpleProtocol {
		return simpleStmt(ctx, conn, sql)
	}
	var r stmtResult
	rows, err := conn.Query(ctx, sql, mode)
	if err == nil {
		var formats []int16
		r.Fields, formats = pgFields(rows.FieldDescriptions())
		for rows.Next() {
			r.Rows = append(r.Rows, diffRow(rows.RawValues(), formats))
		}
		rows.Close()
		err = rows.Err()
		r.Tag = rows.CommandTag().String()
	}
	if err != nil {
		r.Err = errKey(err)
		r.Tag = ""
	}
	r.Tx = string(conn.PgConn().TxStatus())
	return r
}

// simpleStmt sends sql in a Query message as it is (pgx's simple protocol
// mode would take $1 in PREPARE … AS … $1 for a placeholder of its own) and
// reads the last result's rows.
func simpleStmt(ctx context.Context, conn *pgx.Conn, sql string) stmtResult {
	var r stmtResult
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		r.Err = errKey(err)
	} else if len(results) > 0 {
		res := results[len(results)-1]
		var formats []int16
		r.Fields, formats = pgFields(res.FieldDescriptions)
		for _, row := range res.Rows {
			r.Rows = append(r.Rows, diffRow(row, formats))
		}
		r.Tag = res.CommandTag.String()
	}
	r.Tx = string(conn.PgConn().TxStatus())
	return r
}

// runFetchScript runs each statement as JDBC does with a fetch size of 1:
// Parse, Bind, Describe portal, Execute(1), Flush; Execute(1) again while
// the portal is suspended; then Sync.
func runFetchScript(t testing.TB, url string, stmts []string, between func()) []stmtResult {
	t.Helper()
	return runWireStmts(t, url, stmts, between, fetchStmt)
}

// maxFetches bounds the Execute messages of one statement.
const maxFetches = 100

// fetchStmt runs one statement on w; ok is false once the connection is
// unusable.
func fetchStmt(w *wireConn, sql string) (r stmtResult, ok bool) {
	send := func(msgs ...pgproto3.FrontendMessage) bool {
		for _, m := range msgs {
			w.fe.Send(m)
		}
		if err := w.fe.Flush(); err != nil {
			r.Err = "write error: " + err.Error()
			return false
		}
		return true
	}
	if !send(parseMsg("", sql), bindMsg(""), &pgproto3.Describe{ObjectType: 'P'}, execMsg(1), flushMsg) {
		return r, false
	}
	w.hc.Conn.SetReadDeadline(time.Now().Add(stepTimeout))
	defer w.hc.Conn.SetReadDeadline(time.Time{})
	synced := false
	suspended := 0
	var formats []int16
	for {
		m, err := w.fe.Receive()
		if err != nil {
			r.Err += "read error: " + readErr(err)
			return r, false
		}
		switch m := m.(type) {
		case *pgproto3.RowDescription:
			for _, f := range m.Fields {
				r.Fields = append(r.Fields, diffField(string(f.Name), f.DataTypeOID, f.TypeModifier, f.Format))
				formats = append(formats, f.Format)
			}
		case *pgproto3.DataRow:
			r.Rows = append(r.Rows, diffRow(m.Values, formats))
		case *pgproto3.PortalSuspended:
			// No script statement returns this many rows.
			if suspended++; suspended > maxFetches {
				r.Err += fmt.Sprintf("more than %d PortalSuspended", maxFetches)
				return r, false
			}
			if !send(execMsg(1), flushMsg) {
				return r, false
			}
		case *pgproto3.CommandComplete:
			r.Tag = string(m.CommandTag)
		case *pgproto3.ErrorResponse:
			r.Err = diffErr(m.Severity, m.Code, m.Message, m.Detail, m.Hint)
			if m.Severity == "FATAL" || m.Severity == "PANIC" {
				return r, false
			}
		case *pgproto3.ReadyForQuery:
			r.Tx = string(m.TxStatus)
			return r, true
		}
		switch m.(type) {
		case *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.ErrorResponse:
			if !synced {
				synced = true
				if !send(syncMsg) {
					return r, false
				}
			}
		}
	}
}
