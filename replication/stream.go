package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/sync/errgroup"
)

// Tuning of the stream.
const (
	// statusInterval is how often a stream confirms its flush LSN to the
	// source when nothing else prompts it.
	statusInterval = time.Second
	// statusMinInterval is the shortest time between two status messages
	// that only advance the flush LSN.
	statusMinInterval = 10 * time.Millisecond
	// pollInterval bounds how long the reader waits for the source before
	// it confirms what the appliers committed meanwhile.
	pollInterval = 100 * time.Millisecond
	// chunkChanges and chunkBytes bound the changes of one transaction that
	// the reader buffers for one destination shard before handing them to
	// its applier, which applies them into the still open destination
	// transaction. Together with the bounded round trip (applier.full)
	// this bounds memory whatever the size of a source transaction.
	chunkChanges = 1000
	chunkBytes   = 8 << 20
)

// relation is a source table as a pgoutput Relation message describes it.
type relation struct {
	name  string // schema.table, as in table_copies
	ident string // quoted
	cols  []string
	key   []int // indexes of the replica identity columns
	full  bool  // REPLICA IDENTITY FULL
	rule  rule
	keyAt int  // index of rule.column in cols (sharded tables)
	skip  bool // an omni table this source shard does not own
	// src and s: with several source shards, the table's rule on the
	// source and the source shard whose stream this is, which tell the
	// rows of a TRUNCATE on this source apart.
	src rule
	s   int
}

// Stream applies the changes of every source shard to the destination
// shards until ctx is done, then returns nil; it returns an error when a
// stream fails. It needs a finished Copy. Stream may be stopped and started
// again at any time: each destination shard skips what its replication
// origin says it already committed, so every source transaction is applied
// exactly once.
func (t *Task) Stream(ctx context.Context) error {
	step, err := t.Step(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("replication: stream: %w", err)
	}
	if step < StepCopied {
		return fmt.Errorf("replication: stream: the copy is not finished (step %s)", step)
	}
	if err := t.relaxIdentity(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("replication: stream: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for s := range t.src.Shards {
		g.Go(func() error { return t.streamSource(gctx, s) })
	}
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// reader holds the state of one source shard's stream.
type reader struct {
	t          *Task
	s          int
	appliers   []*applier
	rels       map[uint32]*relation
	tables     map[string]*table // owned tables by schema.table
	sent       []pglogrepl.LSN   // per destination: end LSN of the last commit handed over
	dispatched pglogrepl.LSN     // everything up to here was handed to the appliers
	confirmed  pglogrepl.LSN     // last flush LSN sent to the source
	srcConn    *pgx.Conn         // a normal session on the source, opened when needed
	// replayUntil is the highest origin progress of any destination shard
	// at start: transactions before it may be applied on some destination
	// shards and not others.
	replayUntil pglogrepl.LSN

	arena     arena // memory of decoded row changes (decode.go)
	beginMsg  pglogrepl.BeginMessage
	commitMsg pglogrepl.CommitMessage

	// started: the appliers whose round trips flushAll sent, reused.
	started []*applier
	// src: the source's socket, when its low-water mark is managed
	// (coalescingConn); nil otherwise.
	src *rawConn
	// dirtyAt: when an applier first got ops since the last flushAll; zero
	// when none has.
	dirtyAt time.Time
	// idleErr: a flushAll of idle failed; the reader's loop returns it.
	idleErr error
	// deliverForTest, when set, takes the ops instead of the appliers.
	deliverForTest func(d int, o op)

	inTxn   bool
	begin   pglogrepl.BeginMessage
	pending [][]change // per destination, of the current transaction
	size    []int      // bytes in pending
	touched []bool     // destinations that got ops of the current transaction
}

func (t *Task) streamSource(ctx context.Context, s int) error {
	src := shardDesc("source", t.src, s)
	conn, err := t.connectSource(ctx, s)
	if err != nil {
		return fmt.Errorf("replication: stream: %w", err)
	}
	tables, err := t.ownedTables(ctx, conn, s)
	var startText string
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			t.slotName(s)).Scan(&startText)
	}
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("replication: stream: %s: slot %s: %w", src, t.slotName(s), err)
	}
	start, err := pglogrepl.ParseLSN(startText)
	if err != nil {
		return err
	}
	copies, err := t.copied(ctx, s)
	if err != nil {
		return fmt.Errorf("replication: stream: %w", err)
	}
	r := &reader{t: t, s: s, rels: map[uint32]*relation{}, tables: map[string]*table{},
		sent: make([]pglogrepl.LSN, len(t.dst.Shards)), dispatched: start, confirmed: start,
		pending: make([][]change, len(t.dst.Shards)), size: make([]int, len(t.dst.Shards)),
		touched: make([]bool, len(t.dst.Shards))}
	for _, tb := range tables {
		r.tables[tb.String()] = tb
		for d := range t.dst.Shards {
			if _, ok := copies[d][tb.String()]; !ok {
				return fmt.Errorf("replication: stream: %s: table %s was not copied to %s", src, tb, shardDesc("destination", t.dst, d))
			}
		}
	}
	defer func() {
		for _, a := range r.appliers {
			a.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for d := range t.dst.Shards {
		a, err := t.newApplier(ctx, s, d, copies[d])
		if err != nil {
			return fmt.Errorf("replication: stream: %w", err)
		}
		r.appliers = append(r.appliers, a)
		r.sent[d] = a.progress
		r.replayUntil = max(r.replayUntil, a.progress)
		// The round trips (pipeline.go) read without a context:
		// cancelling ends the one under way through the socket's
		// deadline.
		stop := context.AfterFunc(ctx, func() { a.conn.PgConn().Conn().SetDeadline(time.Now()) })
		defer stop()
	}
	err = r.read(ctx)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("replication: stream: %s: %w", src, err)
	}
	return err
}

// read receives the source's WAL stream and hands changes to the appliers.
func (r *reader) read(ctx context.Context) error {
	conn, err := r.t.connectReplication(ctx, r.s)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	defer func() {
		if r.srcConn != nil {
			r.srcConn.Close(context.WithoutCancel(ctx))
		}
	}()
	slot := r.t.slotName(r.s)
	// publication_names is a list of identifiers: quote the name as one.
	pubs := quoteLiteral(quoteIdent(r.t.publication(r.s)))
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names " + pubs},
	}); err != nil {
		return fmt.Errorf("start replication from slot %s: %w", slot, err)
	}
	r.t.log.Info("streaming", "source", r.s, "slot", slot, "publication", r.t.publication(r.s), "from", r.dispatched)
	// A cancelled stream stops at once rather than at the end of the
	// current wait (the cutover's pause waits for it).
	stop := context.AfterFunc(ctx, func() { conn.Conn().SetReadDeadline(time.Now()) })
	defer stop()
	// A waiter of WaitCaughtUp ends the current wait for the source, so
	// that the reader confirms its appliers' progress at once (catchup.go);
	// poked makes the loop set its next deadline.
	var poked atomic.Bool
	wake := func() {
		conn.Conn().SetReadDeadline(time.Now())
		poked.Store(true)
	}
	untrack := r.t.flush.start(r.s, r.confirmed, wake)
	defer untrack()
	// The appliers' round trips go out when the source has nothing more
	// for the moment (reader.idle), from inside the read that found so.
	if cc, ok := conn.Conn().(*coalescingConn); ok {
		cc.idle = func(empty bool) bool { return r.idle(ctx, empty, wake) }
		r.src = cc.rc
	}
	next := time.Now().Add(statusInterval)
	// Receiving waits at most pollInterval, so that the flush LSN follows
	// the appliers when the source is quiet and ctx is noticed. The wait
	// is a read deadline on the socket, set once per interval: a context
	// per message would cost more than decoding the message.
	var checked, deadline time.Time
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.idleErr != nil {
			return r.idleErr
		}
		now := time.Now()
		// A source that keeps the socket full never lets the reader be
		// idle: send the groups once they are maxGroupAge old.
		if !r.dirtyAt.IsZero() && now.Sub(r.dirtyAt) >= maxGroupAge {
			if err := r.flushAll(ctx); err != nil {
				return err
			}
		}
		force := now.After(next)
		waited := r.t.flush.waiting()
		// While messages stream in, the flush LSN is confirmed at most
		// every statusMinInterval (unless WaitCaughtUp waits): one status
		// message per received message would cost the walsender and us
		// more than the rest.
		if force || waited || now.Sub(checked) >= statusMinInterval {
			if err := r.status(ctx, conn, force); err != nil {
				return err
			}
			checked = now
		}
		if force {
			next = now.Add(statusInterval)
		}
		if now.After(deadline) || poked.Swap(false) {
			poll := pollInterval
			if waited {
				poll = catchUpPoll
			}
			deadline = now.Add(poll)
			if err := conn.Conn().SetReadDeadline(deadline); err != nil {
				return err
			}
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.copyData(ctx, conn, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		default:
			return fmt.Errorf("unexpected message %T", msg)
		}
	}
}

// status sends the flush LSN to the source when it advanced, or always when
// force is set. The flush LSN is the minimum over destination shards of what
// each has committed; a shard with nothing in flight has committed all that
// was dispatched.
func (r *reader) status(ctx context.Context, conn *pgconn.PgConn, force bool) error {
	confirmed := r.dispatched
	for d, a := range r.appliers {
		if applied := pglogrepl.LSN(a.applied.Load()); applied < r.sent[d] {
			confirmed = min(confirmed, applied)
		}
	}
	if confirmed < r.confirmed {
		confirmed = r.confirmed // never move the slot back
	}
	if confirmed == r.confirmed && !force {
		return nil
	}
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed}); err != nil {
		return fmt.Errorf("send status: %w", err)
	}
	r.confirmed = confirmed
	r.t.flush.set(r.s, confirmed)
	return nil
}

func (r *reader) copyData(ctx context.Context, conn *pgconn.PgConn, data []byte) error {
	if len(data) == 0 {
		return errors.New("empty CopyData")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return err
		}
		// Everything before the server's WAL end was sent already; outside
		// a transaction nothing before it is left for us.
		if !r.inTxn && k.ServerWALEnd > r.dispatched {
			r.dispatched = k.ServerWALEnd
		}
		if k.ReplyRequested {
			return r.status(ctx, conn, true)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return err
		}
		if isRowChange(x.WALData) {
			c, err := r.arena.decodeRowChange(x.WALData)
			if err != nil {
				return fmt.Errorf("decode pgoutput at %s: %w", x.WALStart, err)
			}
			return r.rowChange(ctx, c)
		}
		// Begin and Commit, one each per source transaction, are decoded
		// into the reader's own messages rather than allocated.
		switch {
		case len(x.WALData) == 0:
			return fmt.Errorf("decode pgoutput at %s: empty message", x.WALStart)
		case pglogrepl.MessageType(x.WALData[0]) == pglogrepl.MessageTypeBegin:
			if err := r.beginMsg.Decode(x.WALData[1:]); err != nil {
				return fmt.Errorf("decode pgoutput at %s: %w", x.WALStart, err)
			}
			return r.message(ctx, &r.beginMsg)
		case pglogrepl.MessageType(x.WALData[0]) == pglogrepl.MessageTypeCommit:
			if err := r.commitMsg.Decode(x.WALData[1:]); err != nil {
				return fmt.Errorf("decode pgoutput at %s: %w", x.WALStart, err)
			}
			return r.message(ctx, &r.commitMsg)
		}
		m, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			return fmt.Errorf("decode pgoutput at %s: %w", x.WALStart, err)
		}
		return r.message(ctx, m)
	}
	return nil
}

func (r *reader) message(ctx context.Context, m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		rel, err := r.relation(ctx, m)
		if err != nil {
			return err
		}
		r.rels[m.RelationID] = rel
	case *pglogrepl.BeginMessage:
		r.inTxn, r.begin = true, *m
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			rel, err := r.rel(id)
			if err != nil {
				return err
			}
			if rel.skip {
				continue
			}
			kind := changeTruncate
			if rel.rule.place == placeSharded && len(r.t.src.Shards) > 1 {
				// The destination tables hold the rows of every source
				// shard: delete only those that came from this one.
				if rel.src.place != placeSharded {
					return fmt.Errorf("TRUNCATE of table %s: it is sharded on the destination but not on the %d source shards, so the rows of this source cannot be told apart",
						rel.name, len(r.t.src.Shards))
				}
				kind = changeTruncateSource
			}
			for d := range r.pending {
				if rel.rule.place != placePinned || rel.rule.shard == d {
					r.add(ctx, d, change{kind: kind, rel: rel})
				}
			}
		}
	case *pglogrepl.CommitMessage:
		for d := range r.pending {
			if len(r.pending[d]) > 0 || r.touched[d] {
				changes := r.take(d)
				if err := r.send(ctx, d, op{final: r.begin.FinalLSN, commit: true, end: m.TransactionEndLSN,
					commitTime: m.CommitTime, changes: changes}); err != nil {
					return err
				}
				r.sent[d] = m.TransactionEndLSN
			}
			r.touched[d] = false
		}
		r.inTxn = false
		r.dispatched = max(r.dispatched, m.TransactionEndLSN)
	}
	return nil
}

// rowChange routes an Insert, Update or Delete (decode.go).
func (r *reader) rowChange(ctx context.Context, c rowChange) error {
	rel, err := r.rel(c.relation)
	if err != nil || rel.skip {
		return err
	}
	return r.route(ctx, rel, c.new, c.old, c.kind)
}

func (r *reader) rel(id uint32) (*relation, error) {
	rel := r.rels[id]
	if rel == nil {
		return nil, fmt.Errorf("change for relation %d before its Relation message", id)
	}
	return rel, nil
}

// relation builds the routing of a Relation message's table.
func (r *reader) relation(ctx context.Context, m *pglogrepl.RelationMessage) (*relation, error) {
	name := m.Namespace + "." + m.RelationName
	rel := &relation{name: name, ident: qualified(m.Namespace, m.RelationName), full: m.ReplicaIdentity == 'f'}
	if slices.Contains(ownSchemas, m.Namespace) {
		rel.skip = true // shardgate's own tables stay on the source
		return rel, nil
	}
	for i, c := range m.Columns {
		rel.cols = append(rel.cols, c.Name)
		if c.Flags&1 != 0 {
			rel.key = append(rel.key, i)
		}
	}
	// A partition takes the rule of its partition root.
	ruleSchema, ruleName, err := r.ruleTable(ctx, m)
	if err != nil {
		return nil, err
	}
	tb := r.tables[name]
	if tb == nil {
		// Not owned (an omni table of another source) or new since the copy.
		ru, err := ruleFor(r.t.dst, ruleSchema, ruleName, rel.cols)
		if err != nil {
			return nil, err
		}
		if ru.place == placeOmni && r.s != omniOwner {
			rel.skip = true
		}
		rel.rule = ru
	} else {
		rel.rule = tb.rule
	}
	if len(r.t.src.Shards) > 1 && rel.rule.place == placeSharded {
		ru, err := ruleFor(r.t.src, ruleSchema, ruleName, rel.cols)
		if err != nil {
			return nil, fmt.Errorf("source rule: %w", err)
		}
		rel.src, rel.s = ru, r.s
	}
	rel.keyAt = slices.Index(rel.cols, rel.rule.column)
	if rel.rule.place == placeSharded && rel.keyAt < 0 {
		return nil, fmt.Errorf("table %s: sharding column %q is not in the stream", name, rel.rule.column)
	}
	return rel, nil
}

// shardOf routes a tuple of a sharded table; ok is false when the tuple
// does not carry the key (unchanged TOAST, or a key-only old tuple without
// it).
func (rel *relation) shardOf(tuple []*pglogrepl.TupleDataColumn) (d int, ok bool, err error) {
	if rel.keyAt >= len(tuple) {
		return 0, false, nil
	}
	v := tuple[rel.keyAt]
	switch v.DataType {
	case pglogrepl.TupleDataTypeText:
		d, err = rel.rule.shardOfText(v.Data, false)
	case pglogrepl.TupleDataTypeNull:
		d, err = rel.rule.shardOfText(nil, true)
	default:
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("table %s: route by %s: %w", rel.name, rel.rule.column, err)
	}
	return d, true, nil
}
