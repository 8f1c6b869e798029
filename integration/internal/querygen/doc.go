// Package querygen generates, from a seed, a small schema, rows for it and
// random SELECTs over it, for differential tests: a sharded database must
// answer every query exactly as one PostgreSQL holding the same rows
// (issue 11).
//
// Schema is the DDL of two tables sharded by their bigint column
// shard_key (items, with a column of each type the proxy orders and
// merges, and events, co-located with it) and an omni table lookup. Data
// gives their rows: NULLs, the extremes of every type (NaN and infinities
// of numeric, float8, dates and timestamps; empty strings and strings
// that sort differently in en_US.UTF-8 and byte order), and many equal
// values, so that groups and duplicates span shards. Queries assume a
// database created with LOCALE 'en_US.UTF-8'.
//
// Generator.Query(i) is the i-th query of a seed: the constructs
// docs/routing.md ("Queries on several shards") says run across shards —
// aggregates and expressions over them, GROUP BY, HAVING, WHERE on the
// sharding key and on other columns, DISTINCT, DISTINCT ON, ORDER BY,
// LIMIT and OFFSET — over one table or a join with lookup or a co-located
// join. A query's answer never depends on the order PostgreSQL reads its
// rows: a query with LIMIT or OFFSET orders by every output column, with
// the text of values that compare equal though spelled differently
// (numeric 1.0 and 1.00, interval '1 day' and '24:00:00') as a tie-break;
// such values never reach min, max, GROUP BY or DISTINCT, and floats are
// never summed; a query that may fail (division by zero in an expression
// over aggregates) has no LIMIT, since PostgreSQL stops computing at its
// limit. Case.Ordered says whether rows compare in order; Case.ParamSQL
// and Case.Params are the query with some constants (sharding keys,
// LIMIT, OFFSET, HAVING counts) as Bind parameters; Case.MayRefuse names
// the construct of the few queries that a proxy refuses by design
// (docs/routing.md "What is refused"). knownGaps (gaps.go) lists the
// constructs the generator leaves out because the proxy answers them
// differently today, each with a minimal query; Generator.Gaps puts them
// back.
//
// # Usage
//
// The differential test integration.TestRndDifferential runs the queries
// on a reference database and through the proxy on two and three shards,
// in the simple protocol, the extended one with binary results, with Bind
// parameters, and with row-limited Executes (a JDBC fetch size), one in
// eight inside a transaction block:
//
//	go test -count=1 -run 'TestRnd' ./integration/
//	RANDOM_DIFF_SEED=7 RANDOM_DIFF_QUERIES=2000 go test -count=1 -run 'TestRnd' ./integration/
//	RANDOM_DIFF_SEED=7 RANDOM_DIFF_ONLY=123 go test -count=1 -run 'TestRnd' ./integration/
//	RANDOM_DIFF_GAPS=name,… go test -count=1 -run 'TestRnd' ./integration/
//
// The seed is random unless RANDOM_DIFF_SEED sets it, and always logged;
// it also draws the proxy's pool mode and the session's TimeZone,
// IntervalStyle and extra_float_digits. A failure prints the command that replays just its
// query. A soak over many seeds:
//
//	for s in $(seq 1 20); do RANDOM_DIFF_SEED=$s RANDOM_DIFF_QUERIES=1000 go test -count=1 -run 'TestRndDifferential$' ./integration/ || break; done
//
// This package's own tests check that a seed gives the same queries and
// that PostgreSQL runs them (QUERYGEN_SEED, QUERYGEN_QUERIES).
package querygen
