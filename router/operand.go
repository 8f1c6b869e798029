package router

import (
	"errors"
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/router/sharding"
)

// scalarOperand reads the value a sharding key is compared with: a
// constant or a parameter, possibly cast ($1::bigint, '5'::int). ok is false
// when n is not such a value; an operand of kind opAll means it is one the
// router cannot route (a cast to another type, a fractional number).
func scalarOperand(k *keyFunc, n *pg_query.Node) (operand, bool) {
	n, textOnly, ok := stripCasts(k, n, false)
	if !ok {
		return operand{kind: opAll}, true
	}
	if p := n.GetParamRef(); p != nil {
		if p.Number < 1 {
			return operand{kind: opAll}, true
		}
		return operand{kind: opParam, param: int(p.Number) - 1, textOnly: textOnly}, true
	}
	if c := n.GetAConst(); c != nil {
		o, err := constOperand(k, c)
		if err != nil {
			return operand{kind: opAll}, true
		}
		return o, true
	}
	return operand{}, false
}

// stripCasts removes casts around a value. ok is false when a cast goes to
// a type whose values the router cannot compare with the key's; textOnly is
// true when a binary parameter of the cast's type is not the key's binary
// form. array says whether the value must be an array.
func stripCasts(k *keyFunc, n *pg_query.Node, array bool) (_ *pg_query.Node, textOnly, ok bool) {
	for {
		tc := n.GetTypeCast()
		if tc == nil {
			return n, textOnly, true
		}
		name, isArray := typeName(tc.TypeName)
		fam, binary := castFamily(name)
		if isArray != array || fam != typeFamily(k.typ) {
			return n, textOnly, false
		}
		textOnly = textOnly || !binary
		n = tc.Arg
	}
}

// constOperand routes a constant now. A value of the wrong form for the key
// type is an error (the caller decides whether it matters); a NULL goes
// where the rule puts NULL, or nowhere.
func constOperand(k *keyFunc, c *pg_query.A_Const) (operand, error) {
	text, null, ok := constText(c)
	if !ok {
		return operand{}, fmt.Errorf("router: constant of an unknown kind")
	}
	if _, isBool := c.Val.(*pg_query.A_Const_Boolval); isBool {
		return operand{}, &sharding.KeyError{Type: k.typ, Value: text, Err: sharding.ErrSyntax}
	}
	key := sharding.Null
	if !null {
		var err error
		if key, err = sharding.ParseKey(k.typ, text); err != nil {
			return operand{}, err
		}
	}
	shard, err := k.fn.Shard(key)
	if errors.Is(err, sharding.ErrNoShard) {
		return operand{kind: opNone}, nil
	}
	if err != nil {
		return operand{}, err
	}
	return operand{kind: opShard, shard: shard}, nil
}

// listOperands reads the list of key IN (…).
func listOperands(k *keyFunc, n *pg_query.Node) []operand {
	l := n.GetList()
	if l == nil {
		return []operand{{kind: opAll}}
	}
	ops := make([]operand, 0, len(l.Items))
	for _, item := range l.Items {
		o, ok := scalarOperand(k, item)
		if !ok {
			return []operand{{kind: opAll}}
		}
		ops = append(ops, o)
	}
	return ops
}

// arrayOperands reads the array of key = ANY(…): a parameter, ARRAY[…] or
// an array literal, possibly cast to an array of the key's type.
func arrayOperands(k *keyFunc, n *pg_query.Node) []operand {
	n, textOnly, ok := stripCasts(k, n, true)
	if !ok {
		return []operand{{kind: opAll}}
	}
	switch {
	case n.GetParamRef() != nil:
		p := n.GetParamRef()
		if p.Number < 1 {
			break
		}
		return []operand{{kind: opArrayParam, param: int(p.Number) - 1, textOnly: textOnly}}
	case n.GetAArrayExpr() != nil:
		return listOperands(k, pg_query.MakeListNode(n.GetAArrayExpr().Elements))
	case n.GetAConst() != nil:
		text, null, ok := constText(n.GetAConst())
		if !ok || null {
			break
		}
		var ops []operand
		routed := eachArrayElement(k.typ, []byte(text), 0, func(key sharding.Key) bool {
			shard, err := k.fn.Shard(key)
			switch {
			case errors.Is(err, sharding.ErrNoShard):
				return true
			case err != nil:
				return false
			}
			if !slices.ContainsFunc(ops, func(o operand) bool { return o.shard == shard }) {
				ops = append(ops, operand{kind: opShard, shard: shard})
			}
			return true
		})
		if !routed {
			break
		}
		if len(ops) == 0 {
			return []operand{{kind: opNone}}
		}
		return ops
	}
	return []operand{{kind: opAll}}
}
