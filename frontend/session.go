package frontend

import (
	"fmt"
	"sort"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
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
	opDeallocate               // DEALLOCATE name: one prepared statement (name)
	// opLocal is SET LOCAL name: it ends with its transaction and changes
	// nothing at commit, but while the transaction is open the session
	// resolves with it (ownSearchPath).
	opLocal
)

// setOp is one tracked change, applied when its transaction commits.
type setOp struct {
	local bool // opHint: SET LOCAL
	kind  opKind
	name  string // lower-cased setting name
	stmt  string // the SET statement that reproduces the value
	// server is the server that ran the statement, once it did: the one
	// whose record of its settings the op changes (nil: the client's
	// current server).
	server *pool.Server
}

// session is a client's view of its session settings.
//
// A client's startup parameters are not part of it: the pool opens servers
// with them (see serverStartup), so PostgreSQL itself knows them as the
// session's reset values, reports them in ParameterStatus and shows them in
// pg_settings with source 'client', exactly as without a proxy.
type session struct {
	sets    map[string]string // from SET statements: name → statement that reproduces the value
	pending []setOp           // changes of the open transaction
	// resync says the open transaction changed settings in a way the
	// proxy does not follow statement by statement (set_config, ROLLBACK
	// TO SAVEPOINT after a SET, an unparsable statement): when it ends,
	// the settings are read back from the server (see readBack).
	resync bool
}

// Identity settings: SET ROLE and SET SESSION AUTHORIZATION. RESET ALL
// leaves them alone; SET SESSION AUTHORIZATION (and DISCARD ALL) also
// resets the role. They are replayed after every other setting, so that a
// superuser-only SET runs before a SET ROLE to a less privileged role.
const (
	settingRole     = "role"
	settingSessAuth = "session_authorization"
)

func isIdentity(name string) bool { return name == settingRole || name == settingSessAuth }

// notForServer are startup parameters that never reach a server's
// startup packet: the proxy's own (user, database, options, which the
// proxy expanded into its settings) and replication (refused at login).
var notForServer = map[string]bool{"user": true, "database": true, "replication": true, "options": true}

// serverStartup returns the startup parameters a server must be opened
// with for a client that sent params.
func serverStartup(params map[string]string) map[string]string {
	m := make(map[string]string, len(params))
	for k, v := range params {
		if !notForServer[k] {
			m[k] = v
		}
	}
	return m
}

// want returns the SET statement the client expects for name ("" means
// the server's reset value).
func (s *session) want(name string) string { return s.sets[name] }

// diff returns the SQL that changes a server's settings (have) into the
// client's, or "" when they agree. Statements come in a fixed order: a
// role or session authorization the server carries is undone first (SET
// SESSION AUTHORIZATION DEFAULT resets both), then every other setting is
// set or reset, then the client's session authorization and role are set.
func (s *session) diff(have map[string]string) string {
	if s.agrees(have) {
		return ""
	}
	return s.diffAll(have)
}

// diffAll is diff without its shortcut for agreeing settings.
func (s *session) diffAll(have map[string]string) string {
	var others []string
	for _, name := range sortedKeys(s.sets) {
		if !isIdentity(name) && have[name] != s.sets[name] {
			others = append(others, s.sets[name])
		}
	}
	for _, name := range sortedKeys(have) {
		if !isIdentity(name) && s.want(name) == "" {
			others = append(others, "RESET "+wire.QuoteIdent(name))
		}
	}
	haveID := have[settingSessAuth] != "" || have[settingRole] != ""
	idDiffers := have[settingSessAuth] != s.want(settingSessAuth) || have[settingRole] != s.want(settingRole)
	if len(others) == 0 && !idDiffers {
		return ""
	}
	var b strings.Builder
	resetID := haveID && (idDiffers || len(others) > 0)
	if resetID {
		b.WriteString("SET SESSION AUTHORIZATION DEFAULT; ")
	}
	for _, stmt := range others {
		b.WriteString(stmt)
		b.WriteString("; ")
	}
	if resetID || idDiffers {
		for _, name := range []string{settingSessAuth, settingRole} {
			if v := s.want(name); v != "" {
				b.WriteString(v)
				b.WriteString("; ")
			}
		}
	}
	return b.String()
}

// agrees reports whether have holds exactly the client's settings, so that
// diff has nothing to send: the case of nearly every checkout, where the
// server's record was synced to this client's, or both are empty. It
// neither sorts nor allocates. A statement that is "" (never recorded)
// would make diff reset the setting, so it does not count as agreeing.
func (s *session) agrees(have map[string]string) bool {
	if len(have) != len(s.sets) {
		return false
	}
	for name, stmt := range s.sets {
		if v, ok := have[name]; !ok || v != stmt || stmt == "" {
			return false
		}
	}
	return true
}

// syncTo records in have that the client's settings were applied.
func (s *session) syncTo(have map[string]string) {
	clear(have)
	for name, stmt := range s.sets {
		have[name] = stmt
	}
}

// apply changes settings (a client's or a server's record) by op, with
// PostgreSQL's rules for the identity settings.
func apply(m map[string]string, op setOp) {
	switch op.kind {
	case opSet:
		m[op.name] = op.stmt
		if op.name == settingSessAuth {
			delete(m, settingRole)
		}
	case opReset:
		delete(m, op.name)
		if op.name == settingSessAuth {
			delete(m, settingRole)
		}
	case opResetAll:
		for name := range m {
			if !isIdentity(name) {
				delete(m, name)
			}
		}
	case opDiscardAll:
		clear(m)
	}
}

// applyOps commits tracked changes to the client's settings and the
// attached server's record of its own settings.
func (c *client) applyOps(ops []setOp) {
	for _, op := range ops {
		if c.sess.sets == nil {
			c.sess.sets = map[string]string{}
		}
		apply(c.sess.sets, op)
		if s := op.server; s != nil {
			apply(s.Session, op)
		} else if c.server != nil {
			apply(c.server.Session, op)
		}
		switch op.kind {
		case opDiscardAll, opDeallocAll:
			// Statements are not transactional: for clients of
			// unsharded databases dropStatements ran when the command
			// completed, and a statement prepared since must survive.
			if c.xs != nil {
				c.dropStatements()
			}
		}
	}
}

// effect is what a statement may do to the session beyond its own
// transaction, as far as a cheap scan of its words tells (literals and
// comments included: a false alarm costs only a parse or a probe).
type effect uint8

const (
	// effSettings: a statement starts with SET, RESET, DISCARD or
	// DEALLOCATE; sessionOps tells what it changes.
	effSettings effect = 1 << iota
	// effResync: set_config() changes settings the proxy does not parse;
	// they are read back when the transaction ends.
	effResync
	// effObjects: temporary objects, session advisory locks, WITH HOLD
	// cursors, LISTEN or SQL-level PREPARE may outlive the transaction;
	// the server is probed when it ends and the client keeps it (pinned)
	// while any of them exists.
	effObjects
	// effSQLPrepare: a statement starts with PREPARE, EXECUTE or
	// DEALLOCATE; SQL-level prepared statements are rewritten
	// (sqlprepare.go).
	effSQLPrepare
)

// scanEffects tells which effects sql may have, in one pass over its
// words: the first word of each statement (after the start or a
// semicolon) and every word anywhere.
func scanEffects(sql []byte) effect {
	var eff effect
	first := true
	for i := 0; i < len(sql); {
		c := sql[i]
		if !identByte[c] {
			switch {
			case c == ';':
				first = true
			case i+1 < len(sql) && (c == '-' && sql[i+1] == '-' || c == '/' && sql[i+1] == '*'):
				// A comment, where a statement's first word may follow.
				if j := skipSpaceAndComments(sql, i); j > i {
					i = j
					continue
				}
			}
			i++
			continue
		}
		j := i + 1
		for j < len(sql) && identByte[sql[j]] {
			j++
		}
		w := sql[i:j]
		if first {
			eff |= firstWordEffect(w)
			first = false
		}
		if effectStart[c] {
			eff |= wordEffect(w)
		}
		i = j
	}
	return eff
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

// identByte is isIdentByte as a table, and effectStart tells the first
// bytes of the words wordEffect knows (hold, listen, pg_…, prepare,
// set_config, temp, temporary), in either case: scanEffects looks a word
// up only when it starts with one. Both are read-only after init.
var identByte, effectStart = func() (ident, start [256]bool) {
	for c := range 256 {
		ident[c] = isIdentByte(byte(c))
	}
	for _, c := range "hlpst" {
		start[c] = true
		start[c-'a'+'A'] = true
	}
	return ident, start
}()

// is reports whether word w is kw (lower case), ignoring ASCII case.
func is(w []byte, kw string) bool {
	if len(w) != len(kw) {
		return false
	}
	for i := range w {
		if w[i]|0x20 != kw[i] && !(w[i] == '_' && kw[i] == '_') {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether w starts with kw (lower case), ignoring
// ASCII case.
func hasPrefixFold(w []byte, kw string) bool {
	return len(w) >= len(kw) && is(w[:len(kw)], kw)
}

// firstWordEffect is the effect the first word of a statement hints at.
func firstWordEffect(w []byte) effect {
	switch len(w) {
	case 3:
		if is(w, "set") {
			return effSettings
		}
	case 5:
		if is(w, "reset") {
			return effSettings
		}
	case 7:
		switch {
		case is(w, "discard"):
			return effSettings
		case is(w, "prepare"), is(w, "execute"):
			return effSQLPrepare
		}
	case 10:
		if is(w, "deallocate") {
			return effSettings | effSQLPrepare
		}
	}
	return 0
}

// wordEffect is the effect a word anywhere in a statement hints at.
func wordEffect(w []byte) effect {
	switch len(w) {
	case 4:
		if is(w, "temp") || is(w, "hold") {
			return effObjects
		}
	case 6:
		if is(w, "listen") {
			return effObjects
		}
	case 7:
		if is(w, "pg_temp") || is(w, "prepare") {
			return effObjects
		}
	case 9:
		if is(w, "temporary") {
			return effObjects
		}
	case 10:
		if is(w, "set_config") {
			return effResync
		}
	}
	if len(w) > 11 && (w[0]|0x20) == 'p' && (hasPrefixFold(w, "pg_advisory") || hasPrefixFold(w, "pg_try_advisory")) {
		return effObjects
	}
	return 0
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

// stmtEffect is what executing one statement does to the session.
type stmtEffect struct {
	eff effect
	ops []setOp
	// needs are the proxy-wide statements that a rewritten EXECUTE or
	// DEALLOCATE names (sqlprepare.go): the server must have them.
	needs []string
	// prepares is the proxy-wide statement a rewritten PREPARE creates.
	prepares string
}

// isZero reports whether se has no effect and names no statement.
func (se *stmtEffect) isZero() bool {
	return se.eff == 0 && len(se.ops) == 0 && len(se.needs) == 0 && se.prepares == ""
}

// analyze returns the session effect of the statement text sql. A text
// the parser rejects but that may change settings is read back after its
// transaction (effResync).
func analyze(sql []byte) stmtEffect {
	eff := scanEffects(sql)
	if eff == 0 {
		return stmtEffect{}
	}
	var ops []setOp
	if eff&effSettings != 0 {
		var err error
		if ops, err = sessionOps(string(sql)); err != nil {
			eff |= effResync
		}
	}
	se := stmtEffect{eff: eff, ops: ops}
	if eff&effSQLPrepare != 0 {
		se.needs = proxyNames(string(sql))
		if sp := parseSQLPrep(string(sql)); sp != nil && sp.prepare && strings.HasPrefix(sp.prepName, "sgq_") {
			se.prepares = sp.prepName
		}
	}
	return se
}

// sessionOps parses sql and returns the session changes its statements
// make. SET LOCAL lasts for one transaction: its op (opLocal) only says the
// transaction changed the setting. SET TRANSACTION is not tracked.
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
				ops = append(ops, setOp{kind: opLocal, name: name})
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
			} else {
				ops = append(ops, setOp{kind: opDeallocate, name: n.DeallocateStmt.Name})
			}
		}
	}
	return ops, nil
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

// standardStrings reports whether the client's standard_conforming_strings
// is on, which decides what a backslash in a string literal means to the
// router's parser (router.AnalyzeStrings): the value its SETs and RESETs
// left (the committed ones, then the open transaction's), else the one it
// logged in with. Not followed: SET LOCAL, and set_config until its
// transaction ended (the settings are read back then).
func (c *client) standardStrings() bool {
	const name = "standard_conforming_strings"
	stmt, set := c.sess.sets[name]
	for _, op := range c.sess.pending {
		switch {
		case op.kind == opSet && op.name == name:
			stmt, set = op.stmt, true
		case op.kind == opReset && op.name == name, op.kind == opResetAll, op.kind == opDiscardAll:
			stmt, set = "", false
		}
	}
	if !set {
		return !c.nonStandardLogin
	}
	return !boolOff(settingValue(stmt))
}

// settingValue returns the value a deparsed SET statement ("SET name TO
// 'value'", or "value" as the deparser writes some) sets, unquoted
// and lower-cased.
func settingValue(stmt string) string {
	i := strings.LastIndex(stmt, " TO ")
	if i < 0 {
		return ""
	}
	return strings.ToLower(strings.Trim(strings.TrimSpace(stmt[i+4:]), `'"`))
}

// boolOff reports whether v is a boolean setting's false, as PostgreSQL's
// parse_bool reads it: a prefix of false or no, of or off, 0.
func boolOff(v string) bool {
	switch {
	case v == "":
		return false
	case strings.HasPrefix("false", v), strings.HasPrefix("no", v):
		return true
	case v == "of", v == "off", v == "0":
		return true
	}
	return false
}
