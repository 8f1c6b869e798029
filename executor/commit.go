package executor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Coordinator is the proxy-wide part of two-phase commit: transaction ids
// unique across proxies and restarts. One Coordinator serves every session
// of a proxy process; it keeps nothing on disk (see twopc.go).
type Coordinator struct {
	prefix string // random per process start
	seq    atomic.Uint64
	log    *slog.Logger

	// Knobs are for tests; production leaves them zero.
	Knobs CommitKnobs
}

// CommitKnobs are the Coordinator's testing knobs.
type CommitKnobs struct {
	// AtStage runs at each stage of a two-phase commit: "prepared" (every
	// shard prepared, no decision yet) and "decided" (the coordinator
	// committed, the other shards not yet). Crash tests kill the process
	// there.
	AtStage func(stage string)
}

// NewCoordinator returns a coordinator whose transaction ids start with
// prefix (random per process: several proxies share the shards).
func NewCoordinator(prefix string, log *slog.Logger) *Coordinator {
	return &Coordinator{prefix: prefix, log: log}
}

// nextTxID returns a transaction id unique across proxies and restarts.
func (c *Coordinator) nextTxID() string {
	return fmt.Sprintf("%s-%d", c.prefix, c.seq.Add(1))
}

func (c *Coordinator) at(stage string) {
	if f := c.Knobs.AtStage; f != nil {
		f(stage)
	}
}

// Commit commits the transaction open on shards: plainly on one shard,
// with two-phase commit on several (twopc.go). A failure before the
// coordinator's COMMIT PREPARED rolls back every shard; after it, the
// transaction is committed and whatever a shard did not finish, a
// resolver finishes.
func (s *Session) Commit(shards []int) error {
	switch {
	case len(shards) == 0:
		return nil
	case len(shards) == 1:
		return s.commitOne(shards[0])
	case s.onReplica(shards):
		// The proxy puts a transaction on a replica only when every
		// statement of it reads (read load balancing): there is nothing
		// to commit atomically, and a standby refuses PREPARE
		// TRANSACTION. Each shard commits on its own.
		var first error
		for _, i := range shards {
			if err := s.commitOne(i); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	c := s.coord
	coord := slices.Min(shards)
	t := s.shards[coord].pool.Target
	g := GID{TxID: c.nextTxID(), Coord: coord, Tag: CoordTag(t.Host, t.Port, t.Database), Shard: coord}
	var prepared []GID
	failure := s.prepare(g, shards, &prepared)
	if failure == nil {
		c.at("prepared")
		failure = s.decide(g)
		if e, ok := failure.(*wire.Error); ok && e.Code == wire.TransactionResolutionUnknown {
			// The coordinator may have committed: its answer is what was
			// lost. The prepared shards stay for the resolver, which
			// learns the outcome from the coordinator's commit log.
			s.Rollback()
			return failure
		}
	}
	if failure != nil {
		s.undo(prepared)
		s.Rollback()
		return failure
	}
	c.at("decided")
	for _, p := range prepared[1:] {
		if _, serr, err := s.ending(p.Shard, "COMMIT PREPARED "+wire.QuoteLiteral(p.String())); err != nil || serr != nil {
			// Committed at the coordinator: a resolver finishes it.
			c.log.Error("COMMIT PREPARED failed; the two-phase resolver will finish it", "gid", p.String(), "err", err, "server_err", serr)
		}
	}
	return nil
}

// commitOne commits the transaction open on shard i with a plain COMMIT.
func (s *Session) commitOne(i int) error {
	st, serr, err := s.ending(i, "COMMIT")
	s.shards[i].inTx = false
	if err != nil {
		return wire.Errorf(wire.ConnectionFailure, "commit: server connection lost: %v", err)
	}
	if serr != nil {
		return serr
	}
	if st != 'I' {
		s.shards[i].server.Broken = true
	}
	return nil
}

// onReplica reports whether the server of one of shards is a replica's.
func (s *Session) onReplica(shards []int) bool {
	for _, i := range shards {
		if srv := s.shards[i].server; srv != nil && srv.OfReplica() {
			return true
		}
	}
	return false
}

// decide commits the coordinator's prepared transaction g: the commit
// point. Its errors are the client's: 40000 when a resolver rolled the
// transaction back first, 08007 when the outcome is unknown.
func (s *Session) decide(g GID) error {
	_, serr, err := s.ending(g.Coord, "COMMIT PREPARED "+wire.QuoteLiteral(g.String()))
	switch {
	case err != nil:
		return &wire.Error{Severity: "ERROR", Code: wire.TransactionResolutionUnknown,
			Message: "the connection to the coordinating shard was lost during COMMIT; the transaction is committed on every shard or on none",
			Detail:  fmt.Sprintf("Two-phase transaction %s; a resolver finishes it on every shard.", g.TxID)}
	case serr != nil && serr.Code == wire.UndefinedObject:
		return &wire.Error{Severity: "ERROR", Code: wire.TransactionRollback,
			Message: "the transaction was rolled back: it stayed undecided longer than the in-doubt timeout and a resolver rolled it back",
			Hint:    "Retry the transaction."}
	case serr != nil:
		return serr
	}
	s.shards[g.Coord].inTx = false
	return nil
}

// undo rolls back the prepared transactions of a commit that failed
// before its commit point (errors are left to the resolver).
func (s *Session) undo(prepared []GID) {
	for _, p := range prepared {
		if srv := s.shards[p.Shard].server; srv == nil || srv.Broken {
			continue
		}
		s.ending(p.Shard, "ROLLBACK PREPARED "+wire.QuoteLiteral(p.String()))
	}
}

// prepare prepares the transaction on the coordinator g.Coord first (with
// its xid), then on the other shards, adding each to prepared, and
// returns the first failure.
func (s *Session) prepare(g GID, shards []int, prepared *[]GID) error {
	xid, _, serr, err := s.internalValue(g.Coord, "SELECT pg_current_xact_id(); PREPARE TRANSACTION "+wire.QuoteLiteral(g.String()))
	if err == nil && serr == nil {
		g.XID, err = strconv.ParseUint(xid, 10, 64)
		if err != nil {
			return wire.Errorf(wire.InternalError, "two-phase commit: shard %d returned xid %q", g.Coord, xid)
		}
		*prepared = append(*prepared, GID{TxID: g.TxID, Coord: g.Coord, Tag: g.Tag, Shard: g.Coord})
		s.shards[g.Coord].inTx = false
	}
	if err := prepareFailed(g.Coord, serr, err); err != nil {
		return err
	}
	for _, i := range shards {
		if i == g.Coord {
			continue
		}
		p := GID{TxID: g.TxID, Coord: g.Coord, Tag: g.Tag, XID: g.XID, Shard: i}
		_, serr, err := s.ending(i, "PREPARE TRANSACTION "+wire.QuoteLiteral(p.String()))
		if err := prepareFailed(i, serr, err); err != nil {
			return err
		}
		*prepared = append(*prepared, p)
		s.shards[i].inTx = false
	}
	return nil
}

// prepareFailed is the client's error for a PREPARE TRANSACTION on shard
// i that failed, nil if it did not.
func prepareFailed(i int, serr *wire.Error, err error) error {
	if err != nil {
		return wire.Errorf(wire.ConnectionFailure, "two-phase commit: shard %d: %v", i, err)
	}
	if serr == nil {
		return nil
	}
	e := &wire.Error{Severity: "ERROR", Code: serr.Code, Message: "two-phase commit failed on shard " + strconv.Itoa(i) + ": " + serr.Message, Detail: serr.Detail, Hint: serr.Hint}
	if serr.Code == wire.ObjectNotInPrerequisiteState {
		e.Hint = "set max_prepared_transactions > 0 on every shard: shardgate commits multi-shard transactions with two-phase commit"
	}
	return e
}

// ResolvePools runs one pass of Resolve over the shards of one database,
// whose primary pools are pools, in shard order.
func ResolvePools(ctx context.Context, pools []*pool.Pool, timeout time.Duration) (ResolveResult, error) {
	shards := make([]TwoPhaseShard, len(pools))
	for i, p := range pools {
		shards[i] = &preparedStore{p: p}
	}
	return Resolve(ctx, shards, timeout)
}

// preparedStore is a TwoPhaseShard over a shard's pool: it sees the
// prepared transactions of the pool's server user (only their owner or a
// superuser may finish them).
type preparedStore struct{ p *pool.Pool }

func (ps *preparedStore) Tag() uint32 {
	t := ps.p.Target
	return CoordTag(t.Host, t.Port, t.Database)
}

// query runs sql and returns its rows as text (NULL as nil).
func (ps *preparedStore) query(ctx context.Context, sql string) ([][][]byte, *wire.Error, error) {
	s, err := ps.p.Checkout(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ps.p.Checkin(s)
	if d, ok := ctx.Deadline(); ok {
		s.Conn.SetDeadline(d)
		defer s.Conn.SetDeadline(time.Time{})
	}
	s.W.Write(wire.AppendQuery(nil, sql))
	if err := s.Flush(); err != nil {
		return nil, nil, err
	}
	var rows [][][]byte
	_, serr, err := readToReady(s, nil, func(body []byte) {
		cols, _ := SplitRow(body, nil)
		row := make([][]byte, len(cols))
		for k, c := range cols {
			if c != nil {
				row[k] = append([]byte{}, c...)
			}
		}
		rows = append(rows, row)
	})
	return rows, serr, err
}

func (ps *preparedStore) Prepared(ctx context.Context) ([]Prepared, error) {
	rows, serr, err := ps.query(ctx, `SELECT gid, extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts
		WHERE database = current_database() AND owner = current_user AND gid LIKE 'sg:%'`)
	if err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	var out []Prepared
	for _, r := range rows {
		g, ok := ParseGID(string(r[0]))
		if !ok {
			continue // not the proxy's, or an earlier release's format
		}
		secs, _ := strconv.ParseFloat(string(r[1]), 64)
		out = append(out, Prepared{GID: g, Age: time.Duration(secs * float64(time.Second))})
	}
	return out, nil
}

func (ps *preparedStore) Status(ctx context.Context, xid uint64) (XactStatus, error) {
	rows, serr, err := ps.query(ctx, fmt.Sprintf("SELECT pg_xact_status('%d'::xid8)", xid))
	if err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return XactUnknown, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return XactUnknown, fmt.Errorf("pg_xact_status returned %d rows", len(rows))
	}
	switch string(rows[0][0]) {
	case "committed":
		return XactCommitted, nil
	case "aborted":
		return XactAborted, nil
	case "in progress":
		return XactInProgress, nil
	}
	return XactUnknown, nil
}

// Finish ends a prepared transaction; found is false when it does not
// exist (42704: another proxy, or an earlier pass, finished it).
func (ps *preparedStore) Finish(ctx context.Context, gid string, commit bool) (bool, error) {
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	_, serr, err := ps.query(ctx, verb+wire.QuoteLiteral(gid))
	switch {
	case err != nil:
		return false, err
	case serr != nil && serr.Code == wire.UndefinedObject:
		return false, nil
	case serr != nil:
		return false, serr
	}
	return true, nil
}
