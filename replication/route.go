package replication

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/router/sharding"
)

// placement says how the rows of one table spread over the destination's
// shards.
type placement uint8

const (
	// placeOmni: every destination shard holds every row. Exactly one
	// source shard (shard 0) owns an omni table, for the copy and for the
	// stream; the others skip it.
	placeOmni placement = iota + 1
	// placeSharded: each row goes to the shard its key column names.
	placeSharded
	// placePinned: every row goes to one shard (a sharded schema).
	placePinned
)

func (p placement) String() string {
	switch p {
	case placeOmni:
		return "omni"
	case placeSharded:
		return "sharded"
	case placePinned:
		return "pinned"
	}
	return fmt.Sprintf("placement(%d)", uint8(p))
}

// rule is where one table's rows go on the destination.
type rule struct {
	place  placement
	column string            // placeSharded: the key column
	typ    sharding.Type     // placeSharded: the key's type
	fn     sharding.Function // placeSharded: over the destination's shards
	shard  int               // placePinned
}

// ruleFor returns the destination rule of table schema.name, whose columns
// are cols. It mirrors router.classify: sharded schemas first, then a
// sharded_tables entry naming the table (qualified, then unqualified), then
// omni_tables, then column-only entries; anything else is omni.
func ruleFor(db *config.Database, schema, name string, cols []string) (rule, error) {
	for _, s := range db.ShardedSchemas {
		if s.Schema == schema {
			if s.Shard < 0 || s.Shard >= len(db.Shards) {
				return rule{}, fmt.Errorf("sharded schema %q: shard %d does not exist", schema, s.Shard)
			}
			return rule{place: placePinned, shard: s.Shard}, nil
		}
	}
	find := func(match func(t *config.ShardedTable) bool) *config.ShardedTable {
		for i := range db.ShardedTables {
			if t := &db.ShardedTables[i]; match(t) {
				return t
			}
		}
		return nil
	}
	t := find(func(t *config.ShardedTable) bool { return t.Table == schema+"."+name })
	if t == nil {
		t = find(func(t *config.ShardedTable) bool { return t.Table == name })
	}
	if t == nil {
		for _, o := range db.OmniTables {
			if o == name || o == schema+"."+name {
				return rule{place: placeOmni}, nil
			}
		}
		t = find(func(t *config.ShardedTable) bool {
			return t.Table == "" && containsString(cols, t.Column)
		})
	}
	if t == nil {
		return rule{place: placeOmni}, nil
	}
	fn, typ, err := shardFunction(t, len(db.Shards))
	if err != nil {
		return rule{}, fmt.Errorf("table %s.%s: %w", schema, name, err)
	}
	if !containsString(cols, t.Column) {
		return rule{}, fmt.Errorf("table %s.%s: sharding column %q does not exist", schema, name, t.Column)
	}
	return rule{place: placeSharded, column: t.Column, typ: typ, fn: fn}, nil
}

// shardFunction builds the sharding function of a sharded_tables entry over
// n shards, as router.newKeyFunc does.
func shardFunction(t *config.ShardedTable, n int) (sharding.Function, sharding.Type, error) {
	typ, err := sharding.ParseType(t.Type)
	if err != nil {
		return nil, 0, err
	}
	switch strings.ToLower(t.Function) {
	case "", "hash":
		return sharding.Hash{Type: typ, Shards: n}, typ, nil
	case "list":
		m := map[string]int{}
		for _, e := range t.Mapping {
			for _, v := range e.Values {
				m[v] = e.Shard
			}
		}
		l, err := sharding.NewList(typ, m, t.DefaultShard)
		return l, typ, err
	case "range":
		bounds := make([]sharding.Bound, len(t.Mapping))
		for i, e := range t.Mapping {
			bounds[i] = sharding.Bound{From: e.From, To: e.To, Shard: e.Shard}
		}
		r, err := sharding.NewRange(typ, bounds, t.DefaultShard)
		return r, typ, err
	}
	return nil, 0, fmt.Errorf("unknown sharding function %q", t.Function)
}

// shardOfBinary returns the destination shard of a sharded row whose key
// column holds b in binary format (nil: NULL).
func (r *rule) shardOfBinary(b []byte) (int, error) {
	k := sharding.Null
	if b != nil {
		var err error
		if k, err = sharding.DecodeBinaryKey(r.typ, b); err != nil {
			return 0, err
		}
	}
	return r.fn.Shard(k)
}

// shardOfText returns the destination shard of a sharded row whose key
// column holds s in text format (null: NULL).
func (r *rule) shardOfText(s []byte, null bool) (int, error) {
	k := sharding.Null
	if !null {
		var err error
		if k, err = r.key(s); err != nil {
			return 0, err
		}
	}
	return r.fn.Shard(k)
}

// key parses the text value s of the rule's key column. Integers as
// PostgreSQL prints them (an optional minus sign and up to 18 decimal
// digits) are parsed here, without the string sharding.ParseKey takes,
// which would cost an allocation per routed row; everything else goes
// through ParseKey.
func (r *rule) key(s []byte) (sharding.Key, error) {
	switch r.typ {
	case sharding.Bigint, sharding.Integer, sharding.Smallint:
		if i, ok := decimal(s); ok {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(i))
			return sharding.DecodeBinaryKey(r.typ, b[:]) // range-checks i for the type
		}
	}
	return sharding.ParseKey(r.typ, string(s))
}

// decimal parses s as an optional minus sign and 1 to 18 decimal digits,
// which cannot overflow an int64; ok is false for anything else.
func decimal(s []byte) (i int64, ok bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int64(c-'0')
	}
	if neg {
		i = -i
	}
	return i, true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
