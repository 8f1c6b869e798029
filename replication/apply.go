package replication

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// changeKind is what one decoded change does on a destination shard.
type changeKind uint8

const (
	changeInsert   changeKind = iota + 1 // INSERT the new tuple
	changeUpdate                         // UPDATE the changed columns of the row with the old identity
	changeDelete                         // DELETE the row with the old identity
	changeTruncate                       // TRUNCATE the table
	// changeMoveOut deletes the row with the old identity and returns the
	// values of the columns the new tuple left unchanged (TOAST), so that
	// the reader can insert the row on its new shard.
	changeMoveOut
	// changeTruncateSource deletes the rows that came from the source
	// shard of the stream: a TRUNCATE on one of several source shards.
	changeTruncateSource
)

// change is one row change routed to one destination shard.
type change struct {
	kind  changeKind
	rel   *relation
	new   []*pglogrepl.TupleDataColumn // insert, update: the new tuple
	old   []*pglogrepl.TupleDataColumn // update, delete, moveOut: holds the identity
	reply chan moveReply               // moveOut only
}

// moveReply answers a changeMoveOut: the text values of the rel's columns
// named in want, or skipped when this destination had already applied the
// transaction.
type moveReply struct {
	values  map[int][]byte
	skipped bool // the destination had committed the transaction already
	missing bool // the old row was not there
	err     error
}

// op is a batch of changes of one source transaction for one destination
// shard. The last op of a transaction has commit set; a transaction too big
// to buffer arrives in several ops, all applied in one destination
// transaction.
type op struct {
	final      pglogrepl.LSN // the source commit record's LSN (Begin.FinalLSN)
	commit     bool
	end        pglogrepl.LSN // commit only: the end of the commit record
	commitTime time.Time     // commit only
	changes    []change
}

// Batching of the apply. The changes the reader hands an applier between
// two of its round trips join one destination transaction ("group
// commit") sent in one pipelined round trip of at most about
// batchStatements statements: BEGIN, the changes of several source
// transactions, one origin advance to the last one's end, COMMIT. Exactly
// once still holds, since the group commits or not as a whole together
// with its origin's progress, and every source transaction in it ends at
// or before that progress. A group always ends with its COMMIT in the same
// round trip, so it never holds locks while waiting for the proxy; only a
// source transaction too big to buffer (several ops) keeps its destination
// transaction open across round trips, as it must.
const (
	batchStatements = 2000
	// groupChanges bounds the changes of one round trip, which changes
	// collapsed into others (apply_batch.go) do not add statements to.
	groupChanges = 8192
	// maxPrepared bounds the statements an applier keeps prepared: one per
	// table, change kind and set of columns present.
	maxPrepared = 512
	// groupLinger and lingerChanges: while the appliers' groups hold
	// fewer than lingerChanges changes in all, the reader waits for more
	// of the source's WAL until groupLinger after the first of them
	// before it sends them (reader.idle). A stream that keeps up with its
	// source otherwise sends a round trip, and commits a destination
	// transaction, for every few changes as they trickle in, and the
	// faster its round trips the smaller its groups: the fixed costs of a
	// round trip (the proxy's system calls and wake-ups, the destination's
	// commit, the walsender's wake-up for its WAL on the same server) then
	// dominate the CPU per change, which a saturated machine can least
	// afford. It adds at most groupLinger to the apply's latency.
	groupLinger   = time.Millisecond
	lingerChanges = 256
	// maxGroupAge bounds how long the reader holds the appliers' groups
	// while the source keeps its socket full (so that idle is not called)
	// and no group fills.
	maxGroupAge = 20 * time.Millisecond
)

// applier applies the stream of one source shard to one destination shard,
// in its own session whose replication origin records what was committed.
type applier struct {
	t          *Task
	s, d       int
	conn       *pgx.Conn
	progress   pglogrepl.LSN            // origin progress: end LSN of the last applied transaction
	watermarks map[string]pglogrepl.LSN // per table: the LSN its copy was taken at
	applied    atomic.Uint64            // end LSN of the last transaction fully handled

	curFinal pglogrepl.LSN // the source transaction being handled
	skipTxn  bool          // it was committed here before a restart
	inTx     bool          // a destination transaction is open (BEGIN queued or sent)
	// boundary: the last op handled ended its source transaction, whose
	// commit LSN and time are last and lastTime; a group may commit here.
	boundary bool
	last     pglogrepl.LSN
	lastTime time.Time

	pipe     pipeline         // the next round trip (pipeline.go)
	args     [][]byte         // parameters of the statement being queued, reused
	prepared map[string]*stmt // by SQL text
	byShape  map[shape]*stmt
	names    int  // prepared statement names handed out
	runs     runs // rows waiting for a multi-row statement (apply_batch.go)
	handled  int  // changes handled since the last round trip
	// dirty: ops were applied since the last round trip, which the next
	// one (start) must send or, at a boundary, commit.
	dirty bool
	// committing: the round trip under way (start) commits the group.
	committing bool
	// collapsed counts changes collapsed into others since the last
	// round trip (apply_batch.go), for progress.collapsed.
	collapsed int
}

// newApplier connects to destination shard d, creates and binds the
// replication origin of (s, d), and reads its progress.
func (t *Task) newApplier(ctx context.Context, s, d int, copies map[string]pglogrepl.LSN) (*applier, error) {
	conn, err := t.connectApplier(ctx, d) // not connectDest: see setup
	if err != nil {
		return nil, err
	}
	a := &applier{t: t, s: s, d: d, conn: conn, watermarks: copies,
		prepared: map[string]*stmt{}, byShape: map[shape]*stmt{}, runs: newRuns()}
	if err := a.setup(ctx); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: origin %s: %w", shardDesc("destination", t.dst, d), t.originName(s, d), err)
	}
	return a, nil
}

func (a *applier) setup(ctx context.Context) error {
	name := a.t.originName(a.s, a.d)
	// The origin is created only while the task's bookkeeping on the
	// shard says it runs, under a share lock on one of its rows, which
	// the drop deletes before it drops the origins (dropDest): a runner
	// that lost its lease, streaming again after another proxy finished
	// and dropped the task, creates nothing that would be left behind.
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return err
	}
	var alive bool
	err = tx.QueryRow(ctx, "SELECT to_regclass('shardgate_reshard.steps') IS NOT NULL").Scan(&alive)
	if err == nil && alive {
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM shardgate_reshard.steps WHERE task = $1 FOR SHARE)`, a.t.Name).Scan(&alive)
	}
	if err == nil && !alive {
		err = fmt.Errorf("task %s has no bookkeeping here: %w", a.t.Name, errFinishedElsewhere)
	}
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT pg_replication_origin_create($1) WHERE pg_replication_origin_oid($1) IS NULL`, name)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	// The session of a cancelled Stream may still hold the origin for a
	// moment while its backend exits.
	for attempt := 0; ; attempt++ {
		_, err := a.conn.Exec(ctx, `SELECT pg_replication_origin_session_setup($1)`, name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != wire.ObjectInUse || attempt >= 100 {
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Multi-row UPDATE and DELETE join a VALUES list with the table: by
	// its identity's index, whatever the statistics of a table just copied.
	//
	// A group's COMMIT must be durable before the stream confirms the
	// slot past it (the slot then no longer holds those changes): with a
	// destination whose synchronous_commit is off, a crash would lose
	// committed groups that no one sends again. So an applier's session
	// raises off to local, and keeps any stronger setting (on, remote_*:
	// a synchronous standby that may take over must have them too).
	if _, err := a.conn.Exec(ctx, `SET session_replication_role = replica; SET enable_hashjoin = off; SET enable_mergejoin = off;
		SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'`); err != nil {
		return err
	}
	var progress *string
	if err := a.conn.QueryRow(ctx, `SELECT pg_replication_origin_progress($1, true)::text`, name).Scan(&progress); err != nil {
		return err
	}
	if progress != nil {
		lsn, err := pglogrepl.ParseLSN(*progress)
		if err != nil {
			return err
		}
		a.progress = lsn
	}
	a.applied.Store(uint64(a.progress))
	return nil
}

// apply queues the statements of o; a row move or a TRUNCATE of one
// source's rows sends the batch and runs on its own round trips.
func (a *applier) apply(ctx context.Context, o op) error {
	a.dirty = true
	if o.final != a.curFinal {
		a.curFinal = o.final
		a.skipTxn = o.final < a.progress // committed here before a restart
	}
	a.boundary = false
	for i := range o.changes {
		c := &o.changes[i]
		if a.skipTxn || o.final < a.watermarks[c.rel.name] {
			if c.reply != nil {
				c.reply <- moveReply{skipped: true}
			}
			continue
		}
		a.handled++
		if !a.inTx {
			if err := a.queue(ctx, "BEGIN", nil); err != nil {
				return err
			}
			a.inTx = true
		}
		switch c.kind {
		case changeTruncateSource:
			err := a.send(ctx)
			if err == nil {
				err = a.truncateSource(ctx, c.rel)
			}
			if err != nil {
				return fmt.Errorf("table %s: truncate the rows of source shard %d: %w", c.rel.name, a.s, err)
			}
		case changeMoveOut:
			// The source stream waits for the RETURNING of the move.
			err := a.send(ctx)
			if err == nil {
				err = a.moveOut(ctx, c)
			}
			if err != nil {
				c.reply <- moveReply{err: err}
				return fmt.Errorf("table %s: %w", c.rel.name, err)
			}
		default:
			batched, err := a.batchRow(ctx, c)
			if err == nil && !batched {
				err = a.queueChange(ctx, c)
			}
			if err != nil {
				return fmt.Errorf("table %s: %w", c.rel.name, err)
			}
		}
	}
	if o.commit {
		a.boundary, a.last, a.lastTime = true, o.end, o.commitTime
	}
	return nil
}

// full reports whether the next round trip is as large as one may be.
func (a *applier) full() bool {
	return a.pipe.statements+a.runs.rows >= batchStatements || a.handled >= groupChanges
}

// start sends the round trip that ends the group, without waiting for its
// answers (finish reads them): at a source transaction's boundary it
// advances the origin to the last source transaction's end and commits;
// inside a source transaction it only sends the batch.
func (a *applier) start(ctx context.Context) error {
	a.dirty = false
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	if a.boundary && a.inTx {
		if err := a.queue(ctx, `SELECT pg_replication_origin_xact_setup($1::text::pg_lsn, $2::text::timestamptz)`,
			[][]byte{[]byte(a.last.String()), []byte(a.lastTime.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))}); err != nil {
			return err
		}
		if err := a.queue(ctx, "COMMIT", nil); err != nil {
			return err
		}
		a.committing = true
	}
	return a.writeBatch()
}

// finish reads the answers of the round trip start sent and records what
// it committed.
func (a *applier) finish() error {
	a.handled = 0
	committing := a.committing
	a.committing = false
	if err := a.readBatch(); err != nil {
		return err
	}
	if committing {
		a.inTx = false
		a.progress = a.last
		a.t.noteApplied(a.s, a.d, a.last, a.lastTime)
	}
	if a.boundary {
		a.applied.Store(uint64(a.last))
	}
	return nil
}

// failed wraps an error of the applier's work on source transaction final.
func (a *applier) failed(final pglogrepl.LSN, err error) error {
	return fmt.Errorf("%s: apply source %d transaction %s: %w%s",
		shardDesc("destination", a.t.dst, a.d), a.s, final, err, schemaHint(err))
}

// queue adds a statement to the round trip, prepared on the destination
// once per distinct text so that the server does not parse and plan it
// again for every row.
func (a *applier) queue(ctx context.Context, sql string, args [][]byte) error {
	s, err := a.prepare(ctx, sql, nil)
	if err != nil {
		return err
	}
	return a.pipe.exec(s, args)
}

// queueChange adds the statement of a row change to the round trip. The
// statement of a change's shape (table, kind, columns present) is built
// and prepared once; after that only its parameters are collected.
func (a *applier) queueChange(ctx context.Context, c *change) error {
	sh, ok := shapeOf(c)
	if s := a.byShape[sh]; ok && s != nil {
		a.args = appendChangeArgs(a.args[:0], c)
		return a.pipe.exec(s, a.args)
	}
	sql, args, needed := a.statement(c)
	if !needed {
		return nil
	}
	s, err := a.prepare(ctx, sql, nil)
	if err != nil {
		return err
	}
	if ok {
		a.byShape[sh] = s
	}
	return a.pipe.exec(s, args)
}

func (a *applier) nextName() int {
	a.names++
	return a.names
}

// send queues the open runs' statements and sends every queued statement
// in one round trip.
func (a *applier) send(ctx context.Context) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	return a.sendBatch(ctx)
}

// schemaHint explains an apply error that a schema change on the source
// causes: DDL is not replicated.
func schemaHint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch pgErr.Code {
	case wire.UndefinedColumn, wire.UndefinedTable, wire.DatatypeMismatch, wire.NotNullViolation:
		return " (the source's schema may have changed: DDL is not replicated; run the same DDL on every destination shard and the stream, retried by itself, goes on)"
	}
	return ""
}
