package pool

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/shardgate/shardgate/config"
)

// Read load balancing over a shard's replicas (see config.LoadBalancing).

// Pool returns the pool s was checked out of.
func (s *Server) Pool() *Pool { return s.pool }

// OfReplica reports whether s is a server of a replica's pool.
func (s *Server) OfReplica() bool { return s.pool != nil && s.pool.Key.Role == RoleReplica }

// roundRobins holds the round_robin position of each shard.
type roundRobins struct {
	mu sync.Mutex // guards m
	m  map[string]*atomic.Uint64
}

func newRoundRobins() *roundRobins { return &roundRobins{m: map[string]*atomic.Uint64{}} }

func (rr *roundRobins) next(db string, shard int) uint64 {
	key := db + "\x00" + strconv.Itoa(shard)
	rr.mu.Lock()
	c := rr.m[key]
	if c == nil {
		c = new(atomic.Uint64)
		rr.m[key] = c
	}
	rr.mu.Unlock()
	return c.Add(1) - 1
}

// ReadPools returns the pools a read on shard of db may use, in the order
// to try them: the one the database's strategy picks among the replicas
// that are not banned (and the primary with include_primary), then the
// other members of that rotation, then the primary. It returns nil when
// the shard has no replicas: reads use the primary like everything else.
func (r *Registry) ReadPools(db *config.Database, u *config.User, shard int) []*Pool {
	if shard < 0 || shard >= len(db.Shards) || len(db.Shards[shard].Replicas) == 0 {
		return nil
	}
	primary := r.Get(db, u, shard)
	if primary == nil {
		return nil
	}
	lb := db.LoadBalancing
	var members []*Pool
	for i := range db.Shards[shard].Replicas {
		if p := r.Replica(db, u, shard, i); p != nil && !r.Banned(p) {
			members = append(members, p)
		}
	}
	if len(members) == 0 {
		return []*Pool{primary}
	}
	if lb.IncludePrimary {
		members = append(members, primary)
	}
	first := 0
	switch lb.Strategy {
	case config.LBRoundRobin:
		first = int(r.rr.next(db.Name, shard) % uint64(len(members)))
	case config.LBLeastConnections:
		best := -1
		for i, p := range members {
			if n := p.busy(); best < 0 || n < best {
				first, best = i, n
			}
		}
	default:
		first = rand.IntN(len(members))
	}
	out := make([]*Pool, 0, len(members)+1)
	for i := range members {
		out = append(out, members[(first+i)%len(members)])
	}
	if !lb.IncludePrimary {
		out = append(out, primary)
	}
	return out
}

// busy returns the server connections checked out of p plus the clients
// waiting for one.
func (p *Pool) busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active + len(p.waiters)
}
