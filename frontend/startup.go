package frontend

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/wire"
)

const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	codeCancelRequest = 80877102
	protocol30        = 3 << 16
)

// startup is what the client asked for in its StartupMessage.
type startup struct {
	user     string
	database string
	params   map[string]string // everything else, options expanded
	// protoOpts are the protocol options ("_pq_." parameters) the client
	// asked for; the proxy supports none of them.
	protoOpts []string
}

// negotiate runs the startup phase up to (not including) authentication. It
// returns nil, nil after answering a CancelRequest.
func (c *client) negotiate(st *State) (*startup, error) {
	tlsDone := false
	gssDone := false
	for {
		body, err := c.r.Startup()
		if err != nil {
			return nil, err
		}
		code, rest, _ := wire.Uint32(body)
		switch {
		case code == codeSSLRequest:
			if tlsDone {
				return nil, wire.Fatalf(wire.ProtocolViolation, "duplicate SSLRequest")
			}
			tlsDone = true
			if st.TLS == nil {
				if _, err := c.conn.Write([]byte{'N'}); err != nil {
					return nil, err
				}
				continue
			}
			if c.r.Buffered() > 0 {
				// Bytes after SSLRequest before the handshake could be
				// injected by a man in the middle (CVE-2021-23222).
				return nil, wire.Fatalf(wire.ProtocolViolation, "received unencrypted data after SSL request")
			}
			if _, err := c.conn.Write([]byte{'S'}); err != nil {
				return nil, err
			}
			// Over a swapsock.Conn, so that the client can move to
			// the event loop with its TLS session (goHot).
			tc := tls.Server(swapsock.New(c.conn), st.TLS)
			if err := tc.Handshake(); err != nil {
				return nil, fmt.Errorf("tls handshake: %w", err)
			}
			c.conn = tc
			c.tls = true
			c.r.Reset(tc)
			c.w.Reset(tc)
		case code == codeGSSENCRequest:
			if gssDone {
				return nil, wire.Fatalf(wire.ProtocolViolation, "duplicate GSSENCRequest")
			}
			gssDone = true
			if _, err := c.conn.Write([]byte{'N'}); err != nil {
				return nil, err
			}
		case code == codeCancelRequest:
			pid, rest, ok := wire.Uint32(rest)
			if !ok || len(rest) < 4 || len(rest) > 256 {
				return nil, wire.Fatalf(wire.ProtocolViolation, "invalid cancel request")
			}
			c.l.cancel(pid, rest)
			return nil, nil
		case code>>16 == 3:
			s, err := parseStartup(rest)
			if err != nil {
				return nil, err
			}
			if code != protocol30 || len(s.protoOpts) > 0 {
				// A newer 3.x minor version or protocol options: tell the
				// client we speak 3.0 without options, as PostgreSQL
				// does, instead of failing.
				c.negotiateVersion(s)
			}
			return s, nil
		default:
			e := wire.Fatalf(wire.FeatureNotSupported,
				"unsupported frontend protocol %d.%d: server supports 3.0 to 3.0", code>>16, code&0xffff)
			if code>>16 < 3 {
				return nil, &oldProtocolError{e}
			}
			return nil, e
		}
	}
}

// oldProtocolError is an error for a client speaking protocol 2.0 or
// older. Such a client reads errors in the 2.0 format (the type byte and a
// NUL-terminated text, no length), which is how PostgreSQL answers it.
type oldProtocolError struct{ e *wire.Error }

func (e *oldProtocolError) Error() string { return e.e.Error() }

// message returns the error in the 2.0 format, as PostgreSQL writes it.
func (e *oldProtocolError) message() []byte {
	b := append([]byte{'E'}, e.e.Severity+":  "+e.e.Message+"\n"...)
	return append(b, 0)
}

func parseStartup(b []byte) (*startup, error) {
	s := &startup{params: map[string]string{}}
	for len(b) > 0 && b[0] != 0 {
		k, rest, ok := wire.CString(b)
		if !ok {
			return nil, wire.Fatalf(wire.ProtocolViolation, "invalid startup packet layout: expected terminator as last byte")
		}
		v, rest, ok := wire.CString(rest)
		if !ok {
			return nil, wire.Fatalf(wire.ProtocolViolation, "invalid startup packet layout: expected terminator as last byte")
		}
		b = rest
		key := string(k)
		switch key {
		case "user":
			s.user = string(v)
		case "database":
			s.database = string(v)
		case "options":
			if err := parseOptions(string(v), s.params); err != nil {
				return nil, err
			}
		case "replication":
			if !bytes.Equal(v, []byte("false")) && !bytes.Equal(v, []byte("off")) && !bytes.Equal(v, []byte("0")) {
				return nil, &wire.Error{Severity: "FATAL", Code: wire.FeatureNotSupported,
					Message: "replication connections are not supported through shardgate",
					Hint:    "connect to the PostgreSQL server directly for replication"}
			}
		default:
			if strings.HasPrefix(key, "_pq_.") {
				// Protocol extensions: answered by NegotiateProtocolVersion.
				s.protoOpts = append(s.protoOpts, key)
				continue
			}
			s.params[strings.ToLower(key)] = string(v)
		}
	}
	if s.user == "" {
		return nil, wire.Fatalf(wire.InvalidAuthorizationSpecification, "no PostgreSQL user name specified in startup packet")
	}
	if s.database == "" {
		s.database = s.user
	}
	return s, nil
}

// parseOptions expands the startup "options" value ("-c a=b --c=d") into
// params, as PostgreSQL's pg_split_opts does (backslash escapes spaces).
func parseOptions(opts string, params map[string]string) error {
	var words []string
	var cur strings.Builder
	esc := false
	for _, r := range opts {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case r == '\\':
			esc = true
		case r == ' ' || r == '\t':
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		var kv string
		switch {
		case w == "-c" && i+1 < len(words):
			i++
			kv = words[i]
		case strings.HasPrefix(w, "-c"):
			kv = w[2:]
		case strings.HasPrefix(w, "--"):
			kv = w[2:]
		default:
			return wire.Fatalf(wire.FeatureNotSupported, "unsupported command-line option in startup options: %q (only -c name=value and --name=value are supported)", w)
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return wire.Fatalf(wire.ProtocolViolation, "-c %s requires a value", kv)
		}
		params[strings.ToLower(strings.ReplaceAll(k, "-", "_"))] = v
	}
	return nil
}

// negotiateVersion sends NegotiateProtocolVersion: the newest protocol
// version the proxy speaks (PostgreSQL sends the whole version number,
// not only the minor one) and the options it does not recognize.
func (c *client) negotiateVersion(s *startup) {
	buf := []byte{'v', 0, 0, 0, 0}
	buf = wire.AppendInt32(buf, protocol30)
	buf = wire.AppendInt32(buf, int32(len(s.protoOpts)))
	for _, o := range s.protoOpts {
		buf = append(buf, o...)
		buf = append(buf, 0)
	}
	c.w.Write(wire.FinishMessage(buf, 0))
}

func (c *client) secretMatches(secret []byte) bool {
	return subtle.ConstantTimeCompare(secret, c.secret[:]) == 1
}

func randUint32() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// loginDeadline bounds the whole startup phase.
func (c *client) loginDeadline(d time.Duration) {
	if d > 0 {
		c.conn.SetDeadline(time.Now().Add(d))
	}
}
