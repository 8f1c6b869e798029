package executor

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Coordinator is the proxy-wide part of two-phase commit: transaction ids
// unique across the proxy's restarts and the decision log, opened on first
// use. One Coordinator serves every session of a proxy process.
type Coordinator struct {
	path   func() string // where the decision log lives (it follows config reloads)
	prefix string        // random per process start
	seq    atomic.Uint64
	log    *slog.Logger

	mu   sync.Mutex // guards dlog
	dlog *DecisionLog

	// Knobs are for tests; production leaves them zero.
	Knobs CommitKnobs
}

// CommitKnobs are the Coordinator's testing knobs.
type CommitKnobs struct {
	// AtStage runs at each stage of a two-phase commit: "prepared" (every
	// shard prepared, no decision yet) and "decided" (the decision is
	// durable, nothing committed yet). Crash tests kill the process there.
	AtStage func(stage string)
}

// NewCoordinator returns a coordinator whose decision log lives at path()
// and whose transaction ids start with prefix.
func NewCoordinator(path func() string, prefix string, log *slog.Logger) *Coordinator {
	return &Coordinator{path: path, prefix: prefix, log: log}
}

// nextTxID returns a transaction id unique across this proxy's restarts.
func (c *Coordinator) nextTxID() string {
	return fmt.Sprintf("%s-%d", c.prefix, c.seq.Add(1))
}

// Log returns the decision log, opening it on first use.
func (c *Coordinator) Log() (*DecisionLog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dlog == nil {
		dlog, err := OpenDecisionLog(c.path())
		if err != nil {
			return nil, err
		}
		c.dlog = dlog
	}
	return c.dlog, nil
}

// Close closes the decision log if it is open.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dlog == nil {
		return nil
	}
	err := c.dlog.Close()
	c.dlog = nil
	return err
}

func (c *Coordinator) at(stage string) {
	if f := c.Knobs.AtStage; f != nil {
		f(stage)
	}
}

// Commit commits the transaction open on shards: plainly on one shard,
// with two-phase commit on several. A failure before the decision rolls
// back every shard; after it, the decision stands and recovery finishes
// what a shard did not.
func (s *Session) Commit(shards []int) error {
	switch len(shards) {
	case 0:
		return nil
	case 1:
		i := shards[0]
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
	c := s.coord
	txid := c.nextTxID()
	var prepared []int
	failure := s.prepare(txid, shards, &prepared)
	if failure == nil {
		c.at("prepared")
		if dlog, err := c.Log(); err != nil {
			failure = wire.Errorf(wire.InternalError, "two-phase commit log %s cannot be opened: %v", c.path(), err)
		} else if err := dlog.Commit(txid); err != nil {
			failure = wire.Errorf(wire.InternalError, "two-phase commit: %v", err)
		}
	}
	if failure != nil {
		for _, i := range prepared {
			s.ending(i, "ROLLBACK PREPARED "+wire.QuoteLiteral(GID(txid, i)))
		}
		s.Rollback()
		return failure
	}
	c.at("decided")
	allDone := true
	for _, i := range prepared {
		if _, serr, err := s.ending(i, "COMMIT PREPARED "+wire.QuoteLiteral(GID(txid, i))); err != nil || serr != nil {
			// The decision is durable: recovery finishes it.
			allDone = false
			c.log.Error("COMMIT PREPARED failed; recovery will finish it", "gid", GID(txid, i), "err", err, "server_err", serr)
		}
	}
	if allDone {
		if dlog, err := c.Log(); err == nil {
			dlog.Done(txid)
		}
	}
	return nil
}

// prepare runs PREPARE TRANSACTION on each shard in turn, adding those
// that prepared to prepared, and returns the first failure.
func (s *Session) prepare(txid string, shards []int, prepared *[]int) error {
	for _, i := range shards {
		_, serr, err := s.ending(i, "PREPARE TRANSACTION "+wire.QuoteLiteral(GID(txid, i)))
		if err != nil {
			return wire.Errorf(wire.ConnectionFailure, "two-phase commit: shard %d: %v", i, err)
		}
		if serr != nil {
			e := &wire.Error{Severity: "ERROR", Code: serr.Code, Message: "two-phase commit failed on shard " + strconv.Itoa(i) + ": " + serr.Message, Detail: serr.Detail, Hint: serr.Hint}
			if serr.Code == wire.ObjectNotInPrerequisiteState {
				e.Hint = "set max_prepared_transactions > 0 on every shard: shardgate commits multi-shard transactions with two-phase commit"
			}
			return e
		}
		*prepared = append(*prepared, i)
		s.shards[i].inTx = false
	}
	return nil
}

// Recover resolves prepared transactions left by an earlier run (a crash
// between PREPARE TRANSACTION and COMMIT PREPARED) on the shards whose
// pools are given: commit where the decision log says so, roll back
// otherwise. It runs before the proxy accepts clients.
func (c *Coordinator) Recover(ctx context.Context, pools []*pool.Pool) error {
	if len(pools) == 0 {
		return nil
	}
	dlog, err := c.Log()
	if err != nil {
		return fmt.Errorf("two-phase commit log %s cannot be opened: %w", c.path(), err)
	}
	stores := make([]PreparedStore, len(pools))
	for i, p := range pools {
		stores[i] = &preparedStore{p: p}
	}
	committed, rolledBack, err := Recover(ctx, dlog, stores)
	if committed+rolledBack > 0 {
		c.log.Info("resolved in-doubt two-phase transactions", "committed", committed, "rolled_back", rolledBack)
	}
	return err
}

// preparedStore implements PreparedStore over a pool.
type preparedStore struct{ p *pool.Pool }

func (ps *preparedStore) query(ctx context.Context, sql string) ([]string, *wire.Error, error) {
	s, err := ps.p.Checkout(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ps.p.Checkin(s)
	s.W.Write(wire.AppendQuery(nil, sql))
	if err := s.Flush(); err != nil {
		return nil, nil, err
	}
	var out []string
	var serr *wire.Error
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			s.Broken = true
			return nil, nil, err
		}
		switch typ {
		case 'D':
			cols, _ := SplitRow(body, nil)
			if len(cols) > 0 && cols[0] != nil {
				out = append(out, string(cols[0]))
			}
		case 'E':
			serr = wire.ParseError(body)
		case 'Z':
			return out, serr, nil
		}
	}
}

func (ps *preparedStore) Prepared(ctx context.Context) ([]string, error) {
	gids, serr, err := ps.query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE 'sg:%'")
	if err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	return gids, nil
}

// Finish ends a prepared transaction. One that does not exist (42704:
// another proxy, or an earlier pass, finished it) is done.
func (ps *preparedStore) Finish(ctx context.Context, gid string, commit bool) error {
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	_, serr, err := ps.query(ctx, verb+wire.QuoteLiteral(gid))
	if err != nil {
		return err
	}
	if serr != nil && serr.Code != wire.UndefinedObject {
		return serr
	}
	return nil
}
