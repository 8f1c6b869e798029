package router

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// insertRows routes the rows of INSERT … VALUES into a sharded table: the
// sharding key of each row.
type insertRows struct {
	key  *keyFunc
	rows []operand
}

// route adds the shard of each row to set. With several rows it returns
// each row's shard.
func (ir *insertRows) route(env *routeEnv, set *shardSet) ([]int, error) {
	if len(ir.rows) == 1 {
		shard, err := ir.rows[0].single(ir.key, env)
		set.add(shard)
		return nil, err
	}
	shards := make([]int, len(ir.rows))
	for i, o := range ir.rows {
		shard, err := o.single(ir.key, env)
		if err != nil {
			return nil, err
		}
		shards[i] = shard
		set.add(shard)
	}
	return shards, nil
}

// insert analyzes INSERT. For a sharded table at the top level it returns
// the rows' keys of INSERT … VALUES, or records INSERT … SELECT
// (insertSelect); nested in a WITH query, the rows become a group that
// must sit on one shard.
func (a *analyzer) insert(ins *pg_query.InsertStmt, nested string) *insertRows {
	defer func(n int) { a.ctes = a.ctes[:n] }(len(a.ctes))
	// The target first: whether it is sharded decides how the SELECT is
	// read. A WITH query cannot be the target, but its name hides a table's.
	a.ctes = append(a.ctes, cteNames(ins.WithClause)...)
	target := a.table(ins.Relation, nested)
	cols := make([]string, 0, len(ins.Cols))
	for _, c := range ins.Cols {
		cols = append(cols, c.GetResTarget().GetName())
	}
	sc := &scope{nested: nested, entries: []entry{{name: ins.Relation.Relname, inst: target}}}
	a.resolveUnknown(sc, cols...)
	sel := ins.SelectStmt.GetSelectStmt()
	values := isValues(sel)
	if nested == "" && sel != nil && !values && target != nil && target.class == shardedTable {
		a.write(target)
		a.insertSelect(ins, sel, target, cols)
		return nil
	}
	a.with(ins.WithClause, nil)
	if values {
		for _, row := range sel.ValuesLists {
			a.exprs(nested, row)
		}
	} else if sel != nil {
		why := "INSERT … SELECT"
		if nested != "" {
			why = nested
		}
		a.query(sel, why)
	}
	if oc := ins.OnConflictClause; oc != nil {
		a.exprs(nested, oc.WhereClause)
		a.exprs(nested, oc.TargetList...)
	}
	a.exprs(nested, ins.ReturningList...)
	if target == nil {
		return nil
	}
	a.write(target)
	switch target.class {
	case pinnedTable, pathTable:
		a.pin(target)
		return nil
	case shardedTable:
	default:
		return nil
	}
	if oc := ins.OnConflictClause; oc != nil && oc.Action == pg_query.OnConflictAction_ONCONFLICT_UPDATE {
		a.keyAssignments(target, oc.TargetList, nested)
	}
	if !values {
		if sel == nil {
			a.fail(unsupported("Give the sharding key a value.", "INSERT … DEFAULT VALUES into sharded table %s has no sharding key to route by", target.name))
		} else {
			a.fail(unsupported(hintOneShard, "INSERT … SELECT into sharded table %s inside %s: the proxy cannot route the selected rows", target.name, nested))
		}
		return nil
	}
	ir := a.insertKeys(target, sel, cols)
	if ir == nil || nested == "" {
		return ir
	}
	var cs []*cond
	for _, o := range ir.rows {
		cs = append(cs, leaf(ir.key, []operand{o}))
	}
	a.groups = append(a.groups, &group{cond: or(cs...), tables: []string{target.name}, nested: nested})
	return nil
}

// cteNames returns the names of the queries of a WITH clause.
func cteNames(wc *pg_query.WithClause) []string {
	if wc == nil {
		return nil
	}
	var out []string
	for _, n := range wc.Ctes {
		if c := n.GetCommonTableExpr(); c != nil {
			out = append(out, c.Ctename)
		}
	}
	return out
}

// isValues reports whether a SELECT is a bare VALUES list.
func isValues(sel *pg_query.SelectStmt) bool {
	return sel != nil && len(sel.ValuesLists) > 0 && len(sel.FromClause) == 0 && sel.WithClause == nil &&
		len(sel.SortClause) == 0 && sel.LimitCount == nil && sel.LimitOffset == nil
}

// insertKeys finds the sharding key of each VALUES row.
func (a *analyzer) insertKeys(target *instance, sel *pg_query.SelectStmt, cols []string) *insertRows {
	key := target.key
	if len(cols) == 0 {
		cols = nil
		if a.r.catalog != nil {
			cols = a.r.catalog(target.rv.Schemaname, target.rv.Relname)
		}
		if cols == nil {
			a.fail(unsupported(fmt.Sprintf("Name the columns: INSERT INTO %s (%s, …) VALUES ….", target.name, key.column),
				"INSERT into sharded table %s without a column list: the proxy does not know the table's column order", target.name))
			return nil
		}
	}
	idx := slices.Index(cols, key.column)
	if idx < 0 {
		a.fail(unsupported("Give the sharding key a value in the INSERT.",
			"INSERT into sharded table %s does not set its sharding column %q", target.name, key.column))
		return nil
	}
	ir := &insertRows{key: key, rows: make([]operand, 0, len(sel.ValuesLists))}
	for i, row := range sel.ValuesLists {
		items := row.GetList().GetItems()
		if idx >= len(items) {
			a.hardFail(wire.Errorf(wire.SyntaxError, "INSERT has more target columns than expressions"))
			return nil
		}
		o, err := insertOperand(key, items[idx])
		if err != nil {
			var ke *sharding.KeyError
			if errors.As(err, &ke) {
				a.hardFail(keyError(err))
			} else if we, ok := wire.AsError(err); ok && we.Code == wire.CheckViolation {
				a.hardFail(err)
			} else {
				a.fail(unsupported(fmt.Sprintf("Give column %s of each row a constant or a parameter.", key.column),
					"cannot route row %d of INSERT into sharded table %s: %v", i+1, target.name, err))
			}
			return nil
		}
		ir.rows = append(ir.rows, o)
	}
	return ir
}

// insertOperand reads the sharding key of one VALUES row.
func insertOperand(k *keyFunc, n *pg_query.Node) (operand, error) {
	if n.GetSetToDefault() != nil {
		return operand{}, errors.New("its sharding key is DEFAULT")
	}
	n, textOnly, ok := stripCasts(k, n, false)
	if !ok {
		return operand{}, errors.New("its sharding key is cast to another type")
	}
	switch {
	case n.GetParamRef() != nil && n.GetParamRef().Number >= 1:
		return operand{kind: opParam, param: int(n.GetParamRef().Number) - 1, textOnly: textOnly}, nil
	case n.GetAConst() != nil:
		c := n.GetAConst()
		// A numeric literal too large for int4 is a Float node too; only a
		// fraction or an exponent makes it a non-integer.
		if f, ok := c.Val.(*pg_query.A_Const_Fval); ok && typeFamily(k.typ) == intFamily && strings.ContainsAny(f.Fval.GetFval(), ".eE") {
			return operand{}, errors.New("its sharding key is not an integer")
		}
		o, err := constOperand(k, c)
		if err != nil {
			return operand{}, err
		}
		if o.kind == opNone {
			text, null, _ := constText(c)
			key := sharding.Null
			if !null {
				key, _ = sharding.ParseKey(k.typ, text)
			}
			return operand{}, noShardError(k, key, sharding.ErrNoShard)
		}
		return o, nil
	}
	return operand{}, errors.New("its sharding key is an expression")
}

// pin adds the group of a table in a sharded schema.
func (a *analyzer) pin(in *instance) {
	o := operand{kind: opShard, shard: in.shard}
	if in.class == pathTable {
		o = operand{kind: opPath}
	}
	a.groups = append(a.groups, &group{cond: leaf(nil, []operand{o}), tables: []string{in.name}, nested: in.nested})
}

// InsertSQL returns the statement for the given rows of a multi-row INSERT
// … VALUES, as split by Plan.InsertRows: the INSERT with only those rows,
// its parameters renumbered from $1, and for each new parameter the index
// of the client's parameter that supplies its value.
func (s *Statement) InsertSQL(rows []int) (sql string, params []int, err error) {
	if len(s.parts) != 1 || s.parts[0].insert == nil {
		return "", nil, errors.New("router: InsertSQL: not a single INSERT … VALUES into a sharded table")
	}
	stmt := proto.Clone(s.parts[0].node).(*pg_query.Node)
	sel := stmt.GetInsertStmt().SelectStmt.GetSelectStmt()
	all := sel.ValuesLists
	sel.ValuesLists = make([]*pg_query.Node, 0, len(rows))
	for _, i := range rows {
		if i < 0 || i >= len(all) {
			return "", nil, fmt.Errorf("router: InsertSQL: no row %d", i)
		}
		sel.ValuesLists = append(sel.ValuesLists, all[i])
	}
	// Renumber in order of first use, so that every remaining parameter is
	// referenced and their types can be inferred.
	renumber := map[int32]int32{}
	walk(stmt, func(n *pg_query.Node) bool {
		if p := n.GetParamRef(); p != nil {
			to, ok := renumber[p.Number]
			if !ok {
				to = int32(len(renumber) + 1)
				renumber[p.Number] = to
				params = append(params, int(p.Number)-1)
			}
			p.Number = to
		}
		return true
	})
	sql, err = deparse(s.version, stmt)
	if err != nil {
		return "", nil, fmt.Errorf("router: InsertSQL: %w", err)
	}
	return sql, params, nil
}

// copy analyzes COPY.
func (a *analyzer) copy(p *part, cs *pg_query.CopyStmt) {
	if cs.Query != nil {
		if sel := cs.Query.GetSelectStmt(); sel != nil {
			a.rowScope = true // its rows are the shards' rows together
			sc := a.query(sel, "")
			a.group()
			if len(a.groups) > 0 {
				a.copyOut(p, cs, sel, sc)
			}
		} else {
			p.write = true
			a.stmt(cs.Query, "COPY")
		}
		return
	}
	in := a.table(cs.Relation, "")
	if in == nil {
		return
	}
	cols := names(cs.Attlist)
	a.resolveUnknown(&scope{entries: []entry{{name: cs.Relation.Relname, inst: in}}}, cols...)
	if !cs.IsFrom {
		switch in.class {
		case shardedTable:
			p.kind = All
		case pinnedTable, pathTable:
			a.pin(in)
		}
		return
	}
	p.write = true
	a.write(in)
	p.copy = copyOptions(cs.Options)
	switch in.class {
	case pinnedTable, pathTable:
		a.pin(in)
	case shardedTable:
		if cs.Filename != "" || cs.IsProgram {
			a.fail(unsupported("Use COPY … FROM STDIN.", "COPY into sharded table %s from a file on the server", in.name))
			return
		}
		if len(cols) == 0 && a.r.catalog != nil {
			cols = a.r.catalog(in.rv.Schemaname, in.rv.Relname)
		}
		if len(cols) == 0 {
			a.fail(unsupported(fmt.Sprintf("Name the columns: COPY %s (%s, …) FROM STDIN.", in.name, in.key.column),
				"COPY into sharded table %s without a column list: the proxy does not know the table's column order", in.name))
			return
		}
		p.copy.Column = slices.Index(cols, in.key.column)
		if p.copy.Column < 0 {
			a.fail(unsupported("Include the sharding column in the COPY.", "COPY into sharded table %s does not include its sharding column %q", in.name, in.key.column))
			return
		}
		p.copy.key, p.copyKey, p.kind = in.key, in.key, All
		p.copy.Table, p.copy.KeyName, p.copy.Fields = in.rv.Relname, in.key.column, len(cols)
	}
}

// copyOut plans COPY (sel) TO of a query over sharded tables: when its
// rows must be merged (ORDER BY, LIMIT, aggregates, DISTINCT, set
// operations), the shards run sel merged as a SELECT and the executor
// writes the rows as COPY data (copyout.go), for COPY … TO STDOUT; to a
// file or program on the server it is refused.
func (a *analyzer) copyOut(p *part, cs *pg_query.CopyStmt, sel *pg_query.SelectStmt, sc *scope) {
	var m *Merge
	var err error
	if a.branches > 0 {
		m, err = unionMerge(sel, a.version)
	} else {
		m, err = buildMerge(sel, a.version, a.topKey(sc, sel))
	}
	if m == nil && err == nil {
		return // the shards' COPY data, concatenated
	}
	refuse := unsupported(hintOneShard, "COPY of a query whose rows must be merged across shards (ORDER BY, LIMIT, aggregates, DISTINCT) to a file or program on the server")
	if err != nil || cs.Filename != "" || cs.IsProgram {
		if err == nil {
			err = refuse
		}
		p.fanout = err
		return
	}
	if m.Rewritten == "" {
		if m.Rewritten, err = deparse(a.version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}); err != nil {
			p.fanout = err
			return
		}
	}
	p.merge, p.copyOut = m, &CopyOut{stmt: cs} // finishCopyOut reads it once p.text is known
}

// copyOptions reads the options of COPY … FROM.
func copyOptions(opts []*pg_query.Node) *Copy {
	c := &Copy{Format: "text", Column: -1}
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		switch v := str(d.Arg); d.Defname {
		case "format":
			c.Format = strings.ToLower(v)
		case "delimiter":
			c.Delimiter = v
		case "null":
			c.Null = v
		case "quote":
			c.Quote = v
		case "escape":
			c.Escape = v
		case "header":
			c.Header = d.Arg == nil || strings.EqualFold(v, "match") || defBool(d.Arg)
		}
	}
	return c
}
