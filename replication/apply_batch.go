package replication

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
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
// different tables are independent. A change whose identity an open run
// already holds flushes every run first. A table with other unique
// constraints keeps its order: a change joins a run only when no run of
// its table was opened after it, and its UPDATEs are not batched (the rows
// of one UPDATE … FROM are not updated in a defined order). A table with
// such a trigger or a rule, REPLICA IDENTITY FULL or more than 64 columns
// is applied one statement per row, as before.

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
	keys   map[runKey]struct{}
	rows   int // changes in open runs
	tables map[*relation]*tableInfo
	multi  map[multiKey]*pgconn.StatementDescription
}

func newRuns() runs {
	return runs{byKey: map[shape]*run{}, keys: map[runKey]struct{}{}, tables: map[*relation]*tableInfo{},
		multi: map[multiKey]*pgconn.StatementDescription{}}
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
		a.runs.keys[runKey{c.rel, k}] = struct{}{}
	}
	return true, nil
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
	add := func(t []*pglogrepl.TupleDataColumn) bool {
		var b []byte
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
		if k := string(b); n == 0 || keys[0] != k {
			keys[n] = k
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
	rest := r.changes
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
		sd, err := a.multiStatement(ctx, r.sh, n, rows[0])
		if err != nil {
			return err
		}
		// Every row of the shape has the same parameters: the new
		// tuple's values present and the identity's.
		args := make([][]byte, 0, n*(bits.OnesCount64(r.sh.set)+bits.OnesCount64(r.sh.where)))
		for _, c := range rows {
			args = appendChangeArgs(args, c)
		}
		a.batch.ExecStatement(sd, args, nil, nil)
		a.queued++
	}
	return nil
}

// multiStatement returns the prepared statement of n rows of shape sh,
// whose first row is c.
func (a *applier) multiStatement(ctx context.Context, sh shape, n int, c *change) (*pgconn.StatementDescription, error) {
	k := multiKey{sh, n}
	if sd := a.runs.multi[k]; sd != nil {
		return sd, nil
	}
	info := a.runs.tables[sh.rel]
	sql, oids := multiSQL(sh, n, c, info.types)
	sd, err := a.prepare(ctx, sql, oids)
	if err != nil {
		return nil, err
	}
	a.runs.multi[k] = sd
	return sd, nil
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
