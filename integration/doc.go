// Package integration holds end-to-end tests: the proxy in front of real
// PostgreSQL servers (started by internal/pgtest), driven by real clients
// (pgx, lib/pq, psql, pgbench).
package integration
