package router

import (
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/wire"
)

// Tables the analysis cannot place, and statements it refuses.
//
// A table that only a column-only sharding rule could cover, and that
// neither the catalog (ColumnOrder) nor the statement shows to have the
// rule's column, is unknown: sharded or omni, reading it from all shards or
// from one could both be wrong. Most often it does not exist at all (a
// typo), and PostgreSQL answers 42P01 with the name's position. The
// catalog cannot tell that apart from a table the proxy's catalog session
// does not see — created in the client's open transaction, found through
// the client's search_path, or a catalog that is unreachable — so the
// router does not route on the catalog's word.
//
// Instead a SELECT that writes nothing runs on every shard as written,
// with a Merge whose only field is Probe: when the shards fail (a table
// that does not exist fails on each of them, at Parse in the extended
// protocol), the client gets their error, PostgreSQL's own; when they
// answer, the executor discards the rows and answers the 0A000 refusal,
// so a wrong answer is never sent.
//
// A statement that writes — INSERT, UPDATE, DELETE, MERGE, INSERT …
// SELECT, SELECT … INTO, a SELECT with a data-modifying WITH query or a
// locking clause — could not be undone, so the shards only parse it
// (Merge.ParseOnly): Parse of the unnamed statement, Close and Sync, which
// analyses the statement as PostgreSQL does before running it (every
// relation, column, function and type resolved) and runs nothing. A table
// that does not exist fails that Parse, with PostgreSQL's own error and
// position; when every shard parses the statement, the 0A000 refusal
// stands. A statement the analysis refuses for another reason
// (unroutable: an INSERT into a sharded table that does not set its
// sharding column, …) is parsed first the same way, since PostgreSQL
// rejects a column that does not exist before anything else. Parse does
// not analyse COPY: the shards parse the query of COPY (query) TO instead
// (Merge.ProbeSQL), and look the table of COPY table up as $1::regclass
// (Merge.ProbeRelation), which fails as COPY does for a table that does
// not exist. Statements whose Parse analyses nothing (DO and the other
// utility statements) stay refused at once.
//
// The executor runs a probe on the client's own servers, after its
// settings (search_path decides what a name resolves to) and inside its
// transaction, which the error aborts as PostgreSQL's would.

// probe decides what an unknown table, or a refusal, of part p, the
// analysis of statement n, makes of it: a probe or a refusal.
func (a *analyzer) probe(p *part, n *pg_query.Node) {
	refusal := p.unroutable
	if refusal == nil {
		refusal = a.unknown
	}
	if refusal == nil && p.source != nil && p.source.probe != nil {
		refusal = p.source.probe.Merge.Probe // INSERT … SELECT: its rows would be written
	}
	if refusal == nil {
		return
	}
	sel := n.GetSelectStmt()
	cs := n.GetCopyStmt()
	switch {
	case cs != nil && p.unroutable == nil && (cs.Relation != nil || cs.Query != nil):
		// Parse does not analyse COPY: the shards look up its table, or
		// parse its query (copyProbe).
		m := &Merge{Probe: refusal, ParseOnly: true}
		if cs.Relation != nil {
			m.ProbeRelation = qualifiedName(cs.Relation)
		}
		p.probe = &Plan{Kind: All, Shards: a.r.all, Merge: m}
	case p.unroutable == nil && sel != nil && !p.write && sel.IntoClause == nil && p.fanout == nil:
		p.probe = &Plan{Kind: All, Shards: a.r.all, Merge: &Merge{Probe: refusal}}
	case analysedAtParse(n):
		p.probe = &Plan{Kind: All, Shards: a.r.all, Merge: &Merge{Probe: refusal, ParseOnly: true}}
		p.probeRefusal = p.unroutable != nil
		p.unroutable = nil
	default:
		p.unroutable = refusal
	}
}

// analysedAtParse reports whether PostgreSQL's Parse of statement n runs
// parse analysis over it (transformStmt), which resolves every name it
// uses; every other statement is a utility statement, analysed only when
// it runs.
func analysedAtParse(n *pg_query.Node) bool {
	switch n.Node.(type) {
	case *pg_query.Node_SelectStmt, *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt,
		*pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt, *pg_query.Node_DeclareCursorStmt,
		*pg_query.Node_CreateTableAsStmt, *pg_query.Node_CallStmt:
		return true
	}
	return false
}

// probePlan is the plan of a probe (probe): every shard, or the only one,
// where a statement naming an unknown table runs as written (one shard
// answers as one PostgreSQL would) and a refused one, or a COPY, stays
// refused.
func (p *part) probePlan(r *Router, env *routeEnv) (*Plan, error) {
	if env.shards == 1 {
		if p.probeRefusal || p.node.GetCopyStmt() != nil {
			return nil, p.probe.Merge.Probe
		}
		return r.direct(0, p.write), nil
	}
	return p.probe, nil
}

// qualifiedName is rv's name as regclass reads it: quoted, with its
// schema when it has one.
func qualifiedName(rv *pg_query.RangeVar) string {
	name := wire.QuoteIdent(rv.Relname)
	if rv.Schemaname != "" {
		name = wire.QuoteIdent(rv.Schemaname) + "." + name
	}
	if rv.Catalogname != "" {
		name = wire.QuoteIdent(rv.Catalogname) + "." + name
	}
	return name
}

// copyProbe completes the probe of COPY (query) TO once the statement's
// text is known (part.text at byte at of sql): the shards parse the query
// inside the parentheses, after one space for each character of sql
// before it. Without a probe, or query, it does nothing; a text it cannot
// read leaves the refusal.
func (p *part) copyProbe(sql string) {
	if p.probe == nil || !p.probe.Merge.ParseOnly || p.probe.Merge.ProbeRelation != "" || p.node.GetCopyStmt() == nil {
		return
	}
	open, end, ok := parenthesised(p.text)
	n := 0
	if ok && p.at <= len(sql) {
		n = utf8.RuneCountInString(sql[:p.at]) + utf8.RuneCountInString(p.text[:open+1])
	}
	if !ok || n > maxPartPad {
		p.unroutable, p.probe = p.probe.Merge.Probe, nil
		return
	}
	m := *p.probe.Merge
	m.ProbeSQL = strings.Repeat(" ", n) + p.text[open+1:end]
	pl := *p.probe
	pl.Merge = &m
	p.probe = &pl
}

// parenthesised returns the byte offsets of the first parenthesis of sql
// (after COPY) and of the one that closes it.
func parenthesised(sql string) (open, end int, ok bool) {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return 0, 0, false
	}
	depth := 0
	for _, t := range res.Tokens {
		switch t.Token {
		case pg_query.Token_ASCII_40:
			if depth == 0 {
				open = int(t.Start)
			}
			depth++
		case pg_query.Token_ASCII_41:
			depth--
			if depth == 0 {
				return open, int(t.Start), int(t.Start) <= len(sql)
			}
		}
	}
	return 0, 0, false
}
