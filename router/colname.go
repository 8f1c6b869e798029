package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// columnName is the name PostgreSQL gives a select list item: its alias,
// else what FigureColname (parser/parse_target.c) guesses from the
// untransformed expression, else "?column?". The proxy needs it where it
// computes a column itself, so that RowDescription names it as one server
// would, and to resolve ORDER BY by output name.
func columnName(rt *pg_query.ResTarget) string {
	if rt.Name != "" {
		return rt.Name
	}
	if name, strength := guessName(rt.Val); strength > 0 {
		return name
	}
	return "?column?"
}

// guessName follows FigureColnameInternal: a name and its strength, 2 for
// a good name (a column, a function), 1 for a second choice (a cast's
// type, "case") that an enclosing cast or CASE may override, 0 for none.
func guessName(n *pg_query.Node) (string, int) {
	if n == nil {
		return "", 0
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_ColumnRef:
		return lastString(x.ColumnRef.Fields)
	case *pg_query.Node_AIndirection:
		if name, s := lastString(x.AIndirection.Indirection); s > 0 {
			return name, s
		}
		return guessName(x.AIndirection.Arg)
	case *pg_query.Node_FuncCall:
		if f := x.FuncCall.Funcname; len(f) > 0 {
			return str(f[len(f)-1]), 2
		}
	case *pg_query.Node_AExpr:
		if x.AExpr.Kind == pg_query.A_Expr_Kind_AEXPR_NULLIF {
			return "nullif", 2
		}
	case *pg_query.Node_TypeCast:
		name, s := guessName(x.TypeCast.Arg)
		if s <= 1 && x.TypeCast.TypeName != nil && len(x.TypeCast.TypeName.Names) > 0 {
			names := x.TypeCast.TypeName.Names
			return str(names[len(names)-1]), 1
		}
		return name, s
	case *pg_query.Node_CollateClause:
		return guessName(x.CollateClause.Arg)
	case *pg_query.Node_GroupingFunc:
		return "grouping", 2
	case *pg_query.Node_SubLink:
		switch x.SubLink.SubLinkType {
		case pg_query.SubLinkType_EXISTS_SUBLINK:
			return "exists", 2
		case pg_query.SubLinkType_ARRAY_SUBLINK:
			return "array", 2
		case pg_query.SubLinkType_EXPR_SUBLINK:
			// The name of the subquery's single column.
			sel := x.SubLink.Subselect.GetSelectStmt()
			for sel != nil && sel.Larg != nil {
				sel = sel.Larg // a set operation's columns are named by its first arm
			}
			if sel != nil && len(sel.TargetList) > 0 {
				if rt := sel.TargetList[0].GetResTarget(); rt != nil {
					if rt.Name != "" {
						return rt.Name, 2
					}
					if name, s := guessName(rt.Val); s > 0 {
						return name, 2
					}
					return "?column?", 2
				}
			}
		}
	case *pg_query.Node_CaseExpr:
		name, s := guessName(x.CaseExpr.Defresult)
		if s <= 1 {
			return "case", 1
		}
		return name, s
	case *pg_query.Node_AArrayExpr:
		return "array", 2
	case *pg_query.Node_RowExpr:
		return "row", 2
	case *pg_query.Node_CoalesceExpr:
		return "coalesce", 2
	case *pg_query.Node_MinMaxExpr:
		switch x.MinMaxExpr.Op {
		case pg_query.MinMaxOp_IS_GREATEST:
			return "greatest", 2
		case pg_query.MinMaxOp_IS_LEAST:
			return "least", 2
		}
	case *pg_query.Node_SqlvalueFunction:
		if name, ok := sqlValueNames[x.SqlvalueFunction.Op]; ok {
			return name, 2
		}
	case *pg_query.Node_XmlExpr:
		if name, ok := xmlNames[x.XmlExpr.Op]; ok {
			return name, 2
		}
	case *pg_query.Node_XmlSerialize:
		return "xmlserialize", 2
	case *pg_query.Node_JsonParseExpr:
		return "json", 2
	case *pg_query.Node_JsonScalarExpr:
		return "json_scalar", 2
	case *pg_query.Node_JsonSerializeExpr:
		return "json_serialize", 2
	case *pg_query.Node_JsonObjectConstructor:
		return "json_object", 2
	case *pg_query.Node_JsonArrayConstructor, *pg_query.Node_JsonArrayQueryConstructor:
		return "json_array", 2
	case *pg_query.Node_JsonObjectAgg:
		return "json_objectagg", 2
	case *pg_query.Node_JsonArrayAgg:
		return "json_arrayagg", 2
	case *pg_query.Node_JsonFuncExpr:
		switch x.JsonFuncExpr.Op {
		case pg_query.JsonExprOp_JSON_EXISTS_OP:
			return "json_exists", 2
		case pg_query.JsonExprOp_JSON_QUERY_OP:
			return "json_query", 2
		case pg_query.JsonExprOp_JSON_VALUE_OP:
			return "json_value", 2
		}
	case *pg_query.Node_MergeSupportFunc:
		return "merge_action", 2
	}
	return "", 0
}

// lastString is the last String node of a list (a column reference's last
// field, ignoring * and subscripts).
func lastString(ns []*pg_query.Node) (string, int) {
	name := ""
	for _, f := range ns {
		if s := f.GetString_(); s != nil {
			name = s.Sval
		}
	}
	if name == "" {
		return "", 0
	}
	return name, 2
}

var sqlValueNames = map[pg_query.SQLValueFunctionOp]string{
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE:        "current_date",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME:        "current_time",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:      "current_time",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP:   "current_timestamp",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N: "current_timestamp",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME:           "localtime",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N:         "localtime",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP:      "localtimestamp",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:    "localtimestamp",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE:        "current_role",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER:        "current_user",
	pg_query.SQLValueFunctionOp_SVFOP_USER:                "user",
	pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER:        "session_user",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG:     "current_catalog",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA:      "current_schema",
}

var xmlNames = map[pg_query.XmlExprOp]string{
	pg_query.XmlExprOp_IS_XMLCONCAT:    "xmlconcat",
	pg_query.XmlExprOp_IS_XMLELEMENT:   "xmlelement",
	pg_query.XmlExprOp_IS_XMLFOREST:    "xmlforest",
	pg_query.XmlExprOp_IS_XMLPARSE:     "xmlparse",
	pg_query.XmlExprOp_IS_XMLPI:        "xmlpi",
	pg_query.XmlExprOp_IS_XMLROOT:      "xmlroot",
	pg_query.XmlExprOp_IS_XMLSERIALIZE: "xmlserialize",
}
