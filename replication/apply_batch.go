package replication

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
)

// This file batches rows into multi-row statements. Inside a destination
// transaction, an applier collects the row changes of one shape (table,
// kind, columns present) into a run instead of one statement per row, and
// sends each run as few multi-row statements: INSERT … VALUES (…), (…),
// UPDATE … FROM (VALUES …) and DELETE … USING (VALUES …), joined on the
// replica identity. A run is turned into statements ("flushed") before any
// statement that is not part of a run, before the batch is sent, and when a
// change would otherwise be applied out of its order.
//
// Changes of one table are reordered (an UPDATE after an INSERT that came
// later, say) only when that cannot change the outcome: the changes touch
// distinct identity values, and the destination table has no unique or
// exclusion constraint but the one on its replica identity, no trigger
// that fires for replicated rows and no rule. Foreign keys do not fire for
// replicated rows (session_replication_role = replica), so changes of
// different tables are independent. Each identity value is touched by at
// most one change in the open runs, so the runs may go out in any order.
// A table with other unique constraints keeps its order: a change joins a
// run only when no run of its table was opened after it, and its UPDATEs
// are not batched (the rows of one UPDATE … FROM are not updated in a
// defined order). A table with such a trigger or a rule, REPLICA IDENTITY
// FULL or more than 64 columns is applied one statement per row, as
// before.
//
// A change whose identity value an open run already holds is collapsed
// with that run's change into one change where the two have the outcome of
// one (collapse), and otherwise flushes every run first. The runs belong
// to one destination transaction, which commits or not as a whole with its
// origin's progress, so a collapse across source transactions keeps
// exactly once. The rules, for a change c after a change p of the same row
// (same table and identity value) in an open run, neither of which changes
// the row's key:
//
//   - UPDATE after UPDATE or INSERT: p becomes the row's image after both,
//     of p's kind: c's values, and p's for the columns c left unchanged
//     (pgoutput's unchanged TOASTed values, 'u'); a column both left
//     unchanged stays so. If the image has more columns than p (c set one
//     that p left unchanged), p leaves its run and the image joins the run
//     of its shape: the row's is the only change of that identity, so its
//     place among the runs does not matter.
//   - DELETE after UPDATE: the DELETE alone (p leaves its run).
//   - DELETE after INSERT: neither, as the row did not exist before the
//     INSERT. (A destination that held the row anyway, against the source,
//     keeps it instead of failing the INSERT on its key.)
//   - Anything else flushes, as before: INSERT after DELETE (no one
//     statement does both, and the INSERT's run would have to follow the
//     DELETE's), a change after a key-changing UPDATE or a key-changing
//     UPDATE after a change (it touches two rows), and every change of a
//     table that may not be reordered.
//
// A collapse never writes into a tuple: tuples may be shared with other
// destination shards' appliers (omni tables).

// Batch sizes: a run of n rows is sent as statements of runSizes rows
// (largest first), each prepared once per shape and size.
var runSizes = [...]int{64, 16, 4, 1}

// run is the open batch of one shape's changes.
type run struct {
	sh      shape
	changes []*change
}

// runKey is an identity value of a row in an open run.
type runKey struct {
	rel *relation
	key string
}

// held is the change of an open run that touches an identity value: each
// value is touched by at most one change in the open runs.
type held struct {
	r     *run
	i     int  // the change's index in r.changes
	moved bool // a key-changing UPDATE, which holds its old and its new value
}

// multiKey names the prepared statement of rows rows of one shape.
type multiKey struct {
	sh   shape
	rows int
}

// tableInfo is what the destination table of a relation allows.
type tableInfo struct {
	batch   bool     // changes may join runs
	reorder bool     // changes of distinct identities may be reordered
	types   []uint32 // per column of the relation: its type on the destination
}

// runs holds an applier's open runs, in the order they were opened.
type runs struct {
	open   []*run
	byKey  map[shape]*run
	keys   map[runKey]held
	rows   int // changes in open runs (not counting those collapsed away)
	tables map[*relation]*tableInfo
	multi  map[multiKey]*stmt
}

func newRuns() runs {
	return runs{byKey: map[shape]*run{}, keys: map[runKey]held{}, tables: map[*relation]*tableInfo{},
		multi: map[multiKey]*stmt{}}
}

// batchRow adds c to its run; ok is false when c cannot join one, and
// then every open run was flushed, so that c may be queued on its own.
func (a *applier) batchRow(ctx context.Context, c *change) (ok bool, err error) {
	sh, shaped := shapeOf(c)
	if !shaped {
		return false, a.flushRuns(ctx)
	}
	info, err := a.tableInfo(ctx, c.rel)
	if err != nil {
		return false, err
	}
	if !info.batch || (c.kind == changeUpdate && !info.reorder) || !wholeIdentity(sh) {
		return false, a.flushRuns(ctx)
	}
	var keys [2]string
	nkeys := 0
	if info.reorder {
		var fine bool
		if nkeys, fine = identityKeys(c, &keys); !fine {
			return false, a.flushRuns(ctx)
		}
		if nkeys == 1 {
			if h, held := a.runs.keys[runKey{c.rel, keys[0]}]; held {
				m, ok := a.collapse(c, h, keys[0])
				if ok && m == nil {
					return true, nil
				}
				if ok {
					c = m
					if sh, shaped = shapeOf(c); !shaped {
						// Not reached: m has c's table and kind, or an
						// INSERT's, and at least c's columns.
						return false, fmt.Errorf("collapsing changes of one row: no statement for the result")
					}
				}
			}
		}
		for _, k := range keys[:nkeys] {
			if _, held := a.runs.keys[runKey{c.rel, k}]; held {
				if err := a.flushRuns(ctx); err != nil {
					return false, err
				}
				break
			}
		}
	} else if a.openedAfter(sh) {
		if err := a.flushRuns(ctx); err != nil {
			return false, err
		}
	}
	r := a.runs.byKey[sh]
	if r == nil {
		r = &run{sh: sh}
		a.runs.byKey[sh] = r
		a.runs.open = append(a.runs.open, r)
	}
	r.changes = append(r.changes, c)
	a.runs.rows++
	for _, k := range keys[:nkeys] {
		a.runs.keys[runKey{c.rel, k}] = held{r: r, i: len(r.changes) - 1, moved: nkeys == 2}
	}
	return true, nil
}

// collapse joins c with the change h of an open run that touches the same
// identity value key, where the two have the outcome of one change (the
// rules are in the file's comment). With ok false they do not, and c
// waits for the open runs to be flushed. With ok true, h's change is
// replaced in its run, when the joined change has its shape (m nil), or
// else removed from its run and key released, and m is the change to add
// in its place.
func (a *applier) collapse(c *change, h held, key string) (m *change, ok bool) {
	if h.moved {
		return nil, false
	}
	p := h.r.changes[h.i]
	switch {
	case c.kind == changeUpdate && (p.kind == changeUpdate || p.kind == changeInsert):
		// The row's image after both: c's new values, and for the columns
		// c left unchanged (TOAST), p's.
		img, ok := overlay(p.new, c.new)
		if !ok {
			return nil, false
		}
		m = &change{kind: p.kind, rel: c.rel, new: img}
		if p.kind == changeUpdate {
			m.old = c.old
		}
		if sh, _ := shapeOf(m); sh == h.r.sh {
			h.r.changes[h.i] = m
			a.collapsed++
			return nil, true
		}
	case c.kind == changeDelete && p.kind == changeUpdate:
		m = c // the DELETE alone
	case c.kind == changeDelete && p.kind == changeInsert:
		// A row inserted and deleted in one group: neither is needed.
		m = nil
	default:
		return nil, false
	}
	h.r.changes[h.i] = nil
	delete(a.runs.keys, runKey{c.rel, key})
	a.runs.rows--
	a.collapsed++
	if m == nil {
		a.collapsed++ // c too
	}
	return m, true
}

// overlay returns the image of a row that was first prev and then changed
// to next: next's values, and prev's for the columns next left unchanged
// (TOAST). ok is false when the tuples do not have the same columns.
func overlay(prev, next []*pglogrepl.TupleDataColumn) (img []*pglogrepl.TupleDataColumn, ok bool) {
	if len(prev) != len(next) {
		return nil, false
	}
	if !hasToast(next) {
		return next, true
	}
	img = make([]*pglogrepl.TupleDataColumn, len(next))
	for i, v := range next {
		if v.DataType == pglogrepl.TupleDataTypeToast {
			v = prev[i]
		}
		img[i] = v
	}
	return img, true
}

// wholeIdentity reports whether an UPDATE or DELETE of shape sh carries
// every column of its replica identity, which its rows are joined on.
func wholeIdentity(sh shape) bool {
	if sh.kind == changeInsert {
		return true
	}
	for _, i := range sh.rel.key {
		if sh.where&(1<<i) == 0 {
			return false
		}
	}
	return true
}

// openedAfter reports whether a run of sh's table was opened after sh's
// run, or sh has no run while its table has one.
func (a *applier) openedAfter(sh shape) bool {
	open := a.runs.open
	for i := len(open) - 1; i >= 0; i-- {
		if open[i].sh == sh {
			return false
		}
		if open[i].sh.rel == sh.rel {
			return true
		}
	}
	return false
}

// identityKeys sets keys to the identity values c touches: the old
// identity's and, unless the same, the new tuple's; fine is false when a
// value is not in the stream.
func identityKeys(c *change, keys *[2]string) (n int, fine bool) {
	var scratch [64]byte // most keys fit: then only the string is allocated
	add := func(t []*pglogrepl.TupleDataColumn) bool {
		b := scratch[:0]
		for _, i := range c.rel.key {
			if i >= len(t) {
				return false
			}
			v := t[i]
			switch v.DataType {
			case pglogrepl.TupleDataTypeText:
				b = strconv.AppendInt(append(b, 't'), int64(len(v.Data)), 10)
				b = append(append(b, ':'), v.Data...)
			case pglogrepl.TupleDataTypeNull:
				b = append(b, 'n')
			default:
				return false
			}
		}
		if n == 0 || keys[0] != string(b) { // the comparison allocates nothing
			keys[n] = string(b)
			n++
		}
		return true
	}
	if c.kind != changeInsert && !add(c.old) {
		return 0, false
	}
	if c.kind != changeDelete && !add(c.new) {
		return 0, false
	}
	return n, true
}

// flushRuns queues the statements of every open run, in the order the runs
// were opened.
func (a *applier) flushRuns(ctx context.Context) error {
	if a.runs.rows == 0 {
		return nil
	}
	for _, r := range a.runs.open {
		if err := a.queueRun(ctx, r); err != nil {
			return fmt.Errorf("table %s: %w", r.sh.rel.name, err)
		}
	}
	a.runs.open = a.runs.open[:0]
	clear(a.runs.byKey)
	clear(a.runs.keys)
	a.runs.rows = 0
	return nil
}

// queueRun queues a run's rows as statements of runSizes rows.
func (a *applier) queueRun(ctx context.Context, r *run) error {
	rest := slices.DeleteFunc(r.changes, func(c *change) bool { return c == nil }) // collapsed away
	for len(rest) > 0 {
		n := runSizes[len(runSizes)-1]
		for _, size := range runSizes {
			if size <= len(rest) {
				n = size
				break
			}
		}
		rows := rest[:n]
		rest = rest[n:]
		if n == 1 {
			if err := a.queueChange(ctx, rows[0]); err != nil {
				return err
			}
			continue
		}
		s, err := a.multiStatement(ctx, r.sh, n, rows[0])
		if err != nil {
			return err
		}
		// Every row of the shape has the same parameters: the new
		// tuple's values present and the identity's.
		args := a.args[:0]
		for _, c := range rows {
			args = appendChangeArgs(args, c)
		}
		a.args = args
		if err := a.pipe.exec(s, args); err != nil {
			return err
		}
	}
	return nil
}

// multiStatement returns the prepared statement of n rows of shape sh,
// whose first row is c.
func (a *applier) multiStatement(ctx context.Context, sh shape, n int, c *change) (*stmt, error) {
	k := multiKey{sh, n}
	if s := a.runs.multi[k]; s != nil {
		return s, nil
	}
	info := a.runs.tables[sh.rel]
	sql, oids := multiSQL(sh, n, c, info.types)
	s, err := a.prepare(ctx, sql, oids)
	if err != nil {
		return nil, err
	}
	a.runs.multi[k] = s
	return s, nil
}

// multiSQL builds the statement of n rows of shape sh (c is one of them),
// and, for UPDATE and DELETE, the types of its parameters: the rows' values
// are joined with the table by a VALUES list, whose columns get their types
// from the parameters. INSERT takes them from its target columns.
func multiSQL(sh shape, n int, c *change, types []uint32) (string, []uint32) {
	rel := sh.rel
	var cols, vcols []string // target columns; names of the VALUES columns
	var rowTypes []uint32
	if sh.kind != changeDelete {
		for i := range c.new {
			if sh.set&(1<<i) != 0 {
				cols = append(cols, quoteIdent(rel.cols[i]))
				vcols = append(vcols, "n"+strconv.Itoa(i))
				rowTypes = append(rowTypes, types[i])
			}
		}
	}
	var conds []string
	if sh.kind != changeInsert {
		for _, i := range rel.key {
			if sh.where&(1<<i) != 0 {
				v := "o" + strconv.Itoa(i)
				vcols = append(vcols, v)
				rowTypes = append(rowTypes, types[i])
				conds = append(conds, "sg_t."+quoteIdent(rel.cols[i])+" = sg_v."+v)
			}
		}
	}
	var sql strings.Builder
	p := 0
	values := func() {
		for r := range n {
			if r > 0 {
				sql.WriteString(", ")
			}
			sql.WriteByte('(')
			for j := range vcols {
				if j > 0 {
					sql.WriteString(", ")
				}
				p++
				sql.WriteString("$" + strconv.Itoa(p))
			}
			sql.WriteByte(')')
		}
	}
	switch sh.kind {
	case changeInsert:
		fmt.Fprintf(&sql, "INSERT INTO %s (%s) VALUES ", rel.ident, strings.Join(cols, ", "))
		values()
		return sql.String(), nil
	case changeUpdate:
		var set []string
		for j, col := range cols {
			set = append(set, col+" = sg_v."+vcols[j])
		}
		fmt.Fprintf(&sql, "UPDATE %s AS sg_t SET %s FROM (VALUES ", rel.ident, strings.Join(set, ", "))
	default:
		fmt.Fprintf(&sql, "DELETE FROM %s AS sg_t USING (VALUES ", rel.ident)
	}
	values()
	fmt.Fprintf(&sql, ") AS sg_v (%s) WHERE %s", strings.Join(vcols, ", "), strings.Join(conds, " AND "))
	oids := make([]uint32, 0, n*len(rowTypes))
	for range n {
		oids = append(oids, rowTypes...)
	}
	return sql.String(), oids
}

// tableInfo returns what rel's destination table allows, reading the
// destination's catalog on first use.
func (a *applier) tableInfo(ctx context.Context, rel *relation) (*tableInfo, error) {
	if info := a.runs.tables[rel]; info != nil {
		return info, nil
	}
	info := &tableInfo{}
	a.runs.tables[rel] = info
	if rel.full || len(rel.key) == 0 || len(rel.cols) > 64 {
		return info, nil
	}
	var special bool
	var names []string
	var types []uint32
	var unique []*string // columns of each unique or exclusion index, \x01-separated; nil: expressions, a predicate or an exclusion
	err := a.conn.QueryRow(ctx, `SELECT c.relhasrules OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgenabled IN ('A', 'R')),
		ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
		ARRAY(SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
		ARRAY(SELECT CASE WHEN i.indpred IS NULL AND i.indexprs IS NULL AND NOT i.indisexclusion
				THEN array_to_string(ARRAY(SELECT a.attname::text FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k), chr(1))
				END
			FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisunique OR i.indisexclusion))
		FROM pg_class c WHERE c.oid = $1::regclass`, rel.ident).Scan(&special, &names, &types, &unique)
	if err != nil {
		return nil, fmt.Errorf("read the destination table %s: %w", rel.name, err)
	}
	if special {
		return info, nil
	}
	info.types = make([]uint32, len(rel.cols))
	for i, col := range rel.cols {
		j := slices.Index(names, col)
		if j < 0 {
			return info, nil // the statement of one row reports the missing column
		}
		info.types[i] = types[j]
	}
	info.batch = true
	keyCols := make([]string, len(rel.key))
	for j, i := range rel.key {
		keyCols[j] = rel.cols[i]
	}
	slices.Sort(keyCols)
	info.reorder = true
	for _, cols := range unique {
		if cols == nil {
			info.reorder = false
			continue
		}
		idx := strings.Split(*cols, "\x01")
		slices.Sort(idx)
		if !slices.Equal(idx, keyCols) {
			info.reorder = false
		}
	}
	return info, nil
}

// appendChangeArgs appends the parameters of c's one-row statement to
// args: the new tuple's values present, then the identity's (changeArgs).
func appendChangeArgs(args [][]byte, c *change) [][]byte {
	if c.kind != changeDelete {
		for _, v := range c.new {
			if v.DataType != pglogrepl.TupleDataTypeToast {
				args = append(args, value(v))
			}
		}
	}
	if c.kind != changeInsert {
		for _, i := range c.rel.key {
			if i < len(c.old) && c.old[i].DataType != pglogrepl.TupleDataTypeToast {
				args = append(args, value(c.old[i]))
			}
		}
	}
	return args
}
