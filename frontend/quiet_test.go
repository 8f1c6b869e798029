package frontend

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"testing"
)

// TestQuietTexts: a text is kept at its second add, not its first; a text
// over maxQuietText never; a full set starts again empty, its doorkeeper
// too, and goes on keeping texts.
func TestQuietTexts(t *testing.T) {
	q := newQuietTexts()
	a := []byte("SELECT * FROM t WHERE id = $1")
	q.add(a)
	if q.has(a) {
		t.Fatal("kept at the first sighting")
	}
	q.add(a)
	if !q.has(a) || q.Len() != 1 {
		t.Fatalf("not kept at the second sighting (%d kept)", q.Len())
	}
	big := bytes.Repeat([]byte("x"), maxQuietText+1)
	q.add(big)
	q.add(big)
	if q.has(big) {
		t.Fatal("a text over maxQuietText was kept")
	}
	for i := 0; q.Len() < maxQuietTexts; i++ {
		s := []byte(fmt.Sprintf("SELECT %d", i))
		q.add(s)
		q.add(s)
	}
	if !q.has(a) {
		t.Fatal("a lost before the set was full")
	}
	b := []byte("SELECT 'one more'")
	q.add(b)
	q.add(b) // the set is full: it starts again, b alone in it
	if q.Len() != 1 || !q.has(b) || q.has(a) {
		t.Fatalf("after the set filled: %d kept, b kept %v, a kept %v; want b alone", q.Len(), q.has(b), q.has(a))
	}
	// a was seen twice before: after the reset its first sighting is a
	// first again (unless its doorkeeper bit is b's, set since).
	if quietBit(q, a) != quietBit(q, b) {
		q.add(a)
		if q.has(a) {
			t.Fatal("the doorkeeper was not cleared with the set")
		}
	}
}

// quietBit is the doorkeeper bit of text in q.
func quietBit(q *quietTexts, text []byte) uint64 {
	return maphash.Bytes(q.seed, text) % quietSeenBits
}
