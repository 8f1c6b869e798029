package pool

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/shardgate/shardgate/config"
)

// Replica health.
//
// A replica is banned when a health check fails (it cannot be connected
// to, does not answer SELECT 1 within health_check_timeout, or the query
// fails) or when a client's checkout fails to connect to it. A banned
// replica gets no reads until ban_time has passed and it then passed a
// health check. Bans belong to the replica server of one shard of a
// logical database (host, port and database name), not to a pool: every
// user's pool of the replica is banned together, and bans survive reloads.
// The primary is never banned. A checkout that the server refused for the
// client's startup parameters (IsStartupRejected) did connect: it bans
// nothing.

// banKey names one replica server of one shard.
type banKey struct {
	db    string
	shard int
	addr  string // host:port/database
}

func replicaBanKey(k Key, t Target) banKey {
	return banKey{db: k.Database, shard: k.Shard, addr: net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) + "/" + t.Database}
}

type banState struct {
	until time.Time // the ban lasts at least until then
	err   error     // why
}

// bans are the current replica bans of a process.
type bans struct {
	mu sync.Mutex // guards m
	m  map[banKey]banState
}

func newBans() *bans { return &bans{m: map[banKey]banState{}} }

// ban bans k for d; it reports whether k was not banned before.
func (b *bans) ban(k banKey, d time.Duration, err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, was := b.m[k]
	b.m[k] = banState{until: time.Now().Add(d), err: err}
	return !was
}

// passed records a passed health check: it lifts an expired ban and
// reports whether it did.
func (b *bans) passed(k banKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.m[k]
	if !ok || time.Now().Before(st.until) {
		return false
	}
	delete(b.m, k)
	return true
}

// err returns why k is banned, or nil.
func (b *bans) err(k banKey) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st, ok := b.m[k]; ok {
		return fmt.Errorf("banned: %w", st.err)
	}
	return nil
}

func (b *bans) banned(k banKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[k]
	return ok
}

// Banned reports whether p is the pool of a banned replica.
func (r *Registry) Banned(p *Pool) bool {
	return p.Key.Role == RoleReplica && r.bans.banned(replicaBanKey(p.Key, p.Target))
}

// Ban bans the replica of pool p after err (a failed connection), for the
// ban_time of its database. It does nothing for a primary, or when err is
// the server's refusal of a client's startup parameters.
func (r *Registry) Ban(p *Pool, err error) {
	if p.Key.Role != RoleReplica || IsStartupRejected(err) {
		return
	}
	lb := r.loadBalancing(p.Key.Database)
	if r.bans.ban(replicaBanKey(p.Key, p.Target), lb.BanTime, err) {
		r.log.Warn("replica banned", "pool", p.Key.String(), "server", p.Target.Host+":"+strconv.Itoa(p.Target.Port), "for", lb.BanTime, "err", err)
	}
}

// loadBalancing returns the load balancing settings of database db.
func (r *Registry) loadBalancing(db string) config.LoadBalancing {
	r.mu.Lock()
	cfg := r.cfg
	r.mu.Unlock()
	if d := cfg.Database(db); d != nil {
		return d.LoadBalancing
	}
	return cfg.LoadBalancing
}

// checker runs the health checks of one registry.
type checker struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// startChecker starts the health checks of every database with replicas,
// once; r.mu is held.
func (r *Registry) startChecker() {
	if r.checker != nil || r.retired || r.closed {
		return
	}
	ch := &checker{stop: make(chan struct{})}
	r.checker = ch
	for i := range r.cfg.Databases {
		db := &r.cfg.Databases[i]
		if !hasReplicas(db) {
			continue
		}
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			r.checkLoop(db, ch.stop)
		}()
	}
}

// stopChecker stops the health checks; r.mu is held. It does not wait for
// checks in flight: they finish within health_check_timeout.
func (r *Registry) stopChecker() {
	if r.checker != nil {
		close(r.checker.stop)
		r.checker = nil
	}
}

func hasReplicas(db *config.Database) bool {
	for i := range db.Shards {
		if len(db.Shards[i].Replicas) > 0 {
			return true
		}
	}
	return false
}

// checkLoop checks the replicas of db every health_check_interval until
// stop is closed.
func (r *Registry) checkLoop(db *config.Database, stop chan struct{}) {
	lb := db.LoadBalancing
	t := time.NewTicker(lb.HealthCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.checkDatabase(db, lb, stop)
	}
}

// checkDatabase checks every replica of db once, in parallel.
func (r *Registry) checkDatabase(db *config.Database, lb config.LoadBalancing, stop chan struct{}) {
	var wg sync.WaitGroup
	for shard := range db.Shards {
		for i := range db.Shards[shard].Replicas {
			t, key, ok := r.checkTarget(db, shard, i)
			if !ok {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), lb.HealthCheckTimeout)
				defer cancel()
				err := checkReplica(ctx, t, lb.HealthCheckTimeout)
				select {
				case <-stop:
					return // the registry was retired meanwhile
				default:
				}
				k := replicaBanKey(key, t)
				if err != nil {
					if r.bans.ban(k, lb.BanTime, err) {
						r.log.Warn("replica banned: health check failed", "database", db.Name, "shard", shard,
							"server", t.Host+":"+strconv.Itoa(t.Port), "for", lb.BanTime, "err", err)
					}
					return
				}
				if r.bans.passed(k) {
					r.log.Info("replica unbanned: health check passed", "database", db.Name, "shard", shard,
						"server", t.Host+":"+strconv.Itoa(t.Port))
				}
			}()
		}
	}
	wg.Wait()
}

// checkTarget returns where and as whom to check replica i of shard: as
// the user of an existing pool of that replica, else as the first user
// allowed on db.
func (r *Registry) checkTarget(db *config.Database, shard, i int) (Target, Key, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, p := range r.pools {
		if k.Database == db.Name && k.Shard == shard && k.Role == RoleReplica && k.Replica == i {
			return p.Target, k, true
		}
	}
	u := r.cfg.FirstUserFor(db.Name)
	if u == nil {
		return Target{}, Key{}, false
	}
	key := Key{Database: db.Name, User: u.Name, Shard: shard, Role: RoleReplica, Replica: i}
	return r.target(db, u, shard, i), key, true
}

// checkReplica connects to t and runs SELECT 1.
func checkReplica(ctx context.Context, t Target, timeout time.Duration) error {
	conn, err := Connect(ctx, t, timeout)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
		return fmt.Errorf("SELECT 1: %w", err)
	}
	return nil
}
