package frontend

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// fakeServer emulates, in memory and synchronously, the part of a
// PostgreSQL backend that the client message loop relies on: answers to
// simple and extended queries, named and unnamed statements and portals,
// skipping to Sync after an error, transaction status, COPY FROM STDIN and
// DEALLOCATE ALL / DISCARD ALL. Statement texts steer it: a text containing
// "fail" fails to parse, "execfail" fails to execute, "suspend" returns a
// row and PortalSuspended to an Execute with a row limit, "BEGIN", "COMMIT"
// and "ROLLBACK" change the transaction status, "COPY" starts a COPY FROM
// STDIN, "ROWS n" returns n rows of 100 bytes.
//
// Every write is processed at once and its answers queued, so the proxy
// can never deadlock against it; a read with nothing queued returns EOF
// (the proxy waits for an answer that the server does not owe).
type fakeServer struct {
	mu       sync.Mutex // guards the following (the proxy may write from a second goroutine)
	in       []byte     // bytes received, not yet a whole message
	out      bytes.Buffer
	stmts    map[string]string // named statements: name → text
	unnamed  []byte            // body of the Parse that made the unnamed statement; nil if none
	unnText  string
	portals  map[string]string // portal → statement text
	status   byte              // I, T or E
	skipping bool              // after an extended-protocol error, until Sync
	batch    bool              // extended-protocol messages arrived since the last Sync
	copying  bool              // in COPY FROM STDIN
	closed   bool
}

func newFakeServer() *fakeServer {
	return &fakeServer{stmts: map[string]string{}, portals: map[string]string{}, status: 'I'}
}

// server returns a pool.Server on f.
func (f *fakeServer) server() *pool.Server {
	conn := &fakeConn{r: f, w: f}
	return &pool.Server{
		Conn: conn, R: wire.NewReader(conn, 32<<10, 1<<30), W: bufio.NewWriterSize(conn, 32<<10),
		Params: map[string]string{}, Session: map[string]string{}, Prepared: map[string]struct{}{},
		Addr: "fake:5432",
	}
}

func (f *fakeServer) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out.Len() == 0 {
		return 0, io.EOF
	}
	return f.out.Read(p)
}

func (f *fakeServer) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, net.ErrClosed
	}
	f.in = append(f.in, p...)
	for len(f.in) >= 5 {
		n := int(binary.BigEndian.Uint32(f.in[1:5]))
		if n < 4 {
			f.closed = true
			return 0, io.ErrClosedPipe
		}
		if len(f.in) < 1+n {
			break
		}
		typ, body := f.in[0], bytes.Clone(f.in[5:1+n])
		f.in = f.in[1+n:]
		f.handle(typ, body)
	}
	return len(p), nil
}

func (f *fakeServer) send(typ byte, body ...[]byte) {
	msg := []byte{typ, 0, 0, 0, 0}
	for _, b := range body {
		msg = append(msg, b...)
	}
	f.out.Write(wire.FinishMessage(msg, 0))
}

func (f *fakeServer) fail(code string, extended bool) {
	f.out.Write(wire.AppendError(nil, wire.Errorf(code, "fake error")))
	if f.status == 'T' {
		f.status = 'E'
	}
	f.skipping = extended
}

func (f *fakeServer) ready() {
	f.out.Write(wire.AppendReadyForQuery(nil, f.status))
}

// complete answers a finished statement and applies its effects.
func (f *fakeServer) complete(text string, extended bool) {
	if rest, ok := strings.CutPrefix(text, "SELECT pg_current_xact_id(); "); ok {
		// A two-phase coordinator's PREPARE, after its xid.
		f.send('D', []byte{0, 1, 0, 0, 0, 2}, []byte("42"))
		f.send('C', []byte("SELECT 1\x00"))
		text = rest
	}
	switch {
	case strings.Contains(text, "execfail"):
		f.fail(wire.DivisionByZero, extended)
		return
	case f.status == 'E' && !strings.HasPrefix(text, "ROLLBACK") && !strings.HasPrefix(text, "COMMIT"):
		f.fail(wire.InFailedSQLTransaction, extended)
		return
	case strings.HasPrefix(text, "ROWS "):
		// "ROWS n": n rows of one 100-byte column.
		n, _ := strconv.Atoi(text[len("ROWS "):])
		row := append([]byte{0, 1, 0, 0, 0, 100}, bytes.Repeat([]byte{'r'}, 100)...)
		for range n {
			f.send('D', row)
		}
		f.send('C', []byte("SELECT "+strconv.Itoa(n)), []byte{0})
		return
	case strings.HasPrefix(text, "BEGIN"):
		f.status = 'T'
	case strings.HasPrefix(text, "COMMIT"), strings.HasPrefix(text, "ROLLBACK"):
		if f.status == 'E' {
			text = "ROLLBACK"
		}
		f.status = 'I'
	case text == "DEALLOCATE ALL" || text == "DISCARD ALL":
		if text == "DISCARD ALL" && f.status != 'I' {
			f.fail(wire.ActiveSQLTransaction, extended)
			return
		}
		clear(f.stmts) // not the unnamed statement (a Query drops that by itself)
	}
	tag := text
	if i := strings.IndexByte(tag, ' '); i > 0 && !strings.HasSuffix(tag, " ALL") {
		tag = tag[:i]
	}
	f.send('C', []byte(tag), []byte{0})
}

func (f *fakeServer) handle(typ byte, body []byte) {
	if f.copying {
		switch typ {
		case 'd', 'H', 'S':
		case 'c':
			f.copying = false
			f.send('C', []byte("COPY 0\x00"))
			f.ready()
		default: // CopyFail, or any other message, ends the COPY with an error
			f.copying = false
			f.fail(wire.QueryCanceled, false)
			f.ready()
		}
		return
	}
	if f.skipping && typ != 'S' {
		return
	}
	switch typ {
	case 'P', 'B', 'D', 'E', 'C':
		f.batch = true
	case 'S', 'Q', 'F':
		f.batch = false
	}
	switch typ {
	case 'Q':
		text, _, _ := wire.CString(body)
		f.unnamed, f.unnText = nil, ""
		switch {
		case len(text) == 0:
			f.send('I')
		case strings.Contains(string(text), "fail") && !strings.Contains(string(text), "execfail"):
			f.fail(wire.SyntaxError, false)
		case bytes.HasPrefix(text, []byte("COPY")):
			f.send('G', []byte{0, 0, 0})
			f.copying = true
			return
		default:
			f.complete(string(text), false)
		}
		f.ready()
	case 'P':
		name, rest, ok := wire.CString(body)
		text, _, ok2 := wire.CString(rest)
		switch {
		case !ok || !ok2:
			f.fail(wire.ProtocolViolation, true)
		case strings.Contains(string(text), "fail") && !strings.Contains(string(text), "execfail"):
			if len(name) == 0 {
				f.unnamed, f.unnText = nil, "" // PostgreSQL drops it before it parses
			}
			f.fail(wire.SyntaxError, true)
		case len(name) == 0:
			f.unnamed, f.unnText = body, string(text)
			f.send('1')
		case hasKey(f.stmts, string(name)):
			f.fail(wire.DuplicatePreparedStatement, true)
		default:
			f.stmts[string(name)] = string(text)
			f.send('1')
		}
	case 'B':
		portal, rest, _ := wire.CString(body)
		name, _, _ := wire.CString(rest)
		text, ok := f.stmts[string(name)]
		if len(name) == 0 {
			text, ok = f.unnText, f.unnamed != nil
		}
		if !ok {
			f.fail(wire.InvalidSQLStatementName, true)
			return
		}
		if f.status == 'E' && !strings.HasPrefix(text, "ROLLBACK") && !strings.HasPrefix(text, "COMMIT") {
			f.fail(wire.InFailedSQLTransaction, true)
			return
		}
		f.portals[string(portal)] = text
		f.send('2')
	case 'D':
		if len(body) < 2 || body[0] != 'S' && body[0] != 'P' {
			f.fail(wire.ProtocolViolation, true)
			return
		}
		name, _, _ := wire.CString(body[1:])
		var ok bool
		switch {
		case body[0] == 'P':
			_, ok = f.portals[string(name)]
		case len(name) == 0:
			ok = f.unnamed != nil
		default:
			_, ok = f.stmts[string(name)]
		}
		if !ok {
			f.fail(wire.InvalidSQLStatementName, true)
			return
		}
		if body[0] == 'S' {
			f.send('t', []byte{0, 0})
		}
		f.send('n')
	case 'E':
		portal, rest, _ := wire.CString(body)
		text, ok := f.portals[string(portal)]
		if !ok {
			f.fail(wire.InvalidCursorName, true)
			return
		}
		if max, _, _ := wire.Uint32(rest); max > 0 && strings.Contains(text, "suspend") {
			f.send('D', []byte{0, 1, 0, 0, 0, 1, '1'})
			f.send('s')
			return
		}
		f.complete(text, true)
	case 'C':
		if len(body) < 2 || body[0] != 'S' && body[0] != 'P' {
			f.fail(wire.ProtocolViolation, true)
			return
		}
		name, _, _ := wire.CString(body[1:])
		switch {
		case body[0] == 'P':
			delete(f.portals, string(name))
		case len(name) == 0:
			f.unnamed, f.unnText = nil, ""
		default:
			delete(f.stmts, string(name))
		}
		f.send('3')
	case 'S':
		f.skipping = false
		if f.status == 'I' {
			clear(f.portals)
		}
		f.ready()
	case 'F':
		f.send('V', []byte{0xff, 0xff, 0xff, 0xff})
		f.ready()
	case 'H', 'd', 'c', 'f':
	case 'X':
		f.closed = true
	default:
		f.fail(wire.ProtocolViolation, false)
		f.ready()
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// fakeConn is a net.Conn over an in-memory reader and writer; deadlines
// are ignored (nothing blocks).
type fakeConn struct {
	r io.Reader
	w io.Writer
}

func (c *fakeConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)        { return c.w.Write(p) }
func (c *fakeConn) Close() error                       { return nil }
func (c *fakeConn) LocalAddr() net.Addr                { return fakeAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr               { return fakeAddr{} }
func (c *fakeConn) SetDeadline(t time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(t time.Time) error { return nil }

type fakeAddr struct{}

func (fakeAddr) Network() string { return "fake" }
func (fakeAddr) String() string  { return "fake:1" }
