package router

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// Statement is the analysis of one SQL text, independent of parameter
// values and session hints. It is immutable and shared by every client
// that sends the same text.
type Statement struct {
	r       *Router
	sql     string
	version int32 // of the parse tree, for Deparse
	parts   []*part
	// static is the plan of every execution when it depends on nothing:
	// pass-through, a comment hint, an empty query.
	static *Plan
	hint   *int // the shard of a comment hint
}

// part is the analysis of one statement of the SQL text.
type part struct {
	node  *pg_query.Node
	text  string // the statement's own text in the client's SQL
	at    int    // the byte offset of text in the client's SQL
	kind  Kind   // non-zero: the route needs no shard computation
	write bool

	// groups are the co-located sets of sharded tables, each constraining
	// the shards the statement needs.
	groups []*group
	// oneShard is the error to return when the groups need more than one
	// shard but the statement is only correct on one (a subquery over a
	// sharded table, a join of tables that are not co-located).
	oneShard error
	// fanout likewise rejects a route over several shards for statements
	// whose results cannot be combined (cursors, COPY of a merged query).
	fanout error
	// unroutable means the analysis cannot route the statement; a hint can.
	unroutable error
	// probe is the plan of a statement naming a table the analysis cannot
	// place, or one it refuses (probeRefusal), that the shards run or
	// parse for their error (probe.go).
	probe        *Plan
	probeRefusal bool

	insert   *insertRows // INSERT … VALUES into a sharded table
	keySets  []keyAssign // UPDATE … SET key = value of a sharded table
	merge    *Merge      // SELECT: how to combine the answers of several shards
	mergeErr error       // SELECT: why the answers of several shards cannot be combined
	copy     *Copy       // COPY … FROM STDIN
	copyKey  *keyFunc    // COPY FROM into a sharded table: rows are split by it
	copyOut  *CopyOut    // COPY (query) TO STDOUT whose rows are merged

	// insertSelect is INSERT … SELECT into a sharded table, and source the
	// analysis of its SELECT, which routes where the rows are read.
	insertSelect *InsertSelect
	source       *part

	explain        *part // EXPLAIN of this statement
	explainAnalyze bool

	ddl, ddlSchemas bool
	omniWrite       string   // an omni table the statement writes
	hintKey         *keyFunc // routes a sharding_key hint
	pars            bool     // the route depends on parameter values

	// pathDependent is set when a sharded schema first on search_path
	// would change the route; onPath is the analysis for that case.
	pathDependent bool
	onPath        *part
}

// keyAssign is SET key = value in an UPDATE of a sharded table.
type keyAssign struct {
	key   *keyFunc
	value operand
}

// SQL returns the statement's text.
func (s *Statement) SQL() string { return s.sql }

// Route computes where the statement goes for the given Bind parameters
// (params[i] nil for NULL; formats as in Bind: none for all text, one for
// all, or one per parameter) and the session's hints. A comment hint in the
// statement wins over Hints, which win over the analysis. Errors are
// *wire.Error.
func (s *Statement) Route(params [][]byte, formats []int16, h Hints) (*Plan, error) {
	p, err := s.route(params, formats, h)
	if err != nil {
		return nil, withParamPosition(err, s.sql)
	}
	return p, nil
}

// route is Route without the position of a missing parameter.
func (s *Statement) route(params [][]byte, formats []int16, h Hints) (*Plan, error) {
	if s.static != nil {
		return s.static, nil
	}
	env := routeEnv{shards: s.r.shards, params: params, formats: formats, pathShard: -1}
	if s.hint != nil || h.Shard != nil || h.ShardingKey != nil {
		shard, err := s.hintShard(h)
		if err != nil {
			return nil, err
		}
		// A hint routes the statement, but an UPDATE still may not leave a
		// row on a shard its new key does not belong to.
		var set shardSet
		set.add(shard)
		for _, p := range s.parts {
			if err := p.checkKeySets(&env, set, 1); err != nil {
				return nil, err
			}
		}
		return s.hinted(shard)
	}
	if len(h.SearchPath) > 0 && len(s.r.schemas) > 0 {
		if shard, ok := s.r.schemas[h.SearchPath[0]]; ok {
			env.pathShard = shard
		}
	}
	if len(s.parts) == 1 {
		return s.parts[0].plan(s.r, &env)
	}
	return s.routeParts(&env, h.Cursor)
}

// plan routes one statement.
func (p *part) plan(r *Router, env *routeEnv) (*Plan, error) {
	if env.pathShard >= 0 && p.onPath != nil {
		p = p.onPath
	}
	if p.unroutable != nil {
		return nil, p.unroutable
	}
	if p.probe != nil {
		return p.probePlan(r, env)
	}
	if p.explain != nil {
		return p.explainPlan(r, env)
	}
	if p.insertSelect != nil {
		return p.insertSelectPlan(r, env)
	}
	if p.kind != 0 {
		if p.copy != nil {
			return &Plan{Kind: p.kind, Shards: r.all, Write: p.write, Copy: p.copy}, nil
		}
		return r.sharedPlan(p.kind, p.write), nil
	}
	var set shardSet
	for _, g := range p.groups {
		if g.cond == nil {
			set.addAll(env.shards)
			continue
		}
		s, ok := g.cond.eval(env)
		if !ok {
			set.addAll(env.shards)
			continue
		}
		set.union(s)
	}
	var rows []int
	if p.insert != nil {
		var err error
		if rows, err = p.insert.route(env, &set); err != nil {
			return nil, err
		}
	}
	n := set.count()
	if n == 0 {
		// No row can match (id = 1 AND id = 2): every shard answers alike.
		set.add(0)
		n = 1
	}
	if n > 1 && p.oneShard != nil {
		return nil, p.oneShard
	}
	if n > 1 && p.fanout != nil {
		return nil, p.fanout
	}
	if err := p.checkKeySets(env, set, n); err != nil {
		return nil, err
	}
	if n == 1 {
		shard := set.first()
		if p.copy != nil {
			pl := &Plan{Kind: Direct, Write: p.write, Copy: p.copy}
			pl.one[0] = shard
			pl.Shards = pl.one[:]
			return pl, nil
		}
		return r.direct(shard, p.write), nil
	}
	if p.mergeErr != nil {
		return nil, p.mergeErr
	}
	pl := &Plan{Kind: Multi, Write: p.write, Merge: p.merge, Copy: p.copy, CopyOut: p.copyOut}
	if n == env.shards {
		pl.Kind, pl.Shards = All, r.all
	} else {
		pl.Shards = set.list()
	}
	if rows != nil {
		pl.InsertRows = make(map[int][]int, n)
		for i, shard := range rows {
			pl.InsertRows[shard] = append(pl.InsertRows[shard], i)
		}
	}
	return pl, nil
}

// insertSelectPlan routes INSERT … SELECT into a sharded table: its SELECT
// where that SELECT alone would go, its rows to any shard.
func (p *part) insertSelectPlan(r *Router, env *routeEnv) (*Plan, error) {
	if p.source.probe != nil {
		return nil, p.source.probe.Merge.Probe // its rows would be written
	}
	src, err := p.source.plan(r, env)
	if err != nil {
		return nil, err
	}
	is := *p.insertSelect
	is.Source = src
	return &Plan{Kind: All, Shards: r.all, Write: true, InsertSelect: &is}, nil
}

// checkKeySets rejects an UPDATE that would move rows to another shard.
func (p *part) checkKeySets(env *routeEnv, set shardSet, n int) error {
	for _, k := range p.keySets {
		if n > 1 {
			return unsupported("Constrain the sharding key in WHERE to the shard of its new value.",
				"cannot update sharding key column %q on several shards: rows could have to move to another shard", k.key.column)
		}
		to, err := k.value.single(k.key, env)
		if err != nil {
			return err
		}
		if from := set.first(); to != from {
			return unsupported("Delete the row and insert it with its new key, in one transaction.",
				"cannot update sharding key column %q: the new value belongs on shard %d, the rows are on shard %d", k.key.column, to, from)
		}
	}
	return nil
}

// shard routes an operand that must name exactly one shard: an INSERT
// row's key, the new key of an UPDATE.
func (o operand) single(k *keyFunc, env *routeEnv) (int, error) {
	switch o.kind {
	case opShard:
		return o.shard, nil
	case opParam:
		if o.param >= len(env.params) {
			return 0, wire.Errorf(wire.UndefinedParameter, "there is no parameter $%d", o.param+1)
		}
		format := paramFormat(env.formats, o.param)
		if format == 1 && o.textOnly {
			return 0, unsupported("Send the parameter in text format, or with the sharding column's type.",
				"cannot route binary parameter $%d: it is cast to a type other than the sharding key's", o.param+1)
		}
		value := env.params[o.param]
		shard, err := k.shardOf(value, format)
		if err == nil {
			return shard, nil
		}
		if errors.Is(err, sharding.ErrNoShard) {
			key, _ := decodeKey(k.typ, value, format)
			return 0, noShardError(k, key, err)
		}
		return 0, keyError(err)
	}
	return 0, wire.Errorf(wire.InternalError, "router: operand of kind %d has no single shard", o.kind)
}

// explainPlan routes EXPLAIN to one of the shards its statement needs.
func (p *part) explainPlan(r *Router, env *routeEnv) (*Plan, error) {
	ex := p.explain
	if env.pathShard >= 0 && ex.onPath != nil {
		ex = ex.onPath
	}
	if p.explainAnalyze && env.shards > 1 && ex.probe != nil {
		// EXPLAIN ANALYZE runs its statement: the shards parse it, which
		// analyses the statement explained, for PostgreSQL's error
		// (probe.go).
		return &Plan{Kind: All, Shards: r.all, Merge: &Merge{Probe: ex.probe.Merge.Probe, ParseOnly: true}}, nil
	}
	inner, err := p.explain.plan(r, env)
	if err != nil {
		return nil, err
	}
	switch inner.Kind {
	case Any, OmniRead, Session, Transaction:
		return r.sharedPlan(inner.Kind, p.write), nil
	case Direct:
		return r.direct(inner.Shards[0], p.write), nil
	}
	if p.explainAnalyze {
		return nil, unsupported(hintOneShard, "EXPLAIN ANALYZE of a statement that runs on several shards")
	}
	return r.direct(inner.Shards[0], false), nil
}

// hintShard resolves the statement's comment hint or the session's shard
// or sharding key hint.
func (s *Statement) hintShard(h Hints) (int, error) {
	if s.hint != nil {
		return *s.hint, nil
	}
	if h.Shard != nil {
		return s.r.checkShard(*h.Shard)
	}
	return s.keyShard(*h.ShardingKey)
}

func (r *Router) checkShard(shard int) (int, error) {
	if shard < 0 || shard >= r.shards {
		return 0, wire.Errorf(wire.InvalidParameterValue, "shard %d does not exist: the database has %d shards (0 to %d)", shard, r.shards, r.shards-1)
	}
	return shard, nil
}

// keyShard routes a sharding key hint by the rule of the statement's
// sharded tables, or the database's only rule, or as a sharded schema's
// name.
func (s *Statement) keyShard(value string) (int, error) {
	var k *keyFunc
	for i, p := range s.parts {
		if p.hintKey == nil {
			continue
		}
		if k != nil && k.class != p.hintKey.class {
			k = nil
			break
		}
		if k == nil || i == 0 {
			k = p.hintKey
		}
	}
	if k == nil {
		k = s.r.bareKey
	}
	if k == nil {
		if shard, ok := s.r.schemas[value]; ok {
			return shard, nil
		}
		return 0, wire.Errorf(wire.InvalidParameterValue, "cannot route sharding key %q: the statement's tables use different sharding functions, or none", value)
	}
	key, err := sharding.ParseKey(k.typ, value)
	if err != nil {
		return 0, keyError(err)
	}
	shard, err := k.fn.Shard(key)
	if err != nil {
		return 0, noShardError(k, key, err)
	}
	return shard, nil
}

// updatesKey reports whether a statement of the text sets a sharding key.
func (s *Statement) updatesKey() bool {
	for _, p := range s.parts {
		if len(p.keySets) > 0 {
			return true
		}
	}
	return false
}

// hinted routes every statement of the text to one shard, as a hint says.
func (s *Statement) hinted(shard int) (*Plan, error) {
	write, ctl, other := false, Kind(0), false
	var cp *Copy
	for _, p := range s.parts {
		if p.kind == Session || p.kind == Transaction {
			if ctl != Transaction {
				ctl = p.kind
			}
			continue
		}
		other = true
		if p.omniWrite != "" {
			return nil, unsupported("Write omni tables without a shard hint.",
				"omni table %s must be written on every shard; a shard hint cannot route the write to one", p.omniWrite)
		}
		write = write || p.write
		if p.copy != nil {
			c := *p.copy
			c.Column, c.key = -1, nil
			cp = &c
		}
	}
	if !other && ctl != 0 {
		return s.r.sharedPlan(ctl, false), nil
	}
	if cp != nil {
		pl := &Plan{Kind: Direct, Write: write, Copy: cp}
		pl.one[0] = shard
		pl.Shards = pl.one[:]
		return pl, nil
	}
	return s.r.direct(shard, write), nil
}

// routeParts routes a text of several statements, which the executor sends
// as one simple Query: all of them must go to the same place.
func (s *Statement) routeParts(env *routeEnv, cursor func(string) bool) (*Plan, error) {
	r := s.r
	direct, write, ctl := -1, false, Kind(0)
	var one, omniRead, other bool
	for _, p := range s.parts {
		if cursor != nil && cursor(cursorOf(p.node)) {
			return s.partsPlan(), nil
		}
		pl, err := p.plan(r, env)
		if err != nil {
			// A statement the text cannot run as one (a refusal, or a
			// DECLARE over several shards, which the proxy serves on its
			// own): each runs on its own, so that the statements before
			// it answer first, as in PostgreSQL, and the proxy's own
			// handling of a statement applies.
			return s.partsPlan(), nil
		}
		write = write || pl.Write
		other = other || pl.Kind != Session
		conflict := pl.Merge != nil || pl.InsertRows != nil || pl.Copy != nil || pl.InsertSelect != nil
		switch pl.Kind {
		case Session, Transaction:
			if ctl != Transaction {
				ctl = pl.Kind
			}
		case Any:
			one = true
		case OmniRead:
			one, omniRead = true, true
		case Direct:
			conflict = conflict || (direct >= 0 && direct != pl.Shards[0])
			direct = pl.Shards[0]
		default:
			// Every shard (DDL, omni writes), among other statements:
			// each on its own, so that the client gets every
			// statement's answer (from one shard); or a statement that
			// needs a merge.
			conflict = true
		}
		if conflict {
			return s.partsPlan(), nil
		}
	}
	if ctl == Transaction || ctl == Session && other || s.hasInsertSelect() {
		// BEGIN, COMMIT or a savepoint among other statements: the
		// client's transaction is the session's, over every shard it
		// touches, so each statement runs on its own (one server must
		// not open or end it behind the session's back). Likewise a SET
		// among other statements: the proxy tracks it, and gives it to
		// the shards the transaction joins later, as a statement of its
		// own.
		return s.partsPlan(), nil
	}
	switch {
	case direct >= 0:
		return r.direct(direct, write), nil
	case omniRead:
		return r.sharedPlan(OmniRead, write), nil
	case one:
		return r.sharedPlan(Any, write), nil
	case ctl != 0:
		return r.sharedPlan(ctl, false), nil
	}
	return r.sharedPlan(Any, false), nil
}

// cursorOf is the cursor a DECLARE, FETCH, MOVE or CLOSE names, "" for any
// other statement (and CLOSE ALL).
func cursorOf(n *pg_query.Node) string {
	switch {
	case n.GetDeclareCursorStmt() != nil:
		return n.GetDeclareCursorStmt().Portalname
	case n.GetFetchStmt() != nil:
		return n.GetFetchStmt().Portalname
	case n.GetClosePortalStmt() != nil:
		return n.GetClosePortalStmt().Portalname
	}
	return ""
}

// Count is the number of statements in the text (0 for an empty query).
func (s *Statement) Count() int { return len(s.parts) }

// hasInsertSelect reports whether a statement of s is an INSERT … SELECT
// into a sharded table (one the shards only parse does not count: it never
// runs).
func (s *Statement) hasInsertSelect() bool {
	for _, p := range s.parts {
		if p.insertSelect != nil && p.probe == nil {
			return true
		}
	}
	return false
}

// partsPlan is the plan of a text of several statements that need
// different shards: each runs on its own (Plan.Parts).
func (s *Statement) partsPlan() *Plan {
	p := &Plan{Kind: Parts}
	for _, pt := range s.parts {
		p.Parts = append(p.Parts, pt.placed(s.sql))
	}
	return p
}

// maxPartPad bounds the padding placed puts before a statement (in
// characters), so that a long text of many statements does not grow
// quadratically; the positions of errors further into a text are the
// statement's own.
const maxPartPad = 16 << 10

// placed is the statement's text as it runs on its own (Plan.Parts): after
// one space for each character of the client's text before it, so that the
// position a server gives an error in it (parser_errposition counts
// characters from the start of the Query) is the one PostgreSQL gives for
// the whole text. Transaction control and settings need no padding: they
// are replayed on shards that join the transaction later.
func (pt *part) placed(sql string) string {
	if pt.at <= 0 || pt.kind == Transaction || pt.kind == Session || pt.at > len(sql) {
		return pt.text
	}
	n := utf8.RuneCountInString(sql[:pt.at])
	if n > maxPartPad {
		return pt.text
	}
	return strings.Repeat(" ", n) + pt.text
}

// String describes a plan for logs and tests.
func (p *Plan) String() string {
	s := fmt.Sprintf("%s %v", p.Kind, p.Shards)
	if p.Write {
		s += " write"
	}
	return s
}
