package clock

import (
	"testing"
	"time"
)

// TestNow: Now keeps a monotonic reading (intervals measured with it
// ignore wall clock steps) and agrees with time.Now.
func TestNow(t *testing.T) {
	before := time.Now()
	now := Now()
	after := time.Now()
	if now == now.Round(0) {
		t.Fatalf("Now() = %v has no monotonic reading", now)
	}
	if now.Before(before) || now.After(after) {
		t.Fatalf("Now() = %v, not between %v and %v", now, before, after)
	}
	if d := now.Round(0).Sub(after.Round(0)); d < -time.Second || d > time.Second {
		t.Fatalf("Now's wall clock is %v away from time.Now's", d)
	}
}

// TestMono: Mono and Of count from the same start, and Mono does not go
// back.
func TestMono(t *testing.T) {
	a := Mono()
	now := Now()
	b := Mono()
	if a < 0 || b < a {
		t.Fatalf("Mono() went from %v to %v", a, b)
	}
	if of := Of(now); of < a || of > b {
		t.Fatalf("Of(Now()) = %v, not between %v and %v", of, a, b)
	}
	if at := At(Of(now)); !at.Equal(now) {
		t.Fatalf("At(Of(%v)) = %v", now, at)
	}
}

// BenchmarkNow against BenchmarkTimeNow: one clock read against two.
func BenchmarkNow(b *testing.B) {
	var t time.Time
	for range b.N {
		t = Now()
	}
	_ = t
}

func BenchmarkMono(b *testing.B) {
	var d time.Duration
	for range b.N {
		d = Mono()
	}
	_ = d
}

func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for range b.N {
		t = time.Now()
	}
	_ = t
}
