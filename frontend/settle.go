package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// This file keeps the isolation invariant of transaction pooling: what the
// proxy believes about a server's session (pool.Server.Session, Prepared)
// equals the server's real state whenever the server changes hands, and
// nothing a client left behind reaches the next client.
//
//   - restore brings a server's settings to the client's before the
//     client's first message goes out, in a round trip of its own: a SET
//     that fails never leaves the client running with another client's
//     settings.
//   - settle runs when a transaction ends: settings changed in ways the
//     proxy does not follow are read back (readBack), and a server whose
//     session holds objects that cannot move is kept by the client
//     (probe, pinned).
//   - reset cleans a server that a session-mode or pinned client leaves:
//     ROLLBACK if needed, then DISCARD ALL; any failure closes the server.
//
// Internal statements fail only when something is badly wrong; every
// failure marks the server broken, so that it is closed at checkin.

// internalTimeout bounds one internal round trip.
const internalTimeout = 10 * time.Second

// serverQuery runs sql as a simple Query on s and returns its rows (text
// format), the transaction status it ended with and the first error the
// server reported. A server that fails is marked broken. A
// NotificationResponse that arrives meanwhile belongs to the session's
// client (a NOTIFY on a channel it listens on): it goes to notify, or is
// dropped when notify is nil (the client is gone).
func serverQuery(s *pool.Server, sql string, notify func(raw []byte)) ([][][]byte, byte, *wire.Error, error) {
	s.Unnamed = s.Unnamed[:0] // a simple Query drops the unnamed statement
	return serverBatch(s, wire.AppendQuery(nil, sql), notify)
}

// serverBatch is serverQuery for any messages the proxy sends on its own
// behalf, ending in one Query or Sync (out): it reads the server's answers
// up to their ReadyForQuery.
func serverBatch(s *pool.Server, out []byte, notify func(raw []byte)) ([][][]byte, byte, *wire.Error, error) {
	s.Conn.SetDeadline(time.Now().Add(internalTimeout))
	defer s.Conn.SetDeadline(time.Time{})
	s.W.Write(out)
	if err := s.Flush(); err != nil {
		return nil, 0, nil, err
	}
	var rows [][][]byte
	var serr *wire.Error
	for {
		typ, raw, body, err := s.R.Next()
		if err != nil {
			s.Broken = true
			return nil, 0, nil, fmt.Errorf("server %s: %w", s.Addr, err)
		}
		switch typ {
		case 'A':
			if notify != nil {
				notify(raw)
			}
		case 'D':
			cols, err := executor.SplitRow(body, nil)
			if err != nil {
				s.Broken = true
				return nil, 0, nil, fmt.Errorf("server %s: %w", s.Addr, err)
			}
			row := make([][]byte, len(cols))
			for i, col := range cols {
				if col != nil {
					row[i] = append([]byte{}, col...)
				}
			}
			rows = append(rows, row)
		case 'E':
			e := wire.ParseError(body)
			s.NoteError(e)
			if serr == nil {
				serr = e
			}
		case 'S':
			s.NoteParameter(body)
		case 'Z':
			if len(body) != 1 {
				s.Broken = true
				return nil, 0, nil, fmt.Errorf("server %s: malformed ReadyForQuery", s.Addr)
			}
			return rows, body[0], serr, nil
		}
	}
}

// idleQuery is serverQuery for the proxy's own statements on an idle
// server: they must succeed and leave it idle, else the server is marked
// broken and the failure returned.
func idleQuery(s *pool.Server, sql string, notify func(raw []byte)) ([][][]byte, error) {
	rows, status, e, err := serverQuery(s, sql, notify)
	switch {
	case err != nil:
		return nil, err
	case e != nil:
		s.Broken = true
		return nil, e
	case status != 'I':
		s.Broken = true
		return nil, fmt.Errorf("server %s: transaction status %q after %q", s.Addr, status, sql)
	}
	return rows, nil
}

// isSchemaChange reports whether a CommandComplete tag is of a statement
// that may change what prepared statements resolve to.
func isSchemaChange(tag []byte) bool {
	if len(tag) == 0 || tag[0] != 'C' && tag[0] != 'A' && tag[0] != 'D' {
		return false // most tags: SELECT, INSERT, UPDATE, BEGIN, COMMIT...
	}
	return bytes.HasPrefix(tag, []byte("CREATE ")) || bytes.HasPrefix(tag, []byte("ALTER ")) ||
		bytes.HasPrefix(tag, []byte("DROP "))
}

// restore brings s's settings to the client's. On failure the server is
// broken and the error is the client's answer.
func (c *client) restore(s *pool.Server) error {
	sql := c.sess.diff(s.Session)
	if sql == "" {
		return nil
	}
	_, status, e, err := serverQuery(s, sql, c.toClient)
	if err != nil {
		return err
	}
	if e == nil && status != 'I' {
		s.Broken = true
		return fmt.Errorf("server %s: not idle after restoring settings", s.Addr)
	}
	if e != nil {
		s.Broken = true
		c.log.Warn("restoring the session's settings on a server failed", "server", s.Addr, "err", e.Error())
		return &wire.Error{Severity: "ERROR", Code: e.Code, Message: e.Message,
			Detail: "shardgate could not restore this session's settings on a pooled server connection",
			Hint:   e.Hint}
	}
	c.sess.syncTo(s.Session)
	return nil
}

// settle runs when a transaction-mode client's transaction has ended on
// its one server (ReadyForQuery 'I', nothing queued): it reads settings
// back and probes for session objects where the transaction's statements
// call for it. It returns an error when the server failed; the client's
// session state is then lost.
func (c *client) settle() error {
	eff := c.txEff
	c.txEff = 0
	clear(c.portals)
	if c.sess.resync || eff&effResync != 0 {
		c.sess.resync = false
		if err := c.readBack(c.server); err != nil {
			return err
		}
	}
	if c.pinned || eff&effObjects != 0 {
		held, err := c.probe(c.server)
		if err != nil {
			return err
		}
		c.pinned = held != 0
	}
	return nil
}

// readBackSQL lists the settings the session changed: every setting whose
// value comes from the session, plus the role and the session
// authorization, which pg_settings does not show.
const readBackSQL = `SELECT pg_catalog.lower(name), pg_catalog.current_setting(name) FROM pg_catalog.pg_settings WHERE source = 'session'` +
	` UNION ALL SELECT 'role', pg_catalog.current_setting('role')` +
	` UNION ALL SELECT 'session_authorization', pg_catalog.session_user()::text`

// readBack replaces the client's settings and s's record of them by what
// the server reports.
func (c *client) readBack(s *pool.Server) error {
	rows, err := idleQuery(s, readBackSQL, c.toClient)
	if err != nil {
		return fmt.Errorf("reading the session's settings back: %w", err)
	}
	login := ""
	if p := s.Pool(); p != nil {
		login = p.Target.User
	}
	sets := map[string]string{}
	for _, row := range rows {
		if len(row) != 2 || row[0] == nil || row[1] == nil {
			continue
		}
		name, val := string(row[0]), string(row[1])
		switch {
		case name == settingRole && val == "none":
			continue
		case name == settingSessAuth && val == login:
			continue
		}
		sets[name] = "SELECT pg_catalog.set_config(" + wire.QuoteLiteral(name) + ", " + wire.QuoteLiteral(val) + ", false)"
	}
	c.sess.sets = sets
	c.sess.syncTo(s.Session)
	return nil
}

// sessionObjects says which kinds of session objects a server's session
// holds (probe): objects that transaction pooling cannot carry from one
// server to another, so that while any exists the client keeps its server.
type sessionObjects uint8

const (
	objTemp         sessionObjects = 1 << iota // temporary relations or functions
	objAdvisoryLock                            // session advisory locks
	objHoldCursor                              // cursors WITH HOLD
	objListen                                  // LISTEN registrations
	objSQLPrepared                             // SQL-level prepared statements of the client's own
)

// objMovable are the session objects a resharding cutover re-creates on
// the new servers (resharded.go): the rest hold contents or locks that
// would not be the same there.
const objMovable = objListen | objSQLPrepared

// objNames names each kind of session object, in probeSQL's column order.
var objNames = [...]string{"temporary objects", "session advisory locks", "cursors WITH HOLD", "LISTEN", "SQL-level prepared statements"}

// String lists the kinds o holds, in words ("temporary objects and
// LISTEN").
func (o sessionObjects) String() string {
	var names []string
	for i, name := range objNames {
		if o&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	switch len(names) {
	case 0:
		return "no session objects"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// probeSQL asks which session objects the session holds: temporary
// relations or functions, session advisory locks, WITH HOLD cursors,
// LISTEN registrations, SQL-level prepared statements (one column each,
// in the order of sessionObjects).
const probeSQL = `SELECT pg_catalog.pg_my_temp_schema() <> 0 AND (` +
	`EXISTS (SELECT FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema()) OR ` +
	`EXISTS (SELECT FROM pg_catalog.pg_proc WHERE pronamespace = pg_catalog.pg_my_temp_schema())), ` +
	`EXISTS (SELECT FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()), ` +
	`EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable), ` +
	`EXISTS (SELECT FROM pg_catalog.pg_listening_channels()), ` +
	`EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql`

// proxyStatements ends probeSQL: SQL-level statements the proxy prepared
// itself (sqlprepare.go) belong to no client.
func proxyStatements(s *pool.Server) string {
	return notProxyStatements(s) + ")"
}

// notProxyStatements is the condition, on pg_prepared_statements.name,
// that leaves out the SQL-level statements the proxy prepared on s itself
// (empty when there are none).
func notProxyStatements(s *pool.Server) string {
	var names []string
	for name := range s.Prepared {
		if strings.HasPrefix(name, "sgq_") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " AND name <> ALL (" + wire.QuoteLiteral("{"+strings.Join(names, ",")+"}") + "::pg_catalog.text[])"
}

// probe reports which session objects s's session holds; any of them pins
// the server to its client.
func (c *client) probe(s *pool.Server) (sessionObjects, error) {
	rows, err := idleQuery(s, probeSQL+proxyStatements(s), c.toClient)
	if err != nil {
		return 0, fmt.Errorf("probing the session for temporary objects, locks, cursors, LISTEN and prepared statements: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != len(objNames) {
		s.Broken = true
		return 0, errors.New("probing the session: unexpected answer")
	}
	var held sessionObjects
	for i, v := range rows[0] {
		if string(v) == "t" {
			held |= 1 << i
		}
	}
	return held, nil
}

// reset cleans the server of a client that leaves while holding it for
// its session (session mode, or pinned in transaction mode): an unfinished
// batch is closed, an open transaction rolled back, then DISCARD ALL drops
// settings, role, temporary objects, locks, cursors, LISTENs and prepared
// statements. Each step is its own round trip (DISCARD ALL cannot run in a
// transaction block, and a multi-statement Query is one); any failure marks
// the server broken.
func (c *client) reset() {
	s := c.server
	c.clientErr = io.EOF // nothing more reaches the client
	if (len(c.q) > 0 || c.pipe.has(pipeUnsynced)) && !c.syncServer() {
		return
	}
	if s.Broken {
		return
	}
	s.AbsorbCancels() // else a late cancel of the client's could fail the reset
	if c.tx != 'I' {
		if _, err := idleQuery(s, "ROLLBACK", nil); err != nil {
			return
		}
	}
	if _, err := idleQuery(s, "DISCARD ALL", nil); err != nil {
		return
	}
	clear(s.Session)
	clear(s.Prepared)
	s.Unnamed = s.Unnamed[:0]
	c.pinned = false
}
