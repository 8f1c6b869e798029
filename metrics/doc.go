// Package metrics exports the proxy's numbers to Prometheus and answers
// health checks.
//
// # Layers
//
//   - Recording (errors.go, histogram.go): ErrorCounts counts ErrorResponses
//     by SQLSTATE class and Histogram counts durations in fixed buckets
//     (0.5 ms to 10 s). Both are arrays of atomic counters whose zero value
//     is ready, and recording allocates nothing (BenchmarkObserve), so the
//     hot path records into them once per query. They live in the pools'
//     Stats, next to the pools' other atomic counters.
//   - Collection (collector.go): at scrape time an unchecked collector asks
//     a Source for one Sample (pool snapshots and counters, the admission
//     gate of each database, shard health, clients by state, statements of
//     sharded databases by route) and turns it into constant metrics. No
//     gauge is updated per query, and label sets follow the configuration
//     across reloads without registering or forgetting series.
//   - Serving (metrics.go): Metrics is a registry of its own, not
//     Prometheus's global one (so that two proxies in one test process do
//     not share series), holding the collector, the reload counters
//     (Reloaded) and Go runtime and process metrics. Handler serves
//     GET /metrics, in Prometheus text or OpenMetrics as the scraper asks,
//     and GET /healthz: 200 "ok" when Source.Health returns nil, else 503
//     with the reason. Listen starts the HTTP server on metrics.listen.
//
// # Lifecycle and concurrency
//
// The running proxy implements Source and creates one Metrics at start.
// A scrape and a health check each bound their calls into the Source to
// three seconds, the time shard probes may take. Listen's server runs in one
// goroutine that Server.Shutdown waits for, after the requests in progress.
// Counters keep growing across reloads, because a pool replaced on reload
// shares its predecessor's Stats.
//
// # Invariants
//
//   - Labels stay low-cardinality: database, user, shard, role, plus the
//     SQLSTATE class of errors (Appendix A's classes, others as "other"), the
//     state of clients and the route of statements. Never SQL text or
//     client addresses.
//   - The proxy's own metric names start with shardgate_ and are the public
//     surface listed in docs/metrics.md (the runtime's are go_ and
//     process_); TestMetricsDashboard checks that every metric the example
//     Grafana dashboard (examples/grafana-dashboard.json) queries exists.
//   - The package imports nothing of the proxy, so that every other package
//     may record into it.
package metrics
