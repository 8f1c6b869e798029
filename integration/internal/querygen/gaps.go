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
	// gapHavingBinary: a HAVING term comparing an aggregate of a type
	// other than integers, floats, numeric, bool and text (date,
	// timestamp, timestamptz, inet seen) with a constant is refused when
	// the client asks for binary results (executor convertConst):
	// SELECT count(*) FROM items HAVING min(d) > '2000-01-01' (extended
	// protocol) → 0A000 "HAVING on a binary column of type OID 1082 is
	// not supported across shards"; the text protocol answers it.
	gapHavingBinary = "having-binary"
	// gapHavingDateLiteral: a timestamp aggregate compared in HAVING with
	// a literal PostgreSQL reads but the proxy does not (a date only for
	// a timestamp, no offset for a timestamptz) fails in the text
	// protocol:
	// SELECT count(*) FROM items HAVING max(ts) > '2000-01-01' → XX000
	// "merge: cannot compare "2000-01-01": not an ISO timestamp";
	// PostgreSQL reads the literal as midnight.
	gapHavingDateLiteral = "having-date-literal"
	// gapHavingBool: wrong answers. A HAVING term comparing a boolean
	// aggregate with a constant spelled other than 't' or 'f' compares
	// the spelling: in the text protocol the proxy compares the shards'
	// "t" with the constant's text, so SELECT count(*) FROM items HAVING
	// bool_or(b) = true returns no row and HAVING bool_or(b) <> true
	// returns one, both the opposite of PostgreSQL; with binary results
	// 'yes' is read as false (executor convertConst).
	gapHavingBool = "having-bool"
	// gapHavingFailure: the proxy computes an expression over aggregates
	// for groups that a HAVING term it leaves to a shard (OR, arithmetic
	// over aggregates: not a plain comparison with a constant) drops, so
	// the expression's error surfaces: SELECT count(*) / count(m) FROM
	// items WHERE false HAVING count(*) > 2 * count(*) → 22012 division
	// by zero through the proxy, no row on PostgreSQL (docs/routing.md:
	// "unless HAVING drops that group first"). Without the gap, a query
	// that may fail has no HAVING.
	gapHavingFailure = "having-failure"
	// gapParamClause: two clauses break with a Bind parameter. An
	// OFFSET without LIMIT: SELECT f8 FROM items ORDER BY f8 OFFSET $1 →
	// 08P01 "bind message supplies 1 parameters, but prepared statement
	// "sg_10" requires 0" (the shards' statement drops the OFFSET, the
	// Bind keeps the parameter). A HAVING comparison with a parameter the
	// client sends in binary, as pgx does for an int64: SELECT note FROM
	// events GROUP BY 1 HAVING count(*) > $1 → XX000 "merge:
	// strconv.ParseInt: parsing "\x00…\x05": invalid syntax". Without
	// the gap, such constants are literals.
	gapParamClause = "param-clause"
	// gapHavingCollateKey: PostgreSQL does not match a COLLATE grouping
	// key in HAVING with the GROUP BY's and raises 42803; the proxy,
	// which does not send HAVING to the shards, answers rows:
	// SELECT count(*) FROM items GROUP BY (vc COLLATE "C") HAVING
	// (vc COLLATE "C") = 'b' → one row through the proxy, 42803 "column
	// "a.vc" must appear in the GROUP BY clause or be used in an
	// aggregate function" on PostgreSQL (vc is varchar(12)).
	gapHavingCollateKey = "having-collate-key"
	// GapFetchTextOrder: with Execute and a row limit (a JDBC fetch
	// size), a cross-shard query that compares text or enum values is
	// refused, as if the proxy had no catalog: Parse "SELECT tx FROM
	// items ORDER BY tx LIMIT 3", Bind, Execute (max rows 7), Sync →
	// 0A000 "cannot order text column "tx" across shards in collation
	// "en_US.UTF-8"", hint "without the shards' catalog the proxy
	// compares text in byte order only"; an enum: "cannot order column
	// "m" of type OID … across shards". Execute without a row limit
	// answers. Without the gap, the differential test's row-limited
	// runner skips queries with Case.SortsText.
	GapFetchTextOrder = "fetch-text-order"
)

// knownGaps describes each gap the generator leaves out.
var knownGaps = map[string]string{
	gapProbeAlias:        "client column aliases c<N> break the proxy's collation probe (0A000)",
	gapSumInterval:       "sum(interval) across shards is refused (0A000)",
	gapHavingBinary:      "HAVING on date/time/inet/… aggregates is refused with binary results (0A000)",
	gapHavingDateLiteral: "HAVING max(timestamp) > 'date-only literal' fails with XX000",
	GapFetchTextOrder:    "row-limited Execute refuses cross-shard text and enum ordering (0A000)",
	gapHavingCollateKey:  "HAVING on a COLLATE grouping key: 42803 on PostgreSQL, rows through the proxy",
	gapParamClause:       "a parameter in OFFSET without LIMIT (08P01) or in a HAVING comparison, binary (XX000)",
	gapHavingFailure:     "an expression over aggregates fails for groups a shard-computed HAVING term drops",
	gapHavingBool:        "HAVING bool_or(b) = true (or <> true, = 'yes', …) filters groups wrongly: a wrong answer",
}

// KnownGaps returns the names of the constructs knownGaps excludes, with
// why.
func KnownGaps() map[string]string { return maps.Clone(knownGaps) }
