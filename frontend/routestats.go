package frontend

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/shardgate/shardgate/metrics"
)

// routeCounts counts a sharded database's statements by how many shards
// they needed.
type routeCounts struct {
	direct, multi, all atomic.Uint64
}

// routeStats holds routeCounts per database name; they survive reloads.
type routeStats struct {
	mu sync.Mutex // guards m
	m  map[string]*routeCounts
}

func (rs *routeStats) get(db string) *routeCounts {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*routeCounts{}
	}
	rc := rs.m[db]
	if rc == nil {
		rc = &routeCounts{}
		rs.m[db] = rc
	}
	return rc
}

// count records one statement that went to n of total shards.
func (rc *routeCounts) count(n, total int) {
	switch {
	case n <= 1:
		rc.direct.Add(1)
	case n >= total:
		rc.all.Add(1)
	default:
		rc.multi.Add(1)
	}
}

// samples returns the counters, sorted by database.
func (rs *routeStats) samples() []metrics.RouteSample {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]metrics.RouteSample, 0, len(rs.m))
	for db, rc := range rs.m {
		out = append(out, metrics.RouteSample{Database: db, Direct: rc.direct.Load(), Multi: rc.multi.Load(), All: rc.all.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Database < out[j].Database })
	return out
}

// routeCounts returns the counters of the client's database, looked up
// once per client.
func (c *client) routeCounts() *routeCounts {
	if c.rc == nil || c.rcDB != c.db.Name {
		c.rc, c.rcDB = c.l.routes.get(c.db.Name), c.db.Name
	}
	return c.rc
}
