package frontend

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// Sharded databases.
//
// A client of a database with several shards holds up to one server per
// shard (shards[i]). Each statement is routed (routePlan); a statement for
// one shard goes through the ordinary relay with c.server pointing at that
// shard's server. Statements for several shards are written to each
// target, and the answers are combined: reads through an executor.Merger,
// writes by adding command tags.
//
// Transactions are the client's, not any one server's: BEGIN is held until
// a statement shows which shard it needs, then replayed on every shard the
// transaction touches (lazily, with the transaction's savepoints and SETs:
// see sharded_session.go). COMMIT of a transaction that touched one shard
// is plain; of several, two-phase. A write to several shards outside a
// transaction runs in an implicit two-phase transaction of its own, so it
// lands everywhere or nowhere.

// routeKind says how a statement runs over shards.
type routeKind uint8

const (
	routeOne       routeKind = iota // exactly one shard (shards[0])
	routeRead                       // several shards, rows merged
	routeWrite                      // several shards, tags added, RETURNING rows concatenated
	routeOmniWrite                  // every shard, one shard's answer
	routeBegin                      // BEGIN / START TRANSACTION
	routeCommit                     // COMMIT / END
	routeRollback                   // ROLLBACK / ABORT
	routeSavepoint                  // SAVEPOINT, RELEASE, ROLLBACK TO
	routeCopy                       // COPY FROM STDIN split over several shards
	routeLocal                      // answered by the proxy (localTag)
)

// routePlan is the routing decision for one statement.
type routePlan struct {
	kind   routeKind
	shards []int
	sql    string // what to send (the client's text, or the router's rewrite)
	write  bool
	ops    []setOp
	// savepoint: the statement's effect on the savepoint list.
	savepoint  string
	release    bool
	rollbackTo bool

	perShard       map[int]string // multi-row INSERT split: the statement for each shard
	perShardParams map[int][]int
	copy           *router.Copy  // routeCopy  // … and which client parameter feeds each of its parameters
	rmerge         *router.Merge // how to merge rows of several shards
	params         [][]byte      // Bind parameters (LIMIT $n, HAVING … $n)
	formats        []int16

	localTag string     // routeLocal: the command tag
	dealloc  string     // routeLocal: the client's SQL-level statement a DEALLOCATE drops
	create   *sqlCreate // a PREPARE: the client's statement it creates
	execs    []*sqlStmt // SQL statements the server must have prepared first
	// setting: a SET or RESET (router.Session), which inside a transaction
	// runs on every shard of the transaction.
	setting bool
}

// shardConn is one shard as a client holds it.
type shardConn struct {
	pool   *pool.Pool
	server *pool.Server
	inTx   bool // the client's transaction is open on this server
	// eff is what the statements that ran on this server since the end of
	// the last transaction may have left behind (see settleShards).
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

// shardTx is a client's transaction on a sharded database.
type shardTx struct {
	open   bool   // explicit transaction
	begin  string // the client's BEGIN, replayed on each shard joined
	failed bool   // aborted: only ROLLBACK is accepted
	// log is what a shard joining the transaction replays after BEGIN:
	// the active savepoints and the SETs of the transaction, in order.
	log []txEntry
}

func (c *client) shardedStatus() byte {
	switch {
	case !c.stx.open:
		return 'I'
	case c.stx.failed:
		return 'E'
	}
	return 'T'
}

// attachShard checks a server out for shard i, queuing the settings sync
// and, inside a transaction, the BEGIN the shard has not seen yet.
func (c *client) attachShard(ctx context.Context, i int) error {
	if !c.holdsShards() {
		// The start of a transaction: pass the pause/maintenance gate and
		// pick up a reloaded configuration.
		if err := c.admit(ctx); err != nil {
			return err
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
	}
	if i >= len(c.shards) {
		return wire.Errorf(wire.InternalError, "shard %d does not exist any more (configuration reloaded)", i)
	}
	sc := &c.shards[i]
	if sc.server == nil {
		c.setState(ClientWaiting)
		s, p, err := c.checkoutBalanced(ctx, sc.pool, i, c.lb.read && !c.stx.open)
		if err != nil {
			if !c.holdsShards() {
				c.release()
			}
			return checkoutError(p, err)
		}
		sc.server = s
		c.setState(ClientActive)
		c.storeCancelTargets()
	}
	return nil
}

// storeCancelTargets points cancel requests at every shard's server the
// client holds: a statement fanned out runs on all of them, and a cancel
// must stop it everywhere.
func (c *client) storeCancelTargets() {
	var t *cancelTarget
	for i := len(c.shards) - 1; i >= 0; i-- {
		if s := c.shards[i].server; s != nil {
			t = &cancelTarget{addr: s.Addr, pid: s.PID, secret: s.Secret, srv: s, next: t}
		}
	}
	c.setCancelTarget(t)
}

// holdsShards reports whether the client holds any shard's server.
func (c *client) holdsShards() bool {
	for i := range c.shards {
		if c.shards[i].server != nil {
			return true
		}
	}
	return false
}

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
		c.shards = []shardConn{{pool: c.pool}}
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
	for i := range c.shards {
		sc := &c.shards[i]
		if sc.server != nil {
			if sc.unsynced {
				// Every path syncs a batch before it lets the server go;
				// one that did not leaves it in an unknown state.
				sc.server.Broken = true
			}
			serverPool(sc.server, sc.pool).Checkin(sc.server)
			sc.server = nil
		}
		sc.inTx, sc.eff, sc.unsynced, sc.failed, sc.batchOps, sc.portal = false, 0, false, false, nil, nil
	}
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
	return wire.Errorf("55000", "the configuration changed %d times while the statement waited; try again", maxReplans)
}

func (c *client) shardedQueryOnce(ctx context.Context, sql string, ops []setOp, sp *sqlPrep) error {
	// A Query after a Flush ends what a row-limited Execute left open.
	if err := c.syncShards(); err != nil {
		return c.shardFailed(err)
	}
	var p *routePlan
	var err error
	if sp != nil && !c.stx.failed {
		p, err = c.shardedSQLPrep(sql, sp)
	}
	if p == nil && err == nil {
		p, err = c.plan(sql)
	}
	if err != nil {
		return c.shardedError(err)
	}
	if p.kind == routeLocal {
		return c.localDone(p.localTag)
	}
	p.ops = ops
	if hintOnly(ops) {
		c.applyHints(ops, c.stx.open)
		return c.localDone("SET")
	}
	if c.stx.failed && p.kind != routeRollback && !(p.kind == routeSavepoint && p.rollbackTo) {
		return c.shardedError(wire.Errorf("25P02", "current transaction is aborted, commands ignored until end of transaction block"))
	}
	switch p.kind {
	case routeBegin:
		if c.stx.open {
			c.w.Write(wire.AppendNotice(nil, &wire.Error{Severity: "WARNING", Code: "25001", Message: "there is already a transaction in progress"}))
		} else {
			c.stx = shardTx{open: true, begin: sql}
		}
		return c.localDone("BEGIN")
	case routeCommit, routeRollback:
		return c.endTx(ctx, p.kind == routeCommit)
	case routeSavepoint:
		return c.savepoint(ctx, p)
	}
	c.lb.read = !c.stx.open && !p.write && (p.kind == routeOne || p.kind == routeRead) &&
		c.balanced() && c.readStatement(sql, false)
	err = c.attachShards(ctx, p.shards)
	c.lb.read = false
	if err != nil {
		c.releaseIfIdle()
		if err == errReplan {
			return err
		}
		return c.shardedError(err)
	}
	c.routeCounts().count(len(p.shards), len(c.shards))
	if p.kind == routeOne {
		return c.runOne(p)
	}
	if p.kind == routeCopy {
		return c.runCopy(ctx, p)
	}
	return c.runMany(ctx, p)
}

// plan routes sql. Without a router (one shard) everything goes to shard 0.
func (c *client) plan(sql string) (*routePlan, error) {
	if c.rt == nil {
		return &routePlan{kind: routeOne, shards: []int{0}, sql: sql}, nil
	}
	return c.rt.plan(sql, c)
}

// localDone answers a statement the proxy handled itself.
func (c *client) localDone(tag string) error {
	c.w.Write(wire.AppendCommandComplete(nil, tag))
	c.w.Write(wire.AppendReadyForQuery(nil, c.shardedStatus()))
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// shardedError reports err and, inside a transaction, aborts it.
func (c *client) shardedError(err error) error {
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	if e.Fatal() {
		c.sendFatal(e)
		return err
	}
	if c.stx.open {
		c.stx.failed = true
	}
	c.w.Write(wire.AppendError(nil, e))
	c.w.Write(wire.AppendReadyForQuery(nil, c.shardedStatus()))
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// runOne sends the statement to one shard through the ordinary relay.
func (c *client) runOne(p *routePlan) error {
	i := p.shards[0]
	sc := &c.shards[i]
	c.server = sc.server
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
	setting := p.setting && c.stx.open
	if setting {
		serr, err := c.setOnJoined(i, p.sql)
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
			if _, _, e, err := serverQuery(c.server, q); err != nil || e != nil {
				c.server.Broken = true
				if err == nil {
					err = e
				}
				return c.shardFailed(err)
			}
		}
		pre = nil
		if err := ensurePrepared(c.server, p.execs); err != nil {
			if c.server.Broken {
				return c.shardFailed(err)
			}
			c.releaseIfIdle()
			return c.shardedError(err)
		}
	}
	for _, q := range pre {
		c.out = wire.AppendQuery(c.out, q)
		c.q = append(c.q, req{kind: reqInternal})
	}
	start := len(c.sess.pending)
	c.out = wire.AppendQuery(c.out, p.sqlFor(i))
	c.q = append(c.q, req{kind: reqQuery, ops: p.ops, create: p.create})
	err := c.roundTripShard()
	c.ranOn(p.shards)
	if err != nil {
		return err
	}
	if c.stx.open && c.tx == 'E' {
		c.stx.failed = true
	}
	if setting && !c.stx.failed {
		c.ranSetting(p.sql, start)
	}
	c.tx = c.shardedStatus()
	c.releaseIfIdle()
	return nil
}

// roundTripShard is roundTrip for the server c.server points at, without
// the single-shard checkin logic.
func (c *client) roundTripShard() error {
	s := c.server
	s.W.Write(c.out)
	c.out = c.out[:0]
	if err := s.Flush(); err != nil {
		return c.shardFailed(err)
	}
	if err := c.relay(); err != nil {
		return c.shardFailed(err)
	}
	return c.flushClient()
}

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
}

func (e *shardLost) Error() string { return e.err.Error() }

// lostShard returns err, a failure of the server c.server points at, as a
// shardLost.
func (c *client) lostShard(err error) error { return &shardLost{err: err, server: c.server} }

// failShard is shardFailed; ready says to answer ReadyForQuery (a simple
// Query), else the client's batch skips to its Sync.
func (c *client) failShard(err error, ready bool) error {
	if c.clientErr != nil {
		return c.clientErr
	}
	c.log.Warn("server connection failed", "err", err)
	for i := range c.shards {
		if s := c.shards[i].server; s != nil && s == c.server {
			s.Broken = true
		}
	}
	// A pinned or session-mode client's session objects are gone with
	// the server, as a transaction is.
	var sg *serverGone
	forwarded := errors.As(err, &sg) && sg.forwarded
	inTx := c.stx.open || c.pinned || c.mode == config.PoolSession || forwarded && sg.fatal
	c.q = c.q[:0]
	c.out = c.out[:0]
	c.batchOps = c.batchOps[:0]
	c.skipping = false
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
		c.w.Write(wire.AppendReadyForQuery(nil, 'I'))
		c.tx = 'I'
	} else {
		c.localSkip = true
	}
	return c.flushClient()
}

// internal runs sql on shard i and waits for ReadyForQuery, returning the
// first error the server reported.
func (c *client) internal(i int, sql string) (status byte, serr *wire.Error, err error) {
	if err := c.useShard(i); err != nil {
		return 0, nil, err
	}
	s := c.shards[i].server
	s.W.Write(wire.AppendQuery(nil, sql))
	if err := s.Flush(); err != nil {
		return 0, nil, err
	}
	return readToReady(s)
}

// readToReady discards a server's answers up to ReadyForQuery, keeping the
// first error.
func readToReady(s *pool.Server) (status byte, serr *wire.Error, err error) {
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			s.Broken = true
			return 0, serr, err
		}
		switch typ {
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
			}
			if serr.Fatal() {
				s.Broken = true
			}
		case 'S':
			s.NoteParameter(body)
		case 'Z':
			if len(body) == 1 {
				return body[0], serr, nil
			}
			return 0, serr, errors.New("malformed ReadyForQuery")
		}
	}
}

// rollbackShards rolls back the client's transaction on every shard that
// has it open; a server that cannot be cleaned is marked broken.
func (c *client) rollbackShards() {
	for i := range c.shards {
		sc := &c.shards[i]
		if sc.server == nil || !sc.inTx || sc.server.Broken {
			continue
		}
		if st, _, err := c.internal(i, "ROLLBACK"); err != nil || st != 'I' {
			sc.server.Broken = true
		}
		sc.inTx = false
	}
	c.stx = shardTx{}
}

// endTx commits or rolls back the client's transaction on every shard it
// touched.
func (c *client) endTx(ctx context.Context, commit bool) error {
	if !c.stx.open {
		c.w.Write(wire.AppendNotice(nil, &wire.Error{Severity: "WARNING", Code: "25P01", Message: "there is no transaction in progress"}))
		if commit {
			return c.localDone("COMMIT")
		}
		return c.localDone("ROLLBACK")
	}
	tag, err := c.finishTx(commit)
	if err != nil {
		return c.shardedError(err)
	}
	return c.localDone(tag)
}

// commitShards commits the transaction open on shards: plainly on one
// shard, with two-phase commit on several.
func (c *client) commitShards(shards []int) error {
	switch len(shards) {
	case 0:
		return nil
	case 1:
		st, serr, err := c.internal(shards[0], "COMMIT")
		c.shards[shards[0]].inTx = false
		if err != nil {
			return wire.Errorf(wire.ConnectionFailure, "commit: server connection lost: %v", err)
		}
		if serr != nil {
			return serr
		}
		if st != 'I' {
			c.shards[shards[0]].server.Broken = true
		}
		return nil
	}
	txid := c.l.nextTxID()
	prepared := []int{}
	var failure error
	for _, i := range shards {
		_, serr, err := c.internal(i, "PREPARE TRANSACTION "+quoteLiteral(executor.GID(txid, i)))
		if err != nil || serr != nil {
			if serr != nil {
				failure = &wire.Error{Severity: "ERROR", Code: serr.Code, Message: "two-phase commit failed on shard " + strconv.Itoa(i) + ": " + serr.Message, Detail: serr.Detail, Hint: serr.Hint}
				if serr.Code == "55000" {
					failure.(*wire.Error).Hint = "set max_prepared_transactions > 0 on every shard: shardgate commits multi-shard transactions with two-phase commit"
				}
			} else {
				failure = wire.Errorf(wire.ConnectionFailure, "two-phase commit: shard %d: %v", i, err)
			}
			break
		}
		prepared = append(prepared, i)
		c.shards[i].inTx = false
	}
	if failure == nil {
		c.twoPhaseHookForTest("prepared")
		dlog := c.l.twoPC()
		if dlog == nil {
			failure = wire.Errorf(wire.InternalError, "two-phase commit log %s cannot be opened", c.l.twoPCPath())
		} else if err := dlog.Commit(txid); err != nil {
			failure = wire.Errorf(wire.InternalError, "two-phase commit: %v", err)
		}
	}
	if failure != nil {
		for _, i := range prepared {
			c.internal(i, "ROLLBACK PREPARED "+quoteLiteral(executor.GID(txid, i)))
		}
		c.rollbackShards()
		return failure
	}
	c.twoPhaseHookForTest("decided")
	allDone := true
	for _, i := range prepared {
		if _, serr, err := c.internal(i, "COMMIT PREPARED "+quoteLiteral(executor.GID(txid, i))); err != nil || serr != nil {
			// The decision is durable: recovery finishes it.
			allDone = false
			c.log.Error("COMMIT PREPARED failed; recovery will finish it", "gid", executor.GID(txid, i), "err", err, "server_err", serr)
		}
	}
	if allDone {
		c.l.twoPC().Done(txid)
	}
	return nil
}

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
