package router

import (
	"errors"
	"fmt"

	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// unsupported returns a 0A000 error: the proxy cannot run the statement
// correctly across shards. hint says what the client can do instead.
func unsupported(hint, format string, args ...any) *wire.Error {
	e := wire.Errorf(wire.FeatureNotSupported, format, args...)
	e.Hint = hint
	return e
}

const (
	hintOneShard = "Constrain the sharding key to one shard, or route the statement with /* shard: N */ or SET shardgate.shard."
	hintJoin     = "Join sharded tables on their sharding keys, or constrain every sharded table to the same single shard."
	hintTemp     = "A temporary table lives in one server session. Use a regular table, or route the statements that use it to one shard with /* shard: N */ or SET shardgate.shard."
)

// keyError turns a sharding key that PostgreSQL would reject into the
// ErrorResponse PostgreSQL would send.
func keyError(err error) error {
	var ke *sharding.KeyError
	if !errors.As(err, &ke) {
		return wire.Errorf(wire.InternalError, "router: %v", err)
	}
	code := wire.InvalidTextRepresentation
	switch {
	case errors.Is(err, sharding.ErrRange):
		code = wire.NumericValueOutOfRange
	case errors.Is(err, sharding.ErrBinary):
		code = wire.InvalidBinaryRepresentation
	}
	return wire.Errorf(code, "%s", ke.Error())
}

// noShardError reports a key that a list or range rule maps to no shard, as
// PostgreSQL reports a row that fits no partition.
func noShardError(k *keyFunc, key sharding.Key, err error) error {
	if errors.Is(err, sharding.ErrKeyType) {
		return wire.Errorf(wire.FeatureNotSupported, "router: %s: %v", k.desc, err)
	}
	if !errors.Is(err, sharding.ErrNoShard) {
		return keyError(err)
	}
	e := wire.Errorf(wire.CheckViolation, "no shard of %s holds sharding key %s", k.desc, key)
	e.Detail = fmt.Sprintf("The %s mapping of column %q has no entry and no default_shard for this value.", k.function, k.column)
	return e
}
