package querygen

import (
	"fmt"
	"strings"
)

// orderLimit is the ORDER BY and LIMIT of a query whose output columns
// are items: a total order (with LIMIT and OFFSET now and then), a
// partial one, or none.
func (b *builder) orderLimit(items []item, k orderKind) string {
	distinct := k == orderDistinct
	switch n := b.rng.IntN(100); {
	case n < 50:
		b.ordered = true
		terms := b.orderTerms(items, 0, distinct)
		if hidden := b.hiddenOrder(k); hidden != "" {
			terms = append([]string{hidden}, terms...)
		}
		return " ORDER BY " + strings.Join(terms, ", ") + b.limit(false)
	case n < 65:
		// A partial order: the comparison sorts the rows, which checks
		// that the proxy accepts the query and returns its rows.
		i := b.rng.IntN(len(items))
		return " ORDER BY " + b.orderTerm(items[i], i+1)
	}
	return ""
}

// orderKind is what a query's ORDER BY may name besides its output
// columns.
type orderKind int

const (
	orderPlain    orderKind = iota // any row expression
	orderGrouped                   // any aggregate
	orderDistinct                  // output columns only (SELECT DISTINCT)
)

// hiddenOrder is, now and then, a first ORDER BY term that is no output
// column: the proxy sorts by a hidden column and strips it.
func (b *builder) hiddenOrder(k orderKind) string {
	if k == orderDistinct || b.rng.IntN(100) >= 30 {
		return ""
	}
	e := b.anyExpr()
	if k == orderGrouped {
		// Not aggOutput: a failing expression here would meet a HAVING
		// chosen before it, and whether PostgreSQL evaluates the sort key
		// of a group that HAVING drops depends on its plan.
		e = b.aggregate()
	}
	b.compares(e)
	return e.sql + b.direction()
}

// orderTerms orders by every item, in a random order, each as its
// position (offset+index+1), its alias or its expression. A variant item
// (equal values spelled differently) is followed by its text, so that
// equal rows are equal byte for byte; distinct queries have none.
func (b *builder) orderTerms(items []item, offset int, distinct bool) []string {
	idx := b.rng.Perm(len(items))
	var terms []string
	for _, i := range idx {
		terms = append(terms, b.orderTerm(items[i], offset+i+1))
		if items[i].e.variant && !distinct {
			b.sortsText = true
			terms = append(terms, "("+items[i].e.sql+")::text"+b.direction())
		}
	}
	return terms
}

// orderTerm is one ORDER BY term for it, at select-list position pos.
func (b *builder) orderTerm(it item, pos int) string {
	b.compares(it.e)
	ref := it.e.sql
	switch n := b.rng.IntN(100); {
	case n < 35:
		ref = fmt.Sprint(pos)
	case n < 60 && it.alias != "":
		ref = it.alias
	case n < 62 && it.e.fam == famText && !it.e.agg && !b.outputOrder:
		// Only the database's collation, C and POSIX are merged.
		b.refusable(`a named collation (COLLATE "en_US")`)
		ref = "(" + it.e.sql + `) COLLATE "en_US"`
	}
	return ref + b.direction()
}

// direction is ASC, DESC or nothing, and now and then NULLS FIRST or
// LAST.
func (b *builder) direction() string {
	d := pick(b, "", " ASC", " DESC")
	if b.rng.IntN(100) < 30 {
		d += pick(b, " NULLS FIRST", " NULLS LAST")
	}
	return d
}

// limit is a LIMIT and OFFSET clause, or "" (always one when must).
func (b *builder) limit(must bool) string {
	if !must && b.rng.IntN(100) < 55 {
		return ""
	}
	if must && b.rng.IntN(100) < 50 {
		return ""
	}
	if b.mayFail {
		// PostgreSQL stops computing a query's expressions at its limit
		// (LIMIT 0 computes none; groups that arrive in ORDER BY's order
		// are computed up to the limit), so whether it raises an error
		// depends on its plan. The proxy computes every group's.
		return ""
	}
	n := pick[int64](b, 0, 1, 3, 10, 50)
	switch b.rng.IntN(12) {
	case 11:
		// The order is total but for equal rows: the rows tied with the
		// last are equal to it, whichever the shards send.
		return fmt.Sprintf(" FETCH FIRST %d ROWS WITH TIES", max(n, 1))
	case 10:
		return pick(b, " LIMIT ALL", " LIMIT NULL", " OFFSET 0", " LIMIT 3 OFFSET 0")
	case 0:
		// The shards get no LIMIT: the proxy drops the OFFSET from their
		// statement.
		return " OFFSET " + b.clauseParam(pick[int64](b, 1, 5, 40), true)
	case 1:
		return " LIMIT " + b.clauseParam(n, false) + " OFFSET " + b.clauseParam(pick[int64](b, 0, 1, 5), false)
	case 2:
		return " FETCH FIRST " + b.clauseParam(max(n, 1), false) + " ROWS ONLY"
	}
	return " LIMIT " + b.clauseParam(n, false)
}
