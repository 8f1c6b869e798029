package config

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestOverlapsMatchesBruteForce checks the sorted sweep of overlaps against
// comparing every pair: errors exactly when some ranges overlap, and each
// reported pair really overlaps.
func TestOverlapsMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bound := func() *shardKey {
		if rng.IntN(5) == 0 {
			return nil
		}
		return &shardKey{n: int64(rng.IntN(20)), isInt: true}
	}
	reported := regexp.MustCompile(`^m\[(\d+)\]: overlaps mapping\[(\d+)\]`)
	for trial := 0; trial < 2000; trial++ {
		var ranges []keyRange
		for i := 0; i < 1+rng.IntN(6); i++ {
			r := keyRange{from: bound(), to: bound(), index: i, path: fmt.Sprintf("m[%d]", i)}
			if r.from != nil && r.to != nil && r.from.compare(*r.to) >= 0 {
				continue
			}
			ranges = append(ranges, r)
		}
		byIndex := map[int]keyRange{}
		for _, r := range ranges {
			byIndex[r.index] = r
		}
		overlap := func(a, b keyRange) bool { return below(a.from, b.to) && below(b.from, a.to) }
		any := false
		for i := range ranges {
			for j := i + 1; j < len(ranges); j++ {
				any = any || overlap(ranges[i], ranges[j])
			}
		}
		r := newReporter("")
		(&validator{r: r}).overlaps(append([]keyRange(nil), ranges...))
		if (len(r.errs) > 0) != any {
			t.Fatalf("ranges %v: %d errors, brute force overlap %v", ranges, len(r.errs), any)
		}
		for _, e := range r.errs {
			m := reported.FindStringSubmatch(e.Path + ": " + e.Msg)
			if m == nil {
				t.Fatalf("unexpected message %q", e.Msg)
			}
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			if a <= b || !overlap(byIndex[a], byIndex[b]) {
				t.Fatalf("ranges %v: reported %s", ranges, e)
			}
		}
	}
}

// TestErrorCap checks that a file repeating one mistake through aliases
// gets maxErrors errors and a count of the rest.
func TestErrorCap(t *testing.T) {
	file := "x-s: &s {host: h, port: 0}\nx-ss: &ss [" + strings.Repeat("*s, ", 300) + "*s]\n" +
		"databases: [{name: a, shards: *ss}]\n"
	_, err := parse([]byte(file), "app.yaml", lookupTestEnv)
	list, ok := err.(ErrorList)
	if !ok || len(list) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d: %v", len(list), maxErrors+1, err)
	}
	// 301 shards with port 0, and 300 duplicates of the first shard.
	if last := list[len(list)-1].Error(); last != "app.yaml: 501 more errors not shown" {
		t.Errorf("last error = %q", last)
	}
}
