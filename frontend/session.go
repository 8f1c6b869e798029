package frontend

import (
	"fmt"
	"sort"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// opKind is a change to session settings.
type opKind uint8

const (
	opSet        opKind = iota // SET name TO value
	opReset                    // RESET name, SET name TO DEFAULT
	opResetAll                 // RESET ALL
	opDiscardAll               // DISCARD ALL: settings and prepared statements
	opDeallocAll               // DEALLOCATE ALL: prepared statements
	opHint                     // SET [LOCAL] shardgate.shard / shardgate.sharding_key: routing, never sent
)

// setOp is one tracked change, applied when its transaction commits.
type setOp struct {
	local bool // opHint: SET LOCAL
	kind  opKind
	name  string // lower-cased setting name
	stmt  string // the SET statement that reproduces the value
}

// session is a client's view of its session settings.
type session struct {
	startup   map[string]string // from the startup packet: name → SET statement
	sets      map[string]string // from SET statements: name → SET statement
	pending   []setOp           // changes of the open transaction
	lastError string            // why the last internal SET failed
}

// untracked are startup parameters the proxy must not replay with SET.
var untracked = map[string]bool{
	"user": true, "database": true, "replication": true, "options": true,
	"is_superuser": true, "server_version": true, "server_encoding": true,
	"integer_datetimes": true, "session_authorization": true, "in_hot_standby": true,
}

// startupSettings turns startup parameters into SET statements.
func startupSettings(params map[string]string) map[string]string {
	m := make(map[string]string, len(params))
	for k, v := range params {
		if untracked[k] {
			continue
		}
		m[k] = "SET " + quoteIdent(k) + " TO " + quoteLiteral(v)
	}
	return m
}

// want returns the SET statement the client expects for name ("" means
// the server default).
func (s *session) want(name string) string {
	if v, ok := s.sets[name]; ok {
		return v
	}
	return s.startup[name]
}

// diff returns the SQL that changes a server's settings (have) into the
// client's, or "" when they agree.
func (s *session) diff(have map[string]string) string {
	var b strings.Builder
	add := func(stmt string) {
		b.WriteString(stmt)
		b.WriteString("; ")
	}
	for name, stmt := range s.startup {
		if _, over := s.sets[name]; !over && have[name] != stmt {
			add(stmt)
		}
	}
	for name, stmt := range s.sets {
		if have[name] != stmt {
			add(stmt)
		}
	}
	for name := range have {
		if s.want(name) == "" {
			add("RESET " + quoteIdent(name))
		}
	}
	return b.String()
}

// syncTo records in have that the client's settings were applied.
func (s *session) syncTo(have map[string]string) {
	clear(have)
	for name := range s.startup {
		have[name] = s.want(name)
	}
	for name, stmt := range s.sets {
		have[name] = stmt
	}
}

// applyOps commits tracked changes to the client's settings and the
// attached server's record of its own settings.
func (c *client) applyOps(ops []setOp) {
	s := c.server
	for _, op := range ops {
		switch op.kind {
		case opSet:
			if c.sess.sets == nil {
				c.sess.sets = map[string]string{}
			}
			c.sess.sets[op.name] = op.stmt
			s.Session[op.name] = op.stmt
		case opReset:
			delete(c.sess.sets, op.name)
			delete(s.Session, op.name)
		case opResetAll:
			clear(c.sess.sets)
			clear(s.Session)
		case opDiscardAll:
			clear(c.sess.sets)
			clear(s.Session)
			if c.shards != nil {
				c.dropStatements()
			}
		case opDeallocAll:
			// Statements are not transactional: for clients of
			// unsharded databases dropStatements ran when the command
			// completed, and a statement prepared since must survive.
			if c.shards != nil {
				c.dropStatements()
			}
		}
		if op.name == "application_name" || op.kind != opSet && op.kind != opReset {
			c.infoMu.Lock()
			c.appName = strings.Trim(strings.TrimPrefix(c.sess.want("application_name"), "SET application_name TO "), "'")
			c.infoMu.Unlock()
		}
	}
}

// sessionKeywords start statements that change session state.
var sessionKeywords = []string{"set", "reset", "discard", "deallocate"}

// mayChangeSession is a cheap pre-check: does any statement in sql start
// with SET, RESET, DISCARD or DEALLOCATE? Only then is sql parsed. A
// semicolon inside a literal can only cause an unneeded parse.
func mayChangeSession(sql []byte) bool {
	i := 0
	for {
		i = skipSpaceAndComments(sql, i)
		for _, kw := range sessionKeywords {
			if hasKeyword(sql[i:], kw) {
				return true
			}
		}
		j := indexByte(sql[i:], ';')
		if j < 0 {
			return false
		}
		i += j + 1
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func hasKeyword(b []byte, kw string) bool {
	if len(b) < len(kw) {
		return false
	}
	for i := 0; i < len(kw); i++ {
		if b[i]|0x20 != kw[i] {
			return false
		}
	}
	if len(b) == len(kw) {
		return true
	}
	c := b[len(kw)]
	return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_')
}

func skipSpaceAndComments(b []byte, i int) int {
	for i < len(b) {
		switch {
		case b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' || b[i] == '\f':
			i++
		case b[i] == '-' && i+1 < len(b) && b[i+1] == '-':
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			depth := 0
			for i+1 < len(b) {
				if b[i] == '/' && b[i+1] == '*' {
					depth++
					i += 2
				} else if b[i] == '*' && b[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			if depth != 0 {
				return len(b)
			}
		default:
			return i
		}
	}
	return i
}

// sessionOps parses sql and returns the session changes its statements
// make. SET LOCAL and SET TRANSACTION last for one transaction and are not
// tracked.
func sessionOps(sql string) ([]setOp, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var ops []setOp
	for _, raw := range tree.Stmts {
		switch n := raw.Stmt.Node.(type) {
		case *pg_query.Node_VariableSetStmt:
			v := n.VariableSetStmt
			name := strings.ToLower(v.Name)
			if strings.HasPrefix(name, "shardgate.") {
				op := setOp{kind: opHint, name: name, local: v.IsLocal}
				if v.Kind == pg_query.VariableSetKind_VAR_SET_VALUE && len(v.Args) == 1 {
					if c := v.Args[0].GetAConst(); c != nil {
						switch {
						case c.GetIval() != nil:
							op.stmt = fmt.Sprint(c.GetIval().Ival)
						case c.GetSval() != nil:
							op.stmt = c.GetSval().Sval
						case c.GetFval() != nil:
							op.stmt = c.GetFval().Fval
						}
					}
				}
				if name != "shardgate.shard" && name != "shardgate.sharding_key" {
					return nil, fmt.Errorf("unknown setting %s (shardgate.shard and shardgate.sharding_key exist)", name)
				}
				ops = append(ops, op)
				continue
			}
			if v.IsLocal {
				continue
			}
			switch v.Kind {
			case pg_query.VariableSetKind_VAR_SET_VALUE:
				stmt, err := pg_query.Deparse(&pg_query.ParseResult{Version: tree.Version, Stmts: []*pg_query.RawStmt{{Stmt: raw.Stmt}}})
				if err != nil {
					return nil, fmt.Errorf("deparse: %w", err)
				}
				ops = append(ops, setOp{kind: opSet, name: name, stmt: stmt})
			case pg_query.VariableSetKind_VAR_SET_DEFAULT, pg_query.VariableSetKind_VAR_RESET:
				ops = append(ops, setOp{kind: opReset, name: name})
			case pg_query.VariableSetKind_VAR_RESET_ALL:
				ops = append(ops, setOp{kind: opResetAll})
			}
		case *pg_query.Node_DiscardStmt:
			if n.DiscardStmt.Target == pg_query.DiscardMode_DISCARD_ALL {
				ops = append(ops, setOp{kind: opDiscardAll})
			}
		case *pg_query.Node_DeallocateStmt:
			if n.DeallocateStmt.Isall {
				ops = append(ops, setOp{kind: opDeallocAll})
			}
		}
	}
	return ops, nil
}

func quoteLiteral(s string) string {
	if strings.ContainsRune(s, '\\') {
		return "E'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// sortedKeys returns m's keys in order, for deterministic output.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
