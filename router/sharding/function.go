package sharding

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Function is one sharding rule: it maps a key to a shard number.
type Function interface {
	// Shard returns the shard for k. It fails with ErrNoShard when the rule
	// maps no shard to k, and with ErrKeyType when k is of another type family
	// than the rule.
	Shard(k Key) (int, error)
}

var (
	// ErrNoShard means a list or range rule has no mapping and no default for
	// a key. PostgreSQL's equivalent, a row that fits no partition, is
	// check_violation (23514); a malformed shard hint is 22023.
	ErrNoShard = errors.New("no shard matches the key")
	// ErrKeyType means a key's type cannot be routed by a rule: an integer key
	// for a text rule, say. Integer types route each other, as do text and
	// varchar.
	ErrKeyType = errors.New("key type does not match the sharding function")
)

// Hash is PostgreSQL hash partitioning over Shards shards: shard r holds the
// keys that a table PARTITION BY HASH on a column of Type would place in the
// partition with MODULUS Shards, REMAINDER r. A NULL key goes to shard 0, as
// PostgreSQL leaves the row hash of an all-NULL key at 0.
type Hash struct {
	Type   Type
	Shards int
}

// Shard returns the remainder PostgreSQL's satisfies_hash_partition accepts
// for k. It does not allocate unless it fails.
func (h Hash) Shard(k Key) (int, error) {
	if h.Shards < 1 {
		return 0, fmt.Errorf("sharding: hash over %d shards", h.Shards)
	}
	if err := check(h.Type, k); err != nil {
		return 0, err
	}
	if k.IsNull() {
		return 0, nil
	}
	return Partition(Combine(0, k.hash()), h.Shards), nil
}

// List maps individual key values to shards. A key that is not listed, and
// NULL, go to Default when it is set and fail with ErrNoShard otherwise.
type List struct {
	Type    Type
	Default *int
	shards  map[value]int
}

// NewList builds a List from the text form of each value, parsed as ParseKey
// does, to its shard. Values that parse to the same key ("7" and "+7", two
// spellings of one UUID) must map to the same shard.
func NewList(t Type, mapping map[string]int, def *int) (*List, error) {
	if t.family() == noFamily {
		return nil, fmt.Errorf("sharding: list: invalid type %s", t)
	}
	def, err := checkDefault(def)
	if err != nil {
		return nil, fmt.Errorf("sharding: list: %w", err)
	}
	texts := make([]string, 0, len(mapping))
	for text := range mapping {
		texts = append(texts, text)
	}
	slices.Sort(texts) // for deterministic errors
	l := &List{Type: t, Default: def, shards: make(map[value]int, len(mapping))}
	for _, text := range texts {
		shard := mapping[text]
		if shard < 0 {
			return nil, fmt.Errorf("sharding: list value %q: negative shard %d", text, shard)
		}
		k, err := ParseKey(t, text)
		if err != nil {
			return nil, fmt.Errorf("sharding: list value %q: %w", text, err)
		}
		if prev, ok := l.shards[k.v]; ok && prev != shard {
			return nil, fmt.Errorf("sharding: list value %q: mapped to shards %d and %d", text, prev, shard)
		}
		l.shards[k.v] = shard
	}
	return l, nil
}

// Shard returns the shard listed for k, or the default.
func (l *List) Shard(k Key) (int, error) {
	if err := check(l.Type, k); err != nil {
		return 0, err
	}
	if !k.IsNull() {
		if shard, ok := l.shards[k.v]; ok {
			return shard, nil
		}
	}
	return fallback(l.Default, k)
}

// Bound is one range of a Range rule in text form: keys k with From <= k < To
// go to Shard. A nil From or To leaves that side unbounded.
type Bound struct {
	From, To *string
	Shard    int
}

// Range maps half-open ranges of keys to shards. Integers compare
// numerically, text and varchar bytewise (as the C collation does), and UUIDs
// bytewise (as PostgreSQL's uuid ordering does). A key outside every range,
// and NULL, go to Default when it is set and fail with ErrNoShard otherwise.
type Range struct {
	Type    Type
	Default *int
	spans   []span // sorted by from, not overlapping
}

// span is a parsed Bound. A side whose has flag is false is unbounded.
type span struct {
	from, to       value
	hasFrom, hasTo bool
	shard          int
	index          int // the position of the Bound, for error messages
}

// NewRange builds a Range from bounds in any order. It rejects ranges that
// overlap and ranges that are empty (From >= To).
func NewRange(t Type, bounds []Bound, def *int) (*Range, error) {
	fam := t.family()
	if fam == noFamily {
		return nil, fmt.Errorf("sharding: range: invalid type %s", t)
	}
	def, err := checkDefault(def)
	if err != nil {
		return nil, fmt.Errorf("sharding: range: %w", err)
	}
	r := &Range{Type: t, Default: def, spans: make([]span, 0, len(bounds))}
	for i, b := range bounds {
		if b.Shard < 0 {
			return nil, fmt.Errorf("sharding: range %d: negative shard %d", i, b.Shard)
		}
		s := span{shard: b.Shard, index: i}
		if b.From != nil {
			k, err := ParseKey(t, *b.From)
			if err != nil {
				return nil, fmt.Errorf("sharding: range %d: from: %w", i, err)
			}
			s.from, s.hasFrom = k.v, true
		}
		if b.To != nil {
			k, err := ParseKey(t, *b.To)
			if err != nil {
				return nil, fmt.Errorf("sharding: range %d: to: %w", i, err)
			}
			s.to, s.hasTo = k.v, true
		}
		if s.hasFrom && s.hasTo && compare(fam, s.from, s.to) >= 0 {
			return nil, fmt.Errorf("sharding: range %d: empty range [%s, %s)", i, *b.From, *b.To)
		}
		r.spans = append(r.spans, s)
	}
	// Sort by start, an unbounded start first; then each span must end no
	// later than the next one starts.
	slices.SortFunc(r.spans, func(a, b span) int {
		if !a.hasFrom || !b.hasFrom {
			return cmp.Compare(boolInt(a.hasFrom), boolInt(b.hasFrom))
		}
		return compare(fam, a.from, b.from)
	})
	for i := 1; i < len(r.spans); i++ {
		prev, cur := r.spans[i-1], r.spans[i]
		if !prev.hasTo || !cur.hasFrom || compare(fam, prev.to, cur.from) > 0 {
			lo, hi := min(prev.index, cur.index), max(prev.index, cur.index)
			return nil, fmt.Errorf("sharding: ranges %d and %d overlap", lo, hi)
		}
	}
	return r, nil
}

// Shard returns the shard of the range holding k, or the default.
func (r *Range) Shard(k Key) (int, error) {
	if err := check(r.Type, k); err != nil {
		return 0, err
	}
	if k.IsNull() {
		return fallback(r.Default, k)
	}
	fam := r.Type.family()
	// Find the first span starting after k; the one before it is the only
	// span that can hold k. An unbounded start sorts first and never starts
	// after k.
	i := sort.Search(len(r.spans), func(i int) bool {
		s := &r.spans[i]
		return s.hasFrom && compare(fam, k.v, s.from) < 0
	})
	if i > 0 {
		if s := &r.spans[i-1]; !s.hasTo || compare(fam, k.v, s.to) < 0 {
			return s.shard, nil
		}
	}
	return fallback(r.Default, k)
}

// check reports whether a rule of type t can route k.
func check(t Type, k Key) error {
	if t.family() == noFamily {
		return fmt.Errorf("sharding: invalid function type %s", t)
	}
	if !k.IsNull() && k.typ.family() != t.family() {
		return fmt.Errorf("sharding: %s key for a %s function: %w", k.typ, t, ErrKeyType)
	}
	return nil
}

func fallback(def *int, k Key) (int, error) {
	if def != nil {
		return *def, nil
	}
	if k.IsNull() {
		return 0, fmt.Errorf("sharding: NULL key: %w", ErrNoShard)
	}
	return 0, fmt.Errorf("sharding: %s key %s: %w", k.typ, k, ErrNoShard)
}

// checkDefault validates a default shard and copies it, so that the caller
// cannot change a rule after building it.
func checkDefault(def *int) (*int, error) {
	if def == nil {
		return nil, nil
	}
	if *def < 0 {
		return nil, fmt.Errorf("negative default shard %d", *def)
	}
	d := *def
	return &d, nil
}

// compare orders two values of one family.
func compare(fam family, a, b value) int {
	switch fam {
	case intFamily:
		return cmp.Compare(a.i, b.i)
	case textFamily:
		return strings.Compare(a.s, b.s)
	}
	return bytes.Compare(a.u[:], b.u[:])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
