// Package pgtest starts real, throwaway PostgreSQL clusters on free loopback
// ports, for integration tests and for the proxy's demo command.
//
// A cluster is a postmaster that pgtest starts as its own child process, so
// that it can wait for it, detect an early exit and kill it for fault tests.
// Starting many clusters is cheap: initdb runs once per process into a
// template data directory, and each cluster starts from a copy of it.
//
// Every file lives under one root, shardgate-pgtest-<uid>/run-<pid>-*/ in
// $PGTEST_ROOT if set, else in /dev/shm when it is a large tmpfs (copying a
// data directory there is ten times faster than on disk), else in
// os.TempDir(). Once the process that made a run directory has exited, the
// next process to use pgtest stops any server left in it and removes it.
//
// PostgreSQL refuses to run as root. When the test runs as root, pgtest runs
// initdb, postgres and pg_basebackup as the "postgres" system user, creating a
// "shardgate-pg" user when there is none.
//
// Tests use New, which skips the test when the PostgreSQL binaries are missing
// (except in CI, where it fails) and stops the cluster when the test ends:
//
//	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "secret"})
//	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
//
// The binaries come from $PG_BINDIR, PATH or /usr/lib/postgresql/*/bin; see
// Binaries.
package pgtest
