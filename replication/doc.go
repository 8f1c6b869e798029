// Package replication moves a live database from one set of shards to
// another: the source database's N shards to the destination database's M
// shards, while the application keeps writing, with every row applied
// exactly once. docs/resharding.md is the operator's guide; this note is the
// design.
//
// # Steps
//
// A Task (task.go) runs the steps of DESIGN.md §8 in order. Each records its
// progress on the destination shards (shardgate_reshard.steps and
// table_copies), so each is re-runnable and a new Task for the same two
// databases resumes where the last one stopped:
//
//  1. SchemaSync (schema.go): pg_dump --schema-only --section=pre-data of
//     source shard 0, applied to each destination shard in one simple
//     Query together with its step marker.
//  2. Copy (copy.go): Check (check.go, precheck.go), then per source shard
//     a publication FOR ALL TABLES and a permanent logical slot (pgoutput)
//     created on a replication connection with EXPORT_SNAPSHOT (or the
//     publication and slot the user named, names.go). That connection stays
//     idle while the tables copy, up to CopyParallelism at a time, each as
//     binary COPY TO STDOUT in a transaction that imports the snapshot
//     (copyformat.go reads the rows). Each row is routed by the
//     destination's rules (route.go; omni tables go to every shard, from
//     source shard 0 only) and streamed into COPY FROM STDIN on its shard.
//     A destination shard loads a table from one source in one transaction
//     that also writes its table_copies row with the snapshot's LSN, so a
//     half-copied table never stays behind. A re-run copies only what is
//     missing, at the snapshot of a temporary slot.
//  3. SchemaSyncPost: the post-data section (keys, indexes, constraints,
//     triggers), after the load.
//  4. Stream (stream.go): START_REPLICATION on each slot (pgoutput
//     proto_version 1, text values), decode, route (dispatch.go), apply
//     (apply.go: batching into destination transactions; statement.go: the
//     SQL each change becomes); until cutover.
//  5. At cutover (ops.go): WaitCaughtUp, SyncSequences; finally Drop.
//
// # Managed tasks and cutover
//
// Manager (tasks.go) runs tasks in the background for the admin commands;
// each Managed task (managed.go) has a TaskKind, a TaskState and a Phase,
// and its run loop retries what failed transiently. A failed stream,
// or a schema sync or copy that lost a server, starts again after a growing
// pause. The cutover (cutover.go) goes through a Gate, the running proxy:
// Pause the source database, WaitCaughtUp (both bounded by the cutover
// timeout), stop the stream, SyncSequences, CutoverConfig (the source's name
// gets the destination's shards and rules), record the source's shards in
// the task's row, WriteCutoverFile (configfile.go: backup, parse-back, temp
// file and rename), Install, Resume, Drop. Until Install succeeds every
// failure resumes traffic on the source and the task keeps streaming.
// Running tasks are recorded on destination shard 0 (persist.go), so that
// Manager.Resume restarts them in a new process, or finishes the drop of a
// cutover that rewrote the file. progress.go keeps per-table copy counters
// and the last applied transaction per (source, destination) pair.
//
// # Stream layers and lifecycle
//
// Per source shard, one goroutine owns the replication connection and one
// destination session per destination shard (an applier each); an
// errgroup for the Stream owns these goroutines and waits for them:
// cancelling Stream's context stops everything (as socket deadlines), and
// a failing one cancels the others. The goroutine decodes pgoutput
// (Relation, Begin, Insert, Update, Delete, Truncate, Commit), routes each
// change, and hands each destination shard's changes to its applier as
// ops, which the applier turns into statements of its next round trip.
// The goroutine decodes Insert, Update and Delete itself (decode.go: one
// copy of the message and two allocations per tuple, where pglogrepl.Parse
// makes about a dozen) and never buffers a whole source transaction: it
// hands changes over in chunks (chunkChanges, chunkBytes) that the applier
// applies into one destination transaction, open until the source's
// Commit. If the stream breaks before that, the connection closes and the
// destination transaction rolls back.
//
// The appliers' round trips go out when the source's socket has nothing
// more for the moment, from inside the read that found it so
// (reader.idle, coalescingConn.idle), when an applier's round trip is
// full, or when the oldest change waiting is maxGroupAge old: all of them
// at once (flushAll), which then waits for all their answers while the
// destination shards work at the same time. So the source's WAL waits in
// the socket and the slot while the destinations apply, rather than in
// memory (backpressure), and the stream's sockets are waited on by one
// goroutine: while it waits, the process has nothing else of the stream's
// to run. With a goroutine per applier (until 2026-12-06), each wait of
// the reader or an applier left its thread idle and the runtime parked
// and woke threads for them; in a proxy with several Ps that was three
// fifths of its context switches, and it fell behind native replication
// where one P kept up (docs/benchmarks.md, issue 12 §5).
//
// Everything an applier got between two round trips joins one destination
// transaction ("group commit"), sent as one pipelined batch of prepared
// statements: BEGIN, the changes of several source transactions, one
// origin advance to the last one's end, COMMIT, in one round trip. While
// the groups are still small, the reader waits for more of the source
// until 1 ms after their first change (groupLinger), so that a stream that
// keeps up does not pay a round trip and a commit for every few changes.
// The applier encodes that round trip itself into a buffer it reuses (pipeline.go), a
// new statement's Parse included. The reader's and the appliers' sockets
// read and write with raw system calls (rawconn.go): entering a system
// call the runtime's way woke its monitor thread out of its idle sleep at
// every round trip, and that thread's polling was a third of the proxy's
// CPU. The linger waits in a raw ppoll(2) of the source's socket rather
// than in time.Sleep (dispatch.go: pause): the goroutine keeps its thread,
// and the socket's low-water mark ends the wait early once 64 KiB of WAL
// came. Parked on a timer, the goroutine's thread slept on a futex until
// another thread woke it: half of the stream's context switches inside a
// serving proxy.
// Only a source transaction too big for one op, a row move and a
// TRUNCATE of one source's rows (below) keep a destination transaction
// open across round trips.
// Rows of one table, kind and set of columns go as one multi-row statement
// where the table's only unique key is its replica identity, so that rows
// of different keys may be reordered (apply_batch.go). On such tables the
// changes of one row inside a destination transaction collapse into one
// where that cannot change the outcome (an UPDATE after an UPDATE or
// INSERT of the row becomes the row's new image; a DELETE after them
// replaces them), so a load that updates a few rows over and over, such
// as pgbench's branches and tellers, writes each once per group.
//
// # Exactly once
//
// Each (source shard s, destination shard d) pair has a replication origin
// on d, bound to the applier's session (pg_replication_origin_session_setup).
// Each group commits with pg_replication_origin_xact_setup, so the origin's
// progress and the data commit atomically, and every source transaction in
// the group ends at or before that progress. On start an applier reads the
// progress and skips every source transaction whose commit LSN is below it.
// A table's changes are also skipped when their transaction committed
// before the LSN its copy was taken at (table_copies.lsn).
//
// # Feedback
//
// The LSN confirmed to a source slot is the minimum over destination shards
// of what each committed; a destination shard that committed everything
// handed to it counts as having committed everything the reader has handed
// out. Outside a transaction a keepalive's WAL end counts as handed out, so
// an idle slot catches up to pg_current_wal_lsn(), which WaitCaughtUp
// relies on. The slot never moves back.
//
// # Invariants
//
//   - An UPDATE that moves a row to another destination shard is a DELETE on
//     the old and an INSERT on the new. Unchanged TOASTed columns are not in
//     the stream, so then the old shard's applier deletes with RETURNING and
//     the reader fills them in (from the source's current row when the old
//     one is gone). A normal UPDATE sets only the columns present.
//   - The sharding key must be in the replica identity (or REPLICA IDENTITY
//     FULL), so that DELETE and key-changing UPDATE carry the old key; Check
//     refuses tables without one.
//   - A TRUNCATE of a sharded table on one of several source shards
//     deletes, on each destination shard, only the rows that came from that
//     source; the stream fails when the source's rules cannot tell them
//     apart.
//   - Appliers run with session_replication_role = replica: triggers and
//     foreign keys of the destination do not fire, as in PostgreSQL's own
//     apply worker.
//
// Protocol references: https://www.postgresql.org/docs/current/protocol-replication.html
// and https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html.
package replication
