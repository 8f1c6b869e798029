package querygen

import "maps"

// The constructs the generator leaves out because the proxy answers them
// differently from PostgreSQL today (issue 11). Generator.Gaps, or
// RANDOM_DIFF_GAPS in the differential test, puts one back, which
// reproduces the difference; remove a gap once the proxy handles it.
const (
	// gapProbeAlias: a client column named c<N> after the columns whose
	// collation the proxy asks a shard for (frontend/collation_check.go
	// renames only the columns up to the last one it needs to c1…cN) makes
	// the probe ambiguous, and the proxy refuses the query:
	// SELECT min(tx), count(*) AS c1 FROM items → 0A000 "cannot order
	// column "min" across shards exactly", detail "column reference "c1"
	// is ambiguous". Without the gap, aliases are o1, o2, ….
	gapProbeAlias = "probe-alias"
	// gapSumInterval: sum(interval) across shards is refused:
	// SELECT sum(iv) FROM items → 0A000 "cannot add partial aggregates of
	// type OID 1186 across shards"; docs/routing.md lists sum as combined
	// and does not refuse it.
	gapSumInterval = "sum-interval"
	// gapHavingFailure: the proxy computes an expression over aggregates
	// for groups that a HAVING term it leaves to a shard (OR, arithmetic
	// over aggregates: not a plain comparison with a constant) drops, so
	// the expression's error surfaces: SELECT count(*) / count(m) FROM
	// items WHERE false HAVING count(*) > 2 * count(*) → 22012 division
	// by zero through the proxy, no row on PostgreSQL (docs/routing.md:
	// "unless HAVING drops that group first"). Without the gap, a query
	// that may fail has no HAVING.
	gapHavingFailure = "having-failure"
	// gapHavingCollateKey: PostgreSQL does not match a COLLATE grouping
	// key in HAVING with the GROUP BY's and raises 42803; the proxy,
	// which does not send HAVING to the shards, answers rows:
	// SELECT count(*) FROM items GROUP BY (vc COLLATE "C") HAVING
	// (vc COLLATE "C") = 'b' → one row through the proxy, 42803 "column
	// "a.vc" must appear in the GROUP BY clause or be used in an
	// aggregate function" on PostgreSQL (vc is varchar(12)).
	gapHavingCollateKey = "having-collate-key"
)

// knownGaps describes each gap the generator leaves out.
var knownGaps = map[string]string{
	gapProbeAlias:       "client column aliases c<N> break the proxy's collation probe (0A000)",
	gapSumInterval:      "sum(interval) across shards is refused (0A000)",
	gapHavingCollateKey: "HAVING on a COLLATE grouping key: 42803 on PostgreSQL, rows through the proxy",
	gapHavingFailure:    "an expression over aggregates fails for groups a shard-computed HAVING term drops",
}

// KnownGaps returns the names of the constructs knownGaps excludes, with
// why.
func KnownGaps() map[string]string { return maps.Clone(knownGaps) }
