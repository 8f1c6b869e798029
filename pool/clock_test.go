package pool

import (
	"testing"
	"time"
)

// TestMonoNow: monoNow keeps a monotonic reading (intervals measured with
// it ignore wall clock steps) and agrees with time.Now.
func TestMonoNow(t *testing.T) {
	before := time.Now()
	now := monoNow()
	after := time.Now()
	if now == now.Round(0) {
		t.Fatalf("monoNow() = %v has no monotonic reading", now)
	}
	if now.Before(before) || now.After(after) {
		t.Fatalf("monoNow() = %v, not between %v and %v", now, before, after)
	}
	if d := now.Round(0).Sub(after.Round(0)); d < -time.Second || d > time.Second {
		t.Fatalf("monoNow's wall clock is %v away from time.Now's", d)
	}
}

// BenchmarkMonoNow against BenchmarkTimeNow: one clock read against two.
func BenchmarkMonoNow(b *testing.B) {
	var t time.Time
	for range b.N {
		t = monoNow()
	}
	_ = t
}

func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for range b.N {
		t = time.Now()
	}
	_ = t
}
