package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	shardingTypes     = []string{"bigint", "integer", "smallint", "text", "varchar", "uuid"}
	shardingFunctions = []string{"hash", "list", "range"}
)

// sharding checks a database's sharded_tables, sharded_schemas and
// omni_tables against each other and its number of shards.
func (v *validator) sharding(p string, db *Database) {
	nshards := len(db.Shards)
	tp := keyPath(p, "sharded_tables")
	byTable := map[string]int{}  // named tables
	byColumn := map[string]int{} // entries without a table, by column
	for i := range db.ShardedTables {
		t := &db.ShardedTables[i]
		ep := indexPath(tp, i)
		v.required(keyPath(ep, "column"), t.Column, "the column that holds the sharding key")
		if t.Table != "" {
			if j, dup := byTable[t.Table]; dup {
				v.r.at(keyPath(ep, "table"), "table %q is already sharded by sharded_tables[%d]%s; a table has one sharding key", t.Table, j, v.r.seeLine(indexPath(tp, j)))
			} else {
				byTable[t.Table] = i
			}
		} else if t.Column != "" {
			if j, dup := byColumn[t.Column]; dup {
				v.r.at(keyPath(ep, "column"), "column %q is already a sharding key for every table by sharded_tables[%d]%s", t.Column, j, v.r.seeLine(indexPath(tp, j)))
			} else {
				byColumn[t.Column] = i
			}
		}
		v.shardedTable(ep, t, nshards)
	}
	v.schemas(p, db, nshards)
	v.omniTables(p, db, byTable)
}

// shardedTable checks one sharded_tables entry: type, function and the
// mapping the function needs.
func (v *validator) shardedTable(ep string, t *ShardedTable, nshards int) {
	typeOK := v.enum(keyPath(ep, "type"), t.Type, shardingTypes)
	v.shardIndex(keyPath(ep, "default_shard"), t.DefaultShard, nshards)
	if !v.enum(keyPath(ep, "function"), t.Function, shardingFunctions) {
		return
	}
	mp := keyPath(ep, "mapping")
	switch t.Function {
	case "hash":
		if len(t.Mapping) > 0 {
			v.r.at(mp, "function hash takes no mapping; use function list or range to map values to shards")
		}
		if t.DefaultShard != nil {
			v.r.at(keyPath(ep, "default_shard"), "function hash maps every value to a shard; default_shard applies to list and range only")
		}
	case "list", "range":
		if len(t.Mapping) == 0 {
			v.r.missing(mp, "required with function %s", t.Function)
			return
		}
		for k := range t.Mapping {
			m := &t.Mapping[k]
			sp := keyPath(indexPath(mp, k), "shard")
			if v.fromFile && !v.r.pos.isSet(sp) {
				v.r.missing(sp, "required: the shard these values go to")
			} else {
				v.shardIndex(sp, &m.Shard, nshards)
			}
		}
		if !typeOK {
			return // values cannot be checked against an unknown type
		}
		if t.Function == "list" {
			v.listMapping(mp, t)
		} else {
			v.rangeMapping(mp, t)
		}
	}
}

// shardIndex checks that a shard index names one of the database's shards.
// With no shards at all, that is the one error reported.
func (v *validator) shardIndex(path string, shard *int, nshards int) {
	if shard != nil && nshards > 0 && (*shard < 0 || *shard >= nshards) {
		v.r.at(path, "shard %d does not exist: the database has %d shard%s (0 to %d)", *shard, nshards, plural(nshards), nshards-1)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// listMapping checks a list mapping: each entry lists values, and no value
// appears twice.
func (v *validator) listMapping(mp string, t *ShardedTable) {
	seen := map[shardKey]string{} // value → path where it was first listed
	for k := range t.Mapping {
		m := &t.Mapping[k]
		ep := indexPath(mp, k)
		if m.From != nil || m.To != nil {
			v.r.at(ep, "function list maps values; from and to belong to function range")
		}
		if len(m.Values) == 0 {
			v.r.missing(keyPath(ep, "values"), "required: the values that go to shard %d", m.Shard)
		}
		for l, s := range m.Values {
			vp := indexPath(keyPath(ep, "values"), l)
			key, err := parseShardKey(t.Type, s)
			if err != nil {
				v.r.at(vp, "%v", err)
				continue
			}
			if first, dup := seen[key]; dup {
				v.r.at(vp, "value %q is already mapped by mapping%s%s", s, strings.TrimPrefix(first, mp), v.r.seeLine(first))
				continue
			}
			seen[key] = vp
		}
	}
}

// keyRange is one range mapping entry; nil bounds are unbounded.
type keyRange struct {
	from, to *shardKey
	index    int
	path     string
}

// rangeMapping checks a range mapping: each entry has a bound, from < to,
// and no two ranges overlap, so that every value has at most one shard.
func (v *validator) rangeMapping(mp string, t *ShardedTable) {
	var ranges []keyRange
	for k := range t.Mapping {
		m := &t.Mapping[k]
		ep := indexPath(mp, k)
		if len(m.Values) > 0 {
			v.r.at(keyPath(ep, "values"), "function range maps from/to bounds; values belong to function list")
		}
		if m.From == nil && m.To == nil {
			if !v.r.unknownKeys[ep] { // "form:" rather than "from:" is reported as unknown
				v.r.at(ep, "needs from, to or both (use default_shard for values outside every range)")
			}
			continue
		}
		r, ok := keyRange{index: k, path: ep}, true
		for _, b := range []struct {
			name string
			s    *string
			dst  **shardKey
		}{{"from", m.From, &r.from}, {"to", m.To, &r.to}} {
			if b.s == nil {
				continue
			}
			key, err := parseShardKey(t.Type, *b.s)
			if err != nil {
				v.r.at(keyPath(ep, b.name), "%v", err)
				ok = false
				continue
			}
			*b.dst = &key
		}
		if !ok {
			continue
		}
		if r.from != nil && r.to != nil && r.from.compare(*r.to) >= 0 {
			v.r.at(keyPath(ep, "to"), "must be greater than from (%s): from is inclusive, to exclusive", *m.From)
			continue
		}
		ranges = append(ranges, r)
	}
	v.overlaps(ranges)
}

// overlaps reports ranges that overlap an earlier one, once per entry, at
// the entry that comes later in the file. Sorted by lower bound, a range
// overlaps another exactly when it starts below the highest upper bound
// seen so far, which keeps this O(n log n) however long the mapping is.
func (v *validator) overlaps(ranges []keyRange) {
	slices.SortStableFunc(ranges, func(a, b keyRange) int {
		switch {
		case a.from == nil && b.from == nil:
			return 0
		case a.from == nil:
			return -1
		case b.from == nil:
			return 1
		}
		return a.from.compare(*b.from)
	})
	reported := map[int]bool{}
	var reach *keyRange
	for i := range ranges {
		r := &ranges[i]
		if reach != nil && below(r.from, reach.to) {
			later, earlier := r, reach
			if later.index < earlier.index {
				later, earlier = earlier, later
			}
			if !reported[later.index] {
				reported[later.index] = true
				v.r.at(later.path, "overlaps mapping[%d]%s; a value must map to one shard", earlier.index, v.r.seeLine(earlier.path))
			}
		}
		if reach == nil || above(r.to, reach.to) {
			reach = r
		}
	}
}

// above reports whether upper bound a lies above upper bound b; nil is
// unbounded.
func above(a, b *shardKey) bool {
	return a == nil && b != nil || a != nil && b != nil && a.compare(*b) > 0
}

// below reports whether lower bound lo lies below upper bound hi; nil is
// unbounded on either side.
func below(lo, hi *shardKey) bool {
	return lo == nil || hi == nil || lo.compare(*hi) < 0
}

// shardKey is a mapping value in a form that compares like PostgreSQL
// compares values of the sharding type: integers numerically, text and
// varchar bytewise, uuids by their 16 bytes (as their lowercase hex).
type shardKey struct {
	n     int64
	s     string
	isInt bool
}

func (a shardKey) compare(b shardKey) int {
	if a.isInt {
		switch {
		case a.n < b.n:
			return -1
		case a.n > b.n:
			return 1
		}
		return 0
	}
	return strings.Compare(a.s, b.s)
}

// parseShardKey parses s as a value of sharding type typ.
func parseShardKey(typ, s string) (shardKey, error) {
	bits := map[string]int{"smallint": 16, "integer": 32, "bigint": 64}[typ]
	switch {
	case bits > 0:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return shardKey{}, fmt.Errorf("%s is out of range for %s", s, typ)
			}
			return shardKey{}, fmt.Errorf("%q is not a valid %s", s, typ)
		}
		return shardKey{n: n, isInt: true}, nil
	case typ == "uuid":
		u := strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}"))
		u = strings.ReplaceAll(u, "-", "")
		if b, err := hex.DecodeString(u); err != nil || len(b) != 16 {
			return shardKey{}, fmt.Errorf("%q is not a valid uuid", s)
		}
		return shardKey{s: u}, nil
	}
	return shardKey{s: s}, nil
}

// schemas checks sharded_schemas: unique schema names pinned to existing
// shards.
func (v *validator) schemas(p string, db *Database, nshards int) {
	sp := keyPath(p, "sharded_schemas")
	seen := map[string]int{}
	for i := range db.ShardedSchemas {
		s := &db.ShardedSchemas[i]
		ep := indexPath(sp, i)
		if v.required(keyPath(ep, "schema"), s.Schema, "the schema whose tables live on one shard") {
			if j, dup := seen[s.Schema]; dup {
				v.r.at(keyPath(ep, "schema"), "schema %q is already pinned by sharded_schemas[%d]%s", s.Schema, j, v.r.seeLine(indexPath(sp, j)))
			} else {
				seen[s.Schema] = i
			}
		}
		if v.fromFile && !v.r.pos.isSet(keyPath(ep, "shard")) {
			v.r.missing(keyPath(ep, "shard"), "required: the shard that holds schema %q", s.Schema)
		} else {
			v.shardIndex(keyPath(ep, "shard"), &s.Shard, nshards)
		}
	}
}

// omniTables checks omni_tables: named, unique and not sharded.
func (v *validator) omniTables(p string, db *Database, sharded map[string]int) {
	op := keyPath(p, "omni_tables")
	seen := map[string]int{}
	for i, name := range db.OmniTables {
		ep := indexPath(op, i)
		if !v.required(ep, name, "a table name") {
			continue
		}
		if j, dup := seen[name]; dup {
			v.r.at(ep, "table %q is listed twice (also omni_tables[%d])", name, j)
			continue
		}
		seen[name] = i
		if j, ok := sharded[name]; ok {
			v.r.at(ep, "table %q is also in sharded_tables[%d]%s; a table is either sharded or omni", name, j, v.r.seeLine(indexPath(keyPath(p, "sharded_tables"), j)))
		}
	}
}
