package metrics

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample is everything the collector exports, read from the proxy at scrape
// time (frontend.Listener.MetricsSample).
type Sample struct {
	Pools     []PoolSample
	Databases []DatabaseSample
	Shards    []ShardSample
	Clients   map[string]int // connected clients by state (idle, waiting, active…)
	Routes    []RouteSample
	Loop      LoopSample
}

// LoopSample is how clients are served: on the event loop
// (limits.event_loop), handed from it to goroutines, or parked.
type LoopSample struct {
	Clients  int    // clients the event loop serves (see hotLoop.running)
	Handoffs uint64 // since the start: moves of a client from the loop to a goroutine
	Parked   int    // idle clients parked without a goroutine (client_park_after)
}

// RouteSample counts the statements of a sharded database by how many
// shards they needed.
type RouteSample struct {
	Database           string
	Direct, Multi, All uint64 // one shard; some shards; every shard
}

// PoolSample is one pool: its current numbers and its counters since the
// process started (counters survive reloads).
type PoolSample struct {
	Database, User string
	Shard          int
	Role           string // primary | replica

	Size           int
	ClientsActive  int // clients holding a server of the pool
	ClientsWaiting int // clients queued for a server of the pool
	ServersActive  int
	ServersIdle    int
	MaxWait        time.Duration // of the oldest queued client

	Transactions  uint64
	Queries       uint64
	Checkouts     uint64
	Timeouts      uint64 // checkouts that gave up after checkout_timeout
	Connects      uint64 // server connections opened
	ConnectErrors uint64
	Disconnects   uint64 // server connections closed
	BytesIn       uint64 // received from the pool's servers
	BytesOut      uint64 // sent to the pool's servers

	Errors                        *ErrorCounts
	QueryTime, XactTime, WaitTime *Histogram
}

// Key identifies the pool, for sorting.
func (p *PoolSample) Key() string {
	return fmt.Sprintf("%s\x00%s\x00%08d\x00%s", p.Database, p.User, p.Shard, p.Role)
}

// DatabaseSample is the gate state of one database.
type DatabaseSample struct {
	Name        string
	Paused      bool
	Maintenance bool
	Waiting     int // clients waiting at the gate
	// GateWait is how long clients waited at the closed gate (PAUSE, a
	// resharding cutover, MAINTENANCE); nil when none ever did.
	GateWait *Histogram
}

// ShardSample is the health of one shard server.
type ShardSample struct {
	Database string
	Shard    int
	Role     string
	Healthy  bool
}

// Source is what the metrics read; frontend.Listener implements it.
type Source interface {
	// MetricsSample returns the current numbers.
	MetricsSample(ctx context.Context) Sample
	// Health returns why the proxy cannot serve, or nil.
	Health(ctx context.Context) error
}

// scrapeTimeout bounds the shard probes of one scrape.
const scrapeTimeout = 3 * time.Second

var poolLabels = []string{"database", "user", "shard", "role"}

func poolDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc("shardgate_pool_"+name, help, append(poolLabels[:4:4], extra...), nil)
}

// collector turns a Sample into metrics at scrape time. Metric names are
// the public surface documented in docs/metrics.md.
type collector struct {
	src Source

	clientsActive, clientsWaiting, serversActive, serversIdle, size, maxWait *prometheus.Desc
	transactions, queries, checkouts, timeouts, connects, connectErrors      *prometheus.Desc
	disconnects, errors, queryTime, xactTime, waitTime, bytesIn, bytesOut    *prometheus.Desc
	clients, paused, maintenance, gateWaiting, gateWait, shardUp, routed     *prometheus.Desc
	loopClients, loopHandoffs, parked                                        *prometheus.Desc
}

func newCollector(src Source) *collector {
	return &collector{
		src:            src,
		clientsActive:  poolDesc("clients_active", "Clients holding a server connection of the pool."),
		clientsWaiting: poolDesc("clients_waiting", "Clients queued for a server connection of the pool."),
		serversActive:  poolDesc("servers_active", "Server connections checked out by clients."),
		serversIdle:    poolDesc("servers_idle", "Idle server connections in the pool."),
		size:           poolDesc("size", "Configured maximum number of server connections."),
		maxWait:        poolDesc("max_wait_seconds", "How long the oldest queued client has been waiting."),
		transactions:   poolDesc("transactions_total", "Transactions finished (ReadyForQuery idle)."),
		queries:        poolDesc("queries_total", "Round trips to servers: simple queries and extended-protocol batches."),
		checkouts:      poolDesc("checkouts_total", "Server connections handed to clients."),
		timeouts:       poolDesc("checkout_timeouts_total", "Checkouts that failed after checkout_timeout."),
		connects:       poolDesc("server_connects_total", "Server connections opened."),
		connectErrors:  poolDesc("server_connect_errors_total", "Failed attempts to open a server connection."),
		disconnects:    poolDesc("server_disconnects_total", "Server connections closed."),
		bytesIn:        poolDesc("server_received_bytes_total", "Bytes received from the pool's servers."),
		bytesOut:       poolDesc("server_sent_bytes_total", "Bytes sent to the pool's servers."),
		errors:         poolDesc("errors_total", "ErrorResponses sent to clients, by SQLSTATE class (first two characters).", "class"),
		queryTime:      poolDesc("query_duration_seconds", "Duration of round trips to servers."),
		xactTime:       poolDesc("transaction_duration_seconds", "Duration of transactions, from the first round trip to ReadyForQuery idle."),
		waitTime:       poolDesc("checkout_wait_seconds", "Time clients waited for a server connection."),
		clients: prometheus.NewDesc("shardgate_clients", "Connected clients by state (admin clients included).",
			[]string{"state"}, nil),
		paused: prometheus.NewDesc("shardgate_database_paused", "1 while the database is paused (admin PAUSE).",
			[]string{"database"}, nil),
		maintenance: prometheus.NewDesc("shardgate_database_maintenance", "1 while the database is in maintenance (admin MAINTENANCE ON).",
			[]string{"database"}, nil),
		gateWaiting: prometheus.NewDesc("shardgate_database_clients_waiting", "Clients waiting for a paused database or one in maintenance.",
			[]string{"database"}, nil),
		gateWait: prometheus.NewDesc("shardgate_database_gate_wait_seconds",
			"How long clients waited for a paused database (PAUSE, a resharding cutover) or one in maintenance before their transaction went on.",
			[]string{"database"}, nil),
		routed: prometheus.NewDesc("shardgate_routed_statements_total",
			"Statements of sharded databases by route: direct (one shard), multi (some shards), all (every shard).",
			[]string{"database", "route"}, nil),
		loopClients: prometheus.NewDesc("shardgate_event_loop_clients",
			"Clients served by the event loop (limits.event_loop), one of them for a moment on a goroutine when a step may block; the others have goroutines of their own or are parked.", nil, nil),
		loopHandoffs: prometheus.NewDesc("shardgate_event_loop_handoffs_total",
			"Moves of a client from the event loop to a goroutine, for a step that may block (a pool wait, a closed gate, COPY, …).", nil, nil),
		parked: prometheus.NewDesc("shardgate_clients_parked",
			"Idle clients parked without a goroutine or buffers (limits.client_park_after).", nil, nil),
		shardUp: prometheus.NewDesc("shardgate_shard_up", "Servers of the shard with this role that answer probes and whose pools connect.",
			[]string{"database", "shard", "role"}, nil),
	}
}

// Describe sends nothing: the collector is unchecked, as its label values
// come and go with the configuration.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

// Collect reads one Sample and sends its metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s := c.src.MetricsSample(ctx)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	histogram := func(d *prometheus.Desc, h *Histogram, labels ...string) {
		if h == nil {
			return
		}
		hs := h.Snapshot()
		ch <- prometheus.MustNewConstHistogram(d, hs.Count, hs.Sum, hs.Buckets, labels...)
	}
	for i := range s.Pools {
		p := &s.Pools[i]
		l := []string{p.Database, p.User, strconv.Itoa(p.Shard), p.Role}
		gauge(c.clientsActive, float64(p.ClientsActive), l...)
		gauge(c.clientsWaiting, float64(p.ClientsWaiting), l...)
		gauge(c.serversActive, float64(p.ServersActive), l...)
		gauge(c.serversIdle, float64(p.ServersIdle), l...)
		gauge(c.size, float64(p.Size), l...)
		gauge(c.maxWait, p.MaxWait.Seconds(), l...)
		counter(c.transactions, p.Transactions, l...)
		counter(c.queries, p.Queries, l...)
		counter(c.checkouts, p.Checkouts, l...)
		counter(c.timeouts, p.Timeouts, l...)
		counter(c.connects, p.Connects, l...)
		counter(c.connectErrors, p.ConnectErrors, l...)
		counter(c.disconnects, p.Disconnects, l...)
		counter(c.bytesIn, p.BytesIn, l...)
		counter(c.bytesOut, p.BytesOut, l...)
		if p.Errors != nil {
			p.Errors.Each(func(class string, n uint64) {
				counter(c.errors, n, append(l[:4:4], class)...)
			})
		}
		histogram(c.queryTime, p.QueryTime, l...)
		histogram(c.xactTime, p.XactTime, l...)
		histogram(c.waitTime, p.WaitTime, l...)
	}
	for state, n := range s.Clients {
		gauge(c.clients, float64(n), state)
	}
	gauge(c.loopClients, float64(s.Loop.Clients))
	counter(c.loopHandoffs, s.Loop.Handoffs)
	gauge(c.parked, float64(s.Loop.Parked))
	for _, r := range s.Routes {
		counter(c.routed, r.Direct, r.Database, "direct")
		counter(c.routed, r.Multi, r.Database, "multi")
		counter(c.routed, r.All, r.Database, "all")
	}
	for _, d := range s.Databases {
		gauge(c.paused, b2f(d.Paused), d.Name)
		gauge(c.maintenance, b2f(d.Maintenance), d.Name)
		gauge(c.gateWaiting, float64(d.Waiting), d.Name)
		histogram(c.gateWait, d.GateWait, d.Name)
	}
	// A shard may have several replicas: they share labels, so the gauge
	// counts the healthy servers of each role.
	type shardRole struct {
		db, shard, role string
	}
	up := map[shardRole]int{}
	var order []shardRole
	for _, sh := range s.Shards {
		k := shardRole{sh.Database, strconv.Itoa(sh.Shard), sh.Role}
		n, seen := up[k]
		if !seen {
			order = append(order, k)
		}
		if sh.Healthy {
			n++
		}
		up[k] = n
	}
	for _, k := range order {
		gauge(c.shardUp, float64(up[k]), k.db, k.shard, k.role)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
