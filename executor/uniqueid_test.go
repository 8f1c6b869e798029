package executor

import (
	"testing"
	"time"
)

func TestIDGenerator(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	g := NewIDGenerator(5)
	g.now = func() time.Time { return now }
	seen := map[int64]bool{}
	prev := int64(0)
	for i := 0; i < 10000; i++ {
		if i == 5000 {
			now = now.Add(-time.Second) // clock steps back
		}
		id := g.Next()
		if id <= prev || seen[id] {
			t.Fatalf("id %d after %d (duplicate %v)", id, prev, seen[id])
		}
		if (id>>12)&1023 != 5 {
			t.Fatalf("node bits of %d are %d", id, (id>>12)&1023)
		}
		seen[id] = true
		prev = id
	}
	other := NewIDGenerator(6)
	other.now = g.now
	if id := other.Next(); seen[id] {
		t.Fatal("two nodes produced the same id")
	}
}
