package frontend

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/shardgate/shardgate/config"
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
	pools := make([]*pool.Pool, len(c.db.Shards))
	for i := range pools {
		pools[i] = st.Pools.Get(c.db, c.user, i)
	}
	c.setShards(pools)
	return nil
}

// abandonShards cleans up after a client of a sharded database left.
func (c *client) abandonShards() {
	c.dropStream()
	if c.server != nil && (len(c.q) > 0) {
		c.clientErr = errClientGone
		c.rollback()
	}
	for i := range c.ext {
		if err := c.syncShard(i); err != nil {
			c.xs.Server(i).Broken = true
		}
	}
	c.server = nil
	c.rollbackShards()
	if c.mode == config.PoolSession || c.pinned {
		// The servers carry the client's session: clean each before
		// it goes back to the pool.
		for i := range c.ext {
			if s := c.xs.Server(i); s != nil && !s.Broken {
				c.server, c.tx, c.q = s, 'I', c.q[:0]
				c.pipe.set(pipeUnsynced, false)
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

func (l *Listener) twoPCPath() string {
	if p := l.State().Config.TwoPhaseCommitLog; p != "" {
		return p
	}
	return filepath.Join(".", "shardgate-2pc.log")
}

// RecoverTwoPhase resolves prepared transactions left by an earlier run
// (crash between PREPARE TRANSACTION and COMMIT PREPARED) on every shard
// of every sharded database: commit where the decision log says so, roll
// back otherwise. It runs before the proxy accepts clients.
func (l *Listener) RecoverTwoPhase(ctx context.Context) error {
	st := l.State()
	var pools []*pool.Pool
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
			pools = append(pools, st.Pools.Get(db, u, i))
		}
	}
	return l.coord.Recover(ctx, pools)
}
