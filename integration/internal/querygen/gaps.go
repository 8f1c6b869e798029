package querygen

import "maps"

// The constructs the generator leaves out because the proxy answers them
// differently from PostgreSQL today (issue 11). Generator.Gaps, or
// RANDOM_DIFF_GAPS in the differential test, puts one back, which
// reproduces the difference; remove a gap once the proxy handles it.
const (
	// gapSumInterval: sum(interval) across shards is refused:
	// SELECT sum(iv) FROM items → 0A000 "cannot add partial aggregates of
	// type OID 1186 across shards", a documented refusal (docs/routing.md
	// "What is refused").
	gapSumInterval = "sum-interval"
)

// knownGaps describes each gap the generator leaves out.
var knownGaps = map[string]string{
	gapSumInterval: "sum(interval) across shards is refused (0A000)",
}

// KnownGaps returns the names of the constructs knownGaps excludes, with
// why.
func KnownGaps() map[string]string { return maps.Clone(knownGaps) }
