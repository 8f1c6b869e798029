package executor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Session is one client's session over the shards of a sharded database:
// the server it holds on each shard, and its transaction, which is the
// client's and not any one server's.
//
// A transaction's BEGIN is held until a statement shows which shard it
// needs (Begin), then replayed on every shard the transaction touches, with
// the transaction's savepoints and SETs in order (TxPrefix). COMMIT of a
// transaction that touched one shard is plain; of several, two-phase
// (Commit, with the Coordinator's decision log).
//
// A Session is used by one goroutine, its client's. It checks nothing out
// itself: the client's checkout policy (the pause gate, replicas) hands it
// servers with Hold, and Detach returns them all.
type Session struct {
	shards []shard
	tx     tx
	coord  *Coordinator
	// cursorSeq numbers the shards' cursors of the session (NewCursor).
	cursorSeq uint64

	// Ready, when set, runs before the session sends a statement of its
	// own to shard i's server: the client ends there what its extended
	// protocol left open (a batch without Sync after a row-limited
	// Execute).
	Ready func(i int) error
	// Settings, when set, returns the Queries that bring shard i's server
	// to the client's settings before a statement (see Prefix).
	Settings func(i int) []string
	// Report, when set, takes what the servers send the client during the
	// statements that end or undo part of a transaction (Commit, Rollback,
	// Savepoint): ParameterStatus for a setting the end of the transaction
	// changed back, and NotificationResponse. Each server sends its own;
	// the client wants one of each (see the frontend's reportOnce).
	Report func(raw []byte)
	// Releasing, when set, runs before a held server goes back to its
	// pool (Detach, Drop): the frontend takes it off the client's
	// coroutine of the event loop there, as it does its other servers.
	Releasing func(*pool.Server)
}

// shard is one shard as a session holds it.
type shard struct {
	pool   *pool.Pool   // the shard's primary pool
	server *pool.Server // the server held; nil when none
	inTx   bool         // the session's transaction is open on server
}

// tx is the session's transaction.
type tx struct {
	open bool // a transaction is open: explicit (BEGIN), or implicit
	// implicit: the transaction is the implicit one of an extended-protocol
	// batch (the statements up to Sync), which the client did not BEGIN.
	implicit bool
	begin    string // the client's BEGIN, replayed on each shard joined
	failed   bool   // aborted: only ROLLBACK (or ROLLBACK TO) is accepted
	// log is what a shard joining the transaction replays after BEGIN:
	// the active savepoints and the SETs of the transaction, in order.
	log []logEntry
}

// logEntry is one entry of a transaction's replay log.
type logEntry struct {
	savepoint string // SAVEPOINT savepoint; "" for a statement
	stmt      string // a SET or RESET every joined shard ran
	mark      int    // savepoint: the caller's mark when it was set (see Savepoint)
}

// NewSession returns a session over the shards whose primary pools are
// pools; it holds no server yet.
func NewSession(pools []*pool.Pool, coord *Coordinator) *Session {
	s := &Session{shards: make([]shard, len(pools)), coord: coord}
	for i, p := range pools {
		s.shards[i].pool = p
	}
	return s
}

// Len is the number of shards.
func (s *Session) Len() int { return len(s.shards) }

// Pool returns shard i's primary pool.
func (s *Session) Pool(i int) *pool.Pool { return s.shards[i].pool }

// Server returns the server the session holds for shard i, or nil.
func (s *Session) Server(i int) *pool.Server { return s.shards[i].server }

// Hold records that the session holds srv, checked out for shard i.
func (s *Session) Hold(i int, srv *pool.Server) { s.shards[i].server = srv }

// Holds reports whether the session holds any server.
func (s *Session) Holds() bool {
	for i := range s.shards {
		if s.shards[i].server != nil {
			return true
		}
	}
	return false
}

// Detach returns every server the session holds to the pool it came from
// (a replica's or the shard's primary pool).
func (s *Session) Detach() { s.detach(false, 0) }

// DetachAt is Detach at now, a clock.Mono time the caller read (the
// frontend's event loop keeps one per turn, so that a checkin needs no
// clock read of its own: pool.Pool.CheckinAt).
func (s *Session) DetachAt(now time.Duration) { s.detach(true, now) }

func (s *Session) detach(at bool, now time.Duration) {
	for i := range s.shards {
		sh := &s.shards[i]
		if sh.server != nil {
			p := sh.server.Pool()
			if p == nil {
				p = sh.pool
			}
			if s.Releasing != nil {
				s.Releasing(sh.server)
			}
			if at {
				p.CheckinAt(sh.server, now)
			} else {
				p.Checkin(sh.server)
			}
			sh.server = nil
		}
		sh.inTx = false
	}
}

// Discard returns shard i's server to its pool as broken and forgets that
// the session's transaction was open on it, so that the shard can take
// another server and join the transaction afresh (TxPrefix). It is for a
// server that died before it carried anything of the client's: what it
// had of the transaction was only the session's own BEGIN and replay.
func (s *Session) Discard(i int) {
	sh := &s.shards[i]
	if srv := sh.server; srv != nil {
		srv.Broken = true
		p := srv.Pool()
		if p == nil {
			p = sh.pool
		}
		if s.Releasing != nil {
			s.Releasing(srv)
		}
		p.Checkin(srv)
		sh.server = nil
	}
	sh.inTx = false
}

// ShardError is the failure of the server a session holds for a shard.
// The server is broken; whatever of the session it carried is lost.
type ShardError struct {
	Shard  int
	Server *pool.Server
	Err    error
}

func (e *ShardError) Error() string { return fmt.Sprintf("shard %d: %v", e.Shard, e.Err) }
func (e *ShardError) Unwrap() error { return e.Err }

func (s *Session) lost(i int, err error) error {
	if srv := s.shards[i].server; srv != nil {
		srv.Broken = true
	}
	return &ShardError{Shard: i, Server: s.shards[i].server, Err: err}
}

// Status is the transaction status a ReadyForQuery reports: I, T or E.
func (s *Session) Status() byte {
	switch {
	case !s.tx.open:
		return 'I'
	case s.tx.failed:
		return 'E'
	}
	return 'T'
}

// InTx reports whether a transaction is open, explicit or implicit.
func (s *Session) InTx() bool { return s.tx.open }

// Implicit reports whether the open transaction is the implicit
// transaction of an extended-protocol batch (BeginImplicit).
func (s *Session) Implicit() bool { return s.tx.open && s.tx.implicit }

// Failed reports whether the open transaction is aborted.
func (s *Session) Failed() bool { return s.tx.failed }

// Abort marks the open transaction, if any, aborted: a statement of it
// failed.
func (s *Session) Abort() {
	if s.tx.open {
		s.tx.failed = true
	}
}

// Recovered marks the open transaction usable again (a ROLLBACK TO that
// the proxy did not run itself succeeded).
func (s *Session) Recovered() { s.tx.failed = false }

// Begin opens a transaction with the client's statement sql, which every
// shard the transaction joins replays; it reports false when an explicit
// one is open already (PostgreSQL warns and carries on). A BEGIN inside
// an implicit transaction makes it explicit, with what ran before it, as
// in PostgreSQL.
func (s *Session) Begin(sql string) bool {
	if s.tx.open && !s.tx.implicit {
		return false
	}
	if s.tx.open {
		s.tx.implicit, s.tx.begin = false, sql
		return true
	}
	s.tx = tx{open: true, begin: sql}
	return true
}

// BeginImplicit opens the implicit transaction of an extended-protocol
// batch: PostgreSQL runs the statements of a batch up to its Sync in one
// transaction, committed at the Sync, or rolled back when one fails. The
// shards join it as statements reach them, as they join an explicit one.
// It does nothing inside a transaction.
func (s *Session) BeginImplicit() {
	if !s.tx.open {
		s.tx = tx{open: true, implicit: true}
	}
}

// InTxOn reports whether the transaction is open on shard i's server.
func (s *Session) InTxOn(i int) bool { return s.shards[i].inTx && s.shards[i].server != nil }

// Joined lists the shards the open transaction runs on.
func (s *Session) Joined() []int {
	var joined []int
	for i := range s.shards {
		if s.InTxOn(i) {
			joined = append(joined, i)
		}
	}
	return joined
}

// Prefix returns the internal Queries shard i needs before the client's
// statement, each to be sent as a Query of its own: the settings sync and
// TxPrefix. The two are separate because a BEGIN in a multi-statement
// Query takes the statements before it into the transaction, so that a
// rollback would undo the settings sync.
func (s *Session) Prefix(i int, implicit bool) []string {
	var qs []string
	if s.Settings != nil {
		qs = s.Settings(i)
	}
	if q := s.TxPrefix(i, implicit); q != "" {
		qs = append(qs, q)
	}
	return qs
}

// TxPrefix returns the Query shard i must run before the client's
// statement to join the transaction — its BEGIN, then the transaction's
// log — or "" when it has joined already or no transaction is open
// (implicit: the statement runs in a transaction of the proxy's own, a
// write to several shards). It counts shard i as joined.
func (s *Session) TxPrefix(i int, implicit bool) string {
	sh := &s.shards[i]
	if !(s.tx.open || implicit) || sh.inTx {
		return ""
	}
	var b strings.Builder
	if s.tx.begin != "" {
		b.WriteString(s.tx.begin)
	} else {
		b.WriteString("BEGIN")
	}
	// A newline ends a trailing comment of the client's text.
	b.WriteString("\n;")
	for _, e := range s.tx.log {
		if e.savepoint != "" {
			b.WriteString(" SAVEPOINT " + wire.QuoteIdent(e.savepoint) + ";")
		} else {
			b.WriteString(" " + e.stmt + "\n;")
		}
	}
	sh.inTx = true
	return b.String()
}

// Internal runs sql on shard i's server and reads its answers to
// ReadyForQuery, returning the status and the first error the server
// reported; an I/O failure is a *ShardError.
func (s *Session) Internal(i int, sql string) (status byte, serr *wire.Error, err error) {
	return s.internal(i, sql, nil)
}

// ending is Internal for the statements that end or undo part of the
// transaction, whose ParameterStatus and notifications go to Report.
func (s *Session) ending(i int, sql string) (status byte, serr *wire.Error, err error) {
	return s.internal(i, sql, s.Report)
}

func (s *Session) internal(i int, sql string, report func([]byte)) (status byte, serr *wire.Error, err error) {
	if s.Ready != nil {
		if err := s.Ready(i); err != nil {
			return 0, nil, s.lost(i, err)
		}
	}
	srv := s.shards[i].server
	srv.W.Write(wire.AppendQuery(nil, sql))
	if err := srv.Flush(); err != nil {
		return 0, nil, s.lost(i, err)
	}
	status, serr, err = readToReady(srv, report, nil)
	if err != nil {
		return 0, serr, s.lost(i, err)
	}
	return status, serr, nil
}

// internalValue is Internal for a Query whose first row's first column
// the caller wants (as text).
func (s *Session) internalValue(i int, sql string) (value string, status byte, serr *wire.Error, err error) {
	if s.Ready != nil {
		if err := s.Ready(i); err != nil {
			return "", 0, nil, s.lost(i, err)
		}
	}
	srv := s.shards[i].server
	srv.W.Write(wire.AppendQuery(nil, sql))
	if err := srv.Flush(); err != nil {
		return "", 0, nil, s.lost(i, err)
	}
	got := false
	status, serr, err = readToReady(srv, s.Report, func(body []byte) {
		if cols, _ := SplitRow(body, nil); !got && len(cols) > 0 && cols[0] != nil {
			value, got = string(cols[0]), true
		}
	})
	if err != nil {
		return "", 0, serr, s.lost(i, err)
	}
	return value, status, serr, nil
}

// ReadToReady discards a server's answers up to ReadyForQuery, keeping the
// first error; ParameterStatus updates the server's record.
func ReadToReady(srv *pool.Server) (status byte, serr *wire.Error, err error) {
	return readToReady(srv, nil, nil)
}

// readToReady is ReadToReady that hands ParameterStatus and
// NotificationResponse messages to report, and DataRow bodies to row,
// when not nil.
func readToReady(srv *pool.Server, report func([]byte), row func([]byte)) (status byte, serr *wire.Error, err error) {
	for {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			srv.Broken = true
			return 0, serr, err
		}
		switch typ {
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
			}
			if serr.Fatal() {
				srv.Broken = true
			}
		case 'S':
			srv.NoteParameter(body)
			if report != nil {
				report(raw)
			}
		case 'A':
			if report != nil {
				report(raw)
			}
		case 'D':
			if row != nil {
				row(body)
			}
		case 'Z':
			if len(body) == 1 {
				return body[0], serr, nil
			}
			srv.Broken = true
			return 0, serr, errors.New("malformed ReadyForQuery")
		}
	}
}

// Rollback rolls the transaction back on every shard it is open on and
// forgets it; a server that cannot be cleaned is marked broken.
func (s *Session) Rollback() {
	for i := range s.shards {
		sh := &s.shards[i]
		if sh.server == nil || !sh.inTx || sh.server.Broken {
			sh.inTx = false
			continue
		}
		if st, _, err := s.ending(i, "ROLLBACK"); err != nil || st != 'I' {
			sh.server.Broken = true
		}
		sh.inTx = false
	}
	s.tx = tx{}
}

// End commits (or rolls back) the transaction on every shard it joined and
// returns the command tag, COMMIT or ROLLBACK (a COMMIT of an aborted
// transaction rolls back, as in PostgreSQL), and the shards that committed.
func (s *Session) End(commit bool) (tag string, committed []int, err error) {
	if !commit || s.tx.failed {
		s.Rollback()
		return "ROLLBACK", nil, nil
	}
	joined := s.Joined()
	err = s.Commit(joined)
	s.tx = tx{}
	if err != nil {
		return "", nil, err
	}
	return "COMMIT", joined, nil
}

// SetOnJoined runs sql, a SET or RESET of the open transaction, on every
// shard in the transaction but except (which runs it next, for the
// client's answer). It returns the first error a shard answers; an I/O
// failure is a *ShardError.
func (s *Session) SetOnJoined(except int, sql string) (serr *wire.Error, err error) {
	for j := range s.shards {
		if j == except || !s.InTxOn(j) {
			continue
		}
		_, e, err := s.Internal(j, sql)
		if err != nil {
			return nil, err
		}
		if e != nil {
			return e, nil
		}
	}
	return nil, nil
}

// LogSetting records that sql, a SET or RESET, ran in the open
// transaction on every joined shard: shards that join later replay it.
func (s *Session) LogSetting(sql string) { s.tx.log = append(s.tx.log, logEntry{stmt: sql}) }

// SavepointKind is what a savepoint statement does.
type SavepointKind uint8

const (
	SavepointSet        SavepointKind = iota // SAVEPOINT name
	SavepointRelease                         // RELEASE [SAVEPOINT] name
	SavepointRollbackTo                      // ROLLBACK TO [SAVEPOINT] name
)

func (k SavepointKind) String() string {
	switch k {
	case SavepointSet:
		return "SAVEPOINT"
	case SavepointRelease:
		return "RELEASE SAVEPOINT"
	case SavepointRollbackTo:
		return "ROLLBACK TO SAVEPOINT"
	}
	return fmt.Sprintf("SavepointKind(%d)", uint8(k))
}

// Savepoint runs a savepoint statement sql on every joined shard and
// records it in the transaction's log for shards that join later. mark is
// the caller's own position (its pending session changes) when a SAVEPOINT
// is set; a ROLLBACK TO returns the mark of its savepoint as restore (the
// caller drops what came after), any other statement -1. serr is the error
// a shard (or the proxy, as PostgreSQL would) answers; an I/O failure is a
// *ShardError.
func (s *Session) Savepoint(kind SavepointKind, name, sql string, mark int) (tag string, restore int, serr *wire.Error, err error) {
	restore = -1
	if !s.tx.open || s.tx.implicit {
		// A batch's implicit transaction is no transaction block.
		return "", restore, wire.Errorf(wire.NoActiveSQLTransaction, "%s can only be used in transaction blocks", kind), nil
	}
	at := -1
	if kind != SavepointSet {
		for k := len(s.tx.log) - 1; k >= 0; k-- {
			if s.tx.log[k].savepoint == name {
				at = k
				break
			}
		}
		if at < 0 {
			e := wire.Errorf(wire.InvalidSavepointSpecification, "savepoint \"%s\" does not exist", name)
			if kind == SavepointRelease {
				e.At = wire.AtRelease
			}
			return "", restore, e, nil
		}
	}
	for i := range s.shards {
		if !s.InTxOn(i) {
			continue
		}
		st, e, err := s.ending(i, sql)
		if err != nil {
			return "", restore, nil, err
		}
		if e != nil {
			return "", restore, e, nil
		}
		if st == 'T' {
			s.tx.failed = false
		}
	}
	switch kind {
	case SavepointRelease:
		// The savepoints go; what ran after them stays.
		kept := s.tx.log[:at]
		for _, e := range s.tx.log[at:] {
			if e.savepoint == "" {
				kept = append(kept, e)
			}
		}
		s.tx.log = kept
		return "RELEASE", restore, nil, nil
	case SavepointRollbackTo:
		s.tx.log = s.tx.log[:at+1]
		s.tx.failed = false
		return "ROLLBACK", s.tx.log[at].mark, nil, nil
	}
	s.tx.log = append(s.tx.log, logEntry{savepoint: name, mark: mark})
	return "SAVEPOINT", restore, nil, nil
}

// Drop returns every server the session holds as broken: the pool closes
// them. It is for a client whose state is unknown (a recovered panic).
func (s *Session) Drop() {
	for i := range s.shards {
		if srv := s.shards[i].server; srv != nil {
			srv.Broken = true
		}
	}
	s.Detach()
}
