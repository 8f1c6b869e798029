package frontend

import (
	"fmt"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// planner routes statements of a sharded database.
type planner interface {
	plan(sql string, c *client) (*routePlan, error)
	// planParams plans sql with its Bind parameters, in into when it is
	// not nil.
	planParams(into *routePlan, sql string, params [][]byte, formats []int16, c *client) (*routePlan, error)
	// planBound plans a Bind of the client's statement st, keeping the
	// analysis of its text on it.
	planBound(into *routePlan, st *sStmt, params [][]byte, formats []int16, c *client) (*routePlan, error)
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
	c.dropParked()
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
