package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The batch runners of the differential harness run each statement of a
// script together with a second one in one batch, the two ways drivers
// batch: a pipeline of extended-protocol messages with one Sync (pgx's
// SendBatch, JDBC's executeBatch, node-postgres' pipelining) and a simple
// Query holding several statements (psql -c, Rails, many ORMs' migration
// runners). One batch is one implicit transaction, so these runners are
// where an answer that depends on which statements share the batch shows.
//
// A statement that reads (SELECT, VALUES, TABLE, WITH … SELECT) runs twice in
// its batch, the second time from a named statement, described before it is
// bound, with every result column in binary: two merges in one batch, the
// second over a statement the proxy has to keep. Any other statement is
// followed by SELECT 1, so that it is never the batch's last and what it
// leaves (a transaction begun, ended or aborted) is what the next statement
// of the batch sees; it runs once, so that the script's later statements
// see what it wrote, as in the other runners.

// diffBatchRunners are the pipeline and multi-statement runners.
func diffBatchRunners() []diffRunner {
	return []diffRunner{
		{name: "pipeline", run: func(t testing.TB, url string, stmts []string, between func()) []stmtResult {
			return runWireStmts(t, url, stmts, between, pipelineStmt)
		}},
		{name: "multi-statement Query", run: func(t testing.TB, url string, stmts []string, between func()) []stmtResult {
			return runWireStmts(t, url, stmts, between, multiStmt)
		}},
	}
}

// runWireStmts runs each statement with run on one raw protocol
// connection, between after each, until run reports the connection
// unusable.
func runWireStmts(t testing.TB, url string, stmts []string, between func(), run func(*wireConn, string) (stmtResult, bool)) []stmtResult {
	t.Helper()
	w := dialWire(t, url)
	defer w.close()
	var out []stmtResult
	for _, sql := range stmts {
		r, ok := run(w, sql)
		out = append(out, r)
		if !ok {
			break
		}
		if between != nil {
			between()
		}
	}
	return out
}

// readsOnly matches a statement the batch runners run twice.
var readsOnly = regexp.MustCompile(`(?is)^\s*(select|values|table|with)\b`)

// writesIn matches what makes a statement that starts like a read write or
// lock something.
var writesIn = regexp.MustCompile(`(?i)\b(insert|update|delete|merge|into|for\s+(update|share|no\s+key|key))\b|nextval|setval|pg_advisory|set_config|pg_sleep`)

// twice reports whether sql runs twice in its batch.
func twice(sql string) bool {
	return readsOnly.MatchString(sql) && !writesIn.MatchString(sql) && !strings.Contains(strings.TrimRight(strings.TrimSpace(sql), ";"), ";")
}

// batchResult gathers the answers of one batch as one stmtResult: each
// result's tag, fields and rows, in order, results apart by "--".
type batchResult struct {
	r       stmtResult
	n       int
	formats []int16
}

func (b *batchResult) next() {
	if b.n > 0 {
		b.r.Fields = append(b.r.Fields, "--")
		b.r.Rows = append(b.r.Rows, "--")
	}
	b.n++
	b.formats = nil
}

// take records m; done is true at ReadyForQuery, fatal when the connection
// ends.
func (b *batchResult) take(m pgproto3.BackendMessage) (done, fatal bool) {
	switch m := m.(type) {
	case *pgproto3.ParseComplete:
		// Where an error comes in the batch: PostgreSQL fails a Parse
		// whose names do not resolve, before any Bind.
		b.r.Fields = append(b.r.Fields, "(parsed)")
	case *pgproto3.BindComplete:
		b.r.Fields = append(b.r.Fields, "(bound)")
	case *pgproto3.ParameterDescription:
	case *pgproto3.NoData:
		// A Describe's answer: drivers pair it with the statement it
		// describes, so a missing or extra one shifts every later answer.
		b.r.Fields = append(b.r.Fields, "(no data)")
	case *pgproto3.RowDescription:
		for _, f := range m.Fields {
			b.r.Fields = append(b.r.Fields, diffField(string(f.Name), f.DataTypeOID, f.TypeModifier, f.Format))
			b.formats = append(b.formats, f.Format)
		}
	case *pgproto3.DataRow:
		b.r.Rows = append(b.r.Rows, diffRow(m.Values, b.formats))
	case *pgproto3.CommandComplete:
		b.r.Tag = strings.TrimPrefix(b.r.Tag+"; "+string(m.CommandTag), "; ")
		b.next()
	case *pgproto3.EmptyQueryResponse:
		b.r.Tag = strings.TrimPrefix(b.r.Tag+"; (empty)", "; ")
		b.next()
	case *pgproto3.PortalSuspended:
		b.r.Tag = strings.TrimPrefix(b.r.Tag+"; (suspended)", "; ")
		b.next()
	case *pgproto3.ErrorResponse:
		if b.r.Err == "" {
			b.r.Err = diffErr(m.Severity, m.Code, m.Message, m.Detail, m.Hint)
		} else {
			b.r.Err += "; then " + diffErr(m.Severity, m.Code, m.Message, m.Detail, m.Hint)
		}
		return false, m.Severity == "FATAL" || m.Severity == "PANIC"
	case *pgproto3.CopyInResponse:
		// The harness's scripts run COPY … FROM STDIN in the runners of
		// client libraries; here the batch cannot go on, as a driver's
		// could not: fail the copy.
		b.r.Tag = strings.TrimPrefix(b.r.Tag+"; (copy in)", "; ")
	case *pgproto3.ReadyForQuery:
		b.r.Tx = string(m.TxStatus)
		return true, false
	}
	return false, false
}

// readBatch reads the answers to one batch up to its ReadyForQuery.
func readBatch(w *wireConn, onCopy func() error) (stmtResult, bool) {
	var b batchResult
	w.hc.Conn.SetReadDeadline(time.Now().Add(stepTimeout))
	defer w.hc.Conn.SetReadDeadline(time.Time{})
	for {
		m, err := w.fe.Receive()
		if err != nil {
			b.r.Err += "read error: " + readErr(err)
			return b.r, false
		}
		done, fatal := b.take(m)
		if fatal {
			return b.r, false
		}
		if done {
			return b.r, true
		}
		if _, ok := m.(*pgproto3.CopyInResponse); ok {
			if err := onCopy(); err != nil {
				b.r.Err += "write error: " + err.Error()
				return b.r, false
			}
		}
	}
}

// pipelineStmt runs sql in a pipeline with one Sync.
func pipelineStmt(w *wireConn, sql string) (stmtResult, bool) {
	w.fe.Send(parseMsg("", sql))
	w.fe.Send(bindMsg(""))
	w.fe.Send(&pgproto3.Describe{ObjectType: 'P'})
	w.fe.Send(execMsg(0))
	if twice(sql) {
		w.fe.Send(parseMsg("sg_batch", sql))
		w.fe.Send(&pgproto3.Describe{ObjectType: 'S', Name: "sg_batch"})
		w.fe.Send(&pgproto3.Bind{PreparedStatement: "sg_batch", ResultFormatCodes: []int16{1}})
		w.fe.Send(&pgproto3.Describe{ObjectType: 'P'})
		w.fe.Send(execMsg(0))
		w.fe.Send(&pgproto3.Close{ObjectType: 'S', Name: "sg_batch"})
	} else {
		w.fe.Send(parseMsg("", "SELECT 1"))
		w.fe.Send(bindMsg(""))
		w.fe.Send(execMsg(0))
	}
	w.fe.Send(syncMsg)
	if err := w.fe.Flush(); err != nil {
		return stmtResult{Err: "write error: " + err.Error()}, false
	}
	return readBatch(w, func() error {
		w.fe.Send(&pgproto3.CopyFail{Message: "the pipeline runner sends no COPY data"})
		return w.fe.Flush()
	})
}

// multiStmt runs sql in a simple Query with a second statement.
func multiStmt(w *wireConn, sql string) (stmtResult, bool) {
	q := strings.TrimRight(strings.TrimSpace(sql), ";")
	if twice(sql) {
		q = fmt.Sprintf("%s\n;%s", q, q)
	} else {
		q += "\n; SELECT 1"
	}
	w.fe.Send(queryMsg(q))
	if err := w.fe.Flush(); err != nil {
		return stmtResult{Err: "write error: " + err.Error()}, false
	}
	return readBatch(w, func() error {
		w.fe.Send(&pgproto3.CopyFail{Message: "the multi-statement runner sends no COPY data"})
		return w.fe.Flush()
	})
}
