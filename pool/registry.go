package pool

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/config"
)

// Registry holds the pools of one configuration, created on first use.
//
// A reload derives the next registry with Next, which carries over every
// pool whose settings did not change (with its server connections); the
// registries of one process share server ids and shard health probes.
type Registry struct {
	log    *slog.Logger
	ids    *atomic.Uint64
	health *prober
	bans   *bans        // replica bans, shared with the registries Next derives
	rr     *roundRobins // round_robin positions, shared likewise

	mu      sync.Mutex // guards the following
	cfg     *config.Config
	pools   map[Key]*Pool
	retired bool     // superseded by Next: Get adds no more pools
	closed  bool     // Close was called
	checker *checker // replica health checks; nil until the first replica pool
}

// NewRegistry returns an empty registry for cfg.
func NewRegistry(cfg *config.Config, log *slog.Logger) *Registry {
	return &Registry{cfg: cfg, log: log, ids: new(atomic.Uint64), health: newProber(),
		bans: newBans(), rr: newRoundRobins(), pools: map[Key]*Pool{}}
}

// Get returns the pool for (db, user, shard) as the registry's config
// describes it, creating it if needed. It returns nil when the database,
// user or shard does not exist.
//
// On a registry that Next superseded, Get returns a pool that is already
// closed for keys it does not hold: its Checkout fails with ErrClosed, which
// tells the caller to look at the current configuration.
func (r *Registry) Get(db *config.Database, u *config.User, shard int) *Pool {
	key := Key{Database: db.Name, User: u.Name, Shard: shard, Role: RolePrimary}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pools[key]; p != nil {
		return p
	}
	if shard < 0 || shard >= len(db.Shards) {
		return nil
	}
	p := New(key, r.target(db, u, shard, -1), db.Pool, r.log, r.ids)
	if r.retired {
		p.Close()
		return p
	}
	r.pools[key] = p
	return p
}

// Replica returns the pool for replica i of (db, user, shard), creating it
// if needed, or nil when that replica does not exist. Replica pools use
// the shard's database name and credentials. Creating the first replica
// pool starts the registry's health checks.
func (r *Registry) Replica(db *config.Database, u *config.User, shard, i int) *Pool {
	key := Key{Database: db.Name, User: u.Name, Shard: shard, Role: RoleReplica, Replica: i}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pools[key]; p != nil {
		return p
	}
	if shard < 0 || shard >= len(db.Shards) || i < 0 || i >= len(db.Shards[shard].Replicas) {
		return nil
	}
	p := New(key, r.target(db, u, shard, i), db.Pool, r.log, r.ids)
	if r.retired || r.closed {
		p.Close()
		return p
	}
	r.pools[key] = p
	r.startChecker()
	return p
}

// target is where pools of (db, u, shard) connect to under r's config:
// the primary, or with replica >= 0 that replica.
func (r *Registry) target(db *config.Database, u *config.User, shard, replica int) Target {
	sh := &db.Shards[shard]
	user, pw := config.ServerCredentials(u, sh)
	t := Target{Host: sh.Host, Port: sh.Port, Database: sh.Database, User: user, Password: pw, SSLMode: config.SSLPrefer}
	if replica >= 0 {
		t.Host, t.Port = sh.Replicas[replica].Host, sh.Replicas[replica].Port
	}
	if r.cfg.TLS != nil {
		t.SSLMode = r.cfg.TLS.ServerSSLMode
		t.ServerCA = r.cfg.TLS.ServerCA
	}
	return t
}

// Next returns the registry for cfg, a reload of r's configuration. Every
// pool of r whose key still exists in cfg moves to the new registry: as is
// (keeping its server connections) when its target and pool settings are
// unchanged, else replaced by a new pool that shares its Stats. The pools
// that were replaced or whose key is gone are returned; the caller closes
// them once the new registry is in use, and their checked-out servers are
// closed as their clients return them. r stops creating pools.
func (r *Registry) Next(cfg *config.Config) (next *Registry, retired []*Pool) {
	n := &Registry{cfg: cfg, log: r.log, ids: r.ids, health: r.health, bans: r.bans, rr: r.rr, pools: map[Key]*Pool{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retired = true
	r.stopChecker()
	for key, p := range r.pools {
		db, u := cfg.Database(key.Database), cfg.User(key.User)
		if db == nil || u == nil || !u.Allows(db.Name) || key.Shard >= len(db.Shards) ||
			key.Role != RolePrimary && (key.Role != RoleReplica || key.Replica >= len(db.Shards[key.Shard].Replicas)) {
			retired = append(retired, p)
			continue
		}
		replica := -1
		if key.Role == RoleReplica {
			replica = key.Replica
			n.startChecker()
		}
		t := n.target(db, u, key.Shard, replica)
		if t == p.Target && db.Pool == p.Config {
			n.pools[key] = p
			continue
		}
		n.pools[key] = newPool(key, t, db.Pool, r.log, r.ids, p.Stats)
		retired = append(retired, p)
	}
	return n, retired
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

// Close stops the health checks and closes every pool.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.stopChecker()
	r.mu.Unlock()
	for _, p := range r.Pools() {
		p.Close()
	}
}

// ShardHealth says whether one shard server (a primary or a replica) can be
// used.
type ShardHealth struct {
	Database string
	Shard    int
	Role     string // RolePrimary or RoleReplica
	Replica  int    // index in the shard's replicas
	Host     string
	Port     int
	Healthy  bool
	Err      error // why not, when not healthy
}

// recentConnectError is how long a failed connection attempt of a pool
// keeps its shard unhealthy although the server answers probes (wrong
// credentials, too many connections, a database that does not exist).
const recentConnectError = 10 * time.Second

// Health checks every shard server of the configuration. A server is
// healthy when it answers a probe (a TCP connection and an SSLRequest,
// which the postmaster answers without authentication; results are cached
// for a second) and no pool of its shard failed to connect in the last ten
// seconds.
func (r *Registry) Health(ctx context.Context) []ShardHealth {
	var out []ShardHealth
	for _, db := range r.cfg.Databases {
		for i, sh := range db.Shards {
			out = append(out, ShardHealth{Database: db.Name, Shard: i, Role: RolePrimary, Host: sh.Host, Port: sh.Port})
			for j, rep := range sh.Replicas {
				out = append(out, ShardHealth{Database: db.Name, Shard: i, Role: RoleReplica, Replica: j, Host: rep.Host, Port: rep.Port})
			}
		}
	}
	addrs := make([]string, len(out))
	for i, h := range out {
		addrs[i] = net.JoinHostPort(h.Host, strconv.Itoa(h.Port))
	}
	errs := r.health.check(ctx, addrs)
	now := time.Now()
	failing := map[Key]error{}
	for _, p := range r.Pools() {
		if s := p.Snapshot(); s.ConnectErr != nil && now.Sub(s.ConnectErrAt) < recentConnectError {
			k := Key{Database: s.Key.Database, Shard: s.Key.Shard, Role: s.Key.Role, Replica: s.Key.Replica}
			failing[k] = s.ConnectErr
		}
	}
	for i := range out {
		h := &out[i]
		h.Err = errs[addrs[i]]
		if h.Err == nil && h.Role == RoleReplica {
			h.Err = r.bans.err(banKey{db: h.Database, shard: h.Shard, addr: addrs[i] + "/" + r.cfg.Database(h.Database).Shards[h.Shard].Database})
		}
		if h.Err == nil {
			h.Err = failing[Key{Database: h.Database, Shard: h.Shard, Role: h.Role, Replica: h.Replica}]
		}
		h.Healthy = h.Err == nil
	}
	return out
}

// probeTTL is how long a probe result is reused.
const probeTTL = time.Second

// probeTimeout bounds one probe.
const probeTimeout = time.Second

// prober probes server addresses and caches the results.
type prober struct {
	mu      sync.Mutex // guards results
	results map[string]probeResult
}

type probeResult struct {
	at  time.Time
	err error
}

func newProber() *prober { return &prober{results: map[string]probeResult{}} }

// check returns the probe error of each address (nil when healthy),
// probing in parallel the addresses without a fresh cached result.
func (p *prober) check(ctx context.Context, addrs []string) map[string]error {
	out := make(map[string]error, len(addrs))
	var stale []string
	now := time.Now()
	p.mu.Lock()
	for _, a := range addrs {
		if _, seen := out[a]; seen {
			continue
		}
		r, ok := p.results[a]
		if ok && now.Sub(r.at) < probeTTL {
			out[a] = r.err
			continue
		}
		out[a] = nil
		stale = append(stale, a)
	}
	p.mu.Unlock()
	if len(stale) == 0 {
		return out
	}
	errs := make([]error, len(stale))
	var wg sync.WaitGroup
	for i, a := range stale {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe(ctx, a)
		}()
	}
	wg.Wait()
	now = time.Now()
	p.mu.Lock()
	for i, a := range stale {
		p.results[a] = probeResult{at: now, err: errs[i]}
		out[a] = errs[i]
	}
	p.mu.Unlock()
	return out
}

// probe checks that a PostgreSQL postmaster answers at addr: it sends an
// SSLRequest and waits for the one-byte answer ('S' or 'N'), then hangs
// up. No backend authenticates, so probes need no credentials.
func probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("probe %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := binary.BigEndian.AppendUint32(nil, 8)
	req = binary.BigEndian.AppendUint32(req, 80877103)
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("probe %s: %w", addr, err)
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return fmt.Errorf("probe %s: no answer to SSLRequest: %w", addr, err)
	}
	if b[0] != 'S' && b[0] != 'N' {
		return fmt.Errorf("probe %s: unexpected answer %q to SSLRequest", addr, b[0])
	}
	return nil
}
