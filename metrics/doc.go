// Package metrics exports the proxy's numbers to Prometheus and answers
// health checks.
//
// The hot path only bumps atomic counters: the pools' Stats (package pool)
// hold plain counters, ErrorCounts by SQLSTATE class and fixed-bucket
// Histograms, all allocation-free. At scrape time a custom collector reads
// a Sample from a Source (frontend.Listener) — pool snapshots, gate state,
// shard health — and turns it into constant metrics, so no gauge is ever
// updated per query and label sets follow the configuration across reloads.
//
// Labels stay low-cardinality: database, user, shard, role, plus the
// SQLSTATE class of errors and the state of clients. Metric names start
// with shardgate_ and are listed in docs/metrics.md.
//
// The package imports nothing of the proxy, so that every other package
// may record into it.
package metrics
