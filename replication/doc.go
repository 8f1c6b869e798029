// Package replication moves a live database from one set of shards to
// another: the source database's N shards to the destination database's M
// shards, while the application keeps writing, with every row applied
// exactly once. docs/resharding.md is the operator's guide; this note is the
// design.
//
// # Steps
//
// A Task runs the steps of DESIGN.md §8 in order, and each is re-runnable:
//
//  1. SchemaSync: pg_dump --schema-only --section=pre-data of source shard
//     0, applied to each destination shard in one transaction together with
//     a marker row in shardgate_reshard.steps.
//  2. Copy: Check, then per source shard a publication FOR ALL TABLES and a
//     permanent logical slot (pgoutput) created on a replication connection
//     with EXPORT_SNAPSHOT (or a publication and slot the user named,
//     names.go; an existing slot is moved to a temporary slot's snapshot).
//     That connection stays open and idle while the
//     tables copy, each in a REPEATABLE READ transaction that imports the
//     snapshot, as binary COPY TO STDOUT. Each row is routed by the
//     destination's sharding function (omni tables: to every shard, from
//     source shard 0 only) and streamed into COPY FROM STDIN on its shard.
//     Each destination shard loads one table from one source in one
//     transaction that also inserts its row in shardgate_reshard.table_copies
//     with the snapshot's LSN.
//  3. SchemaSyncPost: the post-data section (keys, indexes, constraints,
//     triggers), after the load.
//  4. Stream: START_REPLICATION on each slot (pgoutput proto_version 1, text
//     values), decode, route, apply; until cutover.
//  5. At cutover: WaitCaughtUp, SyncSequences; finally Drop.
//
// # Managed tasks and cutover
//
// Manager (tasks.go) runs tasks in the background for the admin commands:
// each Managed task has a TaskKind, a TaskState and a Phase. Its cutover
// (cutover.go) goes through a Gate, the running proxy: Pause the source
// database, WaitCaughtUp, stop the stream, SyncSequences, CutoverConfig
// (the source's name gets the destination's shards and rules), WriteCutoverFile
// (backup, parse-back, temp file and rename), Install, Resume, Drop. Until
// Install succeeds every failure resumes traffic on the source and the task
// keeps streaming. Running tasks are recorded on destination shard 0
// (persist.go) so that Manager.Resume restarts them in a new process.
// progress.go keeps per-table copy counters and the last applied
// transaction per (source, destination) shard pair in memory.
//
// # Stream layers and lifecycle
//
// Per source shard, one reader goroutine owns the replication connection and
// one applier goroutine per destination shard owns a destination session.
// Stream owns them all through an errgroup and waits for them: cancelling
// its context stops everything, and a failing goroutine cancels the others.
// The reader decodes pgoutput (Relation, Begin, Insert, Update, Delete,
// Truncate, Commit), routes each change, and hands each destination shard
// its changes as ops over a bounded channel; a full channel stops the reader
// (backpressure), so the source's WAL waits in the slot rather than in
// memory.
//
// Large transactions: the reader never buffers a whole source transaction.
// It hands a destination shard its changes in chunks (chunkChanges,
// chunkBytes); the applier applies them into one destination transaction
// that stays open until the source's Commit arrives. If the stream breaks
// before that, the connection closes and the destination transaction rolls
// back, so chunking keeps exactly-once without spilling to disk.
//
// # Exactly once
//
// Each (source shard s, destination shard d) pair has a replication origin
// on d. An applier binds it to its session (pg_replication_origin_session_setup)
// and commits each source transaction with pg_replication_origin_xact_setup
// (end LSN, commit time), so the origin's progress and the data commit
// atomically. On start an applier reads the progress and skips every source
// transaction whose commit LSN is below it. Within the copy's window, a
// table's changes are skipped when their transaction committed before the
// LSN its copy was taken at (table_copies.lsn): a re-run Copy takes a new
// snapshot from a temporary slot for the tables still missing.
//
// # Feedback
//
// The LSN confirmed to a source slot is the minimum over destination shards
// of what each committed; a destination shard with nothing queued counts as
// having committed everything the reader has handed out. Outside a
// transaction a keepalive's WAL end counts as handed out, so an idle slot
// catches up to pg_current_wal_lsn(), which WaitCaughtUp relies on. The slot
// never moves back.
//
// # Invariants
//
//   - An UPDATE that moves a row to another destination shard is a DELETE on
//     the old and an INSERT on the new. Unchanged TOASTed columns are not in
//     the stream, so then the old shard's applier deletes with RETURNING and
//     the reader fills them in. A normal UPDATE sets only the columns present.
//   - The sharding key must be in the replica identity (or REPLICA IDENTITY
//     FULL), so that DELETE and key-changing UPDATE carry the old key.
//   - Appliers run with session_replication_role = replica: triggers and
//     foreign keys of the destination do not fire, as in PostgreSQL's own
//     apply worker.
//
// Protocol references: https://www.postgresql.org/docs/current/protocol-replication.html
// and https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html.
package replication
