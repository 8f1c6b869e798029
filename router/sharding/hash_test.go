package sharding

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestHashVectors checks every vector PostgreSQL produced (see
// TestRegenerateHashVectors): the per-type hash, and the remainder for every
// modulus through both Hash.Shard and the bare functions.
func TestHashVectors(t *testing.T) {
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", vectorsPath, err)
	}
	if !slices.Equal(f.Moduli, vectorModuli) {
		t.Fatalf("moduli %v, want %v", f.Moduli, vectorModuli)
	}
	perType := map[string]int{}
	for _, v := range f.Vectors {
		perType[v.Type]++
		name := v.Type + "/NULL"
		if v.Key != nil {
			name = v.Type + "/" + strconv.Quote(*v.Key)
		}
		t.Run(name, func(t *testing.T) {
			typ, err := ParseType(v.Type)
			if err != nil {
				t.Fatal(err)
			}
			k := Null
			if v.Key != nil {
				if k, err = ParseKey(typ, *v.Key); err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprintf("%016x", k.hash()); got != v.Hash {
					t.Errorf("hash = %s, PostgreSQL says %s", got, v.Hash)
				}
				if got := fmt.Sprintf("%016x", bareHash(t, typ, *v.Key)); got != v.Hash {
					t.Errorf("bare hash = %s, PostgreSQL says %s", got, v.Hash)
				}
			}
			for j, n := range f.Moduli {
				got, err := Hash{Type: typ, Shards: n}.Shard(k)
				if err != nil {
					t.Fatal(err)
				}
				if want := v.Remainders[j]; got != want {
					t.Errorf("modulus %d: shard %d, PostgreSQL says %d", n, got, want)
				}
			}
		})
	}
	for _, vt := range vectorTypes {
		if perType[vt.name] < 10 {
			t.Errorf("%s has %d vectors; regenerate %s", vt.name, perType[vt.name], vectorsPath)
		}
	}
}

// bareHash hashes key with the exported per-type function, bypassing Key.
func bareHash(t *testing.T, typ Type, key string) uint64 {
	t.Helper()
	switch typ {
	case Bigint, Integer, Smallint:
		i, err := strconv.ParseInt(key, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return HashInt64(i)
	case Text, Varchar:
		if h := HashBytes([]byte(key)); h != HashText(key) {
			t.Fatalf("HashBytes %x != HashText %x", h, HashText(key))
		}
		return HashText(key)
	}
	u, err := ParseUUID(key)
	if err != nil {
		t.Fatal(err)
	}
	return HashUUID(u)
}

// TestIntermediates pins the intermediate values PEERS.md quotes, which
// PostgreSQL's hashint8extended/hashtextextended/uuid_hash_extended produce.
func TestIntermediates(t *testing.T) {
	ones := [16]byte{}
	for i := range ones {
		ones[i] = 0x11
	}
	for _, tc := range []struct {
		name          string
		hash, rowHash uint64
	}{
		{"int8 42", HashInt64(42), 0xafd30d9a116a5a62},
		{"int8 1", HashInt64(1), 0x9c7715e2970a8fb8},
		{"text test_value", HashText("test_value"), 0xe9e7b7f8421c2955},
		{"uuid 1111…", HashUUID(ones), 0x4dfb780febabad9c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Combine(0, tc.hash); got != tc.rowHash {
				t.Errorf("Combine(0, %#x) = %#x, want %#x", tc.hash, got, tc.rowHash)
			}
		})
	}
	if got := HashInt64(42); got != 0x663218bcfb84b17f {
		t.Errorf("HashInt64(42) = %#x", got)
	}
}

func TestCombine(t *testing.T) {
	// A second column folds in with the shifted first hash, so order matters.
	a, b := HashInt64(1), HashText("x")
	if Combine(Combine(0, a), b) == Combine(Combine(0, b), a) {
		t.Error("Combine is symmetric; hash_combine64 is not")
	}
	if got, want := Combine(0, 0), combineConstant; got != want {
		t.Errorf("Combine(0, 0) = %#x, want %#x", got, want)
	}
}

func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		rowHash uint64
		n, want int
	}{
		{0, 4, 0},
		{^uint64(0), 2, 1}, // unsigned: 2^64-1 is odd
		{^uint64(0), 3, 0}, // 2^64-1 = 3 * 6148914691236517205
		{^uint64(0), 10, 5},
		{1 << 63, 7, int((uint64(1) << 63) % 7)},
		{12345, 1, 0},
		{12345, 0, 0},
		{12345, -3, 0},
	} {
		if got := Partition(tc.rowHash, tc.n); got != tc.want {
			t.Errorf("Partition(%#x, %d) = %d, want %d", tc.rowHash, tc.n, got, tc.want)
		}
	}
}

// TestHashInt64Widening checks that narrow values hash alike however they
// are widened, which is why one function serves int2, int4 and int8.
func TestHashInt64Widening(t *testing.T) {
	for _, v := range []int32{0, 1, -1, 42, -42, 1 << 30, -(1 << 30), -2147483648, 2147483647} {
		if got, want := HashInt64(int64(v)), hashUint32(uint32(v), partitionSeed); got != want {
			t.Errorf("HashInt64(%d) = %#x, hashint4extended = %#x", v, got, want)
		}
	}
}

// TestAllocations keeps the hot path free of allocations: hashing, parsing
// an integer, and every rule's Shard when it finds a shard.
func TestAllocations(t *testing.T) {
	s := "tenant_1234567890_abcdef"
	h := Hash{Type: Text, Shards: 8}
	k, err := ParseKey(Text, s)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewList(Text, map[string]int{s: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	from := "t"
	r, err := NewRange(Text, []Bound{{To: &from}, {From: &from, Shard: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	shard := func(f Function) func() {
		return func() {
			if _, err := f.Shard(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, f := range map[string]func(){
		"List.Shard":  shard(l),
		"Range.Shard": shard(r),
		"HashInt64":   func() { HashInt64(42) },
		"HashText":    func() { HashText(s) },
		"Hash.Shard": func() {
			if _, err := h.Shard(k); err != nil {
				t.Fatal(err)
			}
		},
		"ParseKey bigint": func() {
			if _, err := ParseKey(Bigint, "-9223372036854775808"); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
}

func BenchmarkHashInt64(b *testing.B) {
	b.ReportAllocs()
	var sink uint64
	for i := 0; b.Loop(); i++ {
		sink += HashInt64(int64(i))
	}
	_ = sink
}

func BenchmarkHashText(b *testing.B) {
	for _, n := range []int{8, 36, 256} {
		s := string(make([]byte, n))
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			var sink uint64
			for b.Loop() {
				sink += HashText(s)
			}
			_ = sink
		})
	}
}

func BenchmarkHashShard(b *testing.B) {
	h := Hash{Type: Bigint, Shards: 16}
	k, _ := ParseKey(Bigint, "1234567890")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Shard(k); err != nil {
			b.Fatal(err)
		}
	}
}
