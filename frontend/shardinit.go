package frontend

import (
	"context"
	"fmt"
	"github.com/shardgate/shardgate/config"
	"path/filepath"
	"strings"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// planner routes statements of a sharded database.
type planner interface {
	plan(sql string, c *client) (*routePlan, error)
	planParams(sql string, params [][]byte, formats []int16, c *client) (*routePlan, error)
}

// initShards prepares a client of a sharded database.
func (c *client) initShards(st *State) error {
	rt, err := st.planner(c.db)
	if err != nil {
		return wire.Fatalf(wire.InternalError, "database %q: %v", c.db.Name, err)
	}
	c.rt = rt
	c.shards = make([]shardConn, len(c.db.Shards))
	for i := range c.shards {
		c.shards[i].pool = st.Pools.Get(c.db, c.user, i)
	}
	return nil
}

// abandonShards cleans up after a client of a sharded database left.
func (c *client) abandonShards() {
	if c.server != nil && (len(c.q) > 0) {
		c.clientErr = errClientGone
		c.rollback()
	}
	for i := range c.shards {
		if err := c.syncShard(i); err != nil {
			c.shards[i].server.Broken = true
		}
	}
	c.server = nil
	c.rollbackShards()
	if c.mode == config.PoolSession || c.pinned {
		// The servers carry the client's session: clean each before
		// it goes back to the pool.
		for i := range c.shards {
			if s := c.shards[i].server; s != nil && !s.Broken {
				c.server, c.tx, c.q, c.unsynced = s, 'I', c.q[:0], false
				c.reset()
			}
		}
		c.server = nil
	}
	c.detachShards()
	if c.pool != nil {
		c.detach()
	}
}

var errClientGone = fmt.Errorf("client went away")

// nextTxID returns a transaction id unique across this proxy's restarts.
func (l *Listener) nextTxID() string {
	return fmt.Sprintf("%s-%d", l.txPrefix, l.txSeq.Add(1))
}

// twoPC returns the decision log, opening it on first use.
func (l *Listener) twoPC() *executor.DecisionLog {
	l.twoPCMu.Lock()
	defer l.twoPCMu.Unlock()
	if l.twoPCLog == nil {
		log, err := executor.OpenDecisionLog(l.twoPCPath())
		if err != nil {
			l.log.Error("cannot open the two-phase commit log", "err", err)
			return nil
		}
		l.twoPCLog = log
	}
	return l.twoPCLog
}

func (l *Listener) twoPCPath() string {
	if p := l.State().Config.TwoPhaseCommitLog; p != "" {
		return p
	}
	return filepath.Join(".", "shardgate-2pc.log")
}

func (c *client) twoPhaseHookForTest(stage string) {
	if f := c.l.TwoPhaseHookForTest; f != nil {
		f(stage)
	}
}

// RecoverTwoPhase resolves prepared transactions left by an earlier run
// (crash between PREPARE TRANSACTION and COMMIT PREPARED) on every shard
// of every sharded database: commit where the decision log says so, roll
// back otherwise. It runs before the proxy accepts clients.
func (l *Listener) RecoverTwoPhase(ctx context.Context) error {
	st := l.State()
	dlog := l.twoPC()
	if dlog == nil {
		return fmt.Errorf("two-phase commit log %s cannot be opened", l.twoPCPath())
	}
	var stores []executor.PreparedStore
	for di := range st.Config.Databases {
		db := &st.Config.Databases[di]
		if len(db.Shards) < 2 {
			continue
		}
		u := st.Config.FirstUserFor(db.Name)
		if u == nil {
			continue
		}
		for i := range db.Shards {
			stores = append(stores, &preparedStore{p: st.Pools.Get(db, u, i)})
		}
	}
	if len(stores) == 0 {
		return nil
	}
	committed, rolledBack, err := executor.Recover(ctx, dlog, stores)
	if committed+rolledBack > 0 {
		l.log.Info("resolved in-doubt two-phase transactions", "committed", committed, "rolled_back", rolledBack)
	}
	return err
}

// preparedStore implements executor.PreparedStore over a pool.
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
			cols, _ := executor.SplitRow(body, nil)
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

func (ps *preparedStore) Finish(ctx context.Context, gid string, commit bool) error {
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	_, serr, err := ps.query(ctx, verb+quoteLiteral(gid))
	if err != nil {
		return err
	}
	if serr != nil && !strings.Contains(serr.Message, "does not exist") {
		return serr
	}
	return nil
}
