package frontend

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/metrics"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// This file is the Listener's operations surface: what the admin database
// (package admin) and the metrics endpoint (package metrics) read and
// change.

// ID is the admin client's id, as SHOW CLIENTS lists it.
func (a *AdminConn) ID() uint64 { return a.c.id }

// Closing reports whether the admin client must go: it was killed or the
// listener is shutting down. Next returns a timeout error when that
// happens while it waits for a message.
func (a *AdminConn) Closing() bool { return a.c.killed.Load() || a.c.l.shutting.Load() }

// Accepting reports whether the listener is serving and not shutting down.
func (l *Listener) Accepting() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ln != nil && !l.shutting.Load()
}

// Reload re-reads the configuration file of the current state and installs
// it with Reconfigure. A file that does not load leaves the current
// configuration in place; the error names every problem as file:line.
func (l *Listener) Reload() error { return l.ReloadWith(nil) }

// ReloadWith is Reload with the file's configuration passed through
// adjust first (nil: as it is); an error of adjust fails the reload.
func (l *Listener) ReloadWith(adjust func(*config.Config) (*config.Config, error)) error {
	path := l.State().Config.Path
	if path == "" {
		return errors.New("reload: the configuration did not come from a file")
	}
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	if adjust != nil {
		if cfg, err = adjust(cfg); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
	}
	return l.Reconfigure(cfg)
}

// Reconfigure installs cfg. It builds the complete new state first (TLS
// material, then the pool registry derived from the current one: pools
// whose settings did not change are carried over with their server
// connections), swaps it in with one pointer store, and then closes the
// pools that were replaced or removed; their checked-out servers close as
// their clients' transactions end. Clients move to the new state at their
// next checkout (client.refresh). The old state's catalog connections
// close as well (State.retire).
func (l *Listener) Reconfigure(cfg *config.Config) error {
	l.ctl.reloadMu.Lock()
	defer l.ctl.reloadMu.Unlock()
	old := l.State()
	// NewState loads the TLS material; its empty registry is replaced by
	// the one derived from the current registry.
	st, err := NewState(cfg, l.log)
	if err != nil {
		return err
	}
	var retired []*pool.Pool
	st.Pools, retired = old.Pools.Next(cfg)
	l.SetState(st)
	l.nudgeMoved(old.Config, cfg) // idle listeners move now (idlemove.go)
	for _, p := range retired {
		p.Close()
	}
	old.retire()
	return nil
}

// DatabaseStatus is the gate state of one database.
type DatabaseStatus struct {
	Name        string
	Paused      bool // by PAUSE of this database or of all
	Maintenance bool // by MAINTENANCE ON of this database or of all
	Waiting     int  // clients waiting at the gate
	Holders     int  // clients checking a server out or holding one
}

// DatabaseStatus returns the gate state of database db.
func (l *Listener) DatabaseStatus(db string) DatabaseStatus {
	g := l.ctl.gate(db)
	return DatabaseStatus{Name: db,
		Paused:      l.ctl.all.paused.Load() || g.paused.Load(),
		Maintenance: l.ctl.all.maint.Load() || g.maint.Load(),
		Waiting:     int(g.waiting.Load()),
		Holders:     int(g.holders.Load()),
	}
}

// checkDatabase returns 3D000 unless db ("" for all) is configured.
func (l *Listener) checkDatabase(db string) error {
	if db != "" && l.State().Config.Database(db) == nil {
		return wire.Errorf(wire.InvalidCatalogName, "database \"%s\" does not exist", db)
	}
	return nil
}

// Pause closes the gate of database db ("" for every database) and waits
// until no client of it holds a server (PgBouncer's PAUSE). Clients then
// wait before their next transaction until Resume. If ctx ends or the
// listener shuts down first, the database stays paused and Pause returns
// an error.
func (l *Listener) Pause(ctx context.Context, db string) error {
	if err := l.checkDatabase(db); err != nil {
		return err
	}
	ct := &l.ctl
	g := &ct.all
	if db != "" {
		g = ct.gate(db)
	}
	ct.pausing.Add(1)
	defer ct.pausing.Add(-1)
	ct.mu.Lock()
	ct.set(g, &g.paused, true)
	ct.mu.Unlock()
	tick := time.NewTicker(gateCheckInterval)
	defer tick.Stop()
	for {
		ct.mu.Lock()
		if ct.drained == nil {
			ct.drained = make(chan struct{})
		}
		drained := ct.drained
		ct.mu.Unlock()
		busy := l.busy(db)
		if busy == 0 {
			return nil
		}
		select {
		case <-drained:
		case <-tick.C:
			if l.shutting.Load() {
				return wire.Errorf(wire.AdminShutdown, "shutting down while pausing: %d clients still held servers", busy)
			}
		case <-ctx.Done():
			return fmt.Errorf("pause: %d clients still hold servers: %w", busy, ctx.Err())
		}
	}
}

// busy counts the clients admitted to db ("" for all databases).
func (l *Listener) busy(db string) int64 {
	if db != "" {
		return l.ctl.gate(db).holders.Load()
	}
	var n int64
	if m := l.ctl.gates.Load(); m != nil {
		for _, g := range *m {
			n += g.holders.Load()
		}
	}
	return n
}

// Resume opens the gate that Pause closed. Resume of all databases ("")
// also resumes every database paused on its own.
func (l *Listener) Resume(db string) error {
	if err := l.checkDatabase(db); err != nil {
		return err
	}
	l.setEach(db, func(g *dbGate) *atomic.Bool { return &g.paused }, false)
	return nil
}

// SetMaintenance turns maintenance mode of database db ("" for all) on or
// off. In maintenance, clients wait before their next transaction; unlike
// Pause, turning it on does not wait for open transactions. Maintenance
// off for all databases also ends the maintenance of each database.
func (l *Listener) SetMaintenance(db string, on bool) error {
	if err := l.checkDatabase(db); err != nil {
		return err
	}
	l.setEach(db, func(g *dbGate) *atomic.Bool { return &g.maint }, on)
	return nil
}

// setEach sets a flag of the gate of db, or of all gates when db is "" and
// on is false (ending a state everywhere), or of the all-gate when db is ""
// and on is true.
func (l *Listener) setEach(db string, flag func(*dbGate) *atomic.Bool, on bool) {
	ct := &l.ctl
	var g *dbGate
	if db != "" {
		g = ct.gate(db)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	switch {
	case g != nil:
		ct.set(g, flag(g), on)
	case on:
		ct.set(&ct.all, flag(&ct.all), true)
	default:
		ct.set(&ct.all, flag(&ct.all), false)
		if m := ct.gates.Load(); m != nil {
			for _, g := range *m {
				ct.set(g, flag(g), false)
			}
		}
	}
}

// Health reports why the proxy cannot serve, or nil: it is accepting
// clients and every database has at least one primary shard server that
// answers (see pool.Registry.Health).
func (l *Listener) Health(ctx context.Context) error {
	if !l.Accepting() {
		return errors.New("not accepting clients (shutting down)")
	}
	st := l.State()
	up := map[string]bool{}
	why := map[string][]string{}
	for _, h := range st.Pools.Health(ctx) {
		if h.Role != pool.RolePrimary {
			continue
		}
		if h.Healthy {
			up[h.Database] = true
		} else {
			why[h.Database] = append(why[h.Database], fmt.Sprintf("shard %d: %v", h.Shard, h.Err))
		}
	}
	for _, db := range st.Config.Databases {
		if !up[db.Name] {
			return fmt.Errorf("database %q: no shard is healthy (%s)", db.Name, strings.Join(why[db.Name], "; "))
		}
	}
	return nil
}

// MetricsSample reads everything the metrics collector exports. It is
// called at scrape time, so the hot path keeps only atomic counters.
func (l *Listener) MetricsSample(ctx context.Context) metrics.Sample {
	st := l.State()
	var s metrics.Sample
	for _, p := range st.Pools.Pools() {
		s.Pools = append(s.Pools, poolSample(p))
	}
	sort.Slice(s.Pools, func(i, j int) bool { return s.Pools[i].Key() < s.Pools[j].Key() })
	for _, db := range st.Config.Databases {
		ds := l.DatabaseStatus(db.Name)
		s.Databases = append(s.Databases, metrics.DatabaseSample{Name: db.Name,
			Paused: ds.Paused, Maintenance: ds.Maintenance, Waiting: ds.Waiting, GateWait: &l.ctl.gate(db.Name).waited})
	}
	for _, h := range st.Pools.Health(ctx) {
		s.Shards = append(s.Shards, metrics.ShardSample{Database: h.Database, Shard: h.Shard, Role: h.Role, Healthy: h.Healthy})
	}
	s.Clients = map[string]int{}
	for _, c := range l.Clients() {
		s.Clients[c.State.String()]++
	}
	s.Routes = l.routes.samples()
	s.Loop = metrics.LoopSample{Clients: l.HotClients(), Handoffs: l.HotHandoffs(), Parked: l.Parked()}
	return s
}

func poolSample(p *pool.Pool) metrics.PoolSample {
	snap := p.Snapshot()
	st := p.Stats
	// Replica pools of one shard differ only by index: the role label
	// carries it ("replica0", "replica1"), so every pool has its own
	// label set and the scrape stays valid with several replicas.
	role := snap.Key.Role
	if role == pool.RoleReplica {
		role = fmt.Sprintf("replica%d", snap.Key.Replica)
	}
	return metrics.PoolSample{
		Database: snap.Key.Database, User: snap.Key.User, Shard: snap.Key.Shard, Role: role,
		Size:           snap.Size,
		ClientsActive:  snap.Active,
		ClientsWaiting: snap.Waiting,
		ServersActive:  snap.Active,
		ServersIdle:    snap.Idle,
		MaxWait:        snap.MaxWait,
		Transactions:   st.Transactions.Load(),
		Queries:        st.Queries.Load(),
		Checkouts:      st.Checkouts.Load(),
		Timeouts:       st.Timeouts.Load(),
		Connects:       st.Opened.Load(),
		ConnectErrors:  st.ConnectErrs.Load(),
		Disconnects:    st.Closed.Load(),
		BytesIn:        st.BytesIn.Load(),
		BytesOut:       st.BytesOut.Load(),
		Errors:         &st.Errors,
		QueryTime:      &st.QueryTime,
		XactTime:       &st.XactTime,
		WaitTime:       &st.WaitTime,
	}
}
