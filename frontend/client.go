package frontend

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// ClientInfo is a snapshot of one client for SHOW CLIENTS.
type ClientInfo struct {
	ID          uint64
	Addr        string
	User        string
	Database    string
	AppName     string
	State       ClientState
	TLS         bool
	ConnectedAt time.Time
	Server      uint64 // id of the attached server, 0 if none
	Queries     uint64
	Session     bool // session pooling: the client keeps its server
}

type cancelTarget struct {
	addr   string
	pid    uint32
	secret []byte
	srv    *pool.Server  // told of the cancel, so that it never reaches the server's next client
	next   *cancelTarget // another server the client holds (sharded databases)
}

// serverTarget is s's own cancel target, made by its first holder and kept
// in s.Holder: targets are immutable once stored (a cancel request reads
// one from another goroutine), so every client that holds s shares it.
func serverTarget(s *pool.Server) *cancelTarget {
	if t, ok := s.Holder.(*cancelTarget); ok {
		return t
	}
	t := &cancelTarget{addr: s.Addr, pid: s.PID, secret: s.Secret, srv: s}
	s.Holder = t
	return t
}

// client is one client connection and its goroutine's state. Fields are
// owned by that goroutine unless noted.
type client struct {
	l    *Listener
	conn net.Conn
	r    *wire.Reader
	w    *bufio.Writer
	log  clientLog

	id      uint64
	pid     uint32
	secret  [4]byte
	started int64 // time.Time.UnixNano of the connection (a time.Time is three words)

	st   *State
	user *config.User
	db   *config.Database
	mode config.PoolMode
	pool *pool.Pool

	server  *pool.Server
	startup pool.Startup // the startup parameters servers are opened with (see serverStartup)

	sess  session
	stmts map[string]*stmt // client statement name → proxy-wide statement
	// sqlStmts maps the client's SQL-level prepared statements (PREPARE)
	// to proxy-wide ones in transaction mode (sqlprepare.go).
	sqlStmts map[string]*sqlStmt
	// sqlPending maps the proxy-wide name of a PREPARE sent through the
	// extended protocol to the client's name, until it runs.
	sqlPending map[string]string
	// origText keeps the client's text of statements rewritten for
	// SQL-level statements ("" is the unnamed one), see rebindStatement.
	origText map[string][]byte
	unnamed  []byte // body of the client's last unnamed Parse
	// Session effects of the client's statements in transaction mode
	// (see effect): unnamedEff is the unnamed statement's (nil while it
	// has none: most have none, and a parked client keeps the struct;
	// see unnamedEffect), portals the open portals' (the unnamed one
	// under ""), txEff what the open transaction's executed statements
	// may have left behind.
	unnamedEff *stmtEffect
	portals    map[string]stmtEffect
	// lost is set when the proxy's own statements failed on a server
	// that carried the client's session: the client is ended after its
	// current message.
	lost error

	out       []byte        // messages waiting to be written to the server
	q         []req         // answers expected from the server, in order
	qBuf      []req         // q's reusable backing array (queued)
	lastTag   []byte        // tag of the last CommandComplete relayed
	clientErr error         // the client socket failed while relaying
	answers   int           // messages the server sent in this round trip (see roundTrip's retry)
	tripStart time.Duration // when the batch went to the server, as clock.Mono (see deadServerWindow)
	batchOps  []setOp       // session ops of Executes completed since the last Sync

	// One-byte fields, together so that the struct has no padding (its
	// size class is what a parked client costs; see TestClientSizeClass).
	tx    byte   // transaction status of the last ReadyForQuery sent: I, T or E
	txEff effect // see unnamedEff
	// pinned keeps the server of a transaction-mode client between
	// transactions while its session holds objects that cannot move
	// (temporary tables, session advisory locks, WITH HOLD cursors,
	// LISTEN, SQL-level prepared statements); see settle.
	pinned    bool
	pipe      pipe // where the extended-protocol pipeline is (state.go)
	inCopy    bool // relaying COPY FROM STDIN data (see copyIn)
	loggingIn bool // keep the server attached through login
	admin     bool // the client talks to the admin database (see bound)
	tls       bool
	// nonStandardLogin: the client logged in with standard_conforming_strings
	// off, as its first ParameterStatus said (see standardStrings).
	nonStandardLogin bool
	// Guarded by wakeMu (idlemove.go): idleHeld while the loop waits for
	// the next message of a client holding servers between transactions,
	// moveNudge once a cutover interrupted that wait.
	idleHeld  bool
	moveNudge bool

	// Sharded databases only (see sharded.go).
	xs     *executor.Session // the shards' servers and the transaction over them
	ext    []shardExt        // per shard, what the frontend keeps beside xs
	rt     planner
	sstmts map[string]*sStmt // extended protocol on sharded databases (sharded_ext.go)
	// The rest of the sharded state, allocated with xs (setShards): nil,
	// and so not to be touched, while xs is nil. Kept apart so that the
	// struct of a client of an unsharded database (thousands of them
	// parked, see park.go) stays in a smaller size class.
	*shardedState

	adm admission // gate and pool counters (gate.go)
	lb  lbState   // replica or primary for the next transaction (balance.go)

	cancelMu     sync.Mutex // orders cancel forwarding with the servers leaving the client
	cancelTarget atomic.Pointer[cancelTarget]
	wakeMu       sync.Mutex // orders Shutdown's wake-ups with the client leaving ClientIdle
	state        atomic.Int32
	killed       atomic.Bool
	queries      atomic.Uint64
	infoMu       sync.Mutex // guards appName
	appName      string

	// Parking (park.go). The owner is whichever goroutine serves the
	// client: the one that parked it and the one that resumes it never run
	// at the same time.
	ctx        context.Context // the client's, for the loop of a resumed client
	maxMessage int             // limits.max_message_size at login, for new readers
	sweepSeen  uint64          // the sweep goroutine's: queries at its previous pass
	parkKey    atomic.Uint64   // the current park (fd<<32 | token), for wakeParked
	canPark    atomic.Bool     // the client parks when idle (parkEligible)
	parked     atomic.Bool     // parked now: no goroutine serves the client
	parkNudge  atomic.Bool     // the sweep set a read deadline for the client to park
	parkArmed  bool            // the socket is in the evloop's epoll set
	wantPark   bool            // the sweep interrupted the read: park before reading again
	resumed    bool            // the loop resumed from a park and has not read yet

	multi bool // sharded: running a multi-statement Query part by part (runParts); here for packing
	// unnamedQuiet: the text of the unnamed Parse in unnamed has no
	// session effect and names no SQL-level statement, so that the same
	// Parse again needs no look at its text (rewriteParse); here for
	// packing.
	unnamedQuiet bool
	// unnamedGen counts the client's unnamed Parses (sendUnnamedParse):
	// a reqParse carries its count, so that the relay knows whether the
	// one the server rejected or skipped is the client's last (notParsed).
	unnamedGen uint32
}

// The client's buffer sizes.
const (
	clientReadBuffer  = 16 << 10
	clientWriteBuffer = 32 << 10
	clientQueue       = 8 // answers expected, before qBuf grows
)

func newClient(l *Listener, conn net.Conn) *client {
	c := newBareClient(l, conn)
	c.buffers(1 << 30)
	return c
}

// newBareClient is newClient without the socket's buffers, which a client
// that has sent nothing yet does not need (see Listener.handle).
func newBareClient(l *Listener, conn net.Conn) *client {
	c := &client{
		l:        l,
		conn:     conn,
		id:       l.nextID.Add(1),
		started:  time.Now().UnixNano(),
		tx:       'I',
		qBuf:     make([]req, 0, clientQueue),
		stmts:    map[string]*stmt{},
		sqlStmts: map[string]*sqlStmt{},
	}
	c.pid = randUint32() & 0x7fffffff // a positive int4, as PostgreSQL's pids
	if c.pid == 0 {
		c.pid = 1
	}
	copy(c.secret[:], randomBytes(4))
	c.log = clientLog{c}
	return c
}

// clientLog is the client's logger: the Listener's, with the client's
// attributes (id, address, and once logged in user and database) added to
// each record as it is logged. A logger made with slog.Logger.With per
// client would keep a handler and its preformatted attributes for the
// client's whole life, a few hundred bytes that idle clients (parked in
// thousands, see park.go) would pay for nothing.
type clientLog struct{ c *client }

func (cl clientLog) Debug(msg string, args ...any) { cl.log(slog.LevelDebug, msg, args) }
func (cl clientLog) Info(msg string, args ...any)  { cl.log(slog.LevelInfo, msg, args) }
func (cl clientLog) Warn(msg string, args ...any)  { cl.log(slog.LevelWarn, msg, args) }
func (cl clientLog) Error(msg string, args ...any) { cl.log(slog.LevelError, msg, args) }

func (cl clientLog) log(level slog.Level, msg string, args []any) {
	l := cl.c.l.log
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	c := cl.c
	attrs := make([]any, 0, 8+len(args))
	attrs = append(attrs, "client", c.id, "addr", c.conn.RemoteAddr().String())
	if c.user != nil && c.db != nil {
		attrs = append(attrs, "user", c.user.Name, "database", c.db.Name)
	}
	l.Log(ctx, level, msg, append(attrs, args...)...)
}

// setCancelTarget points the client's cancel requests at t (nil: none).
// A cancel being forwarded has told its servers before this returns (see
// Listener.cancel), so that returning a server to the pool after it takes
// the cancel with it (pool.Server.AbsorbCancels).
func (c *client) setCancelTarget(t *cancelTarget) {
	c.cancelMu.Lock()
	c.cancelTarget.Store(t)
	c.cancelMu.Unlock()
}

// setState records the client's state. Leaving ClientIdle it also takes
// back a wake-up by Shutdown that came after the client read the message
// that ends its idleness: the client may finish its transaction (see
// wakeIfIdle).
func (c *client) setState(s ClientState) {
	if s == ClientIdle {
		c.state.Store(int32(s))
		return
	}
	c.wakeMu.Lock()
	old := ClientState(c.state.Swap(int32(s)))
	c.wakeMu.Unlock()
	if old != ClientIdle {
		return
	}
	nudged := c.parkNudge.Swap(false) // the sweep's, see sweepPark
	if (nudged || c.l.shutting.Load()) && !c.killed.Load() {
		c.conn.SetReadDeadline(time.Time{})
	}
}

func (c *client) info() ClientInfo {
	c.infoMu.Lock()
	app := c.appName
	c.infoMu.Unlock()
	ci := ClientInfo{ID: c.id, Addr: c.conn.RemoteAddr().String(), AppName: app,
		State: ClientState(c.state.Load()), TLS: c.tls, ConnectedAt: time.Unix(0, c.started), Queries: c.queries.Load(),
		Session: c.mode == config.PoolSession}
	if c.user != nil {
		ci.User = c.user.Name
	}
	if c.db != nil {
		ci.Database = c.db.Name
	}
	return ci
}

// run serves the client from startup to disconnect; its login deadline is
// set (Listener.handle).
func (c *client) run(ctx context.Context, st *State) error {
	c.st = st
	s, err := c.negotiate(st)
	if err != nil {
		return c.loginFailed(err)
	}
	if s == nil {
		return nil // cancel request
	}
	if err := c.login(ctx, st, s); err != nil {
		var ad *adminDone
		if errors.As(err, &ad) {
			return ad.err
		}
		return c.loginFailed(err)
	}
	c.conn.SetDeadline(time.Time{})
	c.maxMessage = st.Config.Limits.MaxMessageSize
	c.r.SetMax(c.maxMessage)
	// Before register: from then on other goroutines read c.conn.
	hot := st.Config.Limits.EventLoop && c.w.Flush() == nil && c.goHot(st)
	c.l.register(c) // finish unregisters it
	// BackendKeyData with the proxy's own pid and secret, then ready.
	key := []byte{'K', 0, 0, 0, 12}
	key = wire.AppendInt32(key, int32(c.pid))
	key = append(key, c.secret[:]...)
	c.w.Write(key)
	c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), 'I'))
	if err := c.w.Flush(); err != nil {
		return err
	}
	if (c.mode == config.PoolTransaction || c.xs != nil) && c.server != nil {
		c.detach()
	}
	c.leaveGateIdle()
	c.setState(ClientIdle)
	c.ctx = ctx
	if c.parkEligible() && c.l.evloop() != nil {
		c.canPark.Store(true)
		c.l.parking.loggedIn()
	}
	if hot && c.startHot() {
		return errOnLoop // the coroutine serves the client now
	}
	return c.loop(ctx)
}

// attach checks a server out for the client and brings the server's
// session settings to the client's. When the connection fails under those
// SETs (the server died idle in the pool, see retry.go), they run on
// another server: they are the proxy's own and idempotent.
func (c *client) attach(ctx context.Context) error {
	if c.server != nil {
		return c.enterGateHolding(ctx)
	}
	for try := 1; ; try++ {
		lost, err := c.attachOnce(ctx)
		if !lost || try == retryTries {
			return err
		}
		c.log.Info("server died in the pool; restoring the session on another server", "err", err)
	}
}

// attachOnce is one checkout of attach; lost says the server's connection
// failed while the session was being restored.
func (c *client) attachOnce(ctx context.Context) (lost bool, err error) {
	c.setState(ClientWaiting)
	s, err := c.checkout(ctx)
	if err != nil {
		c.setState(ClientIdle)
		return false, err
	}
	c.server = s
	c.setState(ClientActive)
	c.setCancelTarget(serverTarget(s))
	if err := c.restore(s); err != nil {
		s.Broken = true
		_, answered := wire.AsError(err) // the server refused a SET: the client's answer
		if !answered {
			if p := s.Pool(); p != nil {
				p.CloseDeadIdle()
			}
		}
		c.detach()
		return !answered, err
	}
	return false, nil
}

func checkoutError(p *pool.Pool, err error) error {
	if e, ok := wire.AsError(err); ok {
		return e
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pool.IsStartupRejected(err) {
		// The server refused the client's own startup parameters: the
		// client hears PostgreSQL's answer unchanged.
		return pgError(pe, "ERROR")
	}
	if errors.As(err, &pe) {
		return &wire.Error{Severity: "ERROR", Code: pe.Code,
			Message: fmt.Sprintf("server login failed for %s: %s", p.Key, pe.Message), Detail: pe.Detail, Hint: pe.Hint}
	}
	if errors.Is(err, pool.ErrClosed) {
		return &wire.Error{Severity: "ERROR", Code: wire.AdminShutdown, Message: "the pool was closed (reload or shutdown)"}
	}
	return &wire.Error{Severity: "ERROR", Code: wire.ConnectionFailure,
		Message: fmt.Sprintf("cannot connect to server for %s", p.Key), Detail: err.Error()}
}

// pgError is a server's error as pgconn read it, to be sent to the client
// with severity as the server sent it: with its location fields (which the
// proxy does not otherwise make up for it, see wire/origin.go).
func pgError(pe *pgconn.PgError, severity string) *wire.Error {
	e := &wire.Error{Severity: severity, Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint, Routine: pe.Routine}
	if pe.Position > 0 {
		e.Position = strconv.Itoa(int(pe.Position))
	}
	if pe.File != "" {
		e.More = append(e.More, wire.ErrorField{Type: 'F', Value: pe.File})
	}
	if pe.Line > 0 {
		e.More = append(e.More, wire.ErrorField{Type: 'L', Value: strconv.Itoa(int(pe.Line))})
	}
	if pe.Routine != "" {
		e.More = append(e.More, wire.ErrorField{Type: 'R', Value: pe.Routine})
	}
	return e
}

// detach returns the server to the pool.
func (c *client) detach() {
	s := c.server
	if s == nil {
		return
	}
	c.server = nil
	c.setCancelTarget(nil)
	c.checkin(s)
	c.setState(ClientIdle)
}

// loop reads and serves client messages until the client leaves or parks
// (errParked).
func (c *client) loop(ctx context.Context) error {
	for {
		if c.l.shutting.Load() && c.holdsNothing() || c.killed.Load() {
			code := wire.AdminShutdown
			c.sendFatal(wire.Fatalf(code, "terminating connection due to administrator command"))
			c.abandon() // a killed client may hold a server: roll back, return it
			return nil
		}
		var stopWatch func()
		held := false
		if c.r.Buffered() == 0 {
			// The client's next message is still to come: this is where
			// an idle client parks, goes back to the event loop, and has
			// its server watched. With bytes of it buffered (the rest of
			// a batch) none of these applies (mayPark, watchServer and
			// waitIdle decline them), and their checks are skipped.
			if c.parkNow() && c.park() {
				return errParked
			}
			c.hotIdle()
			stopWatch = c.watchServer()
			held = c.waitIdle()
		} else {
			c.resumed = false // see parkNow
		}
		typ, raw, body, err := c.r.Next()
		moveNow := held && c.doneWaiting()
		if stopWatch != nil {
			stopWatch()
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && (c.l.shutting.Load() || c.killed.Load()) {
				// Woken by Shutdown or KILL: the check at the top of the
				// loop ends an idle or killed client; one in a
				// transaction finishes it first.
				c.conn.SetReadDeadline(time.Time{})
				continue
			}
			if errors.As(err, &ne) && ne.Timeout() && moveNow {
				// Woken by a cutover: a listening session moves now.
				if err := c.moveIdle(ctx); err != nil {
					c.abandon()
					return err
				}
				continue
			}
			if errors.As(err, &ne) && ne.Timeout() && c.parkNudge.Swap(false) {
				// The sweep found the client idle: park it (parkNow).
				c.conn.SetReadDeadline(time.Time{})
				c.wantPark = true
				continue
			}
			if e, ok := wire.AsError(err); ok {
				c.sendFatal(e)
			}
			c.abandon()
			return err
		}
		if c.l.shutting.Load() && c.holdsNothing() && typ != 'X' {
			// A message that raced Shutdown's nudge: an idle client starts
			// nothing new once shutdown began.
			c.sendFatal(wire.Fatalf(wire.AdminShutdown, "terminating connection due to administrator command"))
			c.abandon()
			return nil
		}
		switch typ {
		case 'Q':
			err = c.simpleQuery(ctx, raw, body)
		case 'P', 'B', 'D', 'E', 'C', 'H', 'S':
			err = c.extended(ctx, typ, raw, body)
		case 'F':
			err = c.functionCall(ctx, raw)
		case 'X':
			c.abandon()
			return nil
		case 'd', 'c', 'f':
			// CopyData/Done/Fail outside COPY: ignored, as PostgreSQL does
			// (the client may still be sending after a failed COPY).
		default:
			c.sendFatal(wire.Fatalf(wire.ProtocolViolation, "invalid frontend message type %d", typ))
			c.abandon()
			return fmt.Errorf("invalid message type %d", typ)
		}
		if err != nil {
			c.abandon()
			return err
		}
		if c.clientErr != nil {
			c.abandon()
			return c.clientErr
		}
		if c.lost != nil {
			c.sendFatal(&wire.Error{Severity: "FATAL", Code: wire.ConnectionFailure,
				Message: "server connection lost", Detail: c.lost.Error()})
			c.abandon()
			return c.lost
		}
	}
}

// sendFatal writes e and flushes, ignoring write errors (the connection is
// closing anyway).
func (c *client) sendFatal(e *wire.Error) {
	c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	c.w.Write(wire.AppendError(nil, e))
	c.w.Flush()
}

// refuse answers a client we will not serve, after reading its startup
// packet so that it sees the error.
func (c *client) refuse(e *wire.Error, reason string) {
	c.log.Warn("refusing client", "reason", reason)
	c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	for {
		body, err := c.r.Startup()
		if err != nil {
			return
		}
		code, _, _ := wire.Uint32(body)
		if code == codeSSLRequest || code == codeGSSENCRequest {
			c.conn.Write([]byte{'N'})
			continue
		}
		break
	}
	c.sendFatal(e)
}

// abandon cleans up after the client left or failed: a server it still
// holds is brought back to idle (rolled back) or closed.
func (c *client) abandon() {
	if c.xs != nil {
		c.abandonShards()
		return
	}
	s := c.server
	if s == nil {
		return
	}
	if c.mode == config.PoolSession || c.pinned {
		c.reset()
		c.detach()
		return
	}
	if len(c.q) > 0 || c.tx != 'I' || c.pipe.has(pipeUnsynced) {
		c.clientErr = io.EOF // stop writing to the client
		c.rollback()
	}
	c.detach()
}

// rollback closes an unfinished extended-protocol batch and rolls back an
// open transaction so the server can be reused; on any failure the server
// is marked broken and closed at checkin.
func (c *client) rollback() {
	s := c.server
	s.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer s.Conn.SetDeadline(time.Time{})
	// Whatever is still queued was never sent (each round trip drains the
	// queue): drop it, the client did not finish that batch, and undo
	// what was recorded for it. Session SETs queued by attach were
	// recorded as applied to the server: rather than guess its settings,
	// close it. unsynced describes the queue's end, not what was sent:
	// with a queue dropped, a Sync settles it.
	sync := c.pipe.has(pipeUnsynced) || len(c.q) > 0
	for i := len(c.q) - 1; i >= 0; i-- { // last first, as relayError
		if c.q[i].kind == reqInternal {
			s.Broken = true
		}
		c.notParsed(&c.q[i], false)
	}
	c.q = c.q[:0]
	c.out = c.out[:0]
	if s.Broken {
		return
	}
	if sync {
		// Part of a batch may have gone out (before a Flush or
		// pipelined): close it.
		if !c.syncServer() {
			return
		}
	}
	if s.Broken || c.tx == 'I' {
		return
	}
	s.W.Write(wire.AppendQuery(nil, "ROLLBACK"))
	s.Unnamed = s.Unnamed[:0] // dropped by the simple query
	c.q = append(c.q[:0], req{kind: reqInternal})
	if err := s.Flush(); err != nil || c.relay() != nil {
		s.Broken = true
		return
	}
	if c.tx != 'I' {
		s.Broken = true
	}
}

// syncServer closes an unfinished extended-protocol batch on the client's
// server with a Sync and reads every answer still owed; on failure it marks
// the server broken and returns false.
func (c *client) syncServer() bool {
	s := c.server
	s.W.Write([]byte{'S', 0, 0, 0, 4})
	c.pipe.set(pipeUnsynced, false)
	c.q = append(c.queued(), req{kind: reqSync})
	if err := s.Flush(); err != nil || c.relay() != nil {
		s.Broken = true
		return false
	}
	return true
}

// nudge wakes a client blocked reading so it notices shutdown or kill.
func (c *client) nudge() {
	c.conn.SetReadDeadline(time.Now())
	c.wakeParked()
}

// holdsNothing reports whether the client holds no server: no open
// transaction or session that shutdown must let finish.
func (c *client) holdsNothing() bool { return c.bound() == boundNone }

// wakeIfIdle nudges the client for Shutdown if it holds no server (or is
// an admin session, which has no database). A client holding a server is
// left alone: it is closed after its transaction (see loop), and waking
// it would only cost a wasted read (wire.Reader resumes a message a
// deadline interrupted, so nothing would be lost).
func (c *client) wakeIfIdle() {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	if ClientState(c.state.Load()) == ClientIdle || c.db == nil {
		c.nudge()
	}
}

func (c *client) kill() {
	c.killed.Store(true)
	c.nudge()
}

func (c *client) close() {
	c.setState(ClientClosed)
	c.conn.Close()
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
