package frontend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// routers caches one router per sharded database of a State.
type routers struct {
	mu      sync.Mutex // guards the following
	m       map[string]*routerPlanner
	retired bool // the State was replaced: catalogs keep no connection open
}

// retire closes the catalog connections of a State that a reload replaced
// or that shut down. A client still on it may plan again (its next
// transaction moves it to the new State): its catalog then connects for
// the question and closes again, so no connection outlives the last user.
func (st *State) retire() {
	st.routers.mu.Lock()
	st.routers.retired = true
	ps := make([]*routerPlanner, 0, len(st.routers.m))
	for _, p := range st.routers.m {
		ps = append(ps, p)
	}
	st.routers.mu.Unlock()
	for _, p := range ps {
		if p.cat != nil {
			p.cat.retire()
		}
	}
}

// planner returns the router of db, building it on first use.
func (st *State) planner(db *config.Database) (planner, error) {
	st.routers.mu.Lock()
	defer st.routers.mu.Unlock()
	if p := st.routers.m[db.Name]; p != nil {
		return p, nil
	}
	var cat *catalog
	if u := st.Config.FirstUserFor(db.Name); u != nil {
		cat = &catalog{pool: st.Pools.Get(db, u, 0), cache: map[string][]string{}, retired: st.routers.retired,
			orders: newCollations(st.Pools, db, u)}
		if st.routers.retired {
			cat.orders.retire()
		}
	}
	var columns router.ColumnOrder
	if cat != nil {
		columns = cat.columns
	}
	r, err := router.New(db, columns)
	if err != nil {
		return nil, err
	}
	if st.routers.m == nil {
		st.routers.m = map[string]*routerPlanner{}
	}
	p := &routerPlanner{r: r, cat: cat}
	st.routers.m[db.Name] = p
	return p, nil
}

// routerPlanner adapts router.Router to the frontend's routePlan.
type routerPlanner struct {
	r   *router.Router
	cat *catalog // nil without a user to connect as
}

func (rp *routerPlanner) plan(sql string, c *client) (*routePlan, error) {
	return rp.planParams(nil, sql, nil, nil, c)
}

func (rp *routerPlanner) planParams(into *routePlan, sql string, params [][]byte, formats []int16, c *client) (*routePlan, error) {
	st, err := rp.r.AnalyzeStrings(sql, c.standardStrings())
	if err != nil {
		return nil, err
	}
	return rp.route(into, st, sql, params, formats, c)
}

// planBound is planParams for a Bind of the client's prepared statement
// st: the router's analysis of its text is kept on st (sStmt.analysis), so
// that a Bind only evaluates the sharding key from its parameters, without
// the router cache's lock and hash of the text. A reload that replaced the
// router, or a change of standard_conforming_strings, analyses it again.
func (rp *routerPlanner) planBound(into *routePlan, st *sStmt, params [][]byte, formats []int16, c *client) (*routePlan, error) {
	std := c.standardStrings()
	an := &st.analysis
	if an.stmt == nil || an.router != rp.r || an.standard != std {
		stmt, err := rp.r.AnalyzeStrings(st.sql, std)
		if err != nil {
			return nil, err
		}
		*an = stmtAnalysis{stmt: stmt, router: rp.r, standard: std}
	}
	return rp.route(into, an.stmt, st.sql, params, formats, c)
}

// route turns the router's plan of analysed statement st (text sql) with
// its Bind parameters into a routePlan, in into when it is not nil.
func (rp *routerPlanner) route(into *routePlan, st *router.Statement, sql string, params [][]byte, formats []int16, c *client) (*routePlan, error) {
	p, err := st.Route(params, formats, c.hints.forRouter(c))
	if err != nil {
		return nil, err
	}
	out := into
	if out == nil {
		out = new(routePlan)
	}
	*out = routePlan{Plan: executor.Plan{SQL: sql, Shards: p.Shards, Write: p.Write}, statements: st.Count()}
	if p.InsertSelect != nil {
		out.Kind, out.InsertSelect = executor.RouteInsertSelect, p.InsertSelect
		out.Params, out.Formats = params, formats
		return out, nil
	}
	if p.Copy != nil && len(p.Shards) > 1 {
		out.Kind, out.Copy = executor.RouteCopy, p.Copy
		return out, nil
	}
	switch p.Kind {
	case router.Parts:
		out.Kind, out.Parts = executor.RouteParts, p.Parts
		return out, nil
	case router.Direct:
		out.Kind = executor.RouteOne
	case router.OmniRead, router.Any:
		out.Kind = executor.RouteOne
		out.Shards = []int{c.pickOf(p.Shards)}
	case router.Session:
		// Settings are tracked and replayed on every server the client
		// uses; one shard validates and answers (inside a transaction,
		// after every other shard in it ran a SET: see setOnJoined).
		out.Kind = executor.RouteOne
		out.Shards = []int{c.pickOf(p.Shards)}
		out.setting = changesSettings(sql)
	case router.Transaction:
		return transactionPlan(sql)
	case router.OmniWrite:
		out.Kind = executor.RouteOmniWrite
	case router.Multi, router.All:
		switch {
		case len(p.Shards) == 1:
			out.Kind = executor.RouteOne
		case p.Write:
			out.Kind = executor.RouteWrite
		default:
			out.Kind = executor.RouteRead
		}
		if p.InsertRows != nil {
			out.PerShard = map[int]string{}
			out.PerShardParams = map[int][]int{}
			for shard, rows := range p.InsertRows {
				q, pm, err := st.InsertSQL(rows)
				if err != nil {
					return nil, err
				}
				out.PerShard[shard] = q
				out.PerShardParams[shard] = pm
			}
			out.Params, out.Formats = params, formats
		}
	default:
		return nil, wire.Errorf(wire.InternalError, "router returned plan kind %v", p.Kind)
	}
	if p.Merge != nil {
		out.Merge, out.CopyOut = p.Merge, p.CopyOut
		if p.Merge.Rewritten != "" {
			out.SQL = p.Merge.Rewritten
		}
		out.Params, out.Formats = params, formats
	}
	return out, nil
}

// pickOf returns one of shards for a statement any of them can answer:
// one the client already holds (no extra server, same transaction), else
// a random one.
func (c *client) pickOf(shards []int) int {
	// A shard whose server holds a suspended portal (a driver fetching in
	// chunks, which reads the catalog between chunks: pgjdbc's
	// ResultSetMetaData) is left alone while another will do: running
	// anything there would end the portal.
	busy := func(i int) bool { return c.ext[i].portal != nil || c.stream != nil && c.stream.usesShard(i) }
	for _, i := range shards {
		if c.xs.Server(i) != nil && !busy(i) {
			return i
		}
	}
	k := pickShard(len(shards))
	for n := range len(shards) {
		if i := shards[(k+n)%len(shards)]; !busy(i) {
			return i
		}
	}
	return shards[k]
}

// transactionPlan classifies transaction control.
func transactionPlan(sql string) (*routePlan, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, wire.Errorf(wire.FeatureNotSupported, "transaction control must be a single statement on sharded databases")
	}
	ts := tree.Stmts[0].Stmt.GetTransactionStmt()
	if ts == nil {
		return nil, wire.Errorf(wire.FeatureNotSupported, "unsupported transaction statement")
	}
	p := &routePlan{Plan: executor.Plan{SQL: sql}}
	switch ts.Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN, pg_query.TransactionStmtKind_TRANS_STMT_START:
		p.Kind = executor.RouteBegin
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
		if ts.Chain {
			return nil, wire.Errorf(wire.FeatureNotSupported, "COMMIT AND CHAIN is not supported on sharded databases")
		}
		p.Kind = executor.RouteCommit
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		if ts.Chain {
			return nil, wire.Errorf(wire.FeatureNotSupported, "ROLLBACK AND CHAIN is not supported on sharded databases")
		}
		p.Kind = executor.RouteRollback
	case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		p.Kind, p.savepoint = executor.RouteSavepoint, ts.SavepointName
	case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
		p.Kind, p.savepoint, p.release = executor.RouteSavepoint, ts.SavepointName, true
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		p.Kind, p.savepoint = executor.RouteSavepoint, ts.SavepointName
		p.rollbackTo = true
	default:
		return nil, wire.Errorf(wire.FeatureNotSupported,
			"%s is not supported on sharded databases: shardgate runs two-phase commit itself", strings.ToUpper(strings.Fields(sql)[0]))
	}
	return p, nil
}

// hints are a client's routing overrides (SET shardgate.shard /
// shardgate.sharding_key), session-wide or for the transaction (LOCAL).
type hints struct {
	shard, key           *string
	localShard, localKey *string
}

func (h *hints) forRouter(c *client) router.Hints {
	var out router.Hints
	shard, key := h.shard, h.key
	if h.localShard != nil {
		shard = h.localShard
	}
	if h.localKey != nil {
		key = h.localKey
	}
	if shard != nil {
		var n int
		if _, err := fmt.Sscanf(*shard, "%d", &n); err == nil {
			out.Shard = &n
		}
	}
	out.ShardingKey = key
	if sp, ok := c.sess.sets["search_path"]; ok {
		out.SearchPath = searchPathOf(sp)
	}
	if len(c.cursors) > 0 {
		out.Cursor = func(name string) bool { return c.cursors[name] != nil }
	}
	return out
}

// ownSearchPath reports whether the client resolves names with a
// search_path of its own (a startup parameter or option, or a SET): a
// statement some other session's server accepted may then not resolve in
// its session, so the proxy does not answer its Parse on that word
// (stmt.valid). The open transaction counts too: a SET, RESET or SET LOCAL
// of search_path in it, or a change the proxy did not follow (set_config).
func (c *client) ownSearchPath() bool {
	if _, ok := c.sess.sets["search_path"]; ok || c.sess.resync {
		return true
	}
	for _, op := range c.sess.pending {
		if op.name == "search_path" && op.kind != opHint {
			return true
		}
	}
	params := c.startup.Params()
	_, ok := params["search_path"]
	return ok || strings.Contains(params["options"], "search_path")
}

// searchPathOf extracts schema names from a tracked SET search_path
// statement.
func searchPathOf(stmt string) []string {
	list, ok := setConfigValue(stmt)
	if !ok {
		_, list, ok = strings.Cut(stmt, " TO ")
	}
	if !ok {
		return nil
	}
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.Trim(strings.TrimSpace(s), `"'`)
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// setConfigValue returns the value of a statement readBack made
// ("SELECT pg_catalog.set_config('name', 'value', false)").
func setConfigValue(stmt string) (string, bool) {
	rest, ok := strings.CutPrefix(stmt, "SELECT pg_catalog.set_config(")
	if !ok {
		return "", false
	}
	if _, rest, ok = readLiteral(rest); !ok {
		return "", false
	}
	val, _, ok := readLiteral(strings.TrimPrefix(rest, ", "))
	return val, ok
}

// readLiteral reads the string literal quoteLiteral writes at the start of
// s and returns its value and what follows it.
func readLiteral(s string) (val, rest string, ok bool) {
	esc := strings.HasPrefix(s, "E'")
	if esc {
		s = s[1:]
	}
	if !strings.HasPrefix(s, "'") {
		return "", "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && esc && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
			b.WriteByte('\'')
		case c == '\'':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

// hintOnly reports whether ops are all routing hints (the statement is
// answered by the proxy).
func hintOnly(ops []setOp) bool {
	if len(ops) == 0 {
		return false
	}
	for _, op := range ops {
		if op.kind != opHint {
			return false
		}
	}
	return true
}

// applyHints records SET shardgate.* (RESET when stmt is empty).
func (c *client) applyHints(ops []setOp, inTx bool) {
	for _, op := range ops {
		var v *string
		if op.stmt != "" {
			s := op.stmt
			v = &s
		}
		switch {
		case op.local && !inTx:
			// SET LOCAL outside a transaction has no effect, as in
			// PostgreSQL.
		case op.name == "shardgate.shard" && op.local:
			c.hints.localShard = v
		case op.name == "shardgate.shard":
			c.hints.shard = v
		case op.local:
			c.hints.localKey = v
		default:
			c.hints.key = v
		}
	}
}

// collation returns the database's collation when it is not byte order
// ("" for C and POSIX), from shard 0's catalog.
func (c *client) collation() string {
	rp, ok := c.rt.(*routerPlanner)
	if !ok || rp.cat == nil {
		return ""
	}
	return rp.cat.collation()
}

// catalog answers the router's questions about table columns from shard
// 0's catalog, over a connection of its own (a client may hold every
// pooled server), caching the answers; orders answers the merge's
// questions about how columns order (collation.go).
type catalog struct {
	pool   *pool.Pool
	orders *collations

	mu      sync.Mutex // guards the following
	conn    *pgconn.PgConn
	cache   map[string][]string
	coll    *string
	retired bool // close conn after each use (State.retire)
}

// retire closes the catalog's connection, after the question it may be
// answering, and makes every later question close it again.
func (cat *catalog) retire() {
	cat.orders.retire()
	cat.mu.Lock()
	defer cat.mu.Unlock()
	cat.retired = true
	cat.release()
}

// release closes the connection of a retired catalog; cat.mu is held.
func (cat *catalog) release() {
	if !cat.retired || cat.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cat.conn.Close(ctx)
	cat.conn = nil
}

// collation returns datcollate unless it is C or POSIX.
func (cat *catalog) collation() string {
	cat.mu.Lock()
	defer cat.mu.Unlock()
	defer cat.release()
	if cat.coll != nil {
		return *cat.coll
	}
	if err := cat.connect(); err != nil {
		return "unknown (catalog unreachable)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := cat.conn.ExecParams(ctx, "SELECT datcollate FROM pg_database WHERE datname = current_database()", nil, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		return "unknown (catalog query failed)"
	}
	coll := string(res.Rows[0][0])
	if coll == "C" || coll == "POSIX" || strings.HasPrefix(coll, "C.") {
		coll = ""
	}
	cat.coll = &coll
	return coll
}

// connect opens the catalog connection if needed; cat.mu is held.
func (cat *catalog) connect() error {
	if cat.conn != nil && !cat.conn.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pool.Connect(ctx, cat.pool.Target, cat.pool.Config.ConnectTimeout)
	if err != nil {
		return err
	}
	cat.conn = conn
	return nil
}

func (cat *catalog) columns(schema, table string) []string {
	key := schema + "." + table
	cat.mu.Lock()
	defer cat.mu.Unlock()
	defer cat.release()
	if cols, ok := cat.cache[key]; ok {
		return cols
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cat.connect() != nil {
		return nil
	}
	name := wire.QuoteIdent(table)
	if schema != "" {
		name = wire.QuoteIdent(schema) + "." + name
	}
	res := cat.conn.ExecParams(ctx, "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
		[][]byte{[]byte(name)}, nil, nil, nil).Read()
	if res.Err != nil {
		return nil
	}
	var cols []string
	for _, row := range res.Rows {
		cols = append(cols, string(row[0]))
	}
	cat.cache[key] = cols
	return cols
}
