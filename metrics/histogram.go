package metrics

import (
	"sync/atomic"
	"time"
)

// bucketBounds are the upper bounds, in seconds, of every duration
// histogram: from half a millisecond (a pooled SELECT 1) to ten seconds (a
// checkout that waited for most of a long checkout_timeout).
var bucketBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// bucketNanos are bucketBounds as durations, compared on the hot path.
var bucketNanos = func() (b [len(bucketBounds)]time.Duration) {
	for i, s := range bucketBounds {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// Histogram counts durations in fixed buckets. Observe is a few atomic adds
// and allocates nothing, so the proxy calls it once per query; Prometheus
// reads it at scrape time through Snapshot. The zero value is ready to use.
//
// A snapshot taken during concurrent Observe calls may see a bucket count
// without the matching sum (or the reverse); the skew is one observation
// and Prometheus tolerates it.
type Histogram struct {
	counts [len(bucketBounds) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Int64                         // nanoseconds
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	for i < len(bucketNanos) && d > bucketNanos[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a Histogram's state in Prometheus's terms.
type HistogramSnapshot struct {
	Count   uint64
	Sum     float64            // seconds
	Buckets map[float64]uint64 // upper bound in seconds → cumulative count (+Inf excluded)
}

// Snapshot returns the histogram's current counts.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Buckets: make(map[float64]uint64, len(bucketBounds))}
	for i, ub := range bucketBounds {
		s.Count += h.counts[i].Load()
		s.Buckets[ub] = s.Count
	}
	s.Count += h.counts[len(bucketBounds)].Load()
	s.Sum = time.Duration(h.sum.Load()).Seconds()
	return s
}
