package sharding

import "math/bits"

// partitionSeed is HASH_PARTITION_SEED from PostgreSQL's
// src/include/catalog/partition.h. compute_partition_hash_value passes it to
// every key column's extended hash support function.
const partitionSeed uint64 = 0x7A5B22367996DCFD

// combineConstant is the additive constant of hash_combine64 in
// src/include/common/hashfn.h.
const combineConstant uint64 = 0x49a0f4dd15e5a8e3

// HashInt64 returns hashint8extended(v, HASH_PARTITION_SEED): the hash
// PostgreSQL computes for a bigint partition key. smallint and integer keys
// hash to the same value once widened to int64, because hashint8extended
// folds the high half into the low half so that every value that fits in 32
// bits hashes like hashint4extended (src/backend/access/hash/hashfunc.c).
func HashInt64(v int64) uint64 {
	lo := uint32(v)
	hi := uint32(v >> 32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return hashUint32(lo, partitionSeed)
}

// HashBytes returns hash_bytes_extended(b, len(b), HASH_PARTITION_SEED), the
// 64-bit Jenkins lookup3 hash of src/common/hashfn.c as computed on a
// little-endian machine.
func HashBytes(b []byte) uint64 {
	return hashBytes(b, partitionSeed)
}

// HashText returns the hash PostgreSQL computes for a text or varchar
// partition key with a deterministic collation: hashtextextended, which is
// hash_bytes_extended over the value's bytes in the database encoding. It does
// not allocate.
func HashText(s string) uint64 {
	return hashBytes(s, partitionSeed)
}

// HashUUID returns uuid_hash_extended(u, HASH_PARTITION_SEED): hash_bytes_extended
// over the 16 bytes in network (RFC 9562) order.
func HashUUID(u [16]byte) uint64 {
	return hashBytes(u[:], partitionSeed)
}

// Combine is PostgreSQL's hash_combine64. compute_partition_hash_value starts
// from a row hash of 0 and combines the hash of every non-NULL key column in
// turn, so a single-column key has row hash Combine(0, h).
func Combine(a, b uint64) uint64 {
	return a ^ (b + combineConstant + (a << 54) + (a >> 7))
}

// Partition returns the remainder a hash-partitioned table with modulus n
// assigns to rowHash: rowHash mod n in unsigned 64-bit arithmetic, as in
// satisfies_hash_partition and get_partition_for_tuple. n must be positive;
// Partition returns 0 otherwise rather than dividing by zero.
func Partition(rowHash uint64, n int) int {
	if n <= 0 {
		return 0
	}
	return int(rowHash % uint64(n))
}

// mix is the mix() macro of hashfn.c.
func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

// final is the final() macro of hashfn.c.
func final(a, b, c uint32) (uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return b, c
}

// initial is the starting state of every lookup3 hash: 0x9e3779b9 plus the
// key length plus PostgreSQL's own constant 3923095.
func initial(length uint32, seed uint64) (uint32, uint32, uint32) {
	a := 0x9e3779b9 + length + 3923095
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	return a, b, c
}

// hashUint32 is hash_bytes_uint32_extended.
func hashUint32(k uint32, seed uint64) uint64 {
	a, b, c := initial(4, seed)
	a += k
	b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// hashBytes is hash_bytes_extended for the little-endian byte order of the
// machines PostgreSQL runs on in practice (x86-64, arm64). Its aligned and
// unaligned code paths agree on such machines, and both are mirrored here by
// reading each 32-bit word little-endian. It is generic so that HashText can
// hash a string without copying it into a []byte.
func hashBytes[T ~string | ~[]byte](k T, seed uint64) uint64 {
	n := len(k)
	a, b, c := initial(uint32(n), seed)
	i := 0
	for ; n-i >= 12; i += 12 {
		a += le32(k, i)
		b += le32(k, i+4)
		c += le32(k, i+8)
		a, b, c = mix(a, b, c)
	}
	// The last 11 bytes. The lowest byte of c is reserved for the length in
	// the original lookup3, so the tail bytes 8..10 start at bit 8.
	switch n - i {
	case 11:
		c += uint32(k[i+10]) << 24
		fallthrough
	case 10:
		c += uint32(k[i+9]) << 16
		fallthrough
	case 9:
		c += uint32(k[i+8]) << 8
		fallthrough
	case 8:
		b += le32(k, i+4)
		a += le32(k, i)
	case 7:
		b += uint32(k[i+6]) << 16
		fallthrough
	case 6:
		b += uint32(k[i+5]) << 8
		fallthrough
	case 5:
		b += uint32(k[i+4])
		fallthrough
	case 4:
		a += le32(k, i)
	case 3:
		a += uint32(k[i+2]) << 16
		fallthrough
	case 2:
		a += uint32(k[i+1]) << 8
		fallthrough
	case 1:
		a += uint32(k[i])
	}
	b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// le32 reads the little-endian 32-bit word at k[i:i+4].
func le32[T ~string | ~[]byte](k T, i int) uint32 {
	return uint32(k[i]) | uint32(k[i+1])<<8 | uint32(k[i+2])<<16 | uint32(k[i+3])<<24
}
