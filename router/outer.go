package router

import (
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// outerRelation is the one-row relation of a combined row's inputs that
// the Outer statement reads (see Outer).
const outerRelation = "__shardgate_in"

// outerBuilder collects the Outer statement of a grouped query while its
// Merge is built.
type outerBuilder struct {
	inputs  []ref            // the columns read as i1, i2, …
	targets []*pg_query.Node // the statement's select list
	outputs []ref            // where each select list item's value goes
	where   []*pg_query.Node // HAVING terms
}

// outerTargets gives the Outer statement the select list items that are
// expressions over aggregates.
func (b *mergeBuilder) outerTargets() error {
	for i, t := range b.targets {
		if !t.outer {
			continue
		}
		e, err := b.outerize(t.val)
		if err != nil {
			return err
		}
		b.outer.add(t.name, e, ref{'t', i})
	}
	return nil
}

// outerSlot gives the Outer statement an ORDER BY key of a grouped query
// that is neither a select list item, an aggregate nor a GROUP BY
// expression, and returns the hidden column its value goes to. Shards
// return a placeholder there that has the expression's type and
// collation, by which the merge orders the values.
func (b *mergeBuilder) outerSlot(n *pg_query.Node) (ref, error) {
	e, err := b.outerize(n)
	if err != nil {
		return ref{}, err
	}
	b.hidden = append(b.hidden, placeholder(proto.Clone(n).(*pg_query.Node)))
	b.slots[len(b.hidden)-1] = true
	r := ref{'h', len(b.hidden) - 1}
	b.outer.add("", e, r)
	return r, nil
}

func (o *outerBuilder) add(name string, e *pg_query.Node, at ref) {
	o.targets = append(o.targets, pg_query.MakeResTargetNodeWithNameAndVal(name, e, -1))
	o.outputs = append(o.outputs, at)
}

// outerize returns a copy of an expression of a grouped query for the
// Outer statement: each GROUP BY expression, aggregate call and column
// reference in it becomes an input, read from a column of the combined
// row (made hidden when the select list lacks it, so that the shards
// compute it — or reject it, as PostgreSQL would an ungrouped column).
// What remains runs on one server once per group, as it would have on
// one PostgreSQL.
func (b *mergeBuilder) outerize(n *pg_query.Node) (*pg_query.Node, error) {
	out := proto.Clone(n).(*pg_query.Node)
	if hasParam(n) {
		// The parameter's hidden column (outerParam) needs its type
		// inferred before the shards' statement reaches it.
		b.hidden = append(b.hidden, placeholder(proto.Clone(n).(*pg_query.Node)))
	}
	var err error
	walkInOrder(out.ProtoReflect(), func(x *pg_query.Node) bool {
		if err != nil {
			return false
		}
		var r ref
		var ok bool
		if r, ok, err = b.outerInput(x); err != nil || ok {
			if ok {
				in := b.outer.input(r)
				if coll := keptCollation(x); coll != nil {
					in = &pg_query.Node{Node: &pg_query.Node_CollateClause{CollateClause: &pg_query.CollateClause{Arg: in, Collname: coll}}}
				}
				x.Node = in.Node
			}
			return false
		}
		switch {
		case x.GetSubLink() != nil:
			err = rejectf("a subquery in an expression over aggregates")
		case x.GetParamRef() != nil:
			x.Node = b.outer.input(b.outerParam(x)).Node
			return false
		}
		return err == nil
	})
	return out, err
}

// outerParam returns the hidden column that carries parameter p (a
// ParamRef) to the Outer statement: the shards return $n, with the type
// PostgreSQL gives the parameter in the client's statement. That is the
// type of its first use there, and the shards' statement must meet the
// same first use before the hidden $n: the FROM clause and the select
// list are analyzed first in both statements (the select list's
// expressions over aggregates are placeholders of themselves in the
// shards'), and outerize puts a placeholder of every other expression that
// holds a parameter (a HAVING term, an ORDER BY key) in front of the
// parameter's column, in the order PostgreSQL analyzes them (HAVING, then
// ORDER BY). A parameter that a WHERE, GROUP BY or LIMIT uses first
// (before such a HAVING term or ORDER BY key) would be typed by the
// placeholder instead: checkOuterParams refuses those.
func (b *mergeBuilder) outerParam(p *pg_query.Node) ref {
	if b.outerParams == nil {
		b.outerParams = map[int32]int{}
	}
	b.outerParams[p.GetParamRef().Number]++
	return b.hide(proto.Clone(p).(*pg_query.Node))
}

// checkOuterParams refuses a parameter of an expression over aggregates
// whose type the shards' statement could infer differently (outerParam):
// one that neither the FROM clause nor the select list uses, and that
// appears elsewhere than in the HAVING terms and ORDER BY keys the Outer
// statement computes.
func (b *mergeBuilder) checkOuterParams() error {
	if len(b.outerParams) == 0 {
		return nil
	}
	count := func(nodes ...*pg_query.Node) map[int32]int {
		n := map[int32]int{}
		for _, x := range nodes {
			if x == nil {
				continue
			}
			walk(x, func(y *pg_query.Node) bool {
				if p := y.GetParamRef(); p != nil {
					n[p.Number]++
				}
				return true
			})
		}
		return n
	}
	early := count(append(slices.Clone(b.sel.FromClause), b.sel.TargetList...)...)
	all := count(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: b.sel}})
	for p, n := range b.outerParams {
		if early[p] == 0 && all[p] != n {
			return rejectf("parameter $%d in an expression over aggregates, used first in WHERE, GROUP BY or LIMIT,", p)
		}
	}
	return nil
}

// keptCollation returns the explicit collation of x, an expression an
// input replaces, that its value keeps in the Outer statement, whose
// inputs have their type's default collation: x COLLATE c itself, or
// min, max or string_agg of an argument with COLLATE c (their result has
// the argument's collation). nil for the others, whose results have no
// collation or the default one. (A column with a collation of its own,
// or an expression of one, is not seen: it compares in the database's
// default there.)
func keptCollation(x *pg_query.Node) []*pg_query.Node {
	if c := x.GetCollateClause(); c != nil {
		return c.Collname
	}
	f := x.GetFuncCall()
	if f == nil || len(f.Args) == 0 {
		return nil
	}
	switch funcName(f) {
	case "min", "max", "string_agg":
		if c := f.Args[0].GetCollateClause(); c != nil {
			return c.Collname
		}
	}
	return nil
}

// walkInOrder calls fn for every Node below m, depth first, fields in
// the order of their numbers: unlike walk (protoreflect's Range, whose
// order is unspecified), the same expression always numbers its inputs
// and hides its columns alike. fn returns false to skip the children.
func walkInOrder(m protoreflect.Message, fn func(*pg_query.Node) bool) {
	if !m.IsValid() {
		return
	}
	if n, ok := m.Interface().(*pg_query.Node); ok && !fn(n) {
		return
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.MessageKind || !m.Has(fd) {
			continue
		}
		if fd.IsList() {
			l := m.Get(fd).List()
			for k := 0; k < l.Len(); k++ {
				walkInOrder(l.Get(k).Message(), fn)
			}
			continue
		}
		if !fd.IsMap() {
			walkInOrder(m.Get(fd).Message(), fn)
		}
	}
}

// outerInput returns the column of the combined row that stands for x in
// an outer expression, if x is a GROUP BY expression, an aggregate or a
// column reference.
func (b *mergeBuilder) outerInput(x *pg_query.Node) (ref, bool, error) {
	// x is about to be replaced: what the shards compute is a copy.
	x = proto.Clone(x).(*pg_query.Node)
	for _, g := range b.groupExprs {
		if sameExpr(g.expr, x) {
			return g.at, true, nil
		}
	}
	if f := x.GetFuncCall(); f != nil && isAggregate(f) {
		for i, t := range b.targets {
			if t.agg != 0 && sameExpr(t.val, x) {
				return ref{'t', i}, true, nil
			}
		}
		r, err := b.aggRef(x)
		return r, err == nil, err
	}
	if x.GetGroupingFunc() != nil {
		return b.hide(x), true, nil
	}
	if x.GetColumnRef() == nil {
		return ref{}, false, nil
	}
	if isStar(x) {
		return ref{}, false, rejectf("a whole-row reference (t.*) in an expression over aggregates")
	}
	if r, ok := b.find(x); ok && b.targets[r.i].agg == 0 && !b.targets[r.i].outer {
		return r, true, nil
	}
	return b.hide(x), true, nil
}

// input returns the reference to input r in the Outer statement.
func (o *outerBuilder) input(r ref) *pg_query.Node {
	k := -1
	for i, in := range o.inputs {
		if in == r {
			k = i
		}
	}
	if k < 0 {
		k = len(o.inputs)
		o.inputs = append(o.inputs, r)
	}
	return pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(outerRelation), pg_query.MakeStrNode(fmt.Sprintf("i%d", k+1))}, -1)
}

// outerStatement returns the Outer statement, nil when the query needs
// none.
func (b *mergeBuilder) outerStatement(version int32) (*Outer, error) {
	o := &b.outer
	if len(o.targets) == 0 && len(o.where) == 0 {
		return nil, nil
	}
	sel := &pg_query.SelectStmt{
		TargetList: o.targets,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{Relname: outerRelation, Inh: true, Relpersistence: "p"}}}},
	}
	switch len(o.where) {
	case 0:
	case 1:
		sel.WhereClause = o.where[0]
	default:
		sel.WhereClause = pg_query.MakeBoolExprNode(pg_query.BoolExprType_AND_EXPR, o.where, -1)
	}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		return nil, fmt.Errorf("router: outer statement: %w", err)
	}
	out := &Outer{SQL: sql}
	for _, r := range o.inputs {
		out.Inputs = append(out.Inputs, b.column(r))
	}
	for _, r := range o.outputs {
		out.Outputs = append(out.Outputs, b.column(r))
	}
	return out, nil
}
