package frontend

import (
	"context"
	"errors"
	"math/rand/v2"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Sharded databases.
//
// A client of a database with several shards holds up to one server per
// shard and a transaction over them: both live in c.xs, an
// executor.Session, which also runs what needs several shards (fan-out
// and merge, COPY split, commit and two-phase commit). Each statement is
// routed (routePlan, route.go); a statement for one shard goes through the
// ordinary relay with c.server pointing at that shard's server, so that
// one-shard traffic costs what a pass-through does. The frontend keeps
// what is about the client: its settings and SQL-level statements (which
// every shard's server catches up on, Session.Settings), its
// extended-protocol statements and portals (sharded_ext.go), and per shard
// the state of a batch a row-limited Execute left open (shardExt,
// sharded_portal.go).

// routePlan is the routing decision for one statement.
type routePlan struct {
	executor.Plan
	ops []setOp
	// savepoint: the statement's effect on the savepoint list.
	savepoint  string
	release    bool
	rollbackTo bool

	localTag string // RouteLocal: the command tag
	dealloc  string // RouteLocal: the client's SQL-level statement a DEALLOCATE drops
	// fail: RouteLocal: the error the Execute answers (a PREPARE of a name
	// in use fails at its Execute, as in PostgreSQL, not at its Bind).
	fail *wire.Error
	// RouteLocal: DECLARE of a cursor over several shards, or FETCH, MOVE
	// or CLOSE of a cursor the proxy holds (sharded_cursor.go); a
	// DECLARE's query plan (nil when the name is taken).
	cursorOp   *pg_query.Node
	cursorPlan *routePlan
	create     *sqlCreate // a PREPARE: the client's statement it creates
	execs      []*sqlStmt // SQL statements the server must have prepared first
	// setting: a SET or RESET (router.Session), which inside a transaction
	// runs on every shard of the transaction.
	setting bool
	// statements is the number of statements in the text (a Parse of
	// more than one fails, as in PostgreSQL).
	statements int
}

// shardExt is what the frontend keeps of one shard of a sharded client,
// next to the server and transaction state the executor's Session keeps.
type shardExt struct {
	// eff is what the statements that ran on the shard's server since the
	// end of the last transaction may have left behind (see
	// settleShards).
	eff effect
	// unsynced: a row-limited Execute left the server inside an
	// extended-protocol batch, without Sync (see sharded_portal.go);
	// failed says the server skips to that Sync after an error, and
	// batchOps are the session ops of the batch, applied at the Sync.
	unsynced bool
	failed   bool
	batchOps []setOp
	// portal is the client's portal suspended in the server's unnamed
	// portal, nil when none is.
	portal *sPortal
}

// shardedState is the part of a sharded client's state that the client
// struct keeps behind a pointer (client.shardedState), made with the
// client's executor.Session by setShards: every path that touches it runs
// with c.xs set.
type shardedState struct {
	hints   hints
	rc      *routeCounts // route counters of database rcDB (routestats.go)
	rcDB    string
	stream  *portalStream // a cross-shard read paused between Executes
	reports [][]byte      // ParameterStatus for the next ReadyForQuery (report)
	partErr bool          // an error answered a part of a multi-statement Query (runParts)
	// bindPending: the client's BindComplete is held back until the shard
	// binds the portal, so that an error PostgreSQL raises at Bind takes
	// its place (see deferBind).
	bindPending bool
	// batchReads: every statement of the extended-protocol batch being
	// dispatched is a read, up to its Sync (readBatch), on a database
	// with replicas: its shards' servers may be replicas' (readBalanced).
	batchReads bool
	// freshShard: the server of the shard the statement in progress runs
	// on carried nothing of the client's when the statement started
	// (pool.Server.Untouched), so that it may run again on another server
	// of the shard if that one turns out dead (retryShard).
	freshShard bool
	// Extended protocol on sharded databases (sharded_ext.go).
	batch []batchMsg
	// batchBuf holds copies of the batch's message bodies, one buffer a
	// batch (the reader's is reused by the next message); batchHint is
	// the last batch's size, the next buffer's capacity.
	batchBuf  []byte
	batchHint int
	sportals  map[string]*sPortal
	// sparePortal is a portal a Sync ended, zeroed and kept for the next
	// Bind (recyclePortal): a client that binds statements one batch at a
	// time (pgbench -M prepared, a driver's statement cache) then makes no
	// portal per statement. One per client, not one per statement: a
	// client with hundreds of cached statements keeps one, and a parked
	// client drops it (shed).
	sparePortal    *sPortal
	pendingPrepare string
	// execOut is execOne's message buffer and execTag its copy of the
	// CommandComplete tag, kept for the next statement (scratch).
	execOut, execTag []byte
	// clientParse: the exchange in progress is the client's Parse
	// (validateParse), whose notices go to the client and are counted in
	// parseNotices; other Parses' are the proxy's own (stmt.noisy).
	clientParse  bool
	parseNotices int
	// cursors are the client's cursors over several shards, which the
	// proxy holds (sharded_cursor.go).
	cursors map[string]*proxyCursor
	// savepoints are the open transaction's savepoints, oldest first, each
	// with the number spSeq gave it, so that a ROLLBACK TO ends the
	// cursors declared after its savepoint (cursor.spSeq).
	savepoints []savepointMark
	spSeq      int
	// relisten are the LISTEN channels a resharding cutover took from
	// the session's old servers, to LISTEN on the new shard relistenShard
	// before the session's next transaction (listenAgain).
	relisten      []string
	relistenShard int
}

// setShards makes the client a sharded one over pools (one per shard).
func (c *client) setShards(pools []*pool.Pool) {
	if c.shardedState == nil {
		c.shardedState = &shardedState{}
	}
	c.xs = executor.NewSession(pools, c.l.coord)
	c.xs.Ready = c.useShard
	c.xs.Releasing = c.unhotServer
	c.xs.Settings = c.settingsPrefix
	c.xs.Report = c.reportOnce
	c.ext = make([]shardExt, len(pools))
}

// reportOnce passes what the shards send while the client's transaction
// ends (executor.Session.Report) on to the client: notifications at once,
// ParameterStatus with the client's next ReadyForQuery (report).
func (c *client) reportOnce(raw []byte) {
	if raw[0] == 'S' {
		c.report(raw)
		return
	}
	c.toClient(raw)
}

// report keeps a ParameterStatus for the client's next ReadyForQuery:
// PostgreSQL reports the settings a statement changed just before
// ReadyForQuery, once each, with their last value. Each shard reports
// what the end of a transaction restored; the client hears it once.
func (c *client) report(raw []byte) {
	name, _, _ := wire.CString(raw[5:])
	for k, r := range c.reports {
		if n, _, _ := wire.CString(r[5:]); string(n) == string(name) {
			c.reports[k] = append(r[:0], raw...)
			return
		}
	}
	c.reports = append(c.reports, append([]byte(nil), raw...))
}

// readyForQuery sends the kept ParameterStatus messages, then
// ReadyForQuery with status; within a multi-statement Query run part by
// part (runParts), only its end does.
func (c *client) readyForQuery(status byte) {
	if c.multi {
		return
	}
	for _, r := range c.reports {
		c.toClient(r)
	}
	c.reports = c.reports[:0]
	c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), status))
}

// shardedStatus is the transaction status of the client's session.
func (c *client) shardedStatus() byte { return c.xs.Status() }

// attachShard checks a server out for shard i, queuing the settings sync
// and, inside a transaction, the BEGIN the shard has not seen yet.
func (c *client) attachShard(ctx context.Context, i int) error {
	if c.adm.gate == nil {
		// The start of a transaction: pass the pause/maintenance gate and
		// pick up a reloaded configuration.
		if err := c.admit(ctx); err != nil {
			return err
		}
		if c.holdsShards() {
			// A session-pooled client between transactions keeps its
			// servers; it moves only when a cutover changed its shards.
			if !c.shardsMoved() {
				return c.attachHeld(ctx, i)
			}
			if err := c.leaveSessionShards(); err != nil {
				c.release()
				if e, ok := wire.AsError(err); ok {
					c.sendFatal(e) // every protocol path ends the session with it
				}
				return &fatalSent{err: err}
			}
			if err := c.admit(ctx); err != nil { // detachShards left the gate
				return err
			}
		}
		before := c.st
		if err := c.refreshShards(); err != nil {
			c.release()
			return err
		}
		if c.st != before {
			// The statement was routed by the rules in force before this
			// reload (a resharding cutover changes the shard count, and
			// the gate held the client through it): route it again.
			c.release()
			return errReplan
		}
		if len(c.relisten) > 0 {
			// The session's LISTEN channels follow it from the shards a
			// cutover retired (listenAgain).
			if err := c.listenAgain(ctx); err != nil {
				if e, ok := wire.AsError(err); ok && e.Fatal() {
					c.release()
					c.sendFatal(e)
					return &fatalSent{err: err}
				}
				return err
			}
		}
	}
	return c.attachHeld(ctx, i)
}

// attachHeld is attachShard once the client passed the gate: it checks a
// server out for shard i unless the client holds one.
func (c *client) attachHeld(ctx context.Context, i int) error {
	if i >= c.xs.Len() {
		return wire.Errorf(wire.InternalError, "shard %d does not exist any more (configuration reloaded)", i)
	}
	if c.xs.Server(i) == nil {
		c.setState(ClientWaiting)
		// A read outside a transaction block, or in a batch's implicit
		// transaction of reads (readBalanced), may take a replica's.
		s, p, err := c.checkoutBalanced(ctx, c.xs.Pool(i), i, c.lb.read && (!c.xs.InTx() || c.xs.Implicit()))
		if err != nil {
			if !c.holdsShards() {
				c.release()
			}
			return checkoutError(p, err)
		}
		c.xs.Hold(i, s)
		c.hotServer(s)
		c.setState(ClientActive)
		c.storeCancelTargets()
		if h := c.l.CheckoutHookForTest; h != nil {
			h(i, s)
		}
	}
	return nil
}

// storeCancelTargets points cancel requests at every shard's server the
// client holds: a statement fanned out runs on all of them, and a cancel
// must stop it everywhere.
func (c *client) storeCancelTargets() {
	held, last := 0, (*pool.Server)(nil)
	for i := range c.xs.Len() {
		if s := c.xs.Server(i); s != nil {
			held, last = held+1, s
		}
	}
	if held == 1 {
		// The one server's own target, shared by its holders.
		c.setCancelTarget(serverTarget(last))
		return
	}
	var t *cancelTarget
	for i := c.xs.Len() - 1; i >= 0; i-- {
		if s := c.xs.Server(i); s != nil {
			t = &cancelTarget{addr: s.Addr, pid: s.PID, secret: s.Secret, srv: s, next: t}
		}
	}
	c.setCancelTarget(t)
}

// holdsShards reports whether the client holds any shard's server.
func (c *client) holdsShards() bool { return c.xs != nil && c.xs.Holds() }

// refreshShards moves the client to a reloaded configuration between
// transactions: new pools, new sharding rules (a resharding cutover changes
// the shard count), or 57P01 when its user or database is gone.
func (c *client) refreshShards() error {
	st := c.l.State()
	if st == c.st {
		return nil
	}
	u, db, err := c.reloadedIdentity(st)
	if err != nil {
		return err
	}
	c.st, c.user, c.db = st, u, db
	c.pool = st.Pools.Get(db, u, 0)
	if len(db.Shards) < 2 {
		// The database is not sharded any more: serve it as one shard.
		c.setShards([]*pool.Pool{c.pool})
		c.rt = nil
		return nil
	}
	return c.initShards(st)
}

// detachShards returns every held server to the pool.
func (c *client) detachShards() {
	held := c.holdsShards()
	defer func() {
		if held {
			c.release()
		}
	}()
	// No cancel may reach a server once another client can have it.
	c.setCancelTarget(nil)
	for i := range c.ext {
		if s := c.xs.Server(i); s != nil && c.ext[i].unsynced {
			// Every path syncs a batch before it lets the server go;
			// one that did not leaves it in an unknown state.
			s.Broken = true
		}
		c.ext[i] = shardExt{}
	}
	// The loop's time, read before Releasing (unhotServer) may hand the
	// client to a goroutine, as checkin does.
	c.xs.DetachAt(c.mono())
	c.server = nil
	c.setState(ClientIdle)
}

// errReplan is attachShard's answer when a reload at the start of a
// transaction replaced the routing the statement was planned with; the
// caller plans it again, at most maxReplans times.
var errReplan = errors.New("the configuration changed: route the statement again")

const maxReplans = 10

// shardedQuery runs a simple Query on a sharded database.
func (c *client) shardedQuery(ctx context.Context, sql string, ops []setOp, sp *sqlPrep) error {
	if c.stream != nil && (c.stream.cur == nil || c.proxyCursorOp(sql) == nil) {
		// Its servers run the Query; a FETCH, MOVE or CLOSE of one of
		// the proxy's cursors needs none (sharded_cursor.go), and a
		// COMMIT or ROLLBACK that ends the cursor drops its rows.
		mode := streamKeep
		if c.stream.cur != nil && c.stream.cur.endsWith(sql) {
			mode = streamDrop
		}
		c.settleStream(mode)
	}
	if c.mode != config.PoolTransaction {
		// simpleQuery analyzes statements in transaction mode only, but a
		// sharded session has a server per shard in session mode too: its
		// settings and SQL-level statements are tracked the same way.
		se := analyze([]byte(sql))
		ops = se.ops
		c.txEff |= se.eff
		if se.eff&effSQLPrepare != 0 {
			sp = parseSQLPrep(sql)
		}
	}
	for range maxReplans {
		err := c.shardedQueryOnce(ctx, sql, ops, sp)
		if err != errReplan {
			return err
		}
	}
	return c.shardedError(errReplansExhausted())
}

func errReplansExhausted() error {
	return wire.Errorf(wire.ObjectNotInPrerequisiteState, "the configuration changed %d times while the statement waited; try again", maxReplans)
}

func (c *client) shardedQueryOnce(ctx context.Context, sql string, ops []setOp, sp *sqlPrep) error {
	// A Query after a Flush ends what a row-limited Execute left open, and
	// the implicit transaction of the batch before it: committed first
	// (PostgreSQL would run the Query in it, then commit both).
	if err := c.syncShards(); err != nil {
		return c.shardFailed(err)
	}
	if c.xs.Implicit() && !c.multi {
		if _, err := c.finishTx(!c.xs.Failed()); err != nil {
			return c.shardedError(err)
		}
	}
	if done, err := c.cursorQuery(ctx, sql); done {
		return err
	}
	var p *routePlan
	var err error
	if sp != nil && !c.xs.Failed() {
		p, err = c.shardedSQLPrep(sql, sp)
	}
	if p == nil && err == nil {
		p, err = c.plan(sql)
	}
	if err != nil {
		return c.shardedError(err)
	}
	if p.Kind == executor.RouteParts {
		return c.runParts(ctx, p.Parts)
	}
	if p.Kind == executor.RouteLocal {
		return c.localDone(p.localTag)
	}
	p.ops = ops
	if hintOnly(ops) {
		c.applyHints(ops, c.xs.InTx())
		return c.localDone("SET")
	}
	if c.xs.Failed() && !endsFailedTx(p) {
		return c.shardedError(errAborted())
	}
	switch p.Kind {
	case executor.RouteBegin:
		return c.localDone(c.beginTx(sql))
	case executor.RouteCommit, executor.RouteRollback:
		return c.endTx(ctx, p.Kind == executor.RouteCommit)
	case executor.RouteSavepoint:
		return c.savepoint(ctx, p)
	}
	// Outside a transaction block, or in the implicit transaction of a
	// multi-statement Query of reads (runParts), a read may take replicas'
	// servers; a part after one that holds a primary's stays on primaries.
	c.lb.read = (!c.xs.InTx() || c.multi && c.batchReads && c.xs.Implicit() && !c.holdsPrimary()) &&
		!p.Write && (p.Kind == executor.RouteOne || p.Kind == executor.RouteRead) &&
		c.balanced() && c.readStatement(sql, false)
	err = c.attachShards(ctx, p.Shards)
	c.lb.read = false
	if err != nil {
		c.releaseIfIdle()
		if err == errReplan {
			return err
		}
		return c.shardedError(err)
	}
	c.routeCounts().count(len(p.Shards), c.xs.Len())
	if p.Kind == executor.RouteOne {
		return c.runOne(p)
	}
	if p.Kind == executor.RouteCopy {
		return c.runCopy(p)
	}
	if p.Kind == executor.RouteInsertSelect {
		return c.runInsertSelect(p)
	}
	if p.CopyOut != nil {
		return c.runCopyOut(p)
	}
	return c.runMany(p)
}

// plan routes sql. Without a router (one shard) everything goes to shard 0.
func (c *client) plan(sql string) (*routePlan, error) {
	if c.rt == nil {
		return &routePlan{Plan: executor.Plan{Kind: executor.RouteOne, Shards: []int{0}, SQL: sql}}, nil
	}
	return c.rt.plan(sql, c)
}

// endsFailedTx reports whether p is a statement an aborted transaction
// accepts: ROLLBACK, ROLLBACK TO SAVEPOINT, or COMMIT (which rolls back and
// answers ROLLBACK, as in PostgreSQL).
func endsFailedTx(p *routePlan) bool {
	switch p.Kind {
	case executor.RouteRollback, executor.RouteCommit:
		return true
	case executor.RouteSavepoint:
		return p.rollbackTo
	}
	return false
}

// errAborted is PostgreSQL's answer to a statement in an aborted
// transaction.
func errAborted() error {
	return wire.Errorf(wire.InFailedSQLTransaction, "current transaction is aborted, commands ignored until end of transaction block")
}

// beginTag is the command tag PostgreSQL answers a BEGIN or START
// TRANSACTION with.
func beginTag(sql string) string {
	b := []byte(sql)
	if hasKeyword(b[skipSpaceAndComments(b, 0):], "start") {
		return "START TRANSACTION"
	}
	return "BEGIN"
}

// localDone answers a statement the proxy handled itself.
func (c *client) localDone(tag string) error {
	c.w.Write(wire.AppendCommandComplete(nil, tag))
	c.readyForQuery(c.shardedStatus())
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// shardedError reports err and, inside a transaction, aborts it.
func (c *client) shardedError(err error) error {
	var sent *fatalSent
	if errors.As(err, &sent) {
		return err
	}
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	if e.Fatal() {
		c.sendFatal(e)
		return err
	}
	c.xs.Abort()
	c.partErr = true
	c.w.Write(wire.AppendError(nil, e))
	c.readyForQuery(c.shardedStatus())
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// runOne sends the statement to one shard through the ordinary relay, on
// another server of the shard when the one it holds turns out dead before
// it answered anything (retryShard).
func (c *client) runOne(p *routePlan) error {
	i := p.Shards[0]
	err, cerr := c.onShard(i, func() error { return c.runOneOn(p, i) })
	if cerr != nil {
		c.releaseIfIdle()
		return c.shardedError(cerr)
	}
	var lost *shardLost
	if errors.As(err, &lost) {
		c.server = lost.server
		return c.shardFailed(lost.err)
	}
	return err
}

// runOneOn is one try of runOne on shard i's server. It answers every
// failure itself but a *shardLost, which runOne retries or answers.
func (c *client) runOneOn(p *routePlan, i int) error {
	c.server = c.xs.Server(i)
	if err := c.useShard(i); err != nil {
		return c.shardFailed(err)
	}
	if p.create != nil {
		if _, ok := c.server.Prepared[p.create.st.name]; ok {
			// This server has the statement from another client.
			c.sqlStmts[p.create.client] = p.create.st
			c.releaseIfIdle()
			return c.localDone("PREPARE")
		}
	}
	setting := p.setting && c.xs.InTx()
	if setting {
		serr, err := c.xs.SetOnJoined(i, p.SQL)
		if err != nil {
			return c.shardFailed(err)
		}
		if serr != nil {
			return c.shardedError(serr)
		}
	}
	pre := c.prefix(i, false)
	if len(p.execs) > 0 {
		// Settings (search_path) first, then the PREPARE the EXECUTE
		// needs, then the statement.
		for _, q := range pre {
			if _, _, e, err := serverQuery(c.server, q, c.toClient); err != nil || e != nil {
				c.server.Broken = true
				if err == nil {
					return c.shardFailed(e)
				}
				return c.lostOwnStatement(err)
			}
		}
		pre = nil
		if err := c.ensurePrepared(c.server, p.execs); err != nil {
			if c.server.Broken {
				return c.lostOwnStatement(err)
			}
			c.releaseIfIdle()
			return c.shardedError(err)
		}
	}
	for _, q := range pre {
		c.out = wire.AppendQuery(c.out, q)
		c.q = append(c.queued(), req{kind: reqInternal})
	}
	start := len(c.sess.pending)
	c.out = wire.AppendQuery(c.out, p.SQLFor(i))
	c.q = append(c.queued(), req{kind: reqQuery, ops: p.ops, create: p.create})
	err := c.roundTripShard()
	c.ranOn(p.Shards)
	if err != nil {
		return err
	}
	if c.tx == 'E' {
		c.xs.Abort()
	}
	if setting && !c.xs.Failed() {
		c.ranSetting(p.SQL, start)
	}
	c.tx = c.shardedStatus()
	c.releaseIfIdle()
	return nil
}

// roundTripShard is roundTrip for the server c.server points at, without
// the single-shard checkin logic.
//
// A server that died before it answered anything of the round trip (see
// retryShard) is not answered here: its error is a *shardLost to retry,
// with the round trip's queue dropped.
func (c *client) roundTripShard() error {
	s := c.server
	c.answers = 0
	c.tripStart = c.mono()
	s.W.Write(c.out)
	c.out = c.out[:0]
	err := s.Flush()
	if err != nil && c.freshShard && pool.NothingSent(err) {
		err = &serverGone{retry: true, err: err}
	}
	if err == nil {
		err = c.relay()
	}
	if err == nil {
		return c.flushClient()
	}
	if retryable(err) {
		c.q = c.q[:0]
		c.pipe.set(pipeErrored, false)
		return &shardLost{err: err, server: s, retry: true}
	}
	return c.shardFailed(err)
}

// lostOwnStatement is lostShard for a failure of the proxy's own
// statements on c.server before the client's (the settings sync, the
// shard's BEGIN and replay, SQL-level PREPAREs): nothing of the client's
// ran, so a fresh server's statement may run on another (retryShard).
func (c *client) lostOwnStatement(err error) error { return c.lostShardRetry(err, true) }

// shardFailed handles a broken server on a sharded database: the client's
// transaction (if any) is lost, so the client gets an error and, inside a
// transaction, the connection is closed.
func (c *client) shardFailed(err error) error { return c.failShard(err, true) }

// shardLost is the answer of an extended-protocol message whose shard's
// server failed: the batch reports it with failShard, and answers
// ReadyForQuery at the client's Sync.
type shardLost struct {
	err    error
	server *pool.Server
	// retry: the server died before it answered anything of the
	// client's statement, or while it ran the proxy's own statements
	// before it (see retryShard).
	retry bool
}

func (e *shardLost) Error() string { return e.err.Error() }

// lostShard returns err, a failure of the server c.server points at, as a
// shardLost.
func (c *client) lostShard(err error) error { return c.lostShardRetry(err, false) }

// lostShardRetry is lostShard, with retry saying whether the statement may
// run again on another server of the shard (retryShard).
func (c *client) lostShardRetry(err error, retry bool) error {
	srv := c.server
	var se *executor.ShardError
	if errors.As(err, &se) {
		srv = se.Server
	}
	return &shardLost{err: err, server: srv, retry: retry}
}

// failShard is shardFailed; ready says to answer ReadyForQuery (a simple
// Query), else the client's batch skips to its Sync.
func (c *client) failShard(err error, ready bool) error {
	if c.clientErr != nil {
		return c.clientErr
	}
	c.log.Warn("server connection failed", "err", err)
	c.partErr = true
	var se *executor.ShardError
	if errors.As(err, &se) {
		c.server = se.Server
	}
	for i := range c.xs.Len() {
		if s := c.xs.Server(i); s != nil && s == c.server {
			s.Broken = true
		}
	}
	// A pinned or session-mode client's session objects are gone with
	// the server, as a transaction is.
	var sg *serverGone
	forwarded := errors.As(err, &sg) && sg.forwarded
	// A batch's implicit transaction is lost with the batch; the client's
	// session is not.
	inTx := c.xs.InTx() && !c.xs.Implicit() || c.pinned || c.mode == config.PoolSession || forwarded && sg.fatal
	c.q = c.q[:0]
	c.out = c.out[:0]
	c.batchOps = c.batchOps[:0]
	c.pipe.set(pipeSkipping, false)
	c.pinned = false
	c.rollbackShards()
	c.detachShards()
	e := &wire.Error{Severity: "ERROR", Code: wire.ConnectionFailure, Message: "server connection lost", Detail: err.Error()}
	if inTx && forwarded {
		// The client got the server's FATAL: like PostgreSQL, close.
		c.flushClient()
		return err
	}
	if inTx {
		e.Severity = "FATAL"
		e.Detail += "; the transaction was aborted"
		c.sendFatal(e)
		return err
	}
	if !forwarded {
		c.w.Write(wire.AppendError(nil, e))
	}
	if ready {
		c.readyForQuery('I')
		c.tx = 'I'
	} else {
		c.pipe.set(pipeDropping, true)
	}
	return c.flushClient()
}

// rollbackShards rolls back the client's transaction on every shard that
// has it open.
func (c *client) rollbackShards() { c.xs.Rollback() }

// endTx commits or rolls back the client's transaction on every shard it
// touched.
func (c *client) endTx(ctx context.Context, commit bool) error {
	tag, err := c.endTxTag(commit)
	if err != nil {
		return c.shardedError(err)
	}
	return c.localDone(tag)
}

// beginTx opens the client's transaction for its BEGIN or START
// TRANSACTION sql — with PostgreSQL's warning when one is open already —
// and returns the command tag.
func (c *client) beginTx(sql string) string {
	if !c.xs.Begin(sql) {
		c.w.Write(wire.AppendNotice(nil, &wire.Error{Severity: "WARNING", Code: wire.ActiveSQLTransaction, Message: "there is already a transaction in progress"}))
	}
	return beginTag(sql)
}

// endTxTag runs COMMIT (commit) or ROLLBACK in every protocol and returns
// its command tag. Outside a transaction block, or in an implicit one
// (which it ends), PostgreSQL warns that there is no transaction in
// progress.
func (c *client) endTxTag(commit bool) (string, error) {
	if !c.xs.InTx() || c.xs.Implicit() {
		w := &wire.Error{Severity: "WARNING", Code: wire.NoActiveSQLTransaction, Message: "there is no transaction in progress"}
		switch {
		case !commit:
			w.At = wire.AtRollbackOutside
		case c.xs.InTx():
			w.At = wire.AtCommitImplicit
		}
		c.w.Write(wire.AppendNotice(nil, w))
	}
	if !c.xs.InTx() {
		if commit {
			return "COMMIT", nil
		}
		return "ROLLBACK", nil
	}
	return c.finishTx(commit)
}

// commitShards commits the transaction open on shards: plainly on one
// shard, with two-phase commit on several.
func (c *client) commitShards(shards []int) error { return c.xs.Commit(shards) }

// savepoint runs SAVEPOINT / RELEASE / ROLLBACK TO for a simple Query.
func (c *client) savepoint(ctx context.Context, p *routePlan) error {
	tag, serr, err := c.runSavepoint(p)
	if err != nil {
		return c.shardFailed(err)
	}
	if serr != nil {
		return c.shardedError(serr)
	}
	return c.localDone(tag)
}

// pickShard returns a random shard for reads that any shard can answer.
func pickShard(n int) int { return rand.IntN(n) }

// runParts runs a multi-statement Query whose statements need different
// shards: each statement is planned and run on its own, in one implicit
// transaction, as PostgreSQL runs the statements of a Query in an implicit
// transaction block — committed together at the end (with two-phase commit
// over several shards), rolled back when one fails, the rest skipped. BEGIN
// makes the transaction explicit and COMMIT ends it, after which the
// statements that follow start a new implicit one. The client gets every
// statement's answer and one ReadyForQuery.
func (c *client) runParts(ctx context.Context, parts []string) error {
	c.multi, c.partErr = true, false
	defer func() { c.multi = false }()
	// A Query of reads alone may read from replicas (shardedQueryOnce);
	// its implicit transaction then commits on each shard on its own.
	c.batchReads = !c.xs.InTx() && c.balanced() && c.partsRead(parts)
	defer func() { c.batchReads = false }()
	for _, part := range parts {
		if !c.xs.InTx() {
			c.xs.BeginImplicit()
		}
		ops, sp := partEffects(part, &c.txEff)
		err := errReplan
		for n := 0; err == errReplan && n < maxReplans; n++ {
			err = c.shardedQueryOnce(ctx, part, ops, sp)
		}
		if err == errReplan {
			err = c.shardedError(errReplansExhausted())
		}
		if err != nil {
			return err
		}
		if c.partErr || c.xs.Failed() {
			break
		}
	}
	if c.xs.Implicit() {
		if _, err := c.finishTx(!c.xs.Failed() && !c.partErr); err != nil {
			e, ok := wire.AsError(err)
			if !ok {
				e = wire.Errorf(wire.InternalError, "%v", err)
			}
			c.w.Write(wire.AppendError(nil, e))
		}
	}
	c.multi = false
	c.releaseIfIdle()
	c.tx = c.shardedStatus()
	c.readyForQuery(c.tx)
	return c.flushClient()
}

// partsRead reports whether every statement of a multi-statement Query is
// a read (or ends a transaction: readsInBatch).
func (c *client) partsRead(parts []string) bool {
	for _, part := range parts {
		if !c.readsInBatch(part, false) {
			return false
		}
	}
	return true
}

// partEffects is what one statement of a multi-statement Query does to the
// session: its tracked settings, its SQL-level prepared statements, and
// the effects that make the end of the transaction read settings back.
func partEffects(part string, txEff *effect) ([]setOp, *sqlPrep) {
	se := analyze([]byte(part))
	*txEff |= se.eff
	var sp *sqlPrep
	if se.eff&effSQLPrepare != 0 {
		sp = parseSQLPrep(part)
	}
	return se.ops, sp
}
