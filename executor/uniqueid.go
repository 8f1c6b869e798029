package executor

import (
	"sync"
	"time"
)

// idEpoch is the start of shardgate.unique_id() time: 2024-01-01 UTC.
var idEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// IDGenerator hands out cluster-unique, time-ordered bigints: 41 bits of
// milliseconds since 2024-01-01, 10 bits of node id (one per proxy), 12
// bits of sequence — 4096 ids per millisecond per proxy, for 69 years. Ids
// from one proxy always increase, even if the clock steps back.
type IDGenerator struct {
	node int64
	now  func() time.Time

	mu   sync.Mutex // guards the following
	last int64      // milliseconds of the last id
	seq  int64
}

// NewIDGenerator returns a generator for node (0–1023).
func NewIDGenerator(node int) *IDGenerator {
	return &IDGenerator{node: int64(node) & 1023, now: time.Now}
}

// Next returns a new id.
func (g *IDGenerator) Next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.now().Sub(idEpoch).Milliseconds()
	if ms < g.last {
		ms = g.last // the clock stepped back: stay on the last millisecond
	}
	if ms == g.last {
		g.seq++
		if g.seq > 4095 {
			// This millisecond is used up: borrow the next one.
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.last = ms
	return ms<<22 | g.node<<12 | g.seq
}
