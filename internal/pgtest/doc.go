// Package pgtest starts real, throwaway PostgreSQL clusters on free loopback
// ports, for integration tests and for the proxy's demo command.
//
// Tests use New, which skips the test when the PostgreSQL binaries are
// missing (except when $CI is "true", where it fails) and stops the cluster
// when the test ends:
//
//	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "secret"})
//	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
//
// Other callers use Start and Stop. Options add postgresql.conf settings,
// pick the pg_hba method of TCP connections (trust, scram-sha-256, md5 with
// passwords stored as MD5, password) and give the superuser, always
// "postgres", a password.
//
// # Layers
//
//   - binaries.go finds the server binaries: $PG_BINDIR, then initdb's
//     directory in PATH (symlinks resolved), then the highest
//     /usr/lib/postgresql/*/bin.
//   - env.go prepares, once per process, what all clusters share: the run
//     directory and a template data directory that initdb fills, with
//     settings that trade durability for speed (fsync off, synchronous
//     commits kept so that Kill loses no acknowledged commit) and enable
//     what the proxy's tests need (wal_level logical, prepared transactions,
//     WAL senders and slots). A failure is kept for the process: missing
//     binaries or a failing initdb do not fix themselves between tests.
//   - cluster.go is a Cluster's life: a copy of the template, pg_hba.conf
//     and postgresql.auto.conf written from the Options, a free port, the
//     server started, and Stop, StopKeep, Kill and Restart.
//   - server.go runs the postmaster, procs.go finds and kills server
//     processes and hands out ports, replica.go makes a streaming replica
//     with pg_basebackup -R, sql.go runs statements as the superuser
//     (CreateRole keeps passwords out of its errors).
//
// # Lifecycle
//
// A Cluster is new (data directory made), running, stopped (data kept for
// Restart) or removed (final). The postmaster is a child of this process,
// started directly rather than through pg_ctl, so that pgtest can wait for
// it, see an early exit, and SIGKILL it: Kill simulates a crash for fault
// tests, and Restart recovers on the same port and data directory. Start
// returns once the server accepts the superuser over TCP; a port taken
// between choosing and binding it is retried with another. Stop tries a
// fast shutdown, then an immediate one, then SIGKILL, and removes the
// directories; it is safe to call twice. After a killed postmaster, pgtest
// also kills the backends it leaves behind (found by their working
// directory under /proc), since while they hold its shared memory no new
// postmaster can start.
//
// A Cluster's methods are safe for concurrent use; its mutex is held for
// whole state changes. Ports come from just below the kernel's ephemeral
// range, where no listener on port 0 and no outgoing connection gets one, and
// each is held under an flock on a file in os.TempDir()/shardgate-pgtest-ports
// until its cluster is removed. So no two clusters on the machine share one,
// even across test binaries, and a stopped cluster keeps its own for Restart.
//
// # Files on disk
//
// Every file lives under one root, shardgate-pgtest-<uid>/run-<pid>-*/, in
// $PGTEST_ROOT if set, else in /dev/shm when it is a tmpfs with 2 GiB free
// (creating a copy of the template's thousand files takes 50 ms there and up
// to a second on a disk file system), else in os.TempDir(). A Unix socket whose path would be
// too long goes to a short directory under /tmp. Once the process that made
// a run directory has exited, the next process to use pgtest kills any
// server left in it and removes it.
//
// PostgreSQL refuses to run as root. When the test runs as root, pgtest runs
// initdb, postgres and pg_basebackup as the "postgres" system user, creating
// a "shardgate-pg" user when there is none. PG* environment variables are
// not passed to them, so that the caller's environment cannot point
// pg_basebackup at another server.
package pgtest
