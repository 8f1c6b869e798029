// Package router decides where a statement of a sharded database runs. It
// reads SQL, Bind parameters and session hints and returns a decision, a
// Plan: the target shards, whether the statement writes (and so needs
// primaries), and how the answers of several shards combine (Merge,
// InsertRows, Copy). It does no I/O and holds no connection; carrying a
// Plan out is not its job. docs/routing.md describes the rules for users;
// this note describes how the package applies them.
//
// # Layers
//
// Routing is split in two so that the expensive half runs once per
// statement text rather than once per execution, as the extended query
// protocol invites (https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-EXT-QUERY):
//
//   - Router.Analyze parses the SQL with pg_query (PostgreSQL's own parser)
//     and builds a Statement: for each statement in the text, its kind, the
//     tables it names and how their rows are spread (sharded, omni, pinned
//     to a shard by a sharded schema, a system catalog), and for each group
//     of co-located sharded tables a constraint on their sharding key: a
//     tree of AND and OR over key predicates whose values are constants,
//     already routed to shards, or parameter positions. It also builds the
//     Merge of a SELECT, with the SQL sent to shards when it must differ,
//     and records the reasons a statement cannot run on several shards.
//   - Statement.Route reads the parameter values and Hints, routes each
//     parameter operand through the sharding function, evaluates the
//     constraints into a set of shards, then applies the recorded reasons.
//     It does not allocate for a single-shard result: Direct plans, like the
//     plans of every kind over all shards, are built once by New and shared
//     (BenchmarkAnalyzeRoute).
//
// A text of several statements (one simple Query) gets one Plan: its
// statements must agree on where they run, else the text is refused with
// 0A000. A comment hint (/* shard: N */, /* sharding_key: V */) wins over
// Hints, which win over the analysis; a hinted statement is routed even
// when the parser rejects it, since the proxy's grammar may lag the
// server's.
//
// # Lifecycle and caching
//
// A Router is built by New from one database of a config snapshot and never
// changes; a reload builds a new one. It is safe for concurrent use.
// Statements are cached by text in a bounded LRU (DefaultCacheSize, cache.go)
// and shared by every client that sends the same text; a Statement and the
// Plans and Merges it returns are immutable. Errors are not cached, and
// neither are texts over 64 KiB. A database with one shard and no replicas
// never parses: Analyze returns a pass-through Statement whose plan is
// always shard 0.
//
// The optional ColumnOrder, supplied by the caller from a shard's catalog,
// gives a table's columns for INSERT and COPY without a column list and for
// sharded_tables entries that name only a column. The router calls it while
// analyzing, never while routing.
//
// # Co-location
//
// Two sharded tables are co-located in a query when their sharding keys
// are equal in every row the query combines and their rules place equal
// keys on the same shard (hash rules of one type family, or the same list
// or range rule). The analyzer finds equalities in WHERE and JOIN … ON,
// JOIN … USING, NATURAL JOIN, a subquery's WHERE that equates its key with
// the enclosing query's (correlation), and outer.key IN (SELECT inner.key
// …). Co-located tables form a group (union-find over table references);
// each group's key constraint comes from the WHERE of its outermost query.
// Such a query gives the same answer when each shard runs it on its own
// rows, so it may fan out. Any other sharded table, or one inside a
// subquery, CTE or set operation that is not co-located with a top-level
// table, must have all its rows on one shard, and all groups on the same
// one.
//
// # Invariants
//
//   - A wrong answer is worse than an error. What the router cannot prove
//     correct across shards is a 0A000 error naming the construct, with a
//     hint; conditions it does not understand only widen the set of shards.
//   - Errors are *wire.Error with PostgreSQL's SQLSTATE (errors.go): 42601
//     for SQL the parser rejects, 22P02/22003/22P03 for keys the server
//     would reject, 23514 for a key no list or range shard takes, 22023 for
//     bad hints, 42P02 for a missing parameter, 0A000 otherwise.
//   - An UPDATE may not move a row to a shard its new key does not belong
//     to, hinted or not.
//   - Analysis depends only on the SQL text, the Router's configuration and
//     the ColumnOrder catalog; Route only on parameters and Hints. A
//     statement whose route would change if a sharded schema came first on
//     search_path is analyzed a second time for that case, and Route picks
//     the analysis by Hints.SearchPath.
//   - The package imports, of shardgate's, only config, router/sharding and
//     wire (deps_test.go), and never panics on input: FuzzAnalyze feeds it
//     arbitrary SQL.
//
// # Files
//
// router.go builds a Router and classifies tables; analyze.go, scope.go,
// insert.go, insertselect.go and operand.go analyze statements (INSERT …
// SELECT into a sharded table gets its SELECT analyzed as a statement of
// its own, which routes where the rows are read), over the parse-tree helpers
// of nodes.go; cond.go and array.go evaluate key constraints; merge.go and
// rewrite.go build the Merge and the SQL sent to shards, aggregate.go says
// which aggregates merge, distinct.go how DISTINCT ones do (multidistinct.go
// those of several values, as tagged grouping sets), collect.go how
// collecting ones (string_agg, array_agg, json_agg, jsonb_agg) do,
// window.go which window functions run on every shard, outer.go
// builds the Outer statement of expressions over aggregates, probe.go plans
// a statement naming a table the analysis cannot place (run, or for a
// write only parsed, on the shards for PostgreSQL's error), and colname.go
// the names PostgreSQL gives select list items; statement.go routes;
// hint.go reads comment hints; cache.go is the statement cache; errors.go
// builds the errors; plan.go holds the Plan and the types it refers to.
package router
