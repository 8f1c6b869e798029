// Command conformance runs pgx v5's own test suite three times, directly
// against PostgreSQL and through shardgate in session and in transaction
// mode, and reports every test that passes directly but not through the
// proxy.
//
// # Runs
//
// One throwaway PostgreSQL server (internal/pgtest) is prepared the way
// pgx's CI prepares its own (ci/setup_test.bash, testsetup/): the pgx_test
// database with hstore, ltree and the uint64 domain, the pgx_md5, pgx_pw,
// pgx_scram, pgx_ssl and pgx_sslcert users with pgx's pg_hba.conf rules, and
// TLS with pgx's checked-in certificates. The database is dropped and made
// again before each run, so that what one run leaves behind cannot change
// the next.
//
// The direct run gives pgx the PGX_TEST_* connection strings its CI uses.
// The proxied runs start the proxy binary (built from ./cmd/proxy) with a
// one-shard pgx_test database, the same users and TLS with the same
// certificate, and point every connection string the proxy can serve at it:
// PGX_TEST_PGBOUNCER_CONN_STRING too, which turns on pgx's tests for
// transaction poolers. The Unix-socket string is left out (the proxy listens
// on TCP only), so those tests skip.
//
// # Comparison
//
// go test -json gives one result per test and subtest. A test counts by its
// own result: a parent that failed only because a subtest failed is not
// counted again. A test that passed directly (or was skipped directly and
// ran through the proxy) and through the proxy failed, did not finish (the
// test binary panicked or timed out), did not run or was skipped is a
// regression, unless expected_failures.txt lists it, or a parent of it, for
// that mode. Entries of that file whose test now passes are reported as
// warnings, so that the list only shrinks.
//
// The exit status is 0 when there are no unexpected regressions, 1 when
// there are, and 2 when the runs could not be made (no PostgreSQL, a build
// error).
//
// See docs/conformance.md for how to run it and for the list of expected
// failures with their reasons.
package main
