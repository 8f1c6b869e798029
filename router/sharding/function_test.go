package sharding

import (
	"errors"
	"strings"
	"testing"
)

func key(t *testing.T, typ Type, s string) Key {
	t.Helper()
	k, err := ParseKey(typ, s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ptr[T any](v T) *T { return &v }

// Function must stay implementable by every rule.
var _ = []Function{Hash{}, &Hash{}, &List{}, &Range{}}

func TestHash(t *testing.T) {
	h := Hash{Type: Bigint, Shards: 4}
	if got, err := h.Shard(Null); err != nil || got != 0 {
		t.Errorf("NULL: shard %d, %v; want 0 as PostgreSQL's remainder 0", got, err)
	}
	// Integer widths route each other, as do text and varchar.
	for _, pair := range [][2]Key{
		{key(t, Bigint, "-7"), key(t, Smallint, "-7")},
		{key(t, Bigint, "123456"), key(t, Integer, "123456")},
	} {
		a, errA := h.Shard(pair[0])
		b, errB := h.Shard(pair[1])
		if errA != nil || errB != nil || a != b {
			t.Errorf("%s %v -> %d, %s %v -> %d", pair[0].Type(), pair[0], a, pair[1].Type(), pair[1], b)
		}
	}
	ht := Hash{Type: Varchar, Shards: 2}
	if got, err := ht.Shard(key(t, Text, "test_value")); err != nil || got != 1 {
		t.Errorf("varchar function, text key: %d, %v; want 1", got, err)
	}
	if _, err := h.Shard(key(t, Text, "42")); !errors.Is(err, ErrKeyType) {
		t.Errorf("text key on bigint hash: %v, want ErrKeyType", err)
	}
	if _, err := (Hash{Type: UUID, Shards: 2}).Shard(key(t, Bigint, "1")); !errors.Is(err, ErrKeyType) {
		t.Errorf("bigint key on uuid hash: %v, want ErrKeyType", err)
	}
	for _, bad := range []Hash{{Type: Bigint, Shards: 0}, {Type: Bigint, Shards: -1}, {Type: 0, Shards: 2}} {
		if _, err := bad.Shard(key(t, Bigint, "1")); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if got, err := (Hash{Type: Text, Shards: 1}).Shard(key(t, Text, "anything")); err != nil || got != 0 {
		t.Errorf("one shard: %d, %v", got, err)
	}
}

func TestList(t *testing.T) {
	l, err := NewList(Bigint, map[string]int{"1": 0, "2": 1, "+3": 2, "-4": 2, "0x10": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"1", 0}, {"2", 1}, {"3", 2}, {"-4", 2}, {"16", 1},
	} {
		if got, err := l.Shard(key(t, Bigint, tc.in)); err != nil || got != tc.want {
			t.Errorf("%s: shard %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	if got, err := l.Shard(key(t, Integer, "2")); err != nil || got != 1 {
		t.Errorf("integer key: %d, %v", got, err)
	}
	if _, err := l.Shard(key(t, Bigint, "5")); !errors.Is(err, ErrNoShard) {
		t.Errorf("unlisted: %v, want ErrNoShard", err)
	}
	if _, err := l.Shard(Null); !errors.Is(err, ErrNoShard) {
		t.Errorf("NULL without default: %v, want ErrNoShard", err)
	}
	if _, err := l.Shard(key(t, Text, "1")); !errors.Is(err, ErrKeyType) {
		t.Errorf("text key: %v, want ErrKeyType", err)
	}

	def := 3
	ld, err := NewList(Text, map[string]int{"eu": 0, "us": 1, "": 2}, &def)
	if err != nil {
		t.Fatal(err)
	}
	def = 9 // the rule keeps its own copy
	for _, tc := range []struct {
		k    Key
		want int
	}{
		{key(t, Text, "eu"), 0}, {key(t, Varchar, "us"), 1}, {key(t, Text, ""), 2},
		{key(t, Text, "EU"), 3}, {key(t, Text, "asia"), 3}, {Null, 3},
	} {
		if got, err := ld.Shard(tc.k); err != nil || got != tc.want {
			t.Errorf("%q: shard %d, %v; want %d", tc.k, got, err, tc.want)
		}
	}

	lu, err := NewList(UUID, map[string]int{
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11":   1,
		"{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}": 1, // the same UUID, the same shard: fine
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := lu.Shard(key(t, UUID, "a0eebc999c0b4ef8bb6d6bb9bd380a11")); err != nil || got != 1 {
		t.Errorf("uuid: %d, %v", got, err)
	}
}

func TestNewListErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     Type
		mapping map[string]int
		def     *int
		want    string
	}{
		{"invalid type", 0, map[string]int{"1": 0}, nil, "invalid type"},
		{"bad value", Bigint, map[string]int{"x": 0}, nil, "invalid input syntax"},
		{"out of range", Smallint, map[string]int{"40000": 0}, nil, "out of range"},
		{"negative shard", Bigint, map[string]int{"1": -1}, nil, "negative shard"},
		{"negative default", Bigint, map[string]int{"1": 0}, ptr(-1), "negative default"},
		{"one value, two shards", Bigint, map[string]int{"7": 0, "+7": 1}, nil, "mapped to shards"},
		{"one uuid, two shards", UUID, map[string]int{
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11": 0,
			"A0EEBC999C0B4EF8BB6D6BB9BD380A11":     1,
		}, nil, "mapped to shards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewList(tc.typ, tc.mapping, tc.def)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewList = %v, %v; want an error containing %q", l, err, tc.want)
			}
		})
	}
}

func TestRange(t *testing.T) {
	r, err := NewRange(Bigint, []Bound{
		{From: ptr("200"), To: nil, Shard: 3},
		{From: ptr("0"), To: ptr("100"), Shard: 0},
		{From: nil, To: ptr("0"), Shard: 2},
		{From: ptr("100"), To: ptr("200"), Shard: 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"-9223372036854775808", 2}, {"-1", 2},
		{"0", 0}, {"99", 0}, // from inclusive
		{"100", 1}, {"199", 1}, // to exclusive
		{"200", 3}, {"9223372036854775807", 3},
	} {
		if got, err := r.Shard(key(t, Bigint, tc.in)); err != nil || got != tc.want {
			t.Errorf("%s: shard %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	// Numeric, not textual, order: 99 < 100 although "99" > "100".
	if got, _ := r.Shard(key(t, Smallint, "99")); got != 0 {
		t.Errorf("smallint 99: shard %d, want 0", got)
	}
	if _, err := r.Shard(Null); !errors.Is(err, ErrNoShard) {
		t.Errorf("NULL: %v, want ErrNoShard", err)
	}
	if _, err := r.Shard(key(t, UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")); !errors.Is(err, ErrKeyType) {
		t.Errorf("uuid key: %v, want ErrKeyType", err)
	}
}

func TestRangeGapsAndDefault(t *testing.T) {
	bounds := []Bound{{From: ptr("0"), To: ptr("10"), Shard: 0}, {From: ptr("20"), To: ptr("30"), Shard: 1}}
	r, err := NewRange(Integer, bounds, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"-1", "10", "15", "19", "30", "1000"} {
		if got, err := r.Shard(key(t, Integer, in)); !errors.Is(err, ErrNoShard) {
			t.Errorf("%s: shard %d, %v; want ErrNoShard", in, got, err)
		}
	}
	rd, err := NewRange(Integer, bounds, ptr(7))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		k    Key
		want int
	}{
		{key(t, Integer, "5"), 0}, {key(t, Integer, "20"), 1}, {key(t, Integer, "10"), 7},
		{key(t, Integer, "-1"), 7}, {key(t, Integer, "30"), 7}, {Null, 7},
	} {
		if got, err := rd.Shard(tc.k); err != nil || got != tc.want {
			t.Errorf("%v: shard %d, %v; want %d", tc.k, got, err, tc.want)
		}
	}
	empty, err := NewRange(Bigint, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := empty.Shard(key(t, Bigint, "1")); !errors.Is(err, ErrNoShard) {
		t.Errorf("no ranges: %v, want ErrNoShard", err)
	}
	all, err := NewRange(Bigint, []Bound{{Shard: 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := all.Shard(key(t, Bigint, "-5")); err != nil || got != 4 {
		t.Errorf("unbounded both ways: %d, %v", got, err)
	}
}

func TestRangeText(t *testing.T) {
	r, err := NewRange(Text, []Bound{
		{From: ptr("a"), To: ptr("m"), Shard: 0},
		{From: ptr("m"), Shard: 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want int // -1: ErrNoShard
	}{
		{"a", 0}, {"apple", 0}, {"lzzz", 0}, {"m", 1}, {"zebra", 1},
		{"é", 1},      // 0xC3 sorts after every ASCII byte
		{"Zebra", -1}, // 'Z' < 'a' bytewise, whatever a locale says
		{"", -1},
	} {
		got, err := r.Shard(key(t, Varchar, tc.in))
		if tc.want < 0 {
			if !errors.Is(err, ErrNoShard) {
				t.Errorf("%q: shard %d, %v; want ErrNoShard", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: shard %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestRangeUUID(t *testing.T) {
	r, err := NewRange(UUID, []Bound{
		{To: ptr("80000000-0000-0000-0000-000000000000"), Shard: 0},
		{From: ptr("80000000000000000000000000000000"), Shard: 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"00000000-0000-0000-0000-000000000000", 0},
		{"7fffffff-ffff-ffff-ffff-ffffffffffff", 0},
		{"80000000-0000-0000-0000-000000000000", 1},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", 1},
	} {
		if got, err := r.Shard(key(t, UUID, tc.in)); err != nil || got != tc.want {
			t.Errorf("%s: shard %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestNewRangeErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		typ    Type
		bounds []Bound
		def    *int
		want   string
	}{
		{"overlap", Bigint, []Bound{{From: ptr("0"), To: ptr("10")}, {From: ptr("5"), To: ptr("15")}}, nil, "ranges 0 and 1 overlap"},
		{"contained", Bigint, []Bound{{From: ptr("0"), To: ptr("100")}, {From: ptr("10"), To: ptr("20")}}, nil, "overlap"},
		{"identical", Bigint, []Bound{{From: ptr("0"), To: ptr("10")}, {From: ptr("0"), To: ptr("10"), Shard: 1}}, nil, "overlap"},
		{"two unbounded starts", Bigint, []Bound{{To: ptr("5")}, {To: ptr("3")}}, nil, "overlap"},
		{"two unbounded ends", Bigint, []Bound{{From: ptr("5")}, {From: ptr("3")}}, nil, "overlap"},
		{"unbounded end swallows", Bigint, []Bound{{From: ptr("100"), To: ptr("200")}, {From: ptr("0")}}, nil, "ranges 0 and 1 overlap"},
		{"everything and more", Bigint, []Bound{{}, {From: ptr("1"), To: ptr("2")}}, nil, "overlap"},
		{"text overlap", Text, []Bound{{From: ptr("a"), To: ptr("n")}, {From: ptr("m"), To: ptr("z")}}, nil, "overlap"},
		{"empty", Bigint, []Bound{{From: ptr("5"), To: ptr("5")}}, nil, "empty range"},
		{"inverted", Bigint, []Bound{{From: ptr("10"), To: ptr("5")}}, nil, "empty range"},
		{"numeric order", Bigint, []Bound{{From: ptr("9"), To: ptr("10")}}, ptr(0), ""},
		{"bad from", Bigint, []Bound{{From: ptr("x")}}, nil, "from: invalid input syntax"},
		{"bad to", UUID, []Bound{{To: ptr("x")}}, nil, "to: invalid input syntax"},
		{"out of range", Smallint, []Bound{{From: ptr("0"), To: ptr("40000")}}, nil, "out of range"},
		{"negative shard", Bigint, []Bound{{From: ptr("0"), Shard: -2}}, nil, "negative shard"},
		{"negative default", Bigint, nil, ptr(-1), "negative default"},
		{"invalid type", 0, nil, nil, "invalid type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRange(tc.typ, tc.bounds, tc.def)
			if tc.want == "" {
				if err != nil {
					t.Errorf("NewRange: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRange = %v, %v; want an error containing %q", r, err, tc.want)
			}
		})
	}
	// Touching ranges do not overlap: to is exclusive.
	if _, err := NewRange(Bigint, []Bound{{From: ptr("10"), To: ptr("20")}, {To: ptr("10")}, {From: ptr("20")}}, nil); err != nil {
		t.Errorf("touching ranges: %v", err)
	}
}

func TestNoShardError(t *testing.T) {
	l, _ := NewList(Bigint, map[string]int{"1": 0}, nil)
	_, err := l.Shard(key(t, Bigint, "42"))
	if want := "sharding: bigint key 42: no shard matches the key"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
