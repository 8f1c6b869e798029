package router

import (
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file holds helpers over pg_query's parse tree.

// walk calls fn for every Node below m, depth first, and for every
// RangeVar (wrapped in a Node when the tree holds it directly). fn returns
// false to skip the node's children.
func walk(m proto.Message, fn func(*pg_query.Node) bool) {
	if m == nil {
		return
	}
	walkMessage(m.ProtoReflect(), fn)
}

var (
	nodeDescriptor     = (&pg_query.Node{}).ProtoReflect().Descriptor()
	rangeVarDescriptor = (&pg_query.RangeVar{}).ProtoReflect().Descriptor()
)

func walkMessage(m protoreflect.Message, fn func(*pg_query.Node) bool) {
	if !m.IsValid() {
		return
	}
	switch m.Descriptor() {
	case nodeDescriptor:
		if !fn(m.Interface().(*pg_query.Node)) {
			return
		}
	case rangeVarDescriptor:
		// Many statements hold a table as a *RangeVar field rather than a
		// Node; present it as a Node so that callers see every table.
		rv := m.Interface().(*pg_query.RangeVar)
		fn(&pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: rv}})
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := range l.Len() {
				walkMessage(l.Get(i).Message(), fn)
			}
			return true
		}
		walkMessage(v.Message(), fn)
		return true
	})
}

// walkExpr calls fn for every node of an expression, not descending into
// subqueries: it calls sub with each SubLink instead.
func walkExpr(n *pg_query.Node, fn func(*pg_query.Node) bool, sub func(*pg_query.SubLink)) {
	if n == nil {
		return
	}
	walk(n, func(n *pg_query.Node) bool {
		if sl := n.GetSubLink(); sl != nil {
			walkExpr(sl.Testexpr, fn, sub)
			if sub != nil {
				sub(sl)
			}
			return false
		}
		return fn == nil || fn(n)
	})
}

// sameExpr reports whether two expressions are written alike, ignoring
// where in the text they stand.
func sameExpr(a, b *pg_query.Node) bool {
	return proto.Equal(withoutLocations(a), withoutLocations(b))
}

// withoutLocations returns a copy of n with every location field zeroed.
func withoutLocations(n *pg_query.Node) *pg_query.Node {
	if n == nil {
		return nil
	}
	c := proto.Clone(n).(*pg_query.Node)
	clearLocations(c.ProtoReflect())
	return c
}

func clearLocations(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.Int32Kind && (fd.Name() == "location" || strings.HasSuffix(string(fd.Name()), "_location")):
			m.Clear(fd)
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := range l.Len() {
				clearLocations(l.Get(i).Message())
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			clearLocations(v.Message())
		}
		return true
	})
}

// str returns the value of a String node, or "".
func str(n *pg_query.Node) string {
	if s := n.GetString_(); s != nil {
		return s.Sval
	}
	return ""
}

// names returns the values of a list of String nodes.
func names(ns []*pg_query.Node) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, str(n))
	}
	return out
}

// funcName returns a function's name, without a pg_catalog qualification
// and in lower case; a function in another schema gets its schema prefix.
func funcName(fc *pg_query.FuncCall) string {
	parts := names(fc.Funcname)
	if len(parts) == 0 {
		return ""
	}
	if len(parts) == 2 && parts[0] == "pg_catalog" {
		parts = parts[1:]
	}
	return strings.Join(parts, ".")
}

// operatorName returns the operator of an A_Expr ("=", "<", …) without an
// OPERATOR(pg_catalog.…) qualification.
func operatorName(e *pg_query.A_Expr) string {
	parts := names(e.Name)
	if len(parts) == 2 && parts[0] == "pg_catalog" {
		return parts[1]
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return ""
}

// constText returns the text form of a constant: ok is false for anything
// but a constant, null is true for NULL.
func constText(c *pg_query.A_Const) (text string, null, ok bool) {
	if c.Isnull {
		return "", true, true
	}
	switch v := c.Val.(type) {
	case *pg_query.A_Const_Ival:
		return strconv.FormatInt(int64(v.Ival.GetIval()), 10), false, true
	case *pg_query.A_Const_Fval:
		return v.Fval.GetFval(), false, true
	case *pg_query.A_Const_Sval:
		return v.Sval.GetSval(), false, true
	case *pg_query.A_Const_Boolval:
		if v.Boolval.GetBoolval() {
			return "true", false, true
		}
		return "false", false, true
	}
	return "", false, false
}

// intConst returns the value of an integer constant.
func intConst(n *pg_query.Node) (int64, bool) {
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return 0, false
	}
	if v, ok := c.Val.(*pg_query.A_Const_Ival); ok {
		return int64(v.Ival.GetIval()), true
	}
	return 0, false
}

// typeName returns the last part of a type's name ("int8" for
// pg_catalog.int8) and whether it is an array type.
func typeName(tn *pg_query.TypeName) (string, bool) {
	if tn == nil || len(tn.Names) == 0 {
		return "", false
	}
	return strings.ToLower(str(tn.Names[len(tn.Names)-1])), len(tn.ArrayBounds) > 0
}

// castFamily returns the key type family a cast to type name converts to,
// and whether a binary parameter of that type is encoded like the key (it
// is not for numeric). noFamily means the router cannot reason about it.
func castFamily(name string) (family, bool) {
	switch name {
	case "int2", "int4", "int8", "smallint", "integer", "int", "bigint":
		return intFamily, true
	case "numeric", "decimal":
		return intFamily, false
	case "text", "varchar":
		return textFamily, true
	case "uuid":
		return uuidFamily, true
	}
	return noFamily, false
}

// columnRef returns the names of a column reference (qualifiers first), or
// nil when n is not one or ends in *.
func columnRef(n *pg_query.Node) []string {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) == 0 {
		return nil
	}
	out := make([]string, len(cr.Fields))
	for i, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return nil // A_Star
		}
		out[i] = s.Sval
	}
	return out
}

// isStar reports whether a target is * or x.*.
func isStar(n *pg_query.Node) bool {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) == 0 {
		return false
	}
	return cr.Fields[len(cr.Fields)-1].GetAStar() != nil
}

// relName returns "schema.table" or "table" for messages.
func relName(rv *pg_query.RangeVar) string {
	if rv.Schemaname != "" {
		return rv.Schemaname + "." + rv.Relname
	}
	return rv.Relname
}

// deparse turns one statement back into SQL.
func deparse(version int32, stmt *pg_query.Node) (string, error) {
	return pg_query.Deparse(&pg_query.ParseResult{Version: version, Stmts: []*pg_query.RawStmt{{Stmt: guardTests(stmt)}}})
}

// guardTests returns stmt, or a copy of it in which the operands that
// pg_query's deparser writes without the parentheses they need are
// wrapped in CASE WHEN true THEN … END, which reads alike everywhere and
// keeps the operand's type and collation. The deparser wrote (NOT a) IS
// NULL as NOT a IS NULL, which PostgreSQL reads as NOT (a IS NULL); (a OR
// b) IS NULL as a OR (b IS NULL); (x IS NULL) IN (…) and (NOT b) LIKE c
// likewise. Wrapped: an operand of an operator, IS [NOT] NULL, IS [NOT]
// TRUE/FALSE/UNKNOWN or a cast that is itself an operator, test, AND, OR,
// NOT or COLLATE, but not an ordinary binary operator under an ordinary
// binary operator or a cast (which the deparser parenthesizes), nor a
// COLLATE under an ordinary binary operator (it binds tighter); the
// operands of AND, OR and NOT come out right. (COLLATE of such an operand is
// of a type without collations: PostgreSQL's error either way.)
// TestDeparseRandomExpressions checks it.
func guardTests(stmt *pg_query.Node) *pg_query.Node {
	if !needsGuard(stmt, false) {
		return stmt
	}
	c := proto.Clone(stmt).(*pg_query.Node)
	needsGuard(c, true)
	return c
}

// plainOp reports whether n is an ordinary operator expression (a + b,
// a = b, -a).
func plainOp(n *pg_query.Node) bool {
	e := n.GetAExpr()
	return e != nil && e.Kind == pg_query.A_Expr_Kind_AEXPR_OP
}

// loose reports whether n is an expression the deparser may leave
// unparenthesized where it is an operand.
func loose(n *pg_query.Node) bool {
	return n != nil && (n.GetAExpr() != nil || n.GetBoolExpr() != nil || n.GetNullTest() != nil ||
		n.GetBooleanTest() != nil || n.GetCollateClause() != nil)
}

// needsGuard reports whether stmt has an operand guardTests wraps; with
// fix, it wraps them (stmt must be a copy).
func needsGuard(stmt *pg_query.Node, fix bool) bool {
	named := map[*pg_query.Node]bool{} // select list items, whose names come from them
	walk(stmt, func(n *pg_query.Node) bool {
		if rt := n.GetResTarget(); rt != nil && rt.Val != nil {
			named[rt.Val] = true
		}
		return true
	})
	found := false
	guard := func(arg **pg_query.Node, parentPlain, parentBinary bool) {
		n := *arg
		// COLLATE binds tighter than every binary operator (not than a
		// unary minus), and wrapping it would change what PostgreSQL's
		// grouping check matches: HAVING (a COLLATE "C") = 'x' under
		// GROUP BY (a COLLATE "C") is its 42803, the wrapped one is not.
		if !loose(n) || parentPlain && plainOp(n) || parentBinary && n.GetCollateClause() != nil {
			return
		}
		found = true
		if fix {
			*arg = &pg_query.Node{Node: &pg_query.Node_CaseExpr{CaseExpr: &pg_query.CaseExpr{
				Args: []*pg_query.Node{{Node: &pg_query.Node_CaseWhen{CaseWhen: &pg_query.CaseWhen{
					Expr:   &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: true}}}}},
					Result: n,
				}}}},
			}}}
		}
	}
	walk(stmt, func(n *pg_query.Node) bool {
		switch v := n.Node.(type) {
		case *pg_query.Node_AExpr:
			e := v.AExpr
			plain := e.Kind == pg_query.A_Expr_Kind_AEXPR_OP
			binary := plain && e.Lexpr != nil && e.Rexpr != nil
			if e.Lexpr != nil {
				guard(&e.Lexpr, plain, binary)
			}
			switch e.Kind {
			case pg_query.A_Expr_Kind_AEXPR_IN, pg_query.A_Expr_Kind_AEXPR_OP_ANY, pg_query.A_Expr_Kind_AEXPR_OP_ALL:
				// The list or array is written in parentheses.
			default:
				if l := e.Rexpr.GetList(); l != nil { // BETWEEN's bounds
					for i := range l.Items {
						guard(&l.Items[i], false, false)
					}
				} else if e.Rexpr != nil {
					guard(&e.Rexpr, plain, binary)
				}
			}
		case *pg_query.Node_NullTest:
			guard(&v.NullTest.Arg, false, false)
		case *pg_query.Node_BooleanTest:
			guard(&v.BooleanTest.Arg, false, false)
		case *pg_query.Node_TypeCast:
			// (a + b)::t comes out right. A select list item's cast is
			// left alone: PostgreSQL names the column after the cast's
			// argument ((x COLLATE "C")::text is x), and would name it
			// case.
			if v.TypeCast.Arg != nil && !named[n] {
				guard(&v.TypeCast.Arg, true, false)
			}
		case *pg_query.Node_SubLink:
			if v.SubLink.Testexpr != nil {
				guard(&v.SubLink.Testexpr, false, false)
			}
		}
		return fix || !found
	})
	return found
}
