package querygen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Case is one generated query.
type Case struct {
	// SQL is a SELECT over the schema.
	SQL string
	// Ordered: its ORDER BY orders its rows totally (every output column,
	// equal values spelled alike), so rows compare in order; otherwise a
	// comparison sorts them first.
	Ordered bool
	// ParamSQL is SQL with some of its constants (sharding keys, LIMIT
	// and OFFSET, HAVING counts) as parameters $1, $2, … of values
	// Params, for the extended protocol; "" when SQL has none.
	ParamSQL string
	Params   []any
	// SortsText: the proxy may compare text, enum or text[] values of the
	// query across shards (ORDER BY, min and max, GROUP BY, DISTINCT,
	// HAVING), which it does in the database's collation only when it
	// can read the shards' catalog (it used to refuse them in a row-limited Execute).
	SortsText bool
	// MayRefuse names the construct for which a proxy may answer 0A000
	// by design (docs/routing.md "What is refused"), or is "".
	MayRefuse string
}

// Generator generates queries over the schema. Query(i) depends only on
// Seed, Gaps and i, so any one query replays without the others.
type Generator struct {
	Seed uint64
	// Gaps enables constructs that knownGaps excludes, by name.
	Gaps []string
}

// Query returns the i-th query of the generator's sequence.
func (g Generator) Query(i int) Case {
	b := &builder{rng: rand.New(rand.NewPCG(g.Seed, uint64(i))), gaps: g.Gaps}
	return b.query()
}

// builder builds one query.
type builder struct {
	rng  *rand.Rand
	gaps []string
	// cols are the columns of the FROM's tables; keyAliases the aliases of
	// its sharded tables.
	cols       []colRef
	keyAliases []string
	// distinctArg is the argument of the query's first DISTINCT
	// aggregate, which most of the others share, and distinctFilter its
	// FILTER clause.
	distinctArg    *expr
	distinctFilter string
	// distinctArgs are the different DISTINCT values of the query.
	distinctArgs []string
	mayRefuse    string
	ordered      bool
	// params are the constants of the query that ParamSQL binds.
	params []param
	// groupKeys are the grouping keys of a grouped query, which
	// expressions over aggregates may read.
	groupKeys []item
	// mayFail: the query may fail with an error PostgreSQL raises
	// whatever the order of the rows.
	mayFail bool
	// sortsText: see Case.SortsText.
	sortsText bool
	// outputOrder: ORDER BY must name output columns as they are
	// (DISTINCT, DISTINCT ON).
	outputOrder bool
}

// item is an output column.
type item struct {
	e     expr
	alias string
}

// allowed reports whether construct gap, which knownGaps excludes, is
// enabled; constructs knownGaps does not list always are.
func (b *builder) allowed(gap string) bool {
	if _, known := knownGaps[gap]; !known {
		return true
	}
	return slices.Contains(b.gaps, gap)
}

// refusable marks the query as one a proxy may refuse, for reason.
func (b *builder) refusable(reason string) {
	if b.mayRefuse == "" {
		b.mayRefuse = reason
	}
}

func (b *builder) query() Case {
	from := b.from()
	var sql string
	grouped := false
	switch n := b.rng.IntN(100); {
	case n < 35:
		sql = b.plain(from)
	case n < 80:
		sql, grouped = b.grouped(from), true
	case n < 90:
		sql = b.distinct(from)
	default:
		sql = b.distinctOn(from)
	}
	if !grouped && b.rng.IntN(100) < 12 {
		// How ORMs count a query's rows: the proxy merges the query on
		// its own and counts its rows (router/count.go). (Not grouped
		// ones: over expressions over aggregates it refuses.)
		sql = "SELECT count(*) AS n FROM (" + sql + ") counted"
		b.ordered, b.sortsText = true, false
	}
	c := Case{Ordered: b.ordered, SortsText: b.sortsText, MayRefuse: b.mayRefuse}
	c.SQL, c.ParamSQL, c.Params = b.render(sql)
	return c
}

// from picks the FROM clause and fills b.cols.
func (b *builder) from() string {
	items, events, lookup := tableNamed("items"), tableNamed("events"), tableNamed("lookup")
	var ts []*table
	var sql string
	switch n := b.rng.IntN(100); {
	case n < 52:
		ts, sql = []*table{items}, "items a"
	case n < 58:
		// A subquery in FROM that filters per row: each shard computes
		// its own rows of it (docs/routing.md, Joins and subqueries).
		ts, sql = []*table{items}, "(SELECT * FROM items WHERE shard_key IS NOT NULL) a"
	case n < 62:
		ts, sql = []*table{items, lookup}, "(SELECT * FROM items) a JOIN lookup l ON l.code = a.i2"
	case n < 72:
		ts, sql = []*table{items, lookup}, "items a JOIN lookup l ON l.code = a.i2"
	case n < 77:
		ts, sql = []*table{items, lookup}, "items a LEFT JOIN lookup l ON l.code = a.i2"
	case n < 83:
		ts, sql = []*table{items, events}, "items a JOIN events e ON e.shard_key = a.shard_key"
	case n < 86:
		ts, sql = []*table{items, events}, "items a LEFT JOIN events e ON e.shard_key = a.shard_key"
	case n < 88:
		ts, sql = []*table{items, events}, "items a JOIN events e USING (shard_key)"
	case n < 96:
		ts, sql = []*table{events}, "events e"
	default:
		ts, sql = []*table{lookup}, "lookup l"
	}
	for _, t := range ts {
		if t.name != "lookup" {
			b.keyAliases = append(b.keyAliases, t.alias)
		}
		for i := range t.cols {
			b.cols = append(b.cols, colRef{t: t, c: &t.cols[i]})
		}
	}
	return sql
}

// selectList renders items, aliased where they have one.
func selectList(items []item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.e.sql
		if it.alias != "" {
			parts[i] += " AS " + it.alias
		}
	}
	return strings.Join(parts, ", ")
}

// outputs draws n items with gen, a third of them aliased.
func (b *builder) outputs(n int, gen func() expr) []item {
	items := make([]item, n)
	for i := range items {
		items[i].e = gen()
		if b.rng.IntN(3) == 0 {
			items[i].alias = fmt.Sprintf("%s%d", b.aliasPrefix(), i+1)
		}
	}
	return items
}

// aliasPrefix starts the names of output columns: c, as clients often
// name them (the proxy's collation probe once named its own columns so),
// or o.
func (b *builder) aliasPrefix() string {
	return pick(b, "c", "o")
}

// plain is a SELECT of row expressions, ordered or not.
func (b *builder) plain(from string) string {
	items := b.outputs(1+b.rng.IntN(5), b.anyExpr)
	if len(b.keyAliases) > 0 && b.rng.IntN(100) < 6 {
		items[0].e = scalarSubquery(pick(b, b.keyAliases...))
	}
	extra := ""
	if b.rng.IntN(100) < 10 {
		// The proxy combines the shards' totals (a paginated list's
		// total column).
		extra = ", " + pick(b, "count(*)", "count("+b.anyExpr().sql+")") + " OVER () AS total"
	}
	if b.rng.IntN(100) < 6 {
		// A running aggregate (the default frame counts a row's peers):
		// computed by the proxy when the query's ORDER BY begins with the
		// window's, or is absent; refused otherwise.
		ord := b.anyExpr()
		b.compares(ord)
		agg := "count(*)"
		if e, ok := b.exprWhere(expr.minMaxable); ok && b.rng.IntN(3) > 0 {
			agg = pick(b, "min(", "max(") + e.sql + ")"
			b.compares(e)
		} else if e, ok := b.exprWhere(func(e expr) bool { return !e.variant }); ok {
			agg = "count(" + e.sql + ")"
		}
		dir := pick(b, "", " DESC", " NULLS FIRST", " DESC NULLS LAST")
		extra += ", " + agg + " OVER (ORDER BY " + ord.sql + dir + ") AS running"
		if b.rng.IntN(100) < 60 {
			// In the window's order: rows with equal keys come in any
			// order (compared as a set).
			return "SELECT " + selectList(items) + extra + " FROM " + from + b.where() + " ORDER BY " + ord.sql + dir
		}
		b.refusable("a running window whose order the query's ORDER BY does not begin with")
	}
	sql := "SELECT " + selectList(items) + extra + " FROM " + from + b.where()
	return sql + b.orderLimit(items, orderPlain)
}

// grouped is a SELECT with aggregates, GROUP BY or both.
func (b *builder) grouped(from string) string {
	var keys []item
	for range b.rng.IntN(3) {
		if e, ok := b.exprWhere(func(e expr) bool { return !e.variant }); ok {
			keys = append(keys, item{e: e})
			b.compares(e)
		}
	}
	b.groupKeys = keys
	items := b.groupedItems(keys)
	distinct := b.rng.IntN(100) < 8
	sql := "SELECT "
	if distinct {
		sql += "DISTINCT "
		if items = nonVariant(items); len(items) == 0 {
			items = []item{{e: expr{sql: "count(*)", fam: famInt, agg: true}}}
		}
		for _, it := range items {
			b.compares(it.e)
		}
	}
	sql += selectList(items) + " FROM " + from + b.where()
	group := b.groupBy(items, keys)
	if group != "" && b.rng.IntN(100) < 8 {
		// Grouping sets run across shards; a repeated key repeats a
		// set, and DISTINCT aggregates or aggregates with ORDER BY would
		// make the shards group more finely than the sets: both are
		// refused.
		group = strings.Replace(group, " GROUP BY ", pick(b, " GROUP BY ROLLUP (", " GROUP BY CUBE (", " GROUP BY GROUPING SETS ((), "), 1) + ")"
		b.refusable("grouping sets with a repeated key, DISTINCT or ordered aggregates")
	}
	sql += group
	if b.rng.IntN(100) < 35 {
		having := b.havingTerm(keys)
		if b.rng.IntN(100) < 25 {
			op := pick(b, " AND ", " OR ")
			having += op + b.havingTerm(keys)
			// A term may hold an OR of its own (count(*) > 1 OR …).
			if strings.Contains(having, " OR ") && paramToken.MatchString(having) {
				b.refusable("a parameter in a HAVING term other than a comparison")
			}
		}
		sql += " HAVING " + having
	}
	if distinct {
		b.outputOrder = true
		return sql + b.orderLimit(items, orderDistinct)
	}
	return sql + b.orderLimit(items, orderGrouped)
}

// groupedItems are the output columns of a grouped query: most of its
// grouping keys and some aggregates or expressions over them, in a
// random order.
func (b *builder) groupedItems(keys []item) []item {
	aggs := b.outputs(b.rng.IntN(4), b.aggOutput)
	if len(keys) == 0 && len(aggs) == 0 {
		aggs = b.outputs(1, b.aggOutput)
	}
	aggs = append(aggs, b.severalDistinct()...)
	var items []item
	for _, k := range keys {
		if b.rng.IntN(100) < 80 {
			items = append(items, k)
		}
	}
	items = append(items, aggs...)
	b.rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	if len(items) == 0 {
		items = b.outputs(1, b.aggregate)
	}
	b.refusableAggregates(items)
	b.collationTwins(keys)
	return items
}

// collationTwins marks a query refusable whose DISTINCT values, two or
// more, include one expression under two collations, or under another
// collation than a grouping key's (x and (x COLLATE "C")): PostgreSQL
// sorts such grouping sets' rows by the one in place of the other, so the
// proxy refuses them (router/multidistinct.go, checkCollations).
func (b *builder) collationTwins(keys []item) {
	if len(b.distinctArgs) < 2 {
		return
	}
	norm := func(s string) string {
		s = strings.ReplaceAll(s, ` COLLATE "C"`, "")
		return strings.NewReplacer("(", "", ")", "").Replace(s)
	}
	all := slices.Clone(b.distinctArgs)
	for _, k := range keys {
		all = append(all, k.e.sql)
	}
	for i, x := range all {
		for _, y := range all[i+1:] {
			if x != y && norm(x) == norm(y) {
				b.refusable("one expression under two collations in DISTINCT aggregates")
				return
			}
		}
	}
}

// severalDistinct adds, to some grouped queries, DISTINCT aggregates of
// two or three values of their own, some with a FILTER, which the proxy
// runs as grouping sets of one statement per shard.
func (b *builder) severalDistinct() []item {
	if b.rng.IntN(100) >= 12 {
		return nil
	}
	var out []item
	for range 2 + b.rng.IntN(2) {
		filter := ""
		if b.rng.IntN(100) < 25 {
			filter = " FILTER (WHERE " + b.predicate() + ")"
		}
		out = append(out, item{e: b.distinctAggregateOf(filter, true)})
	}
	return out
}

// compares records that the proxy may compare values of e across shards.
func (b *builder) compares(e expr) {
	switch e.fam {
	case famText, famEnum, famTextArray:
		b.sortsText = true
	}
}

// nonVariant drops the items whose equal values may be spelled
// differently: DISTINCT would show either spelling.
func nonVariant(items []item) []item {
	var out []item
	for _, it := range items {
		if !it.e.variant {
			out = append(out, it)
		}
	}
	return out
}

// refusableAggregates adds, to a few grouped queries, an aggregate the
// proxy cannot combine, and marks the query.
func (b *builder) refusableAggregates(items []item) {
	if b.rng.IntN(100) >= 3 || len(items) == 0 {
		return
	}
	i := b.rng.IntN(len(items))
	if e, ok := b.exprWhere(func(e expr) bool { return e.fam == famInt }); ok {
		items[i].e = expr{sql: "stddev(" + e.sql + ")", fam: famNumeric, variant: true, agg: true}
		b.refusable("stddev")
	}
}

// groupBy is the GROUP BY of keys, each by its position among items
// when it is one of them (a third of the time) or by its expression.
func (b *builder) groupBy(items, keys []item) string {
	var parts []string
	for _, k := range keys {
		part := k.e.sql
		for i, it := range items {
			if it.e.sql == k.e.sql && b.rng.IntN(3) == 0 {
				part = fmt.Sprint(i + 1)
				break
			}
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	b.rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return " GROUP BY " + strings.Join(parts, ", ")
}

// distinct is a SELECT DISTINCT of row expressions.
func (b *builder) distinct(from string) string {
	items := b.outputs(1+b.rng.IntN(3), func() expr {
		e, ok := b.exprWhere(func(e expr) bool { return !e.variant })
		if !ok {
			return expr{sql: "1", fam: famInt}
		}
		return e
	})
	b.outputOrder = true
	for _, it := range items {
		b.compares(it.e)
	}
	sql := "SELECT DISTINCT " + selectList(items) + " FROM " + from + b.where()
	return sql + b.orderLimit(items, orderDistinct)
}

// distinctOn is a SELECT DISTINCT ON, whose ORDER BY picks the row of
// each key: it always orders totally.
func (b *builder) distinctOn(from string) string {
	keys := b.outputs(1+b.rng.IntN(2), func() expr {
		e, ok := b.exprWhere(func(e expr) bool { return !e.variant })
		if !ok {
			return expr{sql: "1", fam: famInt}
		}
		return e
	})
	// PostgreSQL drops a repeated ORDER BY key, and then finds that it
	// no longer starts with the DISTINCT ON keys.
	keys = slices.CompactFunc(keys, func(x, y item) bool { return x.e.sql == y.e.sql })
	rest := b.outputs(1+b.rng.IntN(3), b.anyExpr)
	if b.rng.IntN(100) < 4 {
		rest[0].e = expr{sql: "count(*)", fam: famInt, agg: true}
		b.refusable("DISTINCT ON with aggregates")
	}
	for i := range rest {
		if rest[i].alias != "" {
			rest[i].alias = fmt.Sprintf("r%d", i+1)
		}
	}
	on := make([]string, len(keys))
	for i, k := range keys {
		on[i] = k.e.sql
	}
	items := append(append([]item{}, keys...), rest...)
	sql := "SELECT DISTINCT ON (" + strings.Join(on, ", ") + ") " + selectList(items) + " FROM " + from + b.where()
	if rest[0].e.agg {
		sql += " GROUP BY " + strings.Join(on, ", ")
		for _, it := range rest[1:] {
			sql += ", " + it.e.sql
		}
	}
	b.outputOrder = true
	order := b.orderTerms(keys, 0, false)
	order = append(order, b.orderTerms(rest, len(keys), false)...)
	b.ordered = true
	return sql + " ORDER BY " + strings.Join(order, ", ") + b.limit(true)
}
