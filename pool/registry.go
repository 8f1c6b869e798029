package pool

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/shardgate/shardgate/config"
)

// Registry holds the pools of one configuration, created on first use.
type Registry struct {
	log *slog.Logger
	ids atomic.Uint64

	mu    sync.Mutex // guards the following
	cfg   *config.Config
	pools map[Key]*Pool
}

// NewRegistry returns an empty registry for cfg.
func NewRegistry(cfg *config.Config, log *slog.Logger) *Registry {
	return &Registry{cfg: cfg, log: log, pools: map[Key]*Pool{}}
}

// Get returns the pool for (db, user, shard) as the registry's config
// describes it, creating it if needed. It returns nil when the database,
// user or shard does not exist.
func (r *Registry) Get(db *config.Database, u *config.User, shard int) *Pool {
	key := Key{Database: db.Name, User: u.Name, Shard: shard, Role: "primary"}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pools[key]; p != nil {
		return p
	}
	if shard < 0 || shard >= len(db.Shards) {
		return nil
	}
	sh := &db.Shards[shard]
	user, pw := config.ServerCredentials(u, sh)
	t := Target{Host: sh.Host, Port: sh.Port, Database: sh.Database, User: user, Password: pw, SSLMode: config.SSLPrefer}
	if r.cfg.TLS != nil {
		t.SSLMode = r.cfg.TLS.ServerSSLMode
		t.ServerCA = r.cfg.TLS.ServerCA
	}
	p := New(key, t, db.Pool, r.log, &r.ids)
	r.pools[key] = p
	return p
}

// Pools returns every pool created so far.
func (r *Registry) Pools() []*Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Pool, 0, len(r.pools))
	for _, p := range r.pools {
		out = append(out, p)
	}
	return out
}

// Close closes every pool.
func (r *Registry) Close() {
	for _, p := range r.Pools() {
		p.Close()
	}
}
