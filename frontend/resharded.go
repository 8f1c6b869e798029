package frontend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// A resharding cutover turns a one-shard database into a sharded one in
// the live configuration. A transaction-pooled client of it holds no
// server between transactions and its session state (settings, prepared
// statements) is the proxy's, so it carries on as a sharded session:
// becomeSharded moves it before it starts its next transaction. A client
// that was already past that point, waiting at the paused database's gate
// with the first message of its transaction in hand (a Query, or the
// first message of an extended batch), learns of the cutover when the gate
// opens (errBecameSharded) and serves that message again on the sharded
// path, a FunctionCall included (a sharded session runs function calls on
// shard 0). Only a client that cannot move ends with 57P01 (errResharded).
//
// Of the session objects that pin a session to its server (probe), two
// move with it, in session pooling and for a transaction-pooled client
// they pin (which moves as a session does, and stays pinned where its
// LISTEN runs): SQL-level prepared statements, which are prepared again
// on the new server under the client's names (one-shard to one-shard) or
// become the sharded path's proxy-wide statements (sqlprepare.go), and
// LISTEN registrations, whose channels the session listens on again
// before its next transaction — on the new server, or on one shard of a
// sharded database, where LISTEN runs on one shard as any session
// statement does (listenAgain); sessionmove.go reads and re-creates
// them. A session that listens moves at the cutover itself rather than at
// its next statement (idlemove.go). Temporary objects, session advisory
// locks and cursors WITH HOLD hold contents or locks that would not be the
// same on another server: a session holding any of them ends with 57P01,
// its Detail naming what it holds (errSessionPinned).

// becomeSharded makes a one-shard, transaction-pooled client that holds
// nothing a sharded client when a reload made its database sharded. It
// runs before a Query or the first message of an extended batch.
func (c *client) becomeSharded() error {
	if c.l.State() == c.st {
		return nil // no reload since the client's state: small enough to inline, for every message
	}
	return c.becomeShardedNow()
}

// becomeShardedNow is becomeSharded after a reload.
func (c *client) becomeShardedNow() error {
	if !c.movable() {
		return nil
	}
	st := c.l.State() // newer than c.st: becomeSharded saw a reload, and only the client sets c.st
	if db := st.Config.Database(c.db.Name); db == nil || len(db.Shards) < 2 {
		return nil // refresh handles it at checkout
	}
	c.offLoop() // the move may open new connections; the client comes back at hotIdle
	var kept map[string]*sStmt
	var moved *sessionMove
	if c.server != nil {
		// A session-pooled client, or a transaction-pooled one pinned
		// to its server: the session's state is taken from the server.
		var err error
		if kept, moved, err = c.leaveSessionServer(); err != nil {
			return err
		}
	}
	if err := c.refreshShards(); err != nil {
		return err
	}
	if moved != nil {
		// The session's SQL-level statements and LISTEN channels follow
		// it; its one server was shard 0.
		if err := c.adoptMoved(moved, 0); err != nil {
			return err
		}
		// In transaction pooling the LISTEN pins the client to the shard
		// it runs on; its SQL-level statements are the proxy's now.
		c.pinned = c.mode == config.PoolTransaction && len(moved.channels) > 0
	}
	// The client's prepared statements, named and unnamed, become the
	// sharded path's statements.
	if c.sstmts == nil {
		c.sstmts = map[string]*sStmt{}
	}
	maps.Copy(c.sstmts, kept)
	for name, s := range c.stmts {
		if len(s.parse) > 5 {
			if q, _, ok := parseBody(s.parse[5:]); ok {
				c.sstmts[name] = &sStmt{sql: string(q), st: s, query: q}
			}
		}
	}
	if q, tail, ok := parseBody(c.unnamed); ok {
		c.sstmts[""] = &sStmt{sql: string(q), st: c.l.stmts.get(tail), query: q}
	}
	c.stmts, c.unnamed = map[string]*stmt{}, c.unnamed[:0]
	c.log.Info("database resharded: the session continues on its shards", "shards", c.xs.Len())
	return nil
}

// parseBody returns the query text of a Parse message's body, and the
// body after the statement name (query and parameter types).
func parseBody(body []byte) (query, tail []byte, ok bool) {
	_, tail, ok = wire.CString(body)
	if !ok {
		return nil, nil, false
	}
	query, _, ok = wire.CText(tail)
	return query, tail, ok
}

// leaveSessionServer takes what a session-pooled client's session holds
// on its one server (takeSession) as the sharded path's settings and
// statements, so that the session goes on over the shards; what else
// moves (SQL-level statements, LISTEN) is for adoptMoved, once the client
// is sharded.
func (c *client) leaveSessionServer() (map[string]*sStmt, *sessionMove, error) {
	m, err := c.takeSession()
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]*sStmt, len(m.stmts))
	for _, p := range m.stmts {
		query, _, _ := wire.CString(p.tail)
		out[p.name] = &sStmt{sql: string(query), st: c.l.stmts.get(p.tail), query: query}
	}
	return out, m, nil
}

// takeSession takes what a session-pooled client's session (or a pinned
// transaction-pooled client's) holds on its one server — its settings
// (read back, as for a transaction the proxy does not follow: readBack),
// its protocol-level prepared statements (session pooling) and, when the
// probe finds them, its SQL-level prepared statements and LISTEN channels
// — and closes that server, which is on a database a cutover retired. A
// session holding what cannot move (temporary objects, session advisory
// locks, WITH HOLD cursors: probe) ends with 57P01 instead.
func (c *client) takeSession() (*sessionMove, error) {
	s := c.server
	held, err := c.probe(s)
	if err == nil && held&^objMovable != 0 {
		err = errSessionPinned(c.db.Name, held&^objMovable)
	}
	if err == nil {
		err = c.readBack(s)
	}
	m := &sessionMove{}
	if err == nil && c.mode == config.PoolSession {
		// In transaction pooling the client's protocol-level statements
		// are the proxy's (c.stmts), and the server's are proxy-wide
		// ones of every client.
		m.stmts, err = sessionStatements(s, c.toClient)
	}
	if err == nil && held&objSQLPrepared != 0 {
		m.sql, err = sqlStatements(s, c.toClient)
	}
	if err == nil && held&objListen != 0 {
		m.channels, err = listeningChannels(s, c.toClient)
	}
	s.Broken = true // the old database's connection: closed, never pooled again
	c.detach()
	if err != nil {
		return nil, errCannotMove(err)
	}
	return m, nil
}

// errCannotMove is the 57P01 that ends a session whose state could not be
// taken from, or replayed on, the servers a cutover moved it to; err
// itself when it is a FATAL already. A server's ERROR (on one of the
// proxy's own statements) becomes the 57P01 too: the session it answered
// is gone.
func errCannotMove(err error) error {
	if e, ok := wire.AsError(err); ok && e.Fatal() {
		return err
	}
	return wire.Fatalf(wire.AdminShutdown, "terminating connection due to administrator command: the session could not move to the resharded database: %v", err)
}

// protoStmt is a protocol-level prepared statement of a server's session:
// its name and the body of the Parse message that prepares it after the
// name (text, NUL, parameter types).
type protoStmt struct {
	name string
	tail []byte
}

// sessionStatements returns the protocol-level prepared statements of s's
// session, with the parameter types the server resolved.
func sessionStatements(s *pool.Server, notify func(raw []byte)) ([]protoStmt, error) {
	rows, err := idleQuery(s, "SELECT name, statement, pg_catalog.array_to_string(parameter_types::pg_catalog.oid[], ',') "+
		"FROM pg_catalog.pg_prepared_statements WHERE NOT from_sql", notify)
	if err != nil {
		return nil, fmt.Errorf("reading the session's prepared statements: %w", err)
	}
	var out []protoStmt
	for _, r := range rows {
		if len(r) != 3 || r[0] == nil || r[1] == nil {
			continue
		}
		var oids []uint32
		for f := range strings.SplitSeq(string(r[2]), ",") {
			if f == "" {
				continue
			}
			oid, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("prepared statement %q: parameter type %q", r[0], f)
			}
			oids = append(oids, uint32(oid))
		}
		tail := append(append([]byte{}, r[1]...), 0)
		tail = wire.AppendInt16(tail, int16(len(oids)))
		for _, oid := range oids {
			tail = wire.AppendInt32(tail, int32(oid))
		}
		out = append(out, protoStmt{name: string(r[0]), tail: tail})
	}
	return out, nil
}

// moveSession moves a session-pooled client of a one-shard database that a
// cutover moved to another server (a one-shard destination), at its
// transaction boundary: it takes the session's settings, prepared
// statements and LISTEN channels from its server on the old database
// (takeSession), checks a server of the new one out with those settings
// (attach, as any session starts), and prepares the statements there under
// the client's names (SQL-level ones with their own PREPARE) and listens
// on the channels. The client notices nothing; a session that cannot move
// ends with 57P01.
func (c *client) moveSession(ctx context.Context) error {
	c.offLoop() // new servers, maybe new connections
	m, err := c.takeSession()
	if err != nil {
		return err
	}
	ps := m.stmts
	if err := c.attach(ctx); err != nil {
		if e, ok := wire.AsError(err); ok && !e.Fatal() {
			// The new server refused a setting: the session is not what
			// the client had; it cannot go on as if it moved.
			err = fmt.Errorf("restoring its settings: %s", e.Message)
		}
		return errCannotMove(err)
	}
	// SQL-level statements and LISTEN first: the simple Queries that
	// create them drop the unnamed statement, which prepareAll prepares.
	if err := replaySQL(c.server, m, c.toClient); err != nil {
		c.server.Broken = true
		c.detach()
		return errCannotMove(err)
	}
	if c.mode == config.PoolTransaction {
		// A pinned client: the new server keeps it (settle probes it
		// when its transaction ends); its protocol-level statements
		// follow it as on any server (prepared.go).
		c.pinned = true
		c.log.Info("database moved: the pinned session continues on its new server", "server", c.server.Addr,
			"sql_statements", len(m.sql), "channels", len(m.channels))
		return nil
	}
	unnamed := false
	if _, tail, ok := parseBody(c.unnamed); ok {
		ps = append(ps, protoStmt{tail: tail})
		unnamed = true
	}
	if err := prepareAll(c.server, ps, unnamed, c.toClient); err != nil {
		c.server.Broken = true
		c.detach()
		return errCannotMove(err)
	}
	c.log.Info("database moved: the session continues on its new server", "server", c.server.Addr,
		"statements", len(ps), "sql_statements", len(m.sql), "channels", len(m.channels))
	return nil
}

// prepareAll prepares the statements ps on the idle server s under their
// names, in one round trip. When unnamed says the last one is the
// session's unnamed statement, it goes in a round trip of its own whose
// failure is no error: the client may not use it again (it could have
// failed on the old server too), and a Bind of it then fails as it would
// there.
func prepareAll(s *pool.Server, ps []protoStmt, unnamed bool, notify func(raw []byte)) error {
	batch := func(ps []protoStmt) (*wire.Error, error) {
		var out []byte
		for _, p := range ps {
			start := len(out)
			out = append(append(append(out, 'P', 0, 0, 0, 0), p.name...), 0)
			out = wire.FinishMessage(append(out, p.tail...), start)
		}
		_, status, serr, err := serverBatch(s, append(out, 'S', 0, 0, 0, 4), notify)
		if err != nil {
			return nil, fmt.Errorf("preparing the session's statements on %s: %w", s.Addr, err)
		}
		if status != 'I' {
			return nil, fmt.Errorf("preparing the session's statements on %s: not idle after Sync", s.Addr)
		}
		return serr, nil
	}
	named := ps
	if unnamed {
		named = ps[:len(ps)-1]
	}
	if len(named) > 0 {
		if serr, err := batch(named); err != nil {
			return err
		} else if serr != nil {
			return fmt.Errorf("preparing the session's statements on %s: %s", s.Addr, serr.Message)
		}
	}
	if unnamed {
		if _, err := batch(ps[len(ps)-1:]); err != nil {
			return err
		}
	}
	return nil
}

// errBecameSharded tells the caller of attach that the client's database
// became sharded while it waited at the gate, and that the client can
// move (becomeSharded) and serve its message on the sharded path.
var errBecameSharded = errors.New("the database became sharded")

// movable reports whether becomeSharded can move the client now: at a
// transaction boundary, holding no server (transaction pooling), or only
// the one its session objects pin it to (transaction pooling), or its
// session's (session pooling).
func (c *client) movable() bool {
	if c.xs != nil || c.pipe.has(pipeUnsynced) || len(c.q) > 0 || c.tx != 'I' {
		return false
	}
	switch c.mode {
	case config.PoolTransaction:
		return c.server == nil || c.pinned
	case config.PoolSession:
		return c.server != nil
	}
	return false
}

// errSessionPinned ends a session that a cutover of database db would
// move but that holds session objects that cannot move (probe): held
// names them.
func errSessionPinned(db string, held sessionObjects) *wire.Error {
	return &wire.Error{Severity: "FATAL", Code: wire.AdminShutdown, Message: "terminating connection due to administrator command",
		Detail: fmt.Sprintf("database %q was resharded and this session holds %s, which cannot move to the new shards; reconnect", db, held)}
}

// errResharded ends a one-shard client that meets its database sharded
// where it cannot change paths (see becomeSharded).
func errResharded(db string) error {
	return &wire.Error{Severity: "FATAL", Code: wire.AdminShutdown,
		Message: "terminating connection due to administrator command",
		Detail:  fmt.Sprintf("database %q was resharded while this session waited; reconnect", db)}
}

// A session-pooled client of a sharded database keeps a server per shard
// between transactions, but leaves the gate then (releaseIfIdle), as a
// one-shard session does, so that a resharding cutover drains it. When the
// cutover changed the database's shards, the client meets the new ones at
// its next transaction (attachShard): its settings are the proxy's
// (c.sess.sets, read back at the end of each transaction where the proxy
// does not follow them) and its prepared statements the sharded path's
// own (c.sstmts), so only its servers stay behind — closed, as the old
// shards are being retired — and the new shards' servers get the
// settings and statements as any server a sharded client checks out. A
// session holding what cannot move (probe) ends with 57P01.

// shardsMoved reports whether the running configuration names other
// shards for the client's database than the one the client was set up
// with (a resharding cutover).
func (c *client) shardsMoved() bool {
	st := c.l.State()
	if st == c.st {
		return false
	}
	db := st.Config.Database(c.db.Name)
	if db == nil || len(db.Shards) != len(c.db.Shards) {
		return true
	}
	for i, sh := range db.Shards {
		if !sameServer(sh, c.db.Shards[i]) {
			return true
		}
	}
	return false
}

// leaveSessionShards lets a session-pooled sharded client's servers go
// after a cutover moved its database (see shardsMoved), taking their
// SQL-level prepared statements and LISTEN channels along (adoptMoved), or
// fails with 57P01 when one of them holds session objects that cannot
// move.
func (c *client) leaveSessionShards() error {
	saved := c.server
	defer func() { c.server = saved }()
	var m sessionMove
	listened := -1
	var err error
	for i := range c.ext {
		s := c.xs.Server(i)
		if s == nil || s.Broken || err != nil {
			continue
		}
		c.server = s
		var held sessionObjects
		if held, err = c.probe(s); err != nil {
			continue
		}
		if bad := held &^ objMovable; bad != 0 {
			err = errSessionPinned(c.db.Name, bad)
			continue
		}
		if held&objSQLPrepared != 0 {
			var sql []sqlMove
			sql, err = sqlStatements(s, c.toClient)
			m.sql = append(m.sql, sql...)
		}
		if err == nil && held&objListen != 0 {
			var chans []string
			chans, err = listeningChannels(s, c.toClient)
			m.channels = append(m.channels, chans...)
			if listened < 0 {
				listened = i
			}
		}
	}
	for i := range c.ext {
		if s := c.xs.Server(i); s != nil {
			s.Broken = true // the old shards' connections: closed, never pooled again
		}
	}
	c.server = nil
	saved = nil
	c.detachShards()
	if err == nil {
		err = c.adoptMoved(&m, max(listened, 0))
	}
	if err != nil {
		return errCannotMove(err)
	}
	c.log.Info("database resharded: the session continues on its new shards")
	return nil
}

// fatalSent is an error whose FATAL the client got already: the caller
// ends the session without answering again (it does not unwrap to the
// *wire.Error, which the paths would send).
type fatalSent struct{ err error }

func (f *fatalSent) Error() string { return f.err.Error() }
