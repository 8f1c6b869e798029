package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// trustUser adds user "trusty" (no password) to a poolConfig YAML for
// cl, for tests that speak the protocol byte by byte.
func trustUser(yaml string, cl *pgtest.Cluster) string {
	user := fmt.Sprintf("  - { name: trusty, auth_type: trust, server_user: %s, server_password: %s }\n", cl.User, cl.Password)
	return strings.Replace(yaml, "databases:\n", user+"databases:\n", 1)
}

// startupPacket builds a StartupMessage with protocol version major.minor
// and the given name/value pairs.
func startupPacket(major, minor uint16, kv ...string) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, major)
	b = binary.BigEndian.AppendUint16(b, minor)
	for _, s := range kv {
		b = append(b, s...)
		b = append(b, 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// rawConn is a TCP connection to the proxy read message by message.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next reads one typed message.
func (c *rawConn) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
	if n < 0 || n > 1<<20 {
		return 0, nil, errors.New("bad length from proxy")
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	return hdr[0], body, nil
}

// expectFatal reads an ErrorResponse with severity FATAL, the given
// SQLSTATE and a message containing msg, then the end of the connection.
func (c *rawConn) expectFatal(code, msg string) {
	c.t.Helper()
	typ, body, err := c.next()
	if err != nil {
		c.t.Fatalf("want an ErrorResponse, got %v", err)
	}
	if typ != 'E' {
		c.t.Fatalf("want an ErrorResponse, got message %q %q", typ, body)
	}
	var e pgproto3.ErrorResponse
	if err := e.Decode(body); err != nil {
		c.t.Fatal(err)
	}
	if e.Severity != "FATAL" || e.Code != code || !strings.Contains(e.Message, msg) {
		c.t.Fatalf("got %s %s %q, want FATAL %s containing %q", e.Severity, e.Code, e.Message, code, msg)
	}
	c.expectClosed()
}

// expectClosed waits for the proxy to close the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	if typ, body, err := c.next(); err == nil {
		c.t.Fatalf("connection still open: got %q %q", typ, body)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatal("connection still open after the deadline")
	}
}

// login reads the server's answers to a trust login up to ReadyForQuery
// and returns the message types seen.
func (c *rawConn) login() string {
	c.t.Helper()
	var types []byte
	for {
		typ, body, err := c.next()
		if err != nil {
			c.t.Fatalf("login: after %q: %v", types, err)
		}
		if typ == 'E' {
			c.t.Fatalf("login: error %q", body)
		}
		types = append(types, typ)
		if typ == 'Z' {
			return string(types)
		}
	}
}

// stillServing fails unless a normal client can use the proxy.
func stillServing(t testing.TB, p *proxy) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.AppURL("app"))
	if err != nil {
		t.Fatalf("proxy no longer serving: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		t.Fatalf("proxy no longer serving: %v", err)
	}
}

// TestMalformedInput: a client that breaks the protocol gets an
// ErrorResponse with SQLSTATE 08P01 and is disconnected; other clients are
// not affected.
func TestMalformedInput(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	cfg := strings.Replace(poolConfig(cl, "transaction", 2, "app"), "limits: {", "limits: { max_message_size: 1024,", 1)
	p := startProxy(t, trustUser(cfg, cl))
	trusty := func(t *testing.T) *rawConn {
		c := dialRaw(t, p.Addr)
		c.write(startupPacket(3, 0, "user", "trusty", "database", "app"))
		c.login()
		return c
	}
	tests := []struct {
		name  string
		login bool // log in first
		send  []byte
		msg   string
	}{
		{"startup length too small", false, []byte{0, 0, 0, 4, 0, 3, 0, 0}, "invalid length of startup packet"},
		{"startup length too large", false, []byte{0, 1, 0, 0, 0, 3, 0, 0}, "invalid length of startup packet"},
		{"startup negative length", false, []byte{0xff, 0xff, 0xff, 0xf0, 0, 3, 0, 0}, "invalid length of startup packet"},
		{"startup unterminated", false, []byte{0, 0, 0, 16, 0, 3, 0, 0, 'u', 's', 'e', 'r', 0, 'b', 'o', 'b'}, "invalid startup packet layout"},
		{"startup without user", false, startupPacket(3, 0, "database", "app"), "no PostgreSQL user name"},
		{"negative length", true, []byte{'Q', 0xff, 0xff, 0xff, 0xfe}, "invalid message length"},
		{"length below four", true, []byte{'Q', 0, 0, 0, 2}, "invalid message length"},
		{"oversized message", true, append([]byte{'Q', 0, 0, 0x07, 0xd4}, make([]byte, 2000)...), "too large"},
		{"unknown message type", true, []byte{'y', 0, 0, 0, 4}, "invalid frontend message type"},
		{"unknown message type zero", true, []byte{0, 0, 0, 0, 4}, "invalid frontend message type"},
		{"malformed Parse", true, []byte{'P', 0, 0, 0, 7, 'a', 'b', 'c'}, "malformed Parse"},
		{"malformed Bind", true, []byte{'B', 0, 0, 0, 5, 0}, "malformed Bind"},
		{"malformed Describe", true, []byte{'D', 0, 0, 0, 5, 'S'}, "malformed D"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c *rawConn
			if tc.login {
				c = trusty(t)
			} else {
				c = dialRaw(t, p.Addr)
			}
			c.write(tc.send)
			code := wire.ProtocolViolation
			if tc.name == "startup without user" {
				code = wire.InvalidAuthorizationSpecification
			}
			c.expectFatal(code, tc.msg)
			stillServing(t, p)
		})
	}
}

// TestLoginTimeout: a client that connects and sends nothing, or only part
// of its startup packet, is disconnected after client_login_timeout.
func TestLoginTimeout(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, strings.Replace(poolConfig(cl, "transaction", 2, "app"), "client_login_timeout: 5s", "client_login_timeout: 300ms", 1))
	tests := []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a startup packet", []byte{0, 0, 0, 40, 0, 3}},
		{"startup without password", startupPacket(3, 0, "user", "app", "database", "app")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, p.Addr)
			start := time.Now()
			c.conn.SetDeadline(start.Add(5 * time.Second))
			c.write(tc.send)
			told := false
			for {
				typ, body, err := c.next()
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal("not disconnected within 5s")
					}
					break
				}
				if typ == 'R' {
					continue // the password request
				}
				if typ != 'E' || !strings.Contains(string(body), "client_login_timeout") {
					t.Fatalf("got %q %q", typ, body)
				}
				told = true
			}
			if !told {
				t.Fatal("disconnected without an ErrorResponse")
			}
			if took := time.Since(start); took < 250*time.Millisecond {
				t.Fatalf("disconnected after %s, before the timeout", took)
			}
		})
	}
	stillServing(t, p)
}

// TestProtocolVersions: a client asking for protocol 3.2 (or unknown
// protocol options) is told the proxy speaks 3.0 with
// NegotiateProtocolVersion, byte for byte as PostgreSQL 15 says it, and
// goes on; a 2.0 client gets a FATAL.
func TestProtocolVersions(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, trustUser(poolConfig(cl, "transaction", 2, "app"), cl))
	serverAddr := net.JoinHostPort(cl.Host, fmt.Sprint(cl.Port))
	// firstFromServer returns PostgreSQL's first answer to a startup
	// packet.
	firstFromServer := func(t *testing.T, pkt []byte) (byte, []byte) {
		c := dialRaw(t, serverAddr)
		c.write(pkt)
		typ, body, err := c.next()
		if err != nil {
			t.Fatal(err)
		}
		return typ, body
	}

	tests := []struct {
		name    string
		minor   uint16
		options []string
	}{
		{"3.2", 2, nil},
		{"3.2 with options", 2, []string{"_pq_.test_option", "x", "_pq_.other", "y"}},
		{"3.0 with options", 0, []string{"_pq_.test_option", "x"}},
		{"3.99", 99, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, p.Addr)
			c.write(startupPacket(3, tc.minor, append([]string{"user", "trusty", "database", "app"}, tc.options...)...))
			typ, body, err := c.next()
			if err != nil {
				t.Fatal(err)
			}
			var unrecognized []string
			for i := 0; i < len(tc.options); i += 2 {
				unrecognized = append(unrecognized, tc.options[i])
			}
			if tc.minor > 0 || len(unrecognized) > 0 {
				if typ != 'v' {
					t.Fatalf("got %q %q, want NegotiateProtocolVersion", typ, body)
				}
				var npv pgproto3.NegotiateProtocolVersion
				if err := npv.Decode(body); err != nil {
					t.Fatal(err)
				}
				if npv.NewestMinorProtocol != 3<<16 || strings.Join(npv.UnrecognizedOptions, ",") != strings.Join(unrecognized, ",") {
					t.Fatalf("NegotiateProtocolVersion %+v, want version 3.0 and options %v", npv, unrecognized)
				}
				wantTyp, want := firstFromServer(t, startupPacket(3, tc.minor, append([]string{"user", "postgres", "database", "app"}, tc.options...)...))
				if wantTyp != 'v' || string(want) != string(body) {
					t.Fatalf("NegotiateProtocolVersion %q, PostgreSQL sends %q %q", body, wantTyp, want)
				}
				typ, body, err = c.next()
				if err != nil {
					t.Fatal(err)
				}
			}
			if typ != 'R' || string(body) != "\x00\x00\x00\x00" {
				t.Fatalf("got %q %q, want AuthenticationOk", typ, body)
			}
			if got := c.login(); !strings.HasSuffix(got, "KZ") {
				t.Fatalf("login messages %q", got)
			}
			// BackendKeyData in its 3.0 form, then a working session.
			q := []byte{'Q', 0, 0, 0, 0}
			q = append(q, "SELECT 'ok'\x00"...)
			binary.BigEndian.PutUint32(q[1:], uint32(len(q)-1))
			c.write(q)
			var got []byte
			for {
				typ, body, err := c.next()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, typ)
				if typ == 'D' && !strings.HasSuffix(string(body), "ok") {
					t.Fatalf("DataRow %q", body)
				}
				if typ == 'Z' {
					break
				}
			}
			if string(got) != "TDCZ" {
				t.Fatalf("query answered with %q", got)
			}
		})
	}

	t.Run("pgx max_protocol_version 3.2", func(t *testing.T) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, p.AppURL("app")+"&max_protocol_version=3.2")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var s string
		if err := conn.QueryRow(ctx, "SELECT $1::text", "ok").Scan(&s); err != nil || s != "ok" {
			t.Fatalf("%q %v", s, err)
		}
	})

	t.Run("2.0", func(t *testing.T) {
		// A protocol 2.0 StartupPacket: fixed-size database, user,
		// options, unused and tty fields.
		pkt := make([]byte, 296)
		binary.BigEndian.PutUint32(pkt, 296)
		binary.BigEndian.PutUint32(pkt[4:], 2<<16)
		copy(pkt[8:], "app")
		copy(pkt[72:], "trusty")
		// Both answer in the 2.0 format: 'E', the text, NUL, and close.
		readAll := func(addr string) string {
			c := dialRaw(t, addr)
			c.write(pkt)
			b, err := io.ReadAll(c.r)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		const want = "EFATAL:  unsupported frontend protocol 2.0: server supports 3.0 to 3.0\n\x00"
		if got := readAll(p.Addr); got != want {
			t.Fatalf("proxy answers %q, want %q", got, want)
		}
		if got := readAll(serverAddr); got != want {
			t.Fatalf("PostgreSQL answers %q, want %q", got, want)
		}
	})
	t.Run("4.0", func(t *testing.T) {
		pkt := startupPacket(4, 0, "user", "trusty")
		c := dialRaw(t, p.Addr)
		c.write(pkt)
		c.expectFatal(wire.FeatureNotSupported, "unsupported frontend protocol 4.0: server supports 3.0 to 3.0")
		if typ, body := firstFromServer(t, pkt); typ != 'E' || !strings.Contains(string(body), "C0A000\x00Munsupported frontend protocol 4.0: server supports 3.0 to 3.0\x00") {
			t.Fatalf("PostgreSQL says %q %q", typ, body)
		}
	})
	stillServing(t, p)
}

// TestResetByPeer: clients that vanish at any point (mid-login, with a
// reset) leave the proxy serving.
func TestResetByPeer(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	for _, send := range [][]byte{nil, startupPacket(3, 0, "user", "app", "database", "app"), {'Q', 0, 0}} {
		c := dialRaw(t, p.Addr)
		c.write(send)
		if tc, ok := c.conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		c.conn.Close()
	}
	stillServing(t, p)
}
