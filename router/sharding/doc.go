// Package sharding holds shardgate's sharding functions: pure code that maps
// a sharding key to a shard number. It imports nothing else from shardgate
// (deps_test.go), so that the router, COPY splitting and resharding all
// compute shards the same way, and it does no I/O.
//
// # Keys and rules
//
// A Key is one typed value of a sharding key column, or the Null key. Type
// lists the column types a rule may have (smallint, integer, bigint, text,
// varchar, uuid) and groups them into families: the integer types route
// each other, as do text and varchar. ParseKey reads a key's text form and
// DecodeBinaryKey its binary form, as a Bind parameter or a binary COPY
// field carries it. A Function is one rule: Hash, List (NewList) or Range
// (NewRange, from Bounds). Shard fails with ErrKeyType for a key of another
// family than the rule and with ErrNoShard when a List or Range maps
// nothing to the key and has no default; Hash maps every key of its family.
//
// # Compatibility guarantee
//
// Hash sharding places every key exactly where PostgreSQL's own hash
// partitioning would: for a key column of type T, shard r of N holds the
// rows that a table PARTITION BY HASH on a T column keeps in its partition
// with MODULUS N, REMAINDER r, which is what satisfies_hash_partition(parent,
// N, r, key) accepts. Shards therefore interoperate with native hash
// partitions and postgres_fdw, and a shard's data can be checked or moved
// with plain SQL. The guarantee is bit for bit and is tested against vectors
// generated from a real server (testdata/hash_vectors.json, rebuilt by
// TestRegenerateHashVectors).
//
// The computation, and the PostgreSQL sources it mirrors:
//
//   - Every key is hashed by its type's extended hash support function with
//     the seed HASH_PARTITION_SEED, 0x7A5B22367996DCFD
//     (src/include/catalog/partition.h).
//   - smallint, integer and bigint: hashint8extended of the value widened to
//     int64, which equals hashint2extended and hashint4extended
//     (src/backend/access/hash/hashfunc.c). See HashInt64.
//   - text and varchar: hashtextextended (src/backend/utils/adt/varlena.c),
//     which for a deterministic collation is hash_bytes_extended over the
//     value's bytes. See HashText.
//   - uuid: uuid_hash_extended (src/backend/utils/adt/uuid.c),
//     hash_bytes_extended over the 16 bytes. See HashUUID.
//   - hash_bytes_extended and hash_bytes_uint32_extended are Bob Jenkins'
//     lookup3 with PostgreSQL's constants (src/common/hashfn.c).
//   - The row hash starts at 0 and folds in the hash of each non-NULL key
//     column with hash_combine64 (compute_partition_hash_value in
//     src/backend/partitioning/partbounds.c, hash_combine64 in
//     src/include/common/hashfn.h). See Combine.
//   - The remainder is the row hash modulo N, as unsigned 64-bit integers.
//     See Partition.
//
// NULL keys are skipped by the combine, so a NULL single-column key has row
// hash 0 and lands in remainder 0; Hash routes it to shard 0 likewise.
//
// The guarantee does not extend to char(n)/bpchar (which trims trailing
// spaces), to nondeterministic ICU collations (which hash a sort key), nor to
// big-endian servers (whose lookup3 reads words in the other byte order and so
// hashes text and uuid differently).
//
// Parsing follows PostgreSQL's input functions too, so that a key the proxy
// accepts is one the server accepts: ParseKey checks integer ranges per type
// as int2in/int4in/int8in do, and ParseUUID accepts the spellings uuid_in
// accepts. Errors carry the SQLSTATE class PostgreSQL would report (ErrSyntax,
// ErrRange, ErrBinary).
//
// List and Range map chosen values or half-open ranges of values to shards,
// with an optional default shard, which also takes NULL. They have no
// PostgreSQL counterpart to match beyond ordering: integers compare
// numerically, text bytewise (the C collation) and UUIDs bytewise. NewList
// rejects two spellings of one key mapped to different shards, NewRange
// overlapping and empty ranges.
//
// # Files
//
// hash.go holds the hash functions, key.go the types and keys, uuid.go UUID
// parsing, function.go the rules. FuzzParseKey and FuzzDecodeBinaryKey feed
// the decoders arbitrary input, with a corpus in testdata/fuzz.
package sharding
