// Package executor runs what a statement needs of several shards, and
// makes their answers the one answer a single PostgreSQL server would have
// given.
//
// # Session
//
// A Session (session.go) is one client's session over the shards of a
// sharded database: the server it holds on each shard and its
// transaction, which is the client's and not any one server's. The client
// (package frontend) checks servers out with its own policy — the pause
// gate, replica balancing — and hands them to the session (Hold); Detach
// returns them all, Drop closes them. The session never reads the client's
// connection: what it sends the client goes into a sink (an io.Writer),
// and a COPY reads the client through CopyClient.
//
// A transaction's BEGIN is held until a statement shows which shards it
// needs (Begin), then sent to each shard as it joins, followed by the
// transaction's log — its savepoints and SETs, in order — so that a shard
// joining late is in the same state as the others (TxPrefix; Prefix adds
// the client's settings sync, Session.Settings). Savepoint runs SAVEPOINT,
// RELEASE and ROLLBACK TO on every joined shard and keeps the log; End
// commits or rolls back (a COMMIT of an aborted transaction rolls back).
// The transaction status (Status: I, T or E) is what ReadyForQuery reports
// to the client.
//
// A failure of a held server comes back as a *ShardError naming the shard
// and the server, which is marked broken; the client decides what the loss
// means (an error between transactions, a FATAL inside one).
//
// # Plans and fan-out
//
// A Plan (plan.go) is how one statement runs: its Route (one shard, a read
// merged from several, a write whose tags add up, an omni write, COPY,
// transaction control, or answered by the frontend), its shards, the text
// for each (a split multi-row INSERT), and the router's merge or COPY
// description. Execute (fanout.go) sends a statement to each of its shards
// as a simple Query after what Prefix asks for; ShardRows reads each
// shard's answer; Gather merges them into the sink, reads every shard to
// ReadyForQuery, and settles the implicit transaction of a write outside a
// transaction block: two-phase commit when every shard succeeded, rollback
// everywhere otherwise, so that it lands everywhere or nowhere. The
// frontend uses Gather directly for extended-protocol portals, whose
// messages it builds itself. CopyIn (copyin.go) splits the rows of COPY
// FROM STDIN between the shards with a CopySplitter (copy.go) and commits
// the shards together. InsertSelect (insertselect.go) runs INSERT … SELECT
// into a sharded table: the SELECT through a cursor on each shard it
// reads, declared on all of them before any row is written, each row to
// its key's shard in multi-row INSERTs of typed literals sent between two
// FETCHes, and the shards committed together.
//
// # Two-phase commit
//
// Commit (commit.go) commits a transaction that touched one shard plainly,
// and one that touched several in two phases: PREPARE TRANSACTION on each,
// then the decision is appended to the Coordinator's DecisionLog and
// fsynced (twopc.go), then COMMIT PREPARED on each. A failure before the
// decision rolls back everywhere; after it, the decision stands and
// Coordinator.Recover, run at the next start over every shard, commits
// what is prepared with a decision and rolls back what is prepared without
// one. GIDs are "sg:<txid>:<shard>", txids unique per proxy process start.
// The Coordinator's Knobs let crash tests stop the process between the
// phases.
//
// # Invariants
//
//   - A Session and the servers it holds are used by one goroutine, its
//     client's; the Coordinator is shared and safe for concurrent use.
//   - The session sends a server nothing of its own before its Ready hook
//     ran (the client ends there what its extended protocol left open).
//   - The Prefix a server fails is not retried: the server is broken, as
//     its session is unknown.
//
// # Merge
//
// A Merger reads the DataRows of one statement from each shard (Rows) and
// writes one result. Its Spec comes from the router:
//
//   - no ORDER BY and no aggregates: rows stream through shard after shard,
//     with OFFSET and LIMIT applied by the proxy (memory: one row);
//   - ORDER BY: a streaming k-way merge over the shards' sorted results
//     (memory: one row per shard); shards got LIMIT limit+offset;
//   - aggregates, GROUP BY, DISTINCT: partial results combine per group
//     (count and sum add, min/max compare, bool_and/bool_or, avg from hidden
//     sum and count columns with numeric_div's result scale), then sort and
//     limit (memory: one entry per group);
//   - expressions over aggregates (max(x) - min(x), HAVING sum(x) > 2 *
//     count(*), ORDER BY sum(x) / count(*)): after combining, one shard's
//     server computes them for each group, with the combined aggregates as
//     parameters (outer.go, outer_eval.go), in batches whose answers are
//     read before the next is sent (memory: still one entry per group);
//   - sum and avg of interval, sum of money: each group keeps the
//     shards' partial sums, and one shard's server adds them with
//     PostgreSQL's sum over an array parameter, after the shards are read
//     (fold.go; memory: one partial per shard and group);
//   - DISTINCT aggregates (count(DISTINCT x)): shards group by x too and
//     sort by the group key then x; a k-way merge of their streams folds
//     each x of a group once (distinct.go; memory: one row per shard, one
//     entry per group, never a set of values); with several values (or
//     FILTERs), shards group by grouping sets, the query's groups alone
//     and with each value, and tag each row with its set (GROUPING()):
//     the merge, sorted by the group key, the tag, then the values, reads
//     each aggregate from the rows of its set only (tagged.go; memory: the
//     same);
//   - collecting aggregates (string_agg, array_agg, json_agg, jsonb_agg):
//     each shard's partial result is appended to its group's, shard after
//     shard, or — with ORDER BY y in the aggregate — in the order of a
//     k-way merge of the shards' rows sorted by the group key then y
//     (collect.go; memory: one row per shard, each group's result);
//     bit_and, bit_or and bit_xor combine with their operator (bitagg.go).
//
// Values are ordered like PostgreSQL orders them, in text and binary
// formats: integers, floats (NaN above Infinity), numeric (exact decimals),
// uuid, bool, bytea, "char", bit strings, inet/cidr, macaddr, money
// (binary), date/time types (text in DateStyle ISO), interval (any
// IntervalStyle), arrays of these (value.go and the files it names). Text
// and enums order as the database says: the merge asks its Sink, when it
// is an OrderSource (order.go), for each column's Collation (collation.go:
// byte order for C, strcoll_l for a libc locale, ucol_strcollUTF8 for an
// ICU one through cgo (collation_icu.go; the noicu build tag leaves ICU
// out), each with varstr_cmp's strcmp tie-break when deterministic) or
// enum labels; the frontend answers from the shards' catalogs and refuses
// what it cannot prove. GROUP BY, DISTINCT and DISTINCT ON key on bytes,
// which for text is equality only in a deterministic collation: the merge
// asks a Sink that is an EqualitySource (equality.go) before it groups
// text. A type the merge cannot order exactly is refused with 0A000, never
// ordered approximately.
//
// A plan whose Merge has only a Probe (a SELECT naming a table the router
// cannot place) ran on every shard only for their error: when they answer
// instead, combine discards the rows and returns the Probe's refusal. A
// ParseOnly probe (a write, or a statement the router refuses) never runs:
// each shard only parses it (probe.go), and the first shard's error, or
// else the refusal, is the answer.
//
// Hidden columns the router appended (ORDER BY or avg helpers not in the
// select list) are stripped from RowDescription and every DataRow.
package executor
