package querygen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// expr is a generated SQL expression and what the generator knows of its
// value.
type expr struct {
	sql string
	fam family
	// variant: equal values may be spelled differently (see column).
	variant bool
	// agg: the expression holds an aggregate.
	agg bool
}

// colRef is a column of a table of the query's FROM.
type colRef struct {
	t *table
	c *column
}

func (r colRef) expr() expr {
	return expr{sql: r.t.alias + "." + r.c.name, fam: r.c.fam, variant: r.c.variant}
}

// minMaxable reports whether min and max take e and answer the same
// spelling on one server and across shards.
func (e expr) minMaxable() bool {
	switch e.fam {
	case famBool, famChar, famBytea, famUUID:
		return false // PostgreSQL 15 has no min or max of these
	}
	return !e.variant
}

// summable reports whether sum and avg take e and add exactly: never
// floats, whose sums depend on the order of the rows.
func (e expr) summable() bool { return e.fam == famInt || e.fam == famNumeric }

// rowExpr is a column of c, or an expression over it that cannot fail
// on any of the column's values (no integer arithmetic that could
// overflow, no date arithmetic near the ends of the range).
func (b *builder) rowExpr(r colRef) expr {
	e := r.expr()
	if b.rng.IntN(100) < 55 {
		return e
	}
	f := func(format string, fam family, variant bool) expr {
		return expr{sql: fmt.Sprintf(format, e.sql), fam: fam, variant: variant}
	}
	switch e.fam {
	case famInt:
		return pick(b, f("%s %% 3", famInt, false), f("(%s::numeric * 2)", famNumeric, false), f("(%s::numeric + 0.5)", famNumeric, false), f("%s::text", famText, false))
	case famNumeric:
		return pick(b, f("(%s + 1)", famNumeric, e.variant), f("round(%s, 1)", famNumeric, false), f("%s::text", famText, false), f("trunc(%s)", famNumeric, false))
	case famFloat:
		return pick(b, f("(%s + 1)", famFloat, false), f("floor(%s)", famFloat, false), f("%s::text", famText, false))
	case famBool:
		return pick(b, f("(NOT %s)", famBool, false), f("(%s IS NULL)", famBool, false), f("coalesce(%s, false)", famBool, false))
	case famText:
		// A varchar column is collated as text: compared with a text
		// constant, (vc COLLATE "C") gets its cast to text under the
		// COLLATE in PostgreSQL's tree, so that HAVING (vc COLLATE "C") <>
		// 'x' no longer matches the GROUP BY key (42803).
		collated := `(%s COLLATE "C")`
		if strings.HasPrefix(r.c.typ, "varchar") {
			collated = `(%s::text COLLATE "C")`
		}
		return pick(b, f("lower(%s)", famText, false), f("upper(%s)", famText, false), f("(%s || '!')", famText, false),
			f("length(%s)", famInt, false), f("substr(%s, 1, 1)", famText, false), f("coalesce(%s, '-')", famText, false),
			f(collated, famText, false))
	case famChar:
		return pick(b, f("%s::text", famText, false), f("(%s = 'a')", famBool, false))
	case famBytea:
		return pick(b, f("length(%s)", famInt, false), f("md5(%s)", famText, false), f("(%s || '\\x7f'::bytea)", famBytea, false))
	case famUUID:
		return pick(b, f("%s::text", famText, false), f("substr(%s::text, 1, 4)", famText, false))
	case famDate:
		return pick(b, f("extract(year from %s)", famNumeric, false), f("(%s + 7)", famDate, false), f("%s::text", famText, false))
	case famTimestamp:
		return pick(b, f("date_trunc('day', %s)", famTimestamp, false), f("%s::date", famDate, false), f("extract(epoch from %s)", famNumeric, false))
	case famInterval:
		return pick(b, f("%s::text", famText, false), f("justify_interval(%s)", famInterval, true), f("extract(epoch from %s)", famNumeric, false))
	case famInet:
		return pick(b, f("family(%s)", famInt, false), f("masklen(%s)", famInt, false), f("host(%s)", famText, false), f("network(%s)", famInet, false))
	case famEnum:
		return pick(b, f("%s::text", famText, false), f("(%s > 'meh')", famBool, false))
	case famIntArray:
		return pick(b, f("cardinality(%s)", famInt, false), f("%s[1]", famInt, false), f("array_length(%s, 1)", famInt, false))
	case famTextArray:
		return pick(b, f("cardinality(%s)", famInt, false), f("%s[1]", famText, false), f("array_to_string(%s, '/')", famText, false))
	}
	return e
}

// pick returns one of xs.
func pick[T any](b *builder, xs ...T) T { return xs[b.rng.IntN(len(xs))] }

// anyExpr is a row expression over a random column of the query.
func (b *builder) anyExpr() expr { return b.rowExpr(pick(b, b.cols...)) }

// exprWhere is a row expression for which ok holds, or false when a few
// tries find none.
func (b *builder) exprWhere(ok func(expr) bool) (expr, bool) {
	for range 20 {
		if e := b.anyExpr(); ok(e) {
			return e, true
		}
	}
	return expr{}, false
}

// aggregate is an aggregate call over the query's columns.
func (b *builder) aggregate() expr {
	filter := ""
	if b.rng.IntN(100) < 12 {
		filter = " FILTER (WHERE " + b.predicate() + ")"
	}
	switch n := b.rng.IntN(100); {
	case n < 14:
		return expr{sql: "count(*)" + filter, fam: famInt, agg: true}
	case n < 26:
		return expr{sql: "count(" + b.anyExpr().sql + ")" + filter, fam: famInt, agg: true}
	case n < 36:
		return b.distinctAggregate(filter)
	case n < 56:
		if e, ok := b.exprWhere(expr.summable); ok {
			return expr{sql: "sum(" + e.sql + ")" + filter, fam: famNumeric, variant: e.variant || e.fam == famNumeric, agg: true}
		}
	case n < 63:
		if e, ok := b.exprWhere(expr.summable); ok {
			return expr{sql: "avg(" + e.sql + ")" + filter, fam: famNumeric, variant: true, agg: true}
		}
	case n < 66:
		// Of integers and numerics only: over floats the last digits
		// depend on the order of the rows.
		if e, ok := b.exprWhere(expr.summable); ok {
			f := pick(b, "stddev(", "stddev_samp(", "stddev_pop(", "variance(", "var_samp(", "var_pop(")
			return expr{sql: f + e.sql + ")" + filter, fam: famNumeric, variant: true, agg: true}
		}
	case n < 70:
		if e, ok := b.exprWhere(func(e expr) bool { return e.fam == famInterval }); ok {
			return expr{sql: "sum(" + e.sql + ")" + filter, fam: famInterval, variant: true, agg: true}
		}
	case n < 90:
		if e, ok := b.exprWhere(expr.minMaxable); ok {
			b.compares(e)
			e.sql = pick(b, "min(", "max(", "max(DISTINCT ") + e.sql + ")" + filter
			e.agg = true
			return e
		}
	default:
		if e, ok := b.exprWhere(func(e expr) bool { return e.fam == famBool }); ok {
			return expr{sql: pick(b, "bool_and(", "bool_or(", "every(") + e.sql + ")" + filter, fam: famBool, agg: true}
		}
	}
	return expr{sql: "count(*)", fam: famInt, agg: true}
}

// distinctAggregate is count, sum or avg of DISTINCT values: mostly of
// the value and FILTER of the query's other DISTINCT aggregates, and now
// and then of another one, which the proxy runs as grouping sets of one
// statement per shard (docs/routing.md "DISTINCT aggregates").
func (b *builder) distinctAggregate(filter string) expr {
	return b.distinctAggregateOf(filter, b.distinctArg == nil || b.rng.IntN(100) < 30)
}

// distinctAggregateOf is distinctAggregate of a value of its own when
// fresh, else of the query's first DISTINCT value and FILTER.
func (b *builder) distinctAggregateOf(filter string, fresh bool) expr {
	arg := b.distinctArg
	if fresh || arg == nil {
		e := b.anyExpr()
		if arg == nil {
			b.distinctArg, b.distinctFilter = &e, filter
		}
		arg = &e
	} else {
		filter = b.distinctFilter
	}
	b.compares(*arg)
	if !slices.Contains(b.distinctArgs, arg.sql) {
		b.distinctArgs = append(b.distinctArgs, arg.sql)
	}
	if arg.summable() && !arg.variant && b.rng.IntN(2) == 0 {
		return expr{sql: pick(b, "sum", "avg") + "(DISTINCT " + arg.sql + ")" + filter, fam: famNumeric, variant: true, agg: true}
	}
	return expr{sql: "count(DISTINCT " + arg.sql + ")" + filter, fam: famInt, agg: true}
}

// aggOutput is a select-list item of a grouped query: an aggregate, or
// now and then an expression over aggregates that cannot fail.
func (b *builder) aggOutput() expr {
	if b.rng.IntN(100) < 65 {
		return b.aggregate()
	}
	if len(b.groupKeys) > 0 && b.rng.IntN(100) < 25 {
		return b.keyOverAggregate(pick(b, b.groupKeys...).e)
	}
	a := b.aggregate()
	switch a.fam {
	case famInt, famNumeric:
		return pick(b,
			expr{sql: "coalesce(" + a.sql + ", 0)", fam: famNumeric, variant: a.variant, agg: true},
			expr{sql: "round(" + a.sql + ", 2)", fam: famNumeric, agg: true},
			expr{sql: "(" + a.sql + "::numeric + count(*))", fam: famNumeric, variant: a.variant, agg: true},
			expr{sql: "count(*)::int", fam: famInt, agg: true},
			expr{sql: "CASE WHEN " + a.sql + " > 2 THEN 'many' ELSE 'few' END", fam: famText, agg: true},
			// Division by zero when a group has no non-NULL value: an
			// error PostgreSQL raises whatever the order of the rows.
			b.division(a),
			b.spread())
	case famText:
		return expr{sql: "(" + a.sql + " || '!')", fam: famText, agg: true}
	case famBool:
		return pick(b,
			expr{sql: "(NOT " + a.sql + ")", fam: famBool, agg: true},
			expr{sql: "(" + a.sql + " OR count(*) > 3)", fam: famBool, agg: true})
	}
	return expr{sql: "CASE WHEN count(*) > 1 THEN " + a.sql + " END", fam: a.fam, variant: a.variant, agg: true}
}

// keyOverAggregate is an expression over an aggregate and grouping key
// k, which the proxy computes with the key as a hidden column.
func (b *builder) keyOverAggregate(k expr) expr {
	n := b.rng.IntN(4)
	switch {
	case n == 0 && k.fam == famInt:
		return expr{sql: "((" + k.sql + ")::numeric + count(*))", fam: famNumeric, agg: true}
	case n == 1 && k.fam == famText:
		return expr{sql: "(" + k.sql + " || count(*))", fam: famText, agg: true}
	case n == 2:
		return expr{sql: fmt.Sprintf("CASE WHEN count(*) > %d THEN %s END", b.rng.IntN(4), k.sql), fam: k.fam, variant: k.variant, agg: true}
	}
	m, ok := b.exprWhere(expr.minMaxable)
	if !ok {
		m = k
	}
	b.compares(m)
	// A text key is used as it is: a cast of a grouped (x COLLATE "C")
	// goes under the COLLATE in PostgreSQL's tree and no longer matches
	// the GROUP BY expression (42803).
	key := k.sql
	if k.fam != famText {
		key = "(" + key + ")::text"
	}
	return expr{sql: "(coalesce(" + key + ", '') || max(" + m.sql + ")::text)", fam: famText, agg: true}
}

// division is a divided by a count that is 0 in groups without a
// non-NULL value: division by zero, an error PostgreSQL raises whatever
// the order of the rows, though not always under a LIMIT (see limit).
func (b *builder) division(a expr) expr {
	b.mayFail = true
	return expr{sql: "(" + a.sql + " / count(" + b.anyExpr().sql + "))", fam: famNumeric, variant: true, agg: true}
}

// spread is max(x) - min(x) over an integer or numeric expression, in
// numeric so that the extremes of int8 do not overflow.
func (b *builder) spread() expr {
	e, ok := b.exprWhere(func(e expr) bool { return e.summable() && !e.variant })
	if !ok {
		return expr{sql: "count(*)", fam: famInt, agg: true}
	}
	return expr{sql: fmt.Sprintf("(max(%s)::numeric - min(%s))", e.sql, e.sql), fam: famNumeric, agg: true}
}

// havingTerm is a condition of HAVING, over aggregates or the query's
// grouping keys.
func (b *builder) havingTerm(keys []item) string {
	switch b.rng.IntN(10) {
	case 0:
		return "count(*) > " + b.clauseParam(int64(b.rng.IntN(6)), true)
	case 1:
		return fmt.Sprintf("count(*) >= %d AND count(%s) > 0", b.rng.IntN(4), b.anyExpr().sql)
	case 2:
		if e, ok := b.exprWhere(func(e expr) bool { return e.summable() && !e.variant }); ok {
			return fmt.Sprintf("%s(%s) %s %s", pick(b, "sum", "avg"), e.sql, pick(b, ">", "<", ">=", "<>"), pick(b, "0", "2", "-1", "2.5", "'3'"))
		}
	case 3:
		if e, ok := b.exprWhere(b.havingComparable); ok {
			b.compares(e)
			return fmt.Sprintf("%s(%s) %s %s", pick(b, "min", "max"), e.sql, pick(b, "<", ">", "=", "<>"), b.constantFor(e))
		}
	case 4:
		return fmt.Sprintf("count(*) > 1 OR count(%s) = 0", b.anyExpr().sql)
	case 5:
		if e, ok := b.exprWhere(func(e expr) bool { return e.fam == famBool }); ok {
			spellings := []string{"'t'", "'f'", "true", "false", "'true'", "'yes'", "'on'", "'1'", "'no'", "'off'", "'0'"}
			return fmt.Sprintf("%s(%s) %s %s", pick(b, "bool_or", "bool_and"), e.sql, pick(b, "=", "<>"), pick(b, spellings...))
		}
	case 6, 7:
		// A grouping key compared with a constant: the proxy evaluates it.
		var ks []item
		for _, k := range keys {
			if b.havingComparable(k.e) {
				ks = append(ks, k)
			}
		}
		if len(ks) > 0 {
			k := pick(b, ks...)
			b.compares(k.e)
			return fmt.Sprintf("%s %s %s", k.e.sql, pick(b, "<", ">", "=", "<>", "<=", ">="), b.constantFor(k.e))
		}
	case 8:
		return pick(b, "count(*) > '2'::int", "NOT (count(*) > 2)", "count(*) BETWEEN 2 AND 6", "count(*) IN (1, 3)")
	}
	if e, ok := b.exprWhere(func(e expr) bool { return e.fam == famInt }); ok {
		return fmt.Sprintf("sum(%s) > 2 * count(*)", e.sql)
	}
	return "count(*) > 0"
}

// havingComparable reports whether min and max of e can be compared
// with a constant in HAVING.
func (b *builder) havingComparable(e expr) bool {
	return e.minMaxable()
}

// constantFor is a constant to compare e with: a value of its column when
// e is one, else a small one of its family.
func (b *builder) constantFor(e expr) string {
	for _, r := range b.cols {
		if r.expr().sql == e.sql {
			return pick(b, r.c.values...)
		}
	}
	switch e.fam {
	case famInt, famNumeric, famFloat:
		return pick(b, "0", "1", "3", "-1", "2.5")
	case famText:
		return pick(b, textValues...)
	case famBool:
		return pick(b, "true", "false")
	case famDate:
		return "'2000-01-01'"
	case famTimestamp:
		return "'2000-01-01 01:00:00'"
	case famInet:
		return "'10.0.0.0/8'"
	}
	return "NULL"
}

// predicate is a WHERE (or FILTER) condition on one column: NULL tests,
// comparisons and IN lists with the column's own values.
func (b *builder) predicate() string {
	r := pick(b, b.cols...)
	e := r.expr()
	lit := func() string { return pick(b, r.c.values...) }
	switch n := b.rng.IntN(100); {
	case n < 15:
		return e.sql + pick(b, " IS NULL", " IS NOT NULL")
	case e.fam == famBool:
		return pick(b, e.sql, "NOT "+e.sql, e.sql+" IS NOT TRUE")
	case n < 55:
		return fmt.Sprintf("%s %s %s", e.sql, pick(b, "=", "<>", "<", "<=", ">", ">="), lit())
	case n < 75:
		return fmt.Sprintf("%s IN (%s, %s)", e.sql, lit(), lit())
	case n < 85 && e.fam == famText:
		return fmt.Sprintf("%s LIKE %s", e.sql, pick(b, "'a%'", "'%b'", "'_'", "''"))
	}
	return fmt.Sprintf("%s %s %s", e.sql, pick(b, "=", "<", ">"), lit())
}

// keyPredicate constrains a sharding key: terms the proxy routes by, and
// some it reads as no constraint.
func (b *builder) keyPredicate(alias string) string {
	key := func() int64 {
		n, _ := strconv.ParseInt(pick(b, shardKeys...), 10, 64) // shardKeys are decimal int64s
		return n
	}
	k := func() string { return b.bindableInt(key()) }
	col := alias + ".shard_key"
	switch b.rng.IntN(8) {
	case 0:
		return col + " = " + k()
	case 1:
		return fmt.Sprintf("%s IN (%s, %s, %s)", col, k(), k(), k())
	case 2:
		x, y := key(), key()
		return fmt.Sprintf("%s = ANY(%s)", col, b.bindable(fmt.Sprintf("'{%d,%d}'", x, y), []int64{x, y}))
	case 3:
		return fmt.Sprintf("(%s = %s OR %s = '%d')", col, k(), col, key())
	case 4:
		return col + " IS NULL"
	case 5:
		return fmt.Sprintf("%s > %s", col, k())
	case 6:
		x := key()
		return fmt.Sprintf("%s = %s::bigint", col, b.bindable(fmt.Sprintf("'%d'", x), x))
	}
	// Literals only: PostgreSQL cannot type ARRAY[$1, $2] from its use.
	return fmt.Sprintf("%s = ANY(ARRAY[%d, %d])", col, key(), key())
}

// where is a WHERE clause, or "".
func (b *builder) where() string {
	var terms []string
	if len(b.keyAliases) > 0 && b.rng.IntN(100) < 35 {
		terms = append(terms, b.keyPredicate(pick(b, b.keyAliases...)))
	}
	if len(b.keyAliases) > 0 && b.rng.IntN(100) < 8 {
		terms = append(terms, b.subquery(pick(b, b.keyAliases...)))
	}
	if b.rng.IntN(100) < 50 {
		terms = append(terms, b.predicate())
		if b.rng.IntN(100) < 30 {
			terms = append(terms, b.predicate())
		}
	}
	if len(terms) == 0 {
		return ""
	}
	if len(terms) > 1 && b.rng.IntN(100) < 20 {
		for _, t := range terms {
			if strings.Contains(t, " IN (SELECT ") {
				b.refusable("IN (subquery) in an OR: docs/routing.md reads it as a term of WHERE only")
			}
		}
		return " WHERE (" + strings.Join(terms, " OR ") + ")"
	}
	return " WHERE " + strings.Join(terms, " AND ")
}

// subquery is a WHERE term with a subquery the proxy runs on each shard:
// over a table co-located with alias's (correlated on the sharding key,
// or IN on it), or over the omni table.
func (b *builder) subquery(alias string) string {
	other, o := "events", "e2"
	cond := "e2.grp > 1"
	if alias != "a" {
		other, o, cond = "items", "a2", "a2.b"
	}
	switch b.rng.IntN(4) {
	case 0:
		return fmt.Sprintf("EXISTS (SELECT 1 FROM %s %s WHERE %s.shard_key = %s.shard_key AND %s)", other, o, o, alias, cond)
	case 1:
		return fmt.Sprintf("NOT EXISTS (SELECT 1 FROM %s %s WHERE %s.shard_key = %s.shard_key)", other, o, o, alias)
	case 2:
		return fmt.Sprintf("%s.shard_key IN (SELECT %s.shard_key FROM %s %s WHERE %s)", alias, o, other, o, cond)
	}
	return fmt.Sprintf("%s.shard_key %% 7 IN (SELECT l2.code FROM lookup l2)", alias)
}

// scalarSubquery is a select-list item: a correlated count over the
// table co-located with alias's.
func scalarSubquery(alias string) expr {
	other, o := "events", "e2"
	if alias != "a" {
		other, o = "items", "a2"
	}
	return expr{sql: fmt.Sprintf("(SELECT count(*) FROM %s %s WHERE %s.shard_key = %s.shard_key)", other, o, o, alias), fam: famInt}
}
