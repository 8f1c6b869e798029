package frontend

import (
	"context"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// The session objects a resharding cutover moves with a session
// (resharded.go): SQL-level prepared statements and LISTEN channels, read
// from the old server (sqlStatements, listeningChannels) and re-created on
// a one-shard destination (replaySQL) or on the sharded path (adoptMoved,
// listenAgain).

// sessionMove is what a cutover takes from a server's session besides its
// settings, to re-create on the servers the session moves to.
type sessionMove struct {
	stmts    []protoStmt // protocol-level prepared statements
	sql      []sqlMove   // SQL-level prepared statements of the client's own
	channels []string    // LISTEN channels
}

// sqlMove is a SQL-level prepared statement of a server's session.
type sqlMove struct {
	name string
	// prepare is the PREPARE that created it: the statement text the
	// server kept when that was one PREPARE (so that the new server
	// keeps the same text), else the PREPARE's own part of it.
	prepare string
	// params are its parameter types as the server names them
	// (regtype[] as text), to check the new server resolved the same.
	params string
}

// adoptMoved makes the SQL-level prepared statements a cutover took from
// the session's old servers the client's proxy-wide statements on the
// sharded path (sqlprepare.go), and keeps its LISTEN channels for
// listenAgain, which listens on shard (the old shard that listened) or,
// when the new shards are fewer, on shard 0.
func (c *client) adoptMoved(m *sessionMove, shard int) error {
	for _, q := range m.sql {
		sp := parseSQLPrep(q.prepare)
		if sp == nil || !sp.prepare || sp.prepName != q.name {
			return errCannotMove(fmt.Errorf("SQL-level prepared statement %q: its PREPARE could not be read back", q.name))
		}
		if c.sqlStmts == nil {
			c.sqlStmts = map[string]*sqlStmt{}
		}
		c.sqlStmts[q.name] = c.l.sqlStmts.get(sp.rest, sp.queryText)
	}
	if len(m.channels) > 0 {
		c.relisten = append(c.relisten[:0], m.channels...)
		c.relistenShard = shard
	}
	return nil
}

// listenAgain listens, on one shard's server, on the channels a cutover
// took from the session's old servers (adoptMoved), at the start of the
// session's first transaction on the new shards: a NOTIFY there from then
// on reaches the client, as LISTEN on a sharded database runs on one
// shard. A failure to check the server out is the statement's error, and
// the next transaction tries again; a LISTEN that fails ends the session
// with 57P01.
func (c *client) listenAgain(ctx context.Context) error {
	i := c.relistenShard
	if i >= c.xs.Len() {
		i = 0
	}
	if err := c.attachHeld(ctx, i); err != nil {
		return err
	}
	s := c.xs.Server(i)
	if _, err := idleQuery(s, listenSQL(c.relisten), c.toClient); err != nil {
		return errCannotMove(fmt.Errorf("listening again on %s: %s", s.Addr, errText(err)))
	}
	c.log.Info("database resharded: the session listens on its new shard", "shard", i, "channels", len(c.relisten))
	c.relisten = c.relisten[:0]
	return nil
}

// errText is err's message; a server's ErrorResponse gives its own.
func errText(err error) string {
	if e, ok := wire.AsError(err); ok {
		return e.Message
	}
	return err.Error()
}

// sqlStatements returns the SQL-level prepared statements of s's session
// that are the client's (not the proxy's own: notProxyStatements), each
// with the PREPARE that made it, in the order they were prepared.
func sqlStatements(s *pool.Server, notify func(raw []byte)) ([]sqlMove, error) {
	rows, err := idleQuery(s, "SELECT name, statement, parameter_types::pg_catalog.text FROM pg_catalog.pg_prepared_statements "+
		"WHERE from_sql"+notProxyStatements(s)+" ORDER BY prepare_time, name", notify)
	if err != nil {
		return nil, fmt.Errorf("reading the session's SQL-level prepared statements: %w", err)
	}
	var out []sqlMove
	for _, r := range rows {
		if len(r) != 3 || r[0] == nil || r[1] == nil || r[2] == nil {
			continue
		}
		name := string(r[0])
		prepare, err := prepareText(string(r[1]), name)
		if err != nil {
			return nil, err
		}
		out = append(out, sqlMove{name: name, prepare: prepare, params: string(r[2])})
	}
	return out, nil
}

// prepareText returns the PREPARE of statement name in src, the statement
// text pg_prepared_statements keeps (the whole Query or Parse that ran
// it): src itself when that is the one PREPARE, else the last PREPARE of
// that name in it.
func prepareText(src, name string) (string, error) {
	tree, err := pg_query.Parse(src)
	if err != nil {
		return "", fmt.Errorf("SQL-level prepared statement %q: reading its PREPARE: %w", name, err)
	}
	found := ""
	for _, raw := range tree.Stmts {
		p := raw.Stmt.GetPrepareStmt()
		if p == nil || p.Name != name {
			continue
		}
		if len(tree.Stmts) == 1 {
			return src, nil
		}
		end := len(src)
		if raw.StmtLen > 0 {
			end = int(raw.StmtLocation + raw.StmtLen)
		}
		if start := int(raw.StmtLocation); start >= 0 && start <= end && end <= len(src) {
			found = strings.TrimSpace(src[start:end]) // a location starts after the previous ';'

		}
	}
	if found == "" {
		return "", fmt.Errorf("SQL-level prepared statement %q: its PREPARE is not in the statement text the server kept", name)
	}
	return found, nil
}

// replaySQL prepares m's SQL-level statements on the idle server s with
// their own PREPARE, checks that s resolved the same parameter types, and
// listens on m's channels.
func replaySQL(s *pool.Server, m *sessionMove, notify func(raw []byte)) error {
	if len(m.sql) > 0 {
		names := make([]string, len(m.sql))
		for i, q := range m.sql {
			if _, err := idleQuery(s, q.prepare, notify); err != nil {
				return fmt.Errorf("preparing the SQL-level statement %q on %s: %s", q.name, s.Addr, errText(err))
			}
			names[i] = q.name
		}
		rows, err := idleQuery(s, "SELECT name, parameter_types::pg_catalog.text FROM pg_catalog.pg_prepared_statements WHERE from_sql AND name = ANY ("+
			wire.QuoteLiteral(textArray(names))+"::pg_catalog.text[])", notify)
		if err != nil {
			return fmt.Errorf("reading back the SQL-level statements on %s: %s", s.Addr, errText(err))
		}
		got := map[string]string{}
		for _, r := range rows {
			if len(r) == 2 && r[0] != nil && r[1] != nil {
				got[string(r[0])] = string(r[1])
			}
		}
		for _, q := range m.sql {
			if p, ok := got[q.name]; !ok || p != q.params {
				return fmt.Errorf("the SQL-level statement %q has parameter types %s on %s, %s before", q.name, p, s.Addr, q.params)
			}
		}
	}
	if len(m.channels) > 0 {
		if _, err := idleQuery(s, listenSQL(m.channels), notify); err != nil {
			return fmt.Errorf("listening on %s: %s", s.Addr, errText(err))
		}
	}
	return nil
}

// textArray is names as a PostgreSQL text[] literal's text, each element
// quoted.
func textArray(names []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(n) + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

// listenSQL is one Query that listens on channels.
func listenSQL(channels []string) string {
	var b strings.Builder
	for _, ch := range channels {
		b.WriteString("LISTEN " + wire.QuoteIdent(ch) + "; ")
	}
	return b.String()
}

// listeningChannels returns the channels s's session listens on.
func listeningChannels(s *pool.Server, notify func(raw []byte)) ([]string, error) {
	rows, err := idleQuery(s, "SELECT pg_catalog.pg_listening_channels()", notify)
	if err != nil {
		return nil, fmt.Errorf("reading the session's LISTEN channels: %w", err)
	}
	var out []string
	for _, r := range rows {
		if len(r) == 1 && r[0] != nil {
			out = append(out, string(r[0]))
		}
	}
	return out, nil
}
