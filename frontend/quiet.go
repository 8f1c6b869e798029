package frontend

import (
	"hash/maphash"
	"sync"
)

// quietTexts remembers, proxy-wide, statement texts of unnamed Parses
// whose analysis found nothing for the proxy to do: no session effect
// (analyze), no SQL-level PREPARE, EXECUTE or DEALLOCATE to rewrite
// (hasPrepareKeyword). Both are functions of the text alone, so a text
// found quiet once is quiet for every client and every session, and an
// unnamed Parse of it skips the scans (rewriteParse). A driver that sends
// its statements as unnamed Parses (node-postgres, pgjdbc below its
// prepare threshold, pgbench -M extended) cycles through a few texts: the
// scans were a seventh of the proxy's instructions for a pgbench TPC-B
// transaction in the extended protocol, whose seven statements are seven
// texts (docs/benchmarks.md, issue 13, eighteenth step). The client's own
// last text is caught before (repeatsQuietParse) without a lookup here.
//
// A text is kept at its second sighting: the first sets a bit of its hash
// in seen (a doorkeeper), so that texts with their values written in, new
// at every Parse, do not churn the set. The set holds at most
// maxQuietTexts texts of at most maxQuietText bytes; when full it starts
// again empty, doorkeeper and all.
type quietTexts struct {
	seed maphash.Seed
	mu   sync.Mutex // guards the following
	m    map[string]struct{}
	seen [quietSeenBits / 64]uint64
}

const (
	maxQuietTexts = 4096
	maxQuietText  = 2048
	quietSeenBits = 1 << 16
)

func newQuietTexts() *quietTexts {
	return &quietTexts{seed: maphash.MakeSeed(), m: map[string]struct{}{}}
}

// has reports whether text is known to be quiet.
func (q *quietTexts) has(text []byte) bool {
	q.mu.Lock()
	_, ok := q.m[string(text)]
	q.mu.Unlock()
	return ok
}

// add records that text was found quiet; it is kept from its second time.
func (q *quietTexts) add(text []byte) {
	if len(text) > maxQuietText {
		return
	}
	h := maphash.Bytes(q.seed, text) % quietSeenBits
	word, bit := h/64, uint64(1)<<(h%64)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seen[word]&bit == 0 {
		q.seen[word] |= bit
		return
	}
	if len(q.m) >= maxQuietTexts {
		clear(q.m)
		q.seen = [quietSeenBits / 64]uint64{}
	}
	q.m[string(text)] = struct{}{}
}

// Len returns how many texts are kept.
func (q *quietTexts) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m)
}
