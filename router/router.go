package router

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// DefaultCacheSize is how many analyzed statements a Router keeps.
const DefaultCacheSize = 4096

// maxCachedSQL is the longest statement text the cache keeps. Longer texts
// are usually one-off (bulk INSERTs with literal values) and would crowd out
// the prepared statements the cache exists for.
const maxCachedSQL = 64 << 10

// ColumnOrder returns the columns of a table in their catalog order, or nil
// when the table is unknown. schema is "" for an unqualified name, which the
// implementation resolves with the default search_path. The caller (the
// frontend's catalog lookup) provides it from a shard's catalog
// (pg_attribute); the router calls it while analyzing a statement, never
// while routing one, and it must be safe for concurrent use.
type ColumnOrder func(schema, table string) []string

// Router routes the statements of one logical database. It is safe for
// concurrent use.
type Router struct {
	shards  int
	all     []int               // 0 … shards-1; shared by plans, never modified
	tables  map[string]*keyFunc // sharded_tables by table name, also the unqualified name of a qualified entry
	qual    map[string]*keyFunc // sharded_tables by "schema.table"
	columns map[string]*keyFunc // sharded_tables entries without a table, by column
	omni    map[string]bool     // omni_tables, qualified and unqualified
	schemas map[string]int      // sharded_schemas: schema → shard
	bareKey *keyFunc            // routes a sharding_key hint when the statement names no sharded table; nil when the rules disagree
	catalog ColumnOrder         // may be nil

	passthrough *Statement // non-nil for a database with one shard and no replicas
	plans       []*Plan    // shared plans, see sharedPlan
	cache       *cache
	parses      atomic.Int64 // statements parsed, for tests
}

// keyFunc is one sharding rule: a column and the function that maps its
// values to shards.
type keyFunc struct {
	column   string
	typ      sharding.Type
	fn       sharding.Function
	function string // hash, list or range
	// class is equal for two rules that place equal keys on the same shard:
	// hash rules of one type family, or one list/range entry. A join on
	// columns of the same class is co-located.
	class int
	desc  string // for messages: `table "accounts"`, `column "tenant_id"`
}

// New builds a Router for db. columns may be nil; it is needed only for
// INSERT without a column list and COPY without one into sharded tables,
// and for sharded_tables entries that name a column but no table. Errors
// name the sharded_tables entry at fault.
func New(db *config.Database, columns ColumnOrder) (*Router, error) {
	n := len(db.Shards)
	if n < 1 {
		return nil, fmt.Errorf("router: database %q has no shards", db.Name)
	}
	r := &Router{
		shards:  n,
		all:     make([]int, n),
		tables:  map[string]*keyFunc{},
		qual:    map[string]*keyFunc{},
		columns: map[string]*keyFunc{},
		omni:    map[string]bool{},
		schemas: map[string]int{},
		catalog: columns,
		cache:   newCache(DefaultCacheSize),
	}
	for i := range r.all {
		r.all[i] = i
	}
	r.buildPlans()
	classes := map[int]bool{}
	for i := range db.ShardedTables {
		t := &db.ShardedTables[i]
		k, err := newKeyFunc(t, i, n)
		if err != nil {
			if t.Table == "" {
				return nil, fmt.Errorf("router: database %q: sharded_tables[%d] (column %q): %w", db.Name, i, t.Column, err)
			}
			return nil, fmt.Errorf("router: database %q: sharded table %q: %w", db.Name, t.Table, err)
		}
		classes[k.class] = true
		if r.bareKey == nil {
			r.bareKey = k
		}
		switch _, table, qualified := strings.Cut(t.Table, "."); {
		case t.Table == "":
			r.columns[t.Column] = k
		case qualified:
			r.qual[t.Table] = k
			if _, dup := r.tables[table]; !dup {
				r.tables[table] = k
			}
		default:
			r.tables[t.Table] = k
		}
	}
	if len(classes) > 1 {
		r.bareKey = nil
	}
	for _, name := range db.OmniTables {
		r.omni[name] = true
		if _, table, ok := strings.Cut(name, "."); ok {
			r.omni[table] = true
		}
	}
	for _, s := range db.ShardedSchemas {
		if s.Shard < 0 || s.Shard >= n {
			return nil, fmt.Errorf("router: database %q: sharded schema %q: shard %d does not exist", db.Name, s.Schema, s.Shard)
		}
		r.schemas[s.Schema] = s.Shard
	}
	if n == 1 && !hasReplicas(db) {
		r.passthrough = &Statement{r: r, static: r.direct(0, true)}
	}
	return r, nil
}

func hasReplicas(db *config.Database) bool {
	for _, s := range db.Shards {
		if len(s.Replicas) > 0 {
			return true
		}
	}
	return false
}

// newKeyFunc builds the function of a sharded_tables entry.
func newKeyFunc(t *config.ShardedTable, index, shards int) (*keyFunc, error) {
	typ, err := sharding.ParseType(t.Type)
	if err != nil {
		return nil, err
	}
	k := &keyFunc{column: t.Column, typ: typ, function: t.Function}
	if k.function == "" {
		k.function = "hash"
	}
	if t.Table != "" {
		k.desc = fmt.Sprintf("table %q", t.Table)
	} else {
		k.desc = fmt.Sprintf("tables sharded by column %q", t.Column)
	}
	switch k.function {
	case "hash":
		k.fn = sharding.Hash{Type: typ, Shards: shards}
		k.class = int(typeFamily(typ))
	case "list":
		m := map[string]int{}
		for _, e := range t.Mapping {
			for _, v := range e.Values {
				m[v] = e.Shard
			}
		}
		k.fn, err = sharding.NewList(typ, m, t.DefaultShard)
		k.class = 100 + index
	case "range":
		bounds := make([]sharding.Bound, len(t.Mapping))
		for i, e := range t.Mapping {
			bounds[i] = sharding.Bound{From: e.From, To: e.To, Shard: e.Shard}
		}
		k.fn, err = sharding.NewRange(typ, bounds, t.DefaultShard)
		k.class = 100 + index
	default:
		return nil, fmt.Errorf("unknown sharding function %q", t.Function)
	}
	if err != nil {
		return nil, err
	}
	for _, e := range t.Mapping {
		if e.Shard < 0 || e.Shard >= shards {
			return nil, fmt.Errorf("mapping to shard %d: the database has %d shards", e.Shard, shards)
		}
	}
	if d := t.DefaultShard; d != nil && (*d < 0 || *d >= shards) {
		return nil, fmt.Errorf("default_shard %d: the database has %d shards", *d, shards)
	}
	return k, nil
}

// family groups the key types whose values hash alike.
type family uint8

const (
	noFamily family = iota
	intFamily
	textFamily
	uuidFamily
)

func typeFamily(t sharding.Type) family {
	switch t {
	case sharding.Bigint, sharding.Integer, sharding.Smallint:
		return intFamily
	case sharding.Text, sharding.Varchar:
		return textFamily
	case sharding.UUID:
		return uuidFamily
	}
	return noFamily
}

// Shards returns the number of shards.
func (r *Router) Shards() int { return r.shards }

// Analyze parses sql and returns how to route it, independent of parameter
// values. Results are cached by text, so a prepared statement is parsed
// once. A database with one shard and no replicas never parses: every
// statement passes through to shard 0. Errors are *wire.Error: 42601 for
// SQL the parser rejects, 0A000 for statements the proxy cannot run
// correctly across shards whatever the parameters.
func (r *Router) Analyze(sql string) (*Statement, error) {
	return r.AnalyzeStrings(sql, true)
}

// ParsesForTest reports how many statements r parsed so far (analyses
// not served by its cache), for tests of what its callers keep.
func (r *Router) ParsesForTest() int64 { return r.parses.Load() }

// AnalyzeStrings is Analyze in a session whose standard_conforming_strings
// is on (standard) or off: with it off, a backslash in a string literal
// escapes the next character ('a\\b' is a\b), and the constants the
// router reads or writes back are what the server makes of the text.
func (r *Router) AnalyzeStrings(sql string, standard bool) (*Statement, error) {
	if r.passthrough != nil {
		return r.passthrough, nil
	}
	key := sql
	if !standard {
		key = "\x00nonstandard\x00" + sql // no statement text holds a NUL
	}
	if s := r.cache.get(key); s != nil {
		return s, nil
	}
	s, err := r.analyze(sql, standard)
	if err != nil {
		return nil, err
	}
	if len(sql) <= maxCachedSQL {
		r.cache.put(key, s)
	}
	return s, nil
}

// parse parses sql (with standard_conforming_strings on or off), counting
// parses for tests.
func (r *Router) parse(sql string, standard bool) (*pg_query.ParseResult, error) {
	r.parses.Add(1)
	parse := pg_query.Parse
	if !standard {
		parse = parseNonStandardStrings
	}
	tree, err := parse(sql)
	if err != nil {
		e := wire.Errorf(wire.SyntaxError, "%v", err)
		var pe *parser.Error
		if errors.As(err, &pe) && pe.Cursorpos > 0 {
			e.Position = strconv.Itoa(pe.Cursorpos)
		}
		return nil, e
	}
	return tree, nil
}

// tableClass says how a table's rows are spread over shards.
type tableClass uint8

const (
	omniTable    tableClass = iota + 1 // the same rows on every shard
	systemTable                        // a catalog: read from any shard
	shardedTable                       // split by a sharding key
	pinnedTable                        // in a sharded schema: on one shard
	pathTable                          // unqualified, in the sharded schema first on search_path
	unknownTable                       // may be sharded by a column-only rule
)

// classify finds the class of table schema.name. path says that unqualified
// names resolve to a sharded schema, first on the session's search_path.
func (r *Router) classify(schema, name string, path bool) (tableClass, *keyFunc, int) {
	if schema != "" {
		if shard, ok := r.schemas[schema]; ok {
			return pinnedTable, nil, shard
		}
		if isSystemSchema(schema) {
			return systemTable, nil, 0
		}
		if k := r.qual[schema+"."+name]; k != nil {
			return shardedTable, k, 0
		}
		if r.omni[schema+"."+name] {
			return omniTable, nil, 0
		}
	} else {
		if strings.HasPrefix(name, "pg_") {
			return systemTable, nil, 0
		}
		if path {
			return pathTable, nil, 0
		}
	}
	if k := r.tables[name]; k != nil {
		return shardedTable, k, 0
	}
	if r.omni[name] {
		return omniTable, nil, 0
	}
	if len(r.columns) > 0 {
		return unknownTable, nil, 0
	}
	return omniTable, nil, 0
}

func isSystemSchema(s string) bool {
	return s == "pg_catalog" || s == "information_schema" || s == "pg_toast"
}

// sharedPlan returns the plan of kind over every shard. Shared plans are
// built by New and never modified.
func (r *Router) sharedPlan(kind Kind, write bool) *Plan {
	return r.plans[planIndex(int(kind), write)]
}

// direct returns the shared Direct plan for one shard.
func (r *Router) direct(shard int, write bool) *Plan {
	return r.plans[planIndex(int(Transaction)+1+shard, write)]
}

func planIndex(i int, write bool) int {
	if write {
		return 2*i + 1
	}
	return 2 * i
}

// buildPlans fills r.plans: one plan per kind over every shard, and one
// Direct plan per shard, each for reads and for writes.
func (r *Router) buildPlans() {
	r.plans = make([]*Plan, 2*(int(Transaction)+1+r.shards))
	for _, write := range []bool{false, true} {
		for k := Direct; k <= Transaction; k++ {
			r.plans[planIndex(int(k), write)] = &Plan{Kind: k, Shards: r.all, Write: write}
		}
		for s := range r.shards {
			p := &Plan{Kind: Direct, Write: write}
			p.one[0] = s
			p.Shards = p.one[:]
			r.plans[planIndex(int(Transaction)+1+s, write)] = p
		}
	}
}
