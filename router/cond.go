package router

import (
	"errors"
	"math/bits"
	"unsafe"

	"github.com/shardgate/shardgate/router/sharding"
)

// shardSet is a set of shard numbers. Sets of databases with up to 64
// shards live in lo and never allocate.
type shardSet struct {
	lo uint64
	hi []uint64 // shards 64 and up, bit (s-64)%64 of word (s-64)/64
}

func (s *shardSet) add(shard int) {
	if shard < 64 {
		s.lo |= 1 << uint(shard)
		return
	}
	w := (shard - 64) / 64
	for len(s.hi) <= w {
		s.hi = append(s.hi, 0)
	}
	s.hi[w] |= 1 << uint((shard-64)%64)
}

func (s *shardSet) addAll(n int) {
	for i := range n {
		s.add(i)
	}
}

func (s *shardSet) union(t shardSet) {
	s.lo |= t.lo
	for i, w := range t.hi {
		if i >= len(s.hi) {
			s.hi = append(s.hi, 0)
		}
		s.hi[i] |= w
	}
}

func (s *shardSet) intersect(t shardSet) {
	s.lo &= t.lo
	for i := range s.hi {
		if i < len(t.hi) {
			s.hi[i] &= t.hi[i]
		} else {
			s.hi[i] = 0
		}
	}
}

func (s shardSet) count() int {
	n := bits.OnesCount64(s.lo)
	for _, w := range s.hi {
		n += bits.OnesCount64(w)
	}
	return n
}

// first returns the smallest shard in s, or -1 when s is empty.
func (s shardSet) first() int {
	if s.lo != 0 {
		return bits.TrailingZeros64(s.lo)
	}
	for i, w := range s.hi {
		if w != 0 {
			return 64 + 64*i + bits.TrailingZeros64(w)
		}
	}
	return -1
}

// list returns the shards of s in increasing order.
func (s shardSet) list() []int {
	out := make([]int, 0, s.count())
	for w := s.lo; w != 0; w &= w - 1 {
		out = append(out, bits.TrailingZeros64(w))
	}
	for i, word := range s.hi {
		for w := word; w != 0; w &= w - 1 {
			out = append(out, 64+64*i+bits.TrailingZeros64(w))
		}
	}
	return out
}

// operandKind says where the value of one side of a key predicate comes
// from.
type operandKind uint8

const (
	opShard      operandKind = iota + 1 // a constant, routed at analysis: shard
	opNone                              // a constant no row can hold (NULL, unmapped list value)
	opAll                               // a value the router cannot route: every shard
	opParam                             // parameter param, one key
	opArrayParam                        // parameter param, an array of keys (= ANY($n))
	opPath                              // the shard of the sharded schema first on search_path
)

// operand is one value a sharding key is compared with or set to.
type operand struct {
	kind  operandKind
	shard int // opShard
	param int // opParam, opArrayParam: 0-based parameter index
	// textOnly is set when the parameter is cast to a type the key type
	// cannot decode in binary (numeric for an integer key): a binary value
	// then routes to every shard.
	textOnly bool
}

// condOp is the shape of a cond node.
type condOp uint8

const (
	condLeaf condOp = iota + 1 // the key equals one of ops
	condAnd
	condOr
)

// cond is a constraint on the sharding key of a group of co-located
// tables, as a tree of AND and OR over key predicates. A nil *cond is no
// constraint: every shard.
type cond struct {
	op   condOp
	key  *keyFunc  // condLeaf
	ops  []operand // condLeaf: the operands routed per execution
	fix  shardSet  // condLeaf: the union of its constant operands
	kids []*cond   // condAnd, condOr: never nil
	pars bool      // some leaf below depends on parameters
}

// and combines constraints that must all hold; nil ones are dropped.
func and(cs ...*cond) *cond {
	var kids []*cond
	for _, c := range cs {
		if c == nil {
			continue
		}
		if c.op == condAnd {
			kids = append(kids, c.kids...)
		} else {
			kids = append(kids, c)
		}
	}
	switch len(kids) {
	case 0:
		return nil
	case 1:
		return kids[0]
	}
	c := &cond{op: condAnd, kids: kids}
	for _, k := range kids {
		c.pars = c.pars || k.pars
	}
	return c
}

// or combines alternatives: without a constraint on each, there is none.
func or(cs ...*cond) *cond {
	if len(cs) == 0 {
		return nil
	}
	c := &cond{op: condOr}
	for _, k := range cs {
		if k == nil {
			return nil
		}
		c.kids = append(c.kids, k)
		c.pars = c.pars || k.pars
	}
	if len(c.kids) == 1 {
		return c.kids[0]
	}
	return c
}

// leaf builds a key predicate. Constant operands are folded into a fixed
// set now; an opAll operand makes the leaf no constraint.
func leaf(key *keyFunc, ops []operand) *cond {
	c := &cond{op: condLeaf, key: key}
	for _, o := range ops {
		switch o.kind {
		case opAll:
			return nil
		case opShard:
			c.fix.add(o.shard)
		case opNone:
		default:
			c.ops = append(c.ops, o)
			c.pars = c.pars || o.kind != opPath
		}
	}
	return c
}

// routeEnv is what routing one statement execution reads.
type routeEnv struct {
	shards    int
	params    [][]byte
	formats   []int16
	pathShard int // the shard of the search_path schema, or -1
}

// eval returns the shards that may hold rows satisfying c. ok is false when
// c does not constrain the key after all (a parameter the router cannot
// decode): every shard.
func (c *cond) eval(env *routeEnv) (set shardSet, ok bool) {
	switch c.op {
	case condLeaf:
		set = c.fix
		for _, o := range c.ops {
			if !o.eval(c.key, env, &set) {
				return set, false
			}
		}
		return set, true
	case condAnd:
		first := true
		for _, k := range c.kids {
			s, ok := k.eval(env)
			if !ok {
				continue
			}
			if first {
				set, first = s, false
			} else {
				set.intersect(s)
			}
		}
		return set, !first
	default: // condOr
		for _, k := range c.kids {
			s, ok := k.eval(env)
			if !ok {
				return set, false
			}
			set.union(s)
		}
		return set, true
	}
}

// eval adds the shards of a dynamic operand to set; false means the value
// cannot be routed and every shard is needed.
func (o operand) eval(key *keyFunc, env *routeEnv, set *shardSet) bool {
	switch o.kind {
	case opPath:
		if env.pathShard < 0 {
			return false
		}
		set.add(env.pathShard)
		return true
	case opParam:
		if o.param >= len(env.params) {
			return false
		}
		format := paramFormat(env.formats, o.param)
		if format == 1 && o.textOnly {
			return false
		}
		shard, err := key.shardOf(env.params[o.param], format)
		if err != nil {
			// A value that maps to no shard matches no row; one the key type
			// cannot hold is PostgreSQL's to reject, on every shard.
			return errors.Is(err, sharding.ErrNoShard)
		}
		set.add(shard)
		return true
	case opArrayParam:
		if o.param >= len(env.params) {
			return false
		}
		format := paramFormat(env.formats, o.param)
		if format == 1 && o.textOnly {
			return false
		}
		return eachArrayElement(key.typ, env.params[o.param], format, func(k sharding.Key) bool {
			shard, err := key.fn.Shard(k)
			if err != nil {
				return errors.Is(err, sharding.ErrNoShard)
			}
			set.add(shard)
			return true
		})
	}
	return false
}

// shardOf routes one parameter value (nil for NULL). It does not allocate
// when it succeeds.
func (k *keyFunc) shardOf(value []byte, format int16) (int, error) {
	key, err := decodeKey(k.typ, value, format)
	if err != nil {
		return 0, err
	}
	return k.fn.Shard(key)
}

// decodeKey decodes a parameter or COPY field of key type t. Text values
// are read in place: the Key does not outlive the call that routes it, so
// it may alias value. Errors are copied out of value.
func decodeKey(t sharding.Type, value []byte, format int16) (sharding.Key, error) {
	if value == nil {
		return sharding.Null, nil
	}
	if format == 1 && typeFamily(t) != textFamily {
		return sharding.DecodeBinaryKey(t, value)
	}
	// The binary form of text and varchar is their text.
	k, err := sharding.ParseKey(t, unsafe.String(unsafe.SliceData(value), len(value)))
	if err != nil {
		_, err = sharding.ParseKey(t, string(value))
	}
	return k, err
}
