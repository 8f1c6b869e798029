// Package integration holds end-to-end tests: the proxy in front of real
// PostgreSQL servers (started by internal/pgtest), driven by real clients
// (pgx, lib/pq, psql, psycopg2, node-postgres, pgjdbc, pgbench).
//
// The differential harness (differential_harness_test.go) runs scripts of
// statements on a reference database and through the proxy on a one-, two-
// and three-shard database, in both pool modes, and compares each client
// library's answers through the proxy with the same library's answers
// directly: pgx in its five exec modes, a row-limited Execute path, and
// each statement in a pipeline with one Sync and in a multi-statement Query
// (RowDescription fields with type OID, typmod and format, NoData; values
// byte for byte), lib/pq, psql, psycopg2, node-postgres and pgjdbc (what each
// library shows: see docs/conformance.md). The driver programs live under
// testdata/drivers; .ci/run installs their packages.
package integration
