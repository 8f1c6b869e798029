package router

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/shardgate/shardgate/wire"
)

// InsertSelect is how the executor runs INSERT … SELECT into a sharded
// table. The SELECT (Query) runs where Source says, as a SELECT of its own
// would; each row it produces goes to the shard of its sharding key (the
// column at Key) as a row of a multi-row INSERT that the executor builds
// as Prefix, the rows, Suffix. Each row's values are sent as literals of
// the types the SELECT gave them ('5'::integer), so that the shard applies
// the same assignment casts to the target columns as the INSERT … SELECT
// would have; the Untyped columns, the SELECT's untyped literals ('x',
// NULL), are sent without a type, as the INSERT … SELECT would have
// coerced them.
//
// An InsertSelect is shared by every Plan of its statement, except for
// Source, which each Plan has of its own.
type InsertSelect struct {
	// Table is the target table as the statement names it, for messages.
	Table string
	// Query is the SELECT, with the INSERT's WITH queries.
	Query string
	// Source is where Query runs: Direct, Multi or All (the rows of several
	// shards are combined by Source.Merge, and Source.Merge.Rewritten, when
	// set, replaces Query), or OmniRead or Any (any one of Source.Shards).
	Source *Plan
	// Key is the position of the sharding key column among the SELECT's
	// columns. Without a column list it is the column's position in the
	// table; a SELECT with fewer columns leaves the key to its default,
	// which CheckKey refuses.
	Key int
	// KeyColumn is the name of the sharding key column.
	KeyColumn string
	// Untyped are the columns of the SELECT that are untyped literals.
	Untyped []Column
	// Prefix and Suffix enclose the VALUES rows of the INSERT sent to a
	// shard: `INSERT INTO accounts (id, name) VALUES ` and, say,
	// ` ON CONFLICT DO NOTHING`.
	Prefix, Suffix string

	key *keyFunc
}

// IsUntyped reports whether column i of the SELECT's n columns is an
// untyped literal.
func (is *InsertSelect) IsUntyped(i, n int) bool {
	for _, c := range is.Untyped {
		if c.Index(n) == i {
			return true
		}
	}
	return false
}

// Type OIDs (pg_type.dat) of the values a sharding key may be selected as.
const (
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidText    = 25
	oidUnknown = 705
	oidVarchar = 1043
	oidUUID    = 2950
)

// CheckKey checks, once the SELECT's result columns are known, that its
// rows can be routed: the SELECT gives the sharding key (it has more than
// Key columns), as a value of the key's type family or an untyped literal,
// so that the text of the selected value is the key the row gets. typeName
// names the key's selected type for the message.
func (is *InsertSelect) CheckKey(ncols int, oid uint32, typeName string) error {
	if is.Key >= ncols {
		return unsupported(insertSelectKeyHint(is.Table, is.KeyColumn),
			"INSERT … SELECT into sharded table %s does not set its sharding column %q", is.Table, is.KeyColumn)
	}
	if is.IsUntyped(is.Key, ncols) || oid == oidUnknown {
		return nil
	}
	ok := false
	switch typeFamily(is.key.typ) {
	case intFamily:
		ok = oid == oidInt2 || oid == oidInt4 || oid == oidInt8
	case textFamily:
		ok = oid == oidText || oid == oidVarchar
	case uuidFamily:
		ok = oid == oidUUID
	}
	if !ok {
		return unsupported(fmt.Sprintf("Cast the selected sharding key to the type of column %s: … ::%s.", is.KeyColumn, is.key.typ),
			"cannot route the rows of INSERT … SELECT into sharded table %s: its sharding key %q is selected as type %s", is.Table, is.KeyColumn, typeName)
	}
	return nil
}

// Shard returns the shard of a row whose sharding key the SELECT gave as
// value, its text (nil for NULL).
func (is *InsertSelect) Shard(value []byte) (int, error) {
	k, err := decodeKey(is.key.typ, value, 0)
	if err != nil {
		return 0, keyError(err)
	}
	s, err := is.key.fn.Shard(k)
	if err != nil {
		return 0, noShardError(is.key, k, err)
	}
	return s, nil
}

func insertSelectKeyHint(table, key string) string {
	return fmt.Sprintf("Select the sharding key: INSERT INTO %s (%s, …) SELECT …. The proxy routes each row by it; a default (a sequence) would be computed after routing.", table, key)
}

// insertSelect analyzes INSERT … SELECT into sharded table target at the
// top level of a statement: the SELECT is analyzed as a statement of its
// own (Source), and the INSERT becomes the text each shard gets its rows
// in. cols is the INSERT's column list. The reasons it cannot run are
// recorded as failures a hint can override.
func (a *analyzer) insertSelect(ins *pg_query.InsertStmt, sel *pg_query.SelectStmt, target *instance, cols []string) {
	name, key := target.name, target.key
	if len(ins.ReturningList) > 0 {
		a.fail(unsupported("Read the rows back with a SELECT, or route the statement to one shard with /* shard: N */.",
			"INSERT … SELECT … RETURNING into sharded table %s: the proxy does not return the inserted rows", name))
		return
	}
	if oc := ins.OnConflictClause; oc != nil {
		if oc.Action == pg_query.OnConflictAction_ONCONFLICT_UPDATE {
			a.fail(unsupported("Use ON CONFLICT DO NOTHING, or route the statement to one shard with /* shard: N */.",
				"INSERT … SELECT … ON CONFLICT DO UPDATE into sharded table %s: the proxy inserts the rows in several statements, which would update a row that PostgreSQL refuses to update twice", name))
			return
		}
		if hasParam(oc) {
			a.fail(unsupported("Write the ON CONFLICT clause with constants.",
				"INSERT … SELECT into sharded table %s with a parameter in ON CONFLICT", name))
			return
		}
	}
	if modifies(ins.WithClause) || modifies(sel.WithClause) {
		a.fail(unsupported("Run the data-modifying statement on its own first.",
			"INSERT … SELECT into sharded table %s with a data-modifying WITH query", name))
		return
	}
	if ins.WithClause != nil && sel.WithClause != nil {
		a.fail(unsupported("Put every WITH query in one WITH clause, before INSERT.",
			"INSERT … SELECT into sharded table %s with WITH clauses before both INSERT and SELECT", name))
		return
	}
	keyAt := -1
	if len(cols) == 0 {
		var order []string
		if a.r.catalog != nil {
			order = a.r.catalog(target.rv.Schemaname, target.rv.Relname)
		}
		if order == nil {
			a.fail(unsupported(fmt.Sprintf("Name the columns: INSERT INTO %s (%s, …) SELECT ….", name, key.column),
				"INSERT … SELECT into sharded table %s without a column list: the proxy does not know the table's column order", name))
			return
		}
		keyAt = slices.Index(order, key.column)
	} else {
		for i, c := range ins.Cols {
			if rt := c.GetResTarget(); rt != nil && rt.Name == key.column {
				if len(rt.Indirection) > 0 {
					a.fail(unsupported(insertSelectKeyHint(name, key.column),
						"INSERT … SELECT into sharded table %s sets a part of its sharding column %q", name, key.column))
					return
				}
				keyAt = i
				break
			}
		}
	}
	if keyAt < 0 {
		a.fail(unsupported(insertSelectKeyHint(name, key.column),
			"INSERT … SELECT into sharded table %s does not set its sharding column %q", name, key.column))
		return
	}
	reader := proto.Clone(sel).(*pg_query.SelectStmt)
	if reader.WithClause == nil {
		reader.WithClause = ins.WithClause
	}
	node := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: reader}}
	src, err := a.r.analyzeStmt(node, a.path, a.version)
	if err != nil {
		a.hardFail(err)
		return
	}
	query, err := deparse(a.version, node)
	if err != nil {
		a.hardFail(wire.Errorf(wire.InternalError, "router: INSERT … SELECT: %v", err))
		return
	}
	prefix, suffix, err := insertText(ins, a.version)
	if err != nil {
		a.hardFail(wire.Errorf(wire.InternalError, "router: INSERT … SELECT: %v", err))
		return
	}
	a.insel = &InsertSelect{Table: name, Query: query, Key: keyAt, KeyColumn: key.column,
		Untyped: untypedColumns(sel), Prefix: prefix, Suffix: suffix, key: key}
	a.inselSource = src
}

// rowsMarker stands for the VALUES rows in the INSERT text insertText cuts
// in two.
const rowsMarker = "__shardgate_rows__"

// insertText returns the INSERT a shard gets its rows in, cut where the
// rows go: the statement without its WITH queries and RETURNING, its SELECT
// replaced by VALUES.
func insertText(ins *pg_query.InsertStmt, version int32) (prefix, suffix string, err error) {
	w := proto.Clone(ins).(*pg_query.InsertStmt)
	w.WithClause, w.ReturningList = nil, nil
	row := &pg_query.Node{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{
		pg_query.MakeAConstStrNode(rowsMarker, -1)}}}}
	w.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
		ValuesLists: []*pg_query.Node{row}, Op: pg_query.SetOperation_SETOP_NONE}}}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_InsertStmt{InsertStmt: w}})
	if err != nil {
		return "", "", err
	}
	cut := "VALUES ('" + rowsMarker + "')"
	i := strings.Index(sql, cut)
	if i < 0 {
		return "", "", fmt.Errorf("no VALUES in %q", sql)
	}
	return sql[:i] + "VALUES ", sql[i+len(cut):], nil
}

// untypedColumns returns the columns of sel that are untyped literals ('x'
// or NULL in the select list of a plain SELECT), counted from the end
// after a * in the select list. INSERT … SELECT coerces them to the target
// columns' types; the SELECT alone, or in UNION or VALUES, makes them text.
func untypedColumns(sel *pg_query.SelectStmt) []Column {
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED || len(sel.ValuesLists) > 0 {
		return nil
	}
	var out []Column
	star := false
	n := len(sel.TargetList)
	for i, t := range sel.TargetList {
		rt := t.GetResTarget()
		if rt == nil {
			continue
		}
		if expands(rt.Val) {
			star = true
			continue
		}
		c := rt.Val.GetAConst()
		if c == nil || !c.Isnull && c.GetSval() == nil {
			continue
		}
		if star {
			out = append(out, Column(i-n))
		} else {
			out = append(out, Column(i))
		}
	}
	return out
}

// expands reports whether a select-list item stands for several columns:
// *, t.* or (x).*.
func expands(n *pg_query.Node) bool {
	if isStar(n) {
		return true
	}
	ind := n.GetAIndirection()
	return ind != nil && len(ind.Indirection) > 0 && ind.Indirection[len(ind.Indirection)-1].GetAStar() != nil
}

// modifies reports whether a WITH clause holds INSERT, UPDATE, DELETE or
// MERGE, which a cursor's query may not.
func modifies(wc *pg_query.WithClause) bool {
	if wc == nil {
		return false
	}
	for _, n := range wc.Ctes {
		if c := n.GetCommonTableExpr(); c != nil && c.Ctequery.GetSelectStmt() == nil {
			return true
		}
	}
	return false
}

// hasParam reports whether a parse tree holds a parameter ($n).
func hasParam(m proto.Message) bool {
	found := false
	walk(m, func(n *pg_query.Node) bool {
		found = found || n.GetParamRef() != nil
		return !found
	})
	return found
}
