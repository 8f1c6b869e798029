package admin

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/shardgate/shardgate/pool"
	"gopkg.in/yaml.v3"
)

// The SHOW commands. Counts are bigint columns, flags boolean, times of
// day UTC text, and durations bigint microseconds unless a column's name
// says otherwise (maxwait is whole seconds, as in PgBouncer).

var poolColumns = []column{
	text("database"), text("user"), num("shard"), text("role"), text("host"), num("port"),
	text("mode"), num("size"), num("cl_active"), num("cl_waiting"), num("sv_active"), num("sv_idle"),
	num("sv_total"), num("maxwait"), num("maxwait_us"), flag("paused"), flag("maintenance"), flag("banned"),
}

// sortedPools returns the pools of the current configuration ordered by
// database, user, shard and role.
func (h *Handler) sortedPools() []*pool.Pool {
	ps := h.p.Pools().Pools()
	slices.SortFunc(ps, func(a, b *pool.Pool) int {
		return cmp.Or(cmp.Compare(a.Key.Database, b.Key.Database), cmp.Compare(a.Key.User, b.Key.User),
			cmp.Compare(a.Key.Shard, b.Key.Shard), cmp.Compare(a.Key.Role, b.Key.Role), cmp.Compare(a.Key.Replica, b.Key.Replica))
	})
	return ps
}

// showPools lists pools. cl_active counts clients holding a server of the
// pool and cl_waiting those queued for one; clients held at a paused gate
// are in SHOW DATABASES. sv_total includes connections being opened.
func (h *Handler) showPools(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	reg := h.p.Pools()
	for _, p := range h.sortedPools() {
		s := p.Snapshot()
		g := h.p.DatabaseStatus(s.Key.Database)
		total := s.Active + s.Idle
		r.add(s.Key.Database, s.Key.User, s.Key.Shard, s.Key.Role, s.Target.Host, s.Target.Port,
			string(s.Mode), s.Size, s.Active, s.Waiting, s.Active, s.Idle, total,
			int64(s.MaxWait.Seconds()), s.MaxWait.Microseconds()%1_000_000, g.Paused, g.Maintenance, reg.Banned(p))
	}
	return r, nil
}

var clientColumns = []column{
	num("id"), text("user"), text("database"), text("addr"), text("state"), flag("tls"),
	text("application_name"), text("connect_time"), num("queries"),
}

func (h *Handler) showClients(ctx context.Context, x *call) (*result, error) {
	cs := h.p.Clients()
	slices.SortFunc(cs, func(a, b Client) int { return cmp.Compare(a.ID, b.ID) })
	r := &result{}
	for _, c := range cs {
		r.add(c.ID, c.User, c.Database, c.Addr, c.State, c.TLS, c.AppName, c.ConnectedAt, c.Queries)
	}
	return r, nil
}

var serverColumns = []column{
	text("pool"), text("database"), text("user"), num("shard"), num("id"), text("state"),
	text("addr"), num("pid"), text("connect_time"),
}

func (h *Handler) showServers(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, p := range h.sortedPools() {
		for _, s := range p.Servers() {
			r.add(p.Key.String(), p.Key.Database, p.Key.User, p.Key.Shard, s.ID, s.State.String(),
				s.Addr, s.PID, s.ConnectedAt)
		}
	}
	return r, nil
}

var databaseColumns = []column{
	text("name"), num("shards"), text("pool_mode"), num("pool_size"), num("min_pool_size"),
	text("checkout_timeout"), num("clients"), num("waiting"), flag("paused"), flag("maintenance"),
}

// showDatabases lists logical databases. waiting counts clients held at
// the gate by PAUSE or MAINTENANCE.
func (h *Handler) showDatabases(ctx context.Context, x *call) (*result, error) {
	clients := map[string]int{}
	for _, c := range h.p.Clients() {
		clients[c.Database]++
	}
	r := &result{}
	for _, db := range h.p.Config().Databases {
		g := h.p.DatabaseStatus(db.Name)
		r.add(db.Name, len(db.Shards), string(db.Pool.Mode), db.Pool.Size, db.Pool.MinSize,
			db.Pool.CheckoutTimeout.String(), clients[db.Name], g.Waiting, g.Paused, g.Maintenance)
	}
	return r, nil
}

var shardColumns = []column{
	text("database"), num("shard"), text("host"), num("port"), text("role"), flag("healthy"), text("error"),
}

func (h *Handler) showShards(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, s := range h.p.Pools().Health(ctx) {
		why := ""
		if s.Err != nil {
			why = s.Err.Error()
		}
		r.add(s.Database, s.Shard, s.Host, s.Port, s.Role, s.Healthy, why)
	}
	return r, nil
}

var statsColumns = []column{
	text("database"), text("user"), num("shard"), text("role"),
	num("total_xact_count"), num("total_query_count"), num("total_xact_time"), num("total_query_time"),
	num("total_wait_time"), num("avg_xact_time"), num("avg_query_time"), num("avg_wait_time"),
	num("total_errors"), num("total_checkouts"), num("total_checkout_timeouts"),
	num("total_server_connects"), num("total_server_connect_errors"),
	num("total_received"), num("total_sent"),
}

// showStats lists per-pool counters since the proxy started (they survive
// reloads). Times are microseconds; averages are over the whole period.
func (h *Handler) showStats(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, p := range h.sortedPools() {
		st := p.Stats
		xacts, queries := st.Transactions.Load(), st.Queries.Load()
		xactUS, queryUS := st.XactNanos.Load()/1000, st.QueryNanos.Load()/1000
		wait := st.WaitTime.Snapshot()
		waitUS := uint64(wait.Sum * 1e6)
		r.add(p.Key.Database, p.Key.User, p.Key.Shard, p.Key.Role,
			xacts, queries, xactUS, queryUS, waitUS,
			avg(xactUS, xacts), avg(queryUS, queries), avg(waitUS, wait.Count),
			st.Errors.Total(), st.Checkouts.Load(), st.Timeouts.Load(), st.Opened.Load(), st.ConnectErrs.Load(),
			st.BytesIn.Load(), st.BytesOut.Load())
	}
	return r, nil
}

func avg(total, n uint64) uint64 {
	if n == 0 {
		return 0
	}
	return total / n
}

var configColumns = []column{text("key"), text("value")}

// showConfig lists the effective configuration, one row per scalar, with
// keys as paths ("pool.size", "databases[0].shards[1].host") and passwords
// redacted.
func (h *Handler) showConfig(ctx context.Context, x *call) (*result, error) {
	out, err := h.p.Config().Redacted().YAML()
	if err != nil {
		return nil, fmt.Errorf("show config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("show config: %w", err)
	}
	r := &result{}
	flatten(r, "", &doc)
	return r, nil
}

func flatten(r *result, path string, n *yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			flatten(r, path, c)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			flatten(r, key, n.Content[i+1])
		}
		if len(n.Content) == 0 && path != "" {
			r.add(path, "{}")
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			flatten(r, path+"["+strconv.Itoa(i)+"]", c)
		}
		if len(n.Content) == 0 {
			r.add(path, "[]")
		}
	case yaml.AliasNode:
		flatten(r, path, n.Alias)
	default:
		r.add(path, n.Value)
	}
}

var versionColumns = []column{text("version")}

// Version is shardgate's version: the main module's version from the build
// information ("(devel)" for builds from a work tree).
func Version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("shardgate %s (%s)", v, runtime.Version())
}

func (h *Handler) showVersion(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	r.add(Version())
	return r, nil
}

var listColumns = []column{text("list"), num("items")}

func (h *Handler) showLists(ctx context.Context, x *call) (*result, error) {
	cfg := h.p.Config()
	var used, waiting int
	clients := h.p.Clients()
	for _, c := range clients {
		switch c.State {
		case clientActive:
			used++
		case clientWaiting:
			waiting++
		}
	}
	pools := h.p.Pools().Pools()
	var active, idle int
	for _, p := range pools {
		s := p.Snapshot()
		active += s.Active
		idle += s.Idle
	}
	r := &result{}
	r.add("databases", len(cfg.Databases))
	r.add("users", len(cfg.Users))
	r.add("pools", len(pools))
	r.add("clients", len(clients))
	r.add("used_clients", used)
	r.add("waiting_clients", waiting)
	r.add("servers", active+idle)
	r.add("used_servers", active)
	r.add("idle_servers", idle)
	return r, nil
}

var helpColumns = []column{text("command"), text("description")}

var inDoubtColumns = []column{
	text("database"), num("shard"), text("gid"), text("txid"), num("coordinator"), num("age"), text("state"),
}

// showTransactions lists what the two-phase resolver left at its last
// pass, by database, shard and GID.
func (h *Handler) showTransactions(ctx context.Context, x *call) (*result, error) {
	ds := h.p.InDoubt()
	slices.SortFunc(ds, func(a, b InDoubt) int {
		return cmp.Or(cmp.Compare(a.Database, b.Database), cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.GID, b.GID))
	})
	r := &result{}
	for _, d := range ds {
		r.add(d.Database, d.Shard, d.GID, d.TxID, d.Coordinator, d.Age, d.State)
	}
	return r, nil
}

func (h *Handler) showHelp(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, s := range specs {
		r.add(s.usage, s.help)
	}
	return r, nil
}
