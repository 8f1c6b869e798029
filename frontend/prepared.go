package frontend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// stmt is a proxy-wide prepared statement: one per distinct statement text
// and parameter types, whatever names clients give it.
type stmt struct {
	name  string // proxy-wide name, "sg_<n>"
	parse []byte // the Parse message that prepares it under name
	// valid is set once a server accepted the Parse: a client's Parse of
	// the same text can then be answered without a server (see
	// answerWithoutServer).
	valid atomic.Bool
	// noisy is set once a server's parse of the text raised a notice
	// (the scanner's nonstandard backslash, a truncated identifier):
	// PostgreSQL raises those at every Parse, so that every client Parse
	// of it has a server parse the text again, in the client's session
	// (its settings decide whether they are raised), and the Parses the
	// proxy makes for its own reasons have their notices dropped.
	noisy atomic.Bool

	effOnce sync.Once
	eff     stmtEffect // what executing it does to the session (see analyze)

	npOnce sync.Once
	np     int // parameters a Bind must supply, -1 unknown (see params)

	fetchOnce sync.Once
	fetch     bool // see fetches
}

// fetches reports whether st is a FETCH. PostgreSQL describes a prepared
// FETCH by the cursor as it was at Parse time, and a Describe of one whose
// cursor has since closed dereferences the missing portal
// (FetchStatementTargetList, utility.c: a segmentation fault of the
// backend in PostgreSQL 15). A server statement parsed for another Parse,
// perhaps another client's with another cursor of the name, must not
// answer a client's Parse or Describe: it is parsed again first.
func (st *stmt) fetches() bool {
	st.fetchOnce.Do(func() {
		_, tail, _ := wire.CString(st.parse[5:])
		text, _, _ := wire.CText(tail)
		i := skipSpaceAndComments(text, 0)
		j := i
		for j < len(text) && isIdentByte(text[j]) {
			j++
		}
		st.fetch = is(text[i:j], "fetch")
	})
	return st.fetch
}

// reparse queues a Close and a Parse of st on the server, so that the
// server's statement is described in the session as it is now (see
// fetches); the Close's answer is swallowed, the Parse's is the client's
// when client is set (its Parse), else swallowed too. Every Parse of a
// FETCH goes with its Close: a Close the server skipped after an error
// leaves its statement, which the next Parse then replaces.
func (c *client) reparse(st *stmt, client string) {
	start := len(c.out)
	c.out = append(c.out, 'C', 0, 0, 0, 0, 'S')
	c.out = append(c.out, st.name...)
	c.out = append(c.out, 0)
	c.out = wire.FinishMessage(c.out, start)
	c.out = append(c.out, st.parse...)
	c.q = append(c.queued(), req{kind: reqClose, injected: true, confirm: st},
		req{kind: reqParse, injected: client == "", confirm: st, client: client})
}

// params returns how many parameters a Bind of st must supply, as
// PostgreSQL counts them (router.ParamCount), or -1 when the proxy cannot
// tell. The proxy checks it itself where the server's error would name
// the proxy-wide statement, or come from a shard.
func (st *stmt) params() int {
	st.npOnce.Do(func() {
		st.np = -1
		_, tail, ok := wire.CString(st.parse[5:])
		if !ok {
			return
		}
		text, types, ok := wire.CText(tail)
		if !ok || len(types) < 2 {
			return
		}
		if n, ok := router.ParamCount(string(text), int(binary.BigEndian.Uint16(types))); ok {
			st.np = n
		}
	})
	return st.np
}

// effect returns what executing st does to the session.
func (st *stmt) effect() stmtEffect {
	st.effOnce.Do(func() {
		// parse holds 'P', length, name, NUL, then the text.
		_, tail, _ := wire.CString(st.parse[5:])
		text, _, _ := wire.CText(tail)
		st.eff = analyze(text)
	})
	return st.eff
}

// parseText returns the statement text of a Parse body's tail (text,
// NUL, parameter types).
func parseText(tail []byte) []byte {
	text, _, _ := wire.CText(tail)
	return text
}

// namedCache gives each distinct key (a statement's text, with the schema
// generation, see genKey) one proxy-wide value named prefix<n>, made by
// mk on first use. Both kinds of shared statements use one: protocol-level
// (stmtCache) and SQL-level (sqlStmtCache).
type namedCache[T any] struct {
	prefix string
	gen    *atomic.Uint64 // schema generation, see genKey
	mk     func(name string, key []byte, arg string) *T

	mu     sync.Mutex // guards the following
	m      map[string]*T
	byname map[string]*T
	next   uint64
}

func newNamedCache[T any](prefix string, gen *atomic.Uint64, mk func(name string, key []byte, arg string) *T) *namedCache[T] {
	return &namedCache[T]{prefix: prefix, gen: gen, mk: mk, m: map[string]*T{}, byname: map[string]*T{}}
}

// get returns the value for key, making it (with arg) on first use.
func (nc *namedCache[T]) get(key []byte, arg string) *T {
	var buf [256]byte // most keys: no allocation to look one up
	k := appendGenKey(buf[:0], nc.gen, key)
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if v := nc.m[string(k)]; v != nil {
		return v
	}
	nc.next++
	name := nc.prefix + strconv.FormatUint(nc.next, 10)
	v := nc.mk(name, key, arg)
	nc.m[string(k)] = v
	nc.byname[name] = v
	return v
}

// byName returns the value with proxy-wide name, or nil.
func (nc *namedCache[T]) byName(name string) *T {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.byname[name]
}

// Len returns the number of cached values.
func (nc *namedCache[T]) Len() int {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return len(nc.m)
}

// stmtCache maps statement text + parameter types (the tail of a Parse
// body: text, NUL, parameter count and types) to proxy-wide statements.
type stmtCache struct{ *namedCache[stmt] }

func newStmtCache(gen *atomic.Uint64) stmtCache {
	return stmtCache{newNamedCache("sg_", gen, func(name string, tail []byte, _ string) *stmt {
		msg := []byte{'P', 0, 0, 0, 0}
		msg = append(msg, name...)
		msg = append(msg, 0)
		msg = append(msg, tail...)
		return &stmt{name: name, parse: wire.FinishMessage(msg, 0)}
	})}
}

// get returns the statement for the tail of a Parse body, creating it on
// first use.
func (sc stmtCache) get(tail []byte) *stmt { return sc.namedCache.get(tail, "") }

// appendGenKey appends a cache key to buf, prefixed with the schema generation (see
// Listener.ddlGen): a Parse after a schema change passed through the proxy
// gets a statement of its own, prepared against the new schema, while
// statements clients prepared before keep the plans PostgreSQL gave them
// (and fail as PostgreSQL's would, "cached plan must not change result
// type"). Without it, a client's Parse after DROP TYPE and CREATE TYPE
// reused a server statement whose parameter type was the dropped one.
func appendGenKey(buf []byte, gen *atomic.Uint64, key []byte) []byte {
	if gen != nil {
		buf = append(strconv.AppendUint(buf, gen.Load(), 36), ':')
	}
	return append(buf, key...)
}

// emptyParse prepares the empty query as the unnamed statement: the
// cheapest message that the server answers with ParseComplete, used where a
// client's Parse names a statement the server already has.
var emptyParse = []byte{'P', 0, 0, 0, 8, 0, 0, 0, 0}

// appendUnnamedParse appends a Parse of the unnamed statement whose body
// after the name is tail (text, NUL, parameter types).
func appendUnnamedParse(out, tail []byte) []byte {
	start := len(out)
	out = append(append(out, 'P', 0, 0, 0, 0, 0), tail...)
	return wire.FinishMessage(out, start)
}

// closeUnnamed closes the unnamed statement.
var closeUnnamed = []byte{'C', 0, 0, 0, 6, 'S', 0}

// closeNoop closes a statement that never exists: the server answers
// CloseComplete in the position of the client's Close, without touching
// shared statements.
var closeNoop = wire.FinishMessage(append([]byte{'C', 0, 0, 0, 0, 'S'}, "shardgate_noop\x00"...), 0)

// rewrite translates one extended-protocol message for transaction
// pooling and appends it (plus any Parse the server needs first) to c.out.
func (c *client) rewrite(typ byte, raw, body []byte) error {
	switch typ {
	case 'P':
		return c.rewriteParse(raw, body)
	case 'B':
		return c.rewriteBind(raw, body)
	case 'D', 'C':
		return c.rewriteDescribeClose(typ, raw, body)
	case 'E':
		return c.rewriteExecute(raw, body)
	}
	c.out = append(c.out, raw...)
	c.expect(typ)
	return nil
}

// rewriteParse maps a named Parse onto the proxy-wide statement of its
// text, sent only when the server lacks it.
func (c *client) rewriteParse(raw, body []byte) error {
	s := c.server
	name, tail, ok := wire.CString(body)
	if !ok {
		return wire.Fatalf(wire.ProtocolViolation, "malformed Parse message")
	}
	if c.pipe.has(pipeSkipping) {
		return nil // the server would discard it: the statement is not created
	}
	if len(name) == 0 && c.quietParse(body, tail) {
		c.sendUnnamedParse(raw, body)
		return nil
	}
	orig := parseText(tail)
	nt, fail := c.rewriteSQLText(orig)
	if fail != nil {
		if len(name) == 0 {
			c.forgetUnnamed() // PostgreSQL drops it before it parses the new one
		}
		c.failInOrder(fail)
		return nil
	}
	if nt == nil && c.origText != nil {
		delete(c.origText, string(name))
	}
	if nt != nil {
		c.noteOrig(name, orig)
		tail = append(nt, tail[len(parseText(tail)):]...)
		body = append(append(append([]byte{}, name...), 0), tail...)
		raw = wire.FinishMessage(append([]byte{'P', 0, 0, 0, 0}, body...), 0)
	}
	if len(name) == 0 {
		c.keepUnnamed(body, parseText(tail), nt != nil)
		c.injectNeeds(c.unnamedEffect().needs)
		c.sendUnnamedParse(raw, body)
		return nil
	}
	if c.duplicateSQLName(string(name)) {
		// PostgreSQL parses and analyzes the text before it finds the
		// name taken: a text that fails answers with its own error. The
		// server parses it as its unnamed statement, the proxy swallows
		// the ParseComplete, and the client hears 42P05 in its place
		// (failInOrder) or the text's error, after which the server
		// skips the rest.
		c.out = appendUnnamedParse(c.out, tail)
		c.q = append(c.queued(), req{kind: reqParse, injected: true, unnamed: true})
		s.Unnamed = append(append(s.Unnamed[:0], 0), tail...)
		c.failInOrder(duplicateStatement(name))
		return nil
	}
	st := c.l.stmts.get(tail)
	c.stmts[string(name)] = st
	if st.fetches() {
		c.reparse(st, string(name))
		return nil
	}
	if _, ok := s.Prepared[st.name]; ok || c.pendingParse(st) {
		if c.ownSearchPath() || st.noisy.Load() || c.tx == 'E' || c.syncQueued() {
			// The server parsed it in another session's search_path,
			// or with notices PostgreSQL raises at every Parse, or the
			// transaction is aborted or may be by the time the server
			// gets here (a batch before this one is unanswered), where
			// PostgreSQL refuses a Parse of all but the empty query and
			// the statements that end it: parse the text again,
			// unnamed, so that its errors and notices in this session
			// answer the client's Parse.
			c.out = appendUnnamedParse(c.out, tail)
			s.Unnamed = append(append(s.Unnamed[:0], 0), tail...)
		} else {
			c.out = append(c.out, emptyParse...)
			s.Unnamed = append(s.Unnamed[:0], emptyParse[5:]...)
		}
		// unnamed: the server's unnamed statement is this one now, or
		// unknown when the server rejects or skips it (notParsed).
		c.q = append(c.queued(), req{kind: reqParse, client: string(name), unnamed: true})
		return nil
	}
	c.injectNeeds(st.effect().needs)
	c.out = append(c.out, st.parse...)
	c.q = append(c.queued(), req{kind: reqParse, confirm: st, client: string(name)})
	return nil
}

// rewriteBind binds the proxy-wide statement of the client's name.
func (c *client) rewriteBind(raw, body []byte) error {
	portal, rest, ok := wire.CString(body)
	if !ok {
		return wire.Fatalf(wire.ProtocolViolation, "malformed Bind message")
	}
	name, rest, ok := wire.CString(rest)
	if !ok {
		return wire.Fatalf(wire.ProtocolViolation, "malformed Bind message")
	}
	c.rebindStatement(name)
	st := c.resolve(name)
	if st != nil {
		if n, want := bindParams(rest), st.params(); n >= 0 && want >= 0 && n != want {
			// The server's error would name the proxy-wide statement.
			c.failInOrder(wire.Errorf(wire.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d", n, name, want))
			return nil
		}
	}
	c.notePortal(portal, name, st)
	if st == nil {
		if isProxyName(name) {
			// Never let a client reach another client's shared
			// statement by its proxy-wide name: the server answers
			// 26000 for a name that cannot exist.
			c.out = appendBindRenamed(c.out, portal, name, rest)
		} else {
			c.out = append(c.out, raw...)
		}
		c.expect('B')
		return nil
	}
	start := len(c.out)
	c.out = append(c.out, 'B', 0, 0, 0, 0)
	c.out = append(c.out, portal...)
	c.out = append(c.out, 0)
	c.out = append(c.out, st.name...)
	c.out = append(c.out, 0)
	c.out = append(c.out, rest...)
	c.out = wire.FinishMessage(c.out, start)
	c.expect('B')
	if st.params() < 0 && !c.pipe.has(pipeSkipping) {
		// The proxy cannot count the statement's parameters (a utility
		// statement): the server's error for a wrong count names the
		// proxy-wide statement, which relayError renames.
		last := &c.q[len(c.q)-1]
		last.confirm, last.client = st, string(name)
	}
	return nil
}

// bindParams returns the number of parameters of a Bind body after the
// portal and statement names, or -1 when it is malformed (the server
// reports that).
func bindParams(rest []byte) int {
	d := wire.NewBody(rest)
	for nf := d.Uint16(); nf > 0 && d.Err() == nil; nf-- {
		d.Uint16()
	}
	n := d.Uint16()
	if d.Err() != nil {
		return -1
	}
	return int(n)
}

// rewriteDescribeClose renames a Describe of a statement, and answers a
// Close of a named statement without closing the shared one.
func (c *client) rewriteDescribeClose(typ byte, raw, body []byte) error {
	s := c.server
	if len(body) < 2 {
		return wire.Fatalf(wire.ProtocolViolation, "malformed %c message", typ)
	}
	kind := body[0]
	name, _, ok := wire.CString(body[1:])
	if !ok {
		return wire.Fatalf(wire.ProtocolViolation, "malformed %c message", typ)
	}
	if kind != 'S' {
		if typ == 'C' {
			delete(c.portals, string(name))
		}
		c.out = append(c.out, raw...)
		c.expect(typ)
		return nil
	}
	if typ == 'C' {
		if c.pipe.has(pipeSkipping) {
			// The server skips it after an error: nothing is closed.
			c.out = append(c.out, closeNoop...)
			return nil
		}
		r := req{kind: reqClose}
		if len(name) == 0 {
			c.forgetUnnamed()
			s.Unnamed = s.Unnamed[:0]
			c.out = append(c.out, raw...)
			r.unnamed = true // see notParsed
		} else {
			if st := c.stmts[string(name)]; st != nil {
				// Closed in the client's order of messages; put back if
				// the server skips the Close (notParsed).
				r.client = string(name) + "\x00" + st.name
				delete(c.stmts, string(name))
			}
			c.out = append(c.out, closeNoop...)
		}
		c.q = append(c.queued(), r)
		return nil
	}
	st := c.resolve(name)
	if st != nil && st.fetches() && !c.pendingParse(st) && !c.pipe.has(pipeSkipping) {
		c.reparse(st, "")
	}
	switch {
	case st == nil && isProxyName(name):
		start := len(c.out)
		c.out = append(c.out, 'D', 0, 0, 0, 0, 'S')
		c.out = append(c.out, unknownPrefix...)
		c.out = append(c.out, name...)
		c.out = append(c.out, 0)
		c.out = wire.FinishMessage(c.out, start)
	case st == nil:
		c.out = append(c.out, raw...)
	default:
		start := len(c.out)
		c.out = append(c.out, 'D', 0, 0, 0, 0, 'S')
		c.out = append(c.out, st.name...)
		c.out = append(c.out, 0)
		c.out = wire.FinishMessage(c.out, start)
	}
	c.expect('D')
	return nil
}

// rewriteExecute sends an Execute, with the session effects of its portal.
func (c *client) rewriteExecute(raw, body []byte) error {
	portal, _, ok := wire.CString(body)
	if !ok {
		return wire.Fatalf(wire.ProtocolViolation, "malformed Execute message")
	}
	c.out = append(c.out, raw...)
	if c.pipe.has(pipeSkipping) {
		return nil // the server discards it
	}
	pe := c.portals[string(portal)]
	if pe.prepares != "" {
		if name := c.sqlPending[pe.prepares]; c.duplicateSQLName(name) {
			// PREPARE of a name in use: PostgreSQL fails its Execute.
			c.out = c.out[:len(c.out)-len(raw)]
			c.failInOrder(duplicateStatement([]byte(name)))
			return nil
		}
	}
	c.txEff |= pe.eff
	r := req{kind: reqExecute, ops: pe.ops}
	if pe.prepares != "" {
		// c.out holds the client's Execute already: the injected
		// DEALLOCATE must come before it.
		c.out = c.out[:len(c.out)-len(raw)]
		r.create = c.prepareOnExecute(pe.prepares)
		c.out = append(c.out, raw...)
	}
	c.q = append(c.queued(), r)
	return nil
}

// unnamedEffect is the session effect of the client's unnamed statement.
func (c *client) unnamedEffect() stmtEffect {
	if c.unnamedEff == nil {
		return stmtEffect{}
	}
	return *c.unnamedEff
}

// sendUnnamedParse queues raw, the client's Parse of the unnamed statement
// (body its body), for the server, which then has that statement.
func (c *client) sendUnnamedParse(raw, body []byte) {
	c.server.Unnamed = append(c.server.Unnamed[:0], body...)
	c.out = append(c.out, raw...)
	c.unnamedGen++
	c.q = append(c.queued(), req{kind: reqParse, unnamed: true, gen: c.unnamedGen})
}

// forgetUnnamed records that the client has no unnamed statement.
func (c *client) forgetUnnamed() {
	c.unnamed = c.unnamed[:0]
	c.unnamedQuiet = false
	c.setUnnamedEffect(stmtEffect{})
	if c.origText != nil {
		delete(c.origText, "")
	}
}

// unknownUnnamed stands, in a server's Unnamed, for an unnamed statement
// the proxy does not know (one whose Parse was skipped or never sent left
// the one before in place): it equals no Parse body, so that a client's
// Bind of its own unnamed statement parses it again, and one of a client
// without any closes it first (resolve).
var unknownUnnamed = []byte{0xff}

// repeatsQuietParse reports whether body, the body of an unnamed Parse,
// is the one kept in c.unnamed again (pgbench -M extended, JDBC and pgx
// parse the same text unnamed at every statement) and that text has no
// session effect and names no SQL-level statement (unnamedQuiet): then
// there is nothing to rewrite or analyze, as both depend on the text alone
// when it names no statement. The comparison is with the client's copy,
// so a caller that reuses its buffer for another text is looked at anew.
func (c *client) repeatsQuietParse(body []byte) bool {
	return c.unnamedQuiet && bytes.Equal(body, c.unnamed)
}

// quietParse takes an unnamed Parse (body, and tail its body after the
// name) that needs no look: its body is the kept one again
// (repeatsQuietParse), or its text was found quiet before, by this client
// or another (quietTexts); it records the statement as keepUnnamed would
// have and reports true. False: the caller rewrites and analyzes it.
func (c *client) quietParse(body, tail []byte) bool {
	if c.repeatsQuietParse(body) {
		c.setUnnamedEffect(stmtEffect{})
		return true
	}
	if !c.l.quiet.has(parseText(tail)) {
		return false
	}
	if c.origText != nil {
		delete(c.origText, "") // the last one's, if it was rewritten
	}
	c.keepQuietUnnamed(body)
	return true
}

// keepUnnamed records body, whose text is text, as the unnamed statement
// (after rewriteSQLText: rewritten says it changed the text), with its
// session effect, and whether repeatsQuietParse may skip it next time.
func (c *client) keepUnnamed(body, text []byte, rewritten bool) {
	se := analyze(text)
	if se.isZero() && !rewritten && !hasPrepareKeyword(text) {
		c.l.quiet.add(text)
		c.keepQuietUnnamed(body)
		return
	}
	c.setUnnamedEffect(se)
	c.unnamedQuiet = false
	c.unnamed = append(c.unnamed[:0], body...)
}

// keepQuietUnnamed records body as the unnamed statement, with a text that
// has no session effect and names no SQL-level statement (see
// quietTexts).
func (c *client) keepQuietUnnamed(body []byte) {
	c.setUnnamedEffect(stmtEffect{})
	c.unnamedQuiet = true
	c.unnamed = append(c.unnamed[:0], body...)
}

// setUnnamedEffect records se as the unnamed statement's effect. The
// struct is made the first time an unnamed statement has an effect and
// reused after that (a client parsing unnamed statements allocates nothing
// per Parse); shed drops it while it is empty.
func (c *client) setUnnamedEffect(se stmtEffect) {
	switch {
	case c.unnamedEff != nil:
		*c.unnamedEff = se
	case !se.isZero():
		p := new(stmtEffect) // not &se: se would escape on every call
		*p = se
		c.unnamedEff = p
	}
}

// notePortal records the session effect of the statement a Bind turns
// into portal: the client's statement name (st, or its unnamed statement).
func (c *client) notePortal(portal, name []byte, st *stmt) {
	var se stmtEffect
	switch {
	case st != nil:
		se = st.effect()
	case len(name) == 0:
		se = c.unnamedEffect()
	}
	if se.eff == 0 {
		if len(c.portals) > 0 {
			delete(c.portals, string(portal))
		}
		return
	}
	if c.portals == nil {
		c.portals = map[string]stmtEffect{}
	}
	c.portals[string(portal)] = se
}

// duplicateStatement is PostgreSQL's error for a Parse that reuses the
// name of an existing prepared statement.
func duplicateStatement(name []byte) *wire.Error {
	return &wire.Error{Severity: "ERROR", Code: wire.DuplicatePreparedStatement,
		Message: fmt.Sprintf("prepared statement \"%s\" already exists", name)}
}

// noSuchStatement is PostgreSQL's error for a Bind or Describe of a
// statement name that does not exist.
func noSuchStatement(name []byte) *wire.Error {
	if len(name) == 0 {
		return wire.Errorf(wire.InvalidSQLStatementName, "unnamed prepared statement does not exist")
	}
	return wire.Errorf(wire.InvalidSQLStatementName, "prepared statement \"%s\" does not exist", name)
}

// syncQueued reports whether a Sync of the client's waits for its answer:
// what the server's transaction status is after it is not known yet.
func (c *client) syncQueued() bool {
	for i := range c.q {
		if c.q[i].kind == reqSync {
			return true
		}
	}
	return false
}

// failInOrder makes the server fail at this point of the batch, as if the
// message queued now had failed with e: the server gets a Describe of a
// statement that cannot exist, so it aborts the batch's implicit
// transaction and skips to Sync exactly as for a real error, and the relay
// sends the client e in place of the server's answer.
func (c *client) failInOrder(e *wire.Error) {
	if c.pipe.has(pipeSkipping) {
		return // the server skips the message to Sync, as PostgreSQL would: no error, no answer
	}
	start := len(c.out)
	c.out = append(c.out, 'D', 0, 0, 0, 0, 'S')
	c.out = append(c.out, unknownPrefix+"error"...)
	c.out = append(c.out, 0)
	c.out = wire.FinishMessage(c.out, start)
	c.q = append(c.queued(), req{kind: reqDescribe, replace: e})
}

// resolve returns the proxy-wide statement for a client statement name
// (nil for the unnamed statement or an unknown name), first queuing a Parse
// if the server lacks the statement.
func (c *client) resolve(name []byte) *stmt {
	s := c.server
	if len(name) == 0 {
		switch {
		case c.pipe.has(pipeSkipping):
		case len(c.unnamed) > 0 && !bytes.Equal(c.unnamed, s.Unnamed):
			// The client's unnamed statement was parsed on another server.
			c.injectNeeds(c.unnamedEffect().needs)
			c.out = append(c.out, 'P', 0, 0, 0, 0)
			c.out = append(c.out, c.unnamed...)
			c.out = wire.FinishMessage(c.out, len(c.out)-len(c.unnamed)-5)
			c.q = append(c.queued(), req{kind: reqParse, injected: true, unnamed: true})
			s.Unnamed = append(s.Unnamed[:0], c.unnamed...)
		case len(c.unnamed) == 0 && len(s.Unnamed) > 0:
			// The client has no unnamed statement, and the server's is
			// another client's (or one the proxy parsed): close it, so
			// that the server answers 26000 as PostgreSQL would, and
			// never runs another client's statement.
			c.out = append(c.out, closeUnnamed...)
			c.q = append(c.queued(), req{kind: reqClose, injected: true, unnamed: true})
			s.Unnamed = s.Unnamed[:0]
		}
		return nil
	}
	st := c.stmts[string(name)]
	if st == nil {
		return nil
	}
	if _, ok := s.Prepared[st.name]; !ok && !c.pendingParse(st) && !c.pipe.has(pipeSkipping) {
		if st.fetches() {
			c.reparse(st, "")
			return st
		}
		c.injectNeeds(st.effect().needs)
		c.out = append(c.out, st.parse...)
		c.q = append(c.queued(), req{kind: reqParse, injected: true, confirm: st})
	}
	return st
}

// pendingParse reports whether a Parse of st is queued in this batch.
func (c *client) pendingParse(st *stmt) bool {
	for i := range c.q {
		if c.q[i].kind == reqParse && c.q[i].confirm == st {
			return true
		}
	}
	return false
}

// answerWithoutServer answers, without checking out a server, the
// messages of a transaction-mode client that holds none and whose answers
// the proxy knows: a named Parse of a statement some server already
// accepted (ParseComplete; the server gets the Parse when a Bind or
// Describe first needs it there), a Close of a named statement
// (CloseComplete), and a Sync or Flush with nothing sent to a server
// before it. It reports whether it answered typ.
//
// Clients that prepare synchronously (libpq's PQprepare, as in pgbench -M
// prepared) would otherwise need a free server just to hear
// ParseComplete; when the servers are held by open transactions of other
// clients driven by the same blocked thread, that wait never ends. A
// client with a search_path of its own (ownSearchPath) is not answered so:
// the statement may not resolve in its session, and PostgreSQL would fail
// its Parse.
func (c *client) answerWithoutServer(typ byte, body []byte) bool {
	switch typ {
	case 'P':
		name, tail, ok := wire.CString(body)
		if !ok || len(name) == 0 {
			return false
		}
		if c.duplicateSQLName(string(name)) {
			return false // the error must come in its place: see rewrite
		}
		if c.ownSearchPath() {
			return false // the statement may not resolve in this session
		}
		if hasPrepareKeyword(parseText(tail)) {
			return false // SQL-level statement names are rewritten (see rewrite)
		}
		st := c.l.stmts.get(tail)
		if !st.valid.Load() || st.noisy.Load() {
			return false
		}
		c.stmts[string(name)] = st
		c.w.Write(parseComplete)
		return true
	case 'C':
		if len(body) < 2 || body[0] != 'S' {
			return false
		}
		name, _, ok := wire.CString(body[1:])
		if !ok || len(name) == 0 {
			return false
		}
		delete(c.stmts, string(name))
		c.w.Write(closeComplete)
		return true
	case 'S':
		c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), c.tx))
		return true
	case 'H':
		return true
	}
	return false
}

var (
	parseComplete = []byte{'1', 0, 0, 0, 4}
	closeComplete = []byte{'3', 0, 0, 0, 4}
)

// unknownPrefix renames a client's unknown statement name that looks like
// a proxy-wide one ("sg_…"), so that it cannot resolve on the server.
const unknownPrefix = "shardgate_unknown_"

// isProxyName reports whether a client's statement name could collide
// with a proxy-wide statement name.
func isProxyName(name []byte) bool {
	return len(name) > 3 && string(name[:3]) == "sg_"
}

// appendBindRenamed appends Bind(portal, unknownPrefix+name, rest).
func appendBindRenamed(out, portal, name, rest []byte) []byte {
	start := len(out)
	out = append(out, 'B', 0, 0, 0, 0)
	out = append(out, portal...)
	out = append(out, 0)
	out = append(out, unknownPrefix...)
	out = append(out, name...)
	out = append(out, 0)
	out = append(out, rest...)
	return wire.FinishMessage(out, start)
}

// noteOrig remembers the client's text of a statement the proxy rewrote
// for SQL-level prepared statements, for rebindStatement.
func (c *client) noteOrig(name, orig []byte) {
	if c.origText == nil {
		c.origText = map[string][]byte{}
	}
	c.origText[string(name)] = append([]byte{}, orig...)
}

// rebindStatement re-does, at Bind, the rewrite of a statement that names
// SQL-level prepared statements, when the client's names changed since its
// Parse (see rebind): the statement then stands for the new text.
func (c *client) rebindStatement(name []byte) {
	orig, ok := c.origText[string(name)]
	if !ok {
		return
	}
	var body []byte
	if len(name) == 0 {
		body = c.unnamed
	} else if st := c.stmts[string(name)]; st != nil {
		body = st.parse[5:]
	} else {
		return
	}
	_, tail, _ := wire.CString(body)
	cur := parseText(tail)
	nt := c.rebind(orig, cur)
	if nt == nil {
		return
	}
	newTail := append(append([]byte{}, nt...), tail[len(cur):]...)
	if len(name) == 0 {
		c.unnamed = append(append(c.unnamed[:0], 0), newTail...)
		c.unnamedQuiet = false
		c.setUnnamedEffect(analyze(nt))
		return
	}
	c.stmts[string(name)] = c.l.stmts.get(newTail)
}
