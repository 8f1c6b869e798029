package integration

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// wireConn is a raw protocol connection, to PostgreSQL directly or through the
// proxy, that sends message sequences and reads the answers as text.
type wireConn struct {
	t  testing.TB
	hc *pgconn.HijackedConn
	fe *pgproto3.Frontend
}

func dialWire(t testing.TB, url string) *wireConn {
	t.Helper()
	hc := hijack(t, url)
	return &wireConn{t: t, hc: hc, fe: hc.Frontend}
}

func (w *wireConn) close() { w.hc.Conn.Close() }

// wireStep is one write of messages and the answers to read for it: n
// messages if n > 0, else up to the first ErrorResponse if toErr, else up to
// the zs-th ReadyForQuery.
type wireStep struct {
	send  []pgproto3.FrontendMessage
	n     int
	toErr bool
	zs    int
}

// stepTimeout bounds the wait for one step's answers.
const stepTimeout = 5 * time.Second

// run sends each step's messages in one write and reads its answers. A read
// that fails ends the step with a "read error" entry rather than the test,
// so that callers can compare what arrived with what should have.
func (w *wireConn) run(steps []wireStep, between func(i int)) [][]string {
	w.t.Helper()
	var out [][]string
	for i, st := range steps {
		for _, m := range st.send {
			w.fe.Send(m)
		}
		if err := w.fe.Flush(); err != nil {
			out = append(out, []string{"write error: " + err.Error()})
			return out
		}
		out = append(out, w.read(st))
		if between != nil {
			between(i)
		}
	}
	return out
}

func (w *wireConn) read(st wireStep) []string {
	w.hc.Conn.SetReadDeadline(time.Now().Add(stepTimeout))
	defer w.hc.Conn.SetReadDeadline(time.Time{})
	var got []string
	zs := 0
	for {
		m, err := w.fe.Receive()
		if err != nil {
			return append(got, "read error: "+readErr(err))
		}
		got = append(got, fullMsg(m))
		switch {
		case st.n > 0:
			if len(got) == st.n {
				return got
			}
		case st.toErr:
			if _, ok := m.(*pgproto3.ErrorResponse); ok {
				return got
			}
		default:
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				if zs++; zs >= st.zs {
					return got
				}
			}
		}
	}
}

// readErr names the end of a connection as a client sees it.
func readErr(err error) string {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("nothing within %s", stepTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return err.Error()
}

// fullMsg renders a backend message with every field a client acts on.
func fullMsg(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.ErrorResponse:
		return fmt.Sprintf("E(%s %s %q detail %q)", m.Severity, m.Code, m.Message, m.Detail)
	case *pgproto3.NoticeResponse:
		return fmt.Sprintf("N(%s %s %q)", m.Severity, m.Code, m.Message)
	case *pgproto3.RowDescription:
		var f []string
		for _, fd := range m.Fields {
			f = append(f, fmt.Sprintf("%s:%d", fd.Name, fd.DataTypeOID))
		}
		return "T(" + strings.Join(f, ",") + ")"
	case *pgproto3.ParameterStatus:
		return fmt.Sprintf("S(%s=%s)", m.Name, m.Value)
	case *pgproto3.NotificationResponse:
		return fmt.Sprintf("A(%s,%s)", m.Channel, m.Payload)
	case *pgproto3.CopyInResponse:
		return "G"
	}
	return shortMsg(m)
}

// sameWire fails unless the proxy's answers equal PostgreSQL's, step by
// step and message by message.
func sameWire(t testing.TB, what string, steps []wireStep, got, want [][]string) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, w []string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if strings.Join(g, " ") != strings.Join(w, " ") {
			var sent []string
			if i < len(steps) {
				for _, m := range steps[i].send {
					sent = append(sent, fmt.Sprintf("%T", m))
				}
			}
			t.Fatalf("%s, step %d (sent %s):\n got  %s\n want %s (as direct)", what, i,
				strings.ReplaceAll(strings.Join(sent, " "), "*pgproto3.", ""),
				abbrev(strings.Join(g, " "), 600), abbrev(strings.Join(w, " "), 600))
		}
	}
}

// Message constructors for wire steps.
func parseMsg(name, sql string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: sql} }
func bindMsg(stmt string) *pgproto3.Bind        { return &pgproto3.Bind{PreparedStatement: stmt} }
func execMsg(maxRows uint32) *pgproto3.Execute  { return &pgproto3.Execute{MaxRows: maxRows} }
func queryMsg(sql string) *pgproto3.Query       { return &pgproto3.Query{String: sql} }

var (
	syncMsg  = &pgproto3.Sync{}
	flushMsg = &pgproto3.Flush{}
)
