package pool

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/clock"
	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/wire"
)

// ServerState is where a server connection is in its life.
type ServerState int32

const (
	// ServerIdle is in the pool, ready to be checked out.
	ServerIdle ServerState = iota
	// ServerActive is checked out by one client.
	ServerActive
	// ServerClosed is closed and out of the pool.
	ServerClosed
)

func (s ServerState) String() string {
	switch s {
	case ServerIdle:
		return "idle"
	case ServerActive:
		return "active"
	case ServerClosed:
		return "closed"
	}
	return "unknown"
}

// Target says where and as whom a pool connects.
type Target struct {
	Host     string
	Port     int
	Database string
	User     string
	Password string
	SSLMode  config.SSLMode
	ServerCA string
}

func (t Target) String() string {
	return fmt.Sprintf("%s@%s:%d/%s", t.User, t.Host, t.Port, t.Database)
}

// Server is one connection to a PostgreSQL server.
type Server struct {
	ID     uint64
	Conn   net.Conn
	R      *wire.Reader
	W      *bufio.Writer
	PID    uint32
	Secret []byte
	Addr   string // host:port, for cancel requests

	// Params are the parameters the server last reported (ParameterStatus).
	Params map[string]string
	// Session maps a lower-cased setting name to the SET statement that the
	// proxy applied on behalf of clients and that is in effect now.
	Session map[string]string
	// Prepared holds the proxy-wide prepared statement names this server
	// has parsed.
	Prepared map[string]struct{}
	// Unnamed identifies the statement text in the server's unnamed
	// prepared statement slot (the Parse body; empty when unknown).
	Unnamed []byte
	// Broken is set by the owner when the connection cannot be reused.
	Broken bool
	// Holder is the frontend's value for this connection, made once by a
	// holder and immutable after (the target of cancel requests): every
	// later holder reuses it instead of making its own per checkout.
	Holder any
	// StalePlans is set when the server reported that a prepared
	// statement's result type changed (a table was altered): its shared
	// statements are deallocated at checkin, so that the next client
	// prepares them afresh instead of failing on a stale plan.
	StalePlans bool

	// Traffic since the last checkin; only the owner touches these.
	bytesIn, bytesOut uint64

	// Cancel requests forwarded to the backend for the client holding the
	// server (see CancelStarted and AbsorbCancels); written by the
	// goroutines that forward them.
	cancelsPending atomic.Int32
	cancelSent     atomic.Bool

	state   ServerState
	startup Startup
	created time.Time
	// createdAt and lastUsed are clock.Mono times: when the connection
	// was established (created, for server_lifetime) and last checked in.
	createdAt time.Duration
	lastUsed  time.Duration
	pool      *Pool
}

// State returns the server's state.
func (s *Server) State() ServerState { return s.state }

// Startup returns the startup parameters the connection was opened with.
func (s *Server) Startup() Startup { return s.startup }

// Created returns when the connection was established.
func (s *Server) Created() time.Time { return s.created }

// Flush writes buffered messages to the server, marking it broken on
// failure. When not one byte has reached the connection since the server
// was checked out, the error says so (NothingSent): what the caller wrote
// can go to another server without any risk of running twice.
func (s *Server) Flush() error {
	if err := s.W.Flush(); err != nil {
		s.Broken = true
		err = fmt.Errorf("server %s: write: %w", s.Addr, err)
		if s.bytesOut == 0 {
			return &notSentError{err}
		}
		return err
	}
	return nil
}

// notSentError is a failed write of which no byte reached the server.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// Untouched reports whether nothing was written to or read from the
// server since its checkout: it carries nothing of its holder's yet.
func (s *Server) Untouched() bool { return s.bytesOut == 0 && s.bytesIn == 0 }

// NothingSent reports whether err is a Flush that failed before any byte
// written since the server's checkout reached its connection.
func NothingSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}

// NoteParameter records a ParameterStatus body from the server in Params
// and returns the setting's name and value.
func (s *Server) NoteParameter(body []byte) (name, value string) {
	n, rest, _ := wire.CString(body)
	v, _, _ := wire.CString(rest)
	name, value = string(n), string(v)
	s.Params[name] = value
	return name, value
}

// NoteError records what an ErrorResponse from the server means for the
// connection's reuse.
func (s *Server) NoteError(e *wire.Error) {
	if e.Fatal() {
		s.Broken = true
	}
	if staleCachedPlan(e) {
		s.StalePlans = true
	}
}

// staleCachedPlan reports whether e is PostgreSQL's "cached plan must not
// change result type": a prepared statement's result type changed under it.
// 0A000 alone covers every unsupported feature and the message is
// translated (lc_messages), so the error is told by the routine that raises
// it, plancache.c's RevalidateCachedQuery.
func staleCachedPlan(e *wire.Error) bool {
	return e.Code == wire.FeatureNotSupported && e.Routine == "RevalidateCachedQuery"
}

// deallocateAll drops every prepared statement on the server (DEALLOCATE
// ALL) and forgets them; a failure marks the server broken.
func (s *Server) deallocateAll() {
	s.StalePlans = false
	s.exec("DEALLOCATE ALL", "")
	clear(s.Prepared)
}

// exec runs one statement of the pool's own on the idle server and reads
// its answers to ReadyForQuery. An error (other than one with SQLSTATE
// tolerate), a failure or a server that does not end idle marks the server
// broken. The statement drops the unnamed prepared statement, as any
// simple Query does.
func (s *Server) exec(sql, tolerate string) {
	s.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer s.Conn.SetDeadline(time.Time{})
	s.W.Write(wire.AppendQuery(nil, sql))
	if s.Flush() != nil {
		return
	}
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			s.Broken = true
			return
		}
		switch typ {
		case 'E':
			if e := wire.ParseError(body); tolerate == "" || e.Code != tolerate {
				s.Broken = true
			}
		case 'Z':
			if len(body) != 1 || body[0] != 'I' {
				s.Broken = true
			}
			s.Unnamed = s.Unnamed[:0]
			return
		}
	}
}

// CancelStarted records that a cancel request for the server's backend is
// on its way; CancelFinished, that the server's postmaster took it (it has
// signalled the backend).
func (s *Server) CancelStarted()  { s.cancelSent.Store(true); s.cancelsPending.Add(1) }
func (s *Server) CancelFinished() { s.cancelsPending.Add(-1) }

// cancelWait bounds the wait for a forwarded cancel request to land.
const cancelWait = 5 * time.Second

// AbsorbCancels makes sure that no cancel request forwarded for the
// server's last client reaches the statement of the next one. PostgreSQL
// keeps a cancel that arrives while the backend waits for a command and
// applies it to the next statement, so a client that sent a cancel and
// then let its server go would cancel whatever the next client runs. Once
// every forwarded cancel has landed, a statement of the proxy's own takes
// any that is still pending; a server that cannot be made clean is marked
// broken. Only the owner calls it, on an idle server.
func (s *Server) AbsorbCancels() {
	if !s.cancelSent.Swap(false) || s.Broken {
		return
	}
	deadline := time.Now().Add(cancelWait)
	for s.cancelsPending.Load() > 0 {
		if time.Now().After(deadline) {
			s.Broken = true
			return
		}
		time.Sleep(time.Millisecond)
	}
	s.exec("SELECT 1", wire.QueryCanceled)
}

// SwapConn makes the server use conn from now on: the same connection in
// another guise (the frontend's event loop takes a socket out of Go's
// netpoller, frontend/fdconn.go). Nothing may be buffered either way; the
// caller has closed or taken over the old Conn. Only the owner calls it.
func (s *Server) SwapConn(conn net.Conn) error {
	if s.R.Buffered() > 0 || s.W.Buffered() > 0 {
		return fmt.Errorf("server %s: swap connection: data buffered", s.Addr)
	}
	s.Conn = conn
	s.R.Reset(countingReader{conn, &s.bytesIn})
	s.W.Reset(countingWriter{conn, &s.bytesOut})
	return nil
}

// CheckinBlocks reports whether checking the server in may wait for
// something else than its socket: a forwarded cancel to land
// (AbsorbCancels), or the statements of a checkin reset. An owner that
// must not block (the frontend's event loop) moves to a goroutine first.
func (s *Server) CheckinBlocks() bool {
	return !s.Broken && (s.cancelSent.Load() || s.StalePlans)
}

// Close closes the connection, politely (Terminate) when it is healthy.
func (s *Server) Close() {
	if s.state == ServerClosed {
		return
	}
	s.state = ServerClosed
	if !s.Broken {
		s.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		s.W.Write([]byte{'X', 0, 0, 0, 4})
		s.W.Flush()
	}
	s.Conn.Close()
}

// Alive reports whether an idle connection still looks usable. An idle
// server sends nothing, so anything readable means it is going away: EOF
// after a restart or pg_terminate_backend, or a FATAL ErrorResponse before
// the close. The probe is one non-blocking MSG_PEEK recv.
//
// A TLS server is probed on the socket under its session (a swapsock.Conn,
// as Dial makes every TLS session): an idle server sends no record either,
// so a byte there is its FATAL or close_notify, and EOF its exit. A record
// that crypto/tls already read ahead is not seen, and the first read will
// tell, as it does for a server that died less than aliveCheckAfter ago.
func (s *Server) Alive() bool {
	if s.R.Buffered() > 0 {
		return false
	}
	sc, ok := swapsock.Under(s.Conn).(syscall.Conn)
	if !ok {
		return true // a TLS session over a socket of its own: the first read will tell
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	var buf [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		case err != nil, n >= 0:
			alive = false
		}
		return true
	})
	return alive
}

// Cancel asks the server to cancel the query this connection runs, on a
// new connection, as the protocol's CancelRequest works.
func (s *Server) Cancel(ctx context.Context) error {
	return SendCancel(ctx, s.Addr, s.PID, s.Secret)
}

// SendCancel sends a CancelRequest for (pid, secret) to addr.
func SendCancel(ctx context.Context, addr string, pid uint32, secret []byte) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("cancel: dial %s: %w", addr, err)
	}
	defer c.Close()
	buf := make([]byte, 0, 12+len(secret))
	buf = binary.BigEndian.AppendUint32(buf, uint32(12+len(secret)))
	buf = binary.BigEndian.AppendUint32(buf, 80877102)
	buf = binary.BigEndian.AppendUint32(buf, pid)
	buf = append(buf, secret...)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(buf); err != nil {
		return fmt.Errorf("cancel: write %s: %w", addr, err)
	}
	// The server closes the connection after it read the request; waiting
	// for that makes the cancel land before the caller goes on.
	var one [1]byte
	c.Read(one[:])
	return nil
}

// Connect opens an ordinary pgconn connection to t, outside any pool, for
// the proxy's own queries: the frontend's catalog lookups use it.
// Two-phase commit recovery does not: it checks sessions out of the pools
// (Pool.Checkout, executor/commit.go).
func Connect(ctx context.Context, t Target, connectTimeout time.Duration) (*pgconn.PgConn, error) {
	cfg, err := t.pgconnConfig(connectTimeout, Startup{})
	if err != nil {
		return nil, err
	}
	if connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, connectTimeout)
		defer cancel()
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("server %s: connect: %w", t, err)
	}
	return pc, nil
}

// Dial connects and authenticates to t with the startup parameters of st,
// then takes the raw connection over. When the server refuses one of st's
// parameters, the error wraps the server's *pgconn.PgError.
func Dial(ctx context.Context, t Target, st Startup, connectTimeout time.Duration) (*Server, error) {
	cfg, err := t.pgconnConfig(connectTimeout, st)
	if err != nil {
		return nil, err
	}
	if connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, connectTimeout)
		defer cancel()
	}
	// TLS runs over a swapsock.Conn, so that the frontend's event loop can
	// take the socket under the session over (frontend/hot.go); hijack
	// unwraps a connection without TLS.
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return swapsock.New(c), nil
	}
	// pgconn starts a background reader when a write of the handshake is
	// slow, and stops it only after its Read in progress returns: that
	// Read can still be waiting when Hijack hands the connection over, and
	// would swallow the first answer the proxy waits for. Reading through
	// pgconn's reader instead (it returns that Read's bytes, then reads the
	// connection directly) loses nothing, and settleReader ends that Read
	// before the server is handed out.
	var r io.Reader
	cfg.BuildFrontend = func(br io.Reader, w io.Writer) *pgproto3.Frontend {
		r = br
		return pgproto3.NewFrontend(br, w)
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("server %s: connect: %w", t, err)
	}
	s, err := hijack(pc, r, t)
	if err != nil {
		return nil, err
	}
	if err := settleReader(r, s.Conn); err != nil {
		s.Conn.Close()
		return nil, fmt.Errorf("server %s: after login: %w", t, err)
	}
	s.startup = st
	return s, nil
}

// settleReader ends the read that pgconn's background reader r may still
// have in progress after the login (see Dial), so that nothing reads the
// connection behind the server's owner: the frontend's event loop takes
// the socket over (under a TLS session too, whose read side a read
// failing on the old socket would break for good). A read deadline in the
// past ends the read; the background reader keeps what it read before
// (r returns it first) and drops the timeout. A read that ended with an
// error (the server closed) is returned. pgconn's background reader is an
// internal type: its Status (0 is stopped) is reached by its method set.
func settleReader(r io.Reader, conn net.Conn) error {
	bg, ok := r.(interface{ Status() int32 })
	if !ok || bg.Status() == 0 {
		return nil
	}
	conn.SetReadDeadline(time.Now())
	defer conn.SetReadDeadline(time.Time{})
	for bg.Status() != 0 {
		// With nothing buffered, Read waits for the read in progress to
		// end; with bytes buffered it returns at once, and the loop
		// yields until the deadline ended the read.
		if _, err := r.Read(nil); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		runtime.Gosched()
	}
	return nil
}

// pgconnConfig is the pgconn configuration to connect to t with the startup
// parameters of st. pgconn sends every RuntimeParams entry as a startup
// packet parameter under its own name (options included) and then sets
// user and database, so st cannot change those.
func (t Target) pgconnConfig(connectTimeout time.Duration, st Startup) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%d sslmode=%s connect_timeout=%d",
		quoteDSN(t.Host), t.Port, sslmode(t.SSLMode), max(1, int(connectTimeout/time.Second))))
	if err != nil {
		return nil, fmt.Errorf("server %s: config: %w", t, err)
	}
	cfg.User = t.User
	cfg.Password = t.Password
	cfg.Database = t.Database
	cfg.RuntimeParams = maps.Clone(st.Params())
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.ConnectTimeout = connectTimeout
	if t.SSLMode == config.SSLVerifyFull && t.ServerCA != "" && cfg.TLSConfig != nil {
		pem, err := os.ReadFile(t.ServerCA)
		if err != nil {
			return nil, fmt.Errorf("server %s: server_ca: %w", t, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.TLSConfig = &tls.Config{RootCAs: pool, ServerName: t.Host}
		cfg.Fallbacks = nil
	}
	return cfg, nil
}

// hijack takes the connection of pc over; r reads from it (see Dial).
func hijack(pc *pgconn.PgConn, r io.Reader, t Target) (*Server, error) {
	hc, err := pc.Hijack()
	if err != nil {
		pc.Close(context.Background())
		return nil, fmt.Errorf("server %s: hijack: %w", t, err)
	}
	conn := hc.Conn
	if sc, ok := conn.(*swapsock.Conn); ok {
		// No TLS: the socket itself. r still reads through the
		// swapsock.Conn, which forwards to it.
		conn = sc.Socket()
	}
	now := time.Now()
	s := &Server{
		Conn:     conn,
		PID:      hc.PID,
		Secret:   hc.SecretKey,
		Addr:     net.JoinHostPort(t.Host, strconv.Itoa(t.Port)),
		Params:   hc.ParameterStatuses,
		Session:  map[string]string{},
		Prepared: map[string]struct{}{},
		created:  now,
	}
	s.createdAt = clock.Of(now)
	s.lastUsed = s.createdAt
	s.R = wire.NewReader(countingReader{r, &s.bytesIn}, 32<<10, 1<<30)
	s.W = bufio.NewWriterSize(countingWriter{conn, &s.bytesOut}, 32<<10)
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	return s, nil
}

// countingReader and countingWriter count a server connection's traffic
// into the Server, whose owner adds it to the pool's Stats at checkin.
type countingReader struct {
	r io.Reader
	n *uint64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += uint64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n *uint64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	*c.n += uint64(n)
	return n, err
}

// flushCounts moves the traffic counted since the last call into st.
func (s *Server) flushCounts(st *Stats) {
	if s.bytesIn != 0 {
		st.BytesIn.Add(s.bytesIn)
		s.bytesIn = 0
	}
	if s.bytesOut != 0 {
		st.BytesOut.Add(s.bytesOut)
		s.bytesOut = 0
	}
}

func sslmode(m config.SSLMode) string {
	switch m {
	case config.SSLDisable, config.SSLRequire, config.SSLVerifyFull:
		return string(m)
	}
	return "prefer"
}

func quoteDSN(s string) string {
	return "'" + s + "'"
}
