package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
)

// This file is the SQL an applier runs for each change: the shape of a
// row change's prepared statement and its parameters, the INSERT, UPDATE,
// DELETE or TRUNCATE text, and the two changes that need a round trip of
// their own: a row move out of the shard and a TRUNCATE of one source's
// rows.

// shape identifies the statement of a row change: its table, its kind and
// which columns the new tuple (set) and the old identity (where) carry.
type shape struct {
	rel        *relation
	kind       changeKind
	set, where uint64
}

// shapeOf returns c's shape; ok is false for changes it cannot describe
// (tables of more than 64 columns, kinds other than insert, update and
// delete, an update that changes nothing).
func shapeOf(c *change) (shape, bool) {
	sh := shape{rel: c.rel, kind: c.kind}
	if len(c.rel.cols) > 64 {
		return sh, false
	}
	switch c.kind {
	case changeInsert, changeUpdate, changeDelete:
	default:
		return sh, false
	}
	if c.kind != changeDelete {
		for i, v := range c.new {
			if v.DataType != pglogrepl.TupleDataTypeToast {
				sh.set |= 1 << i
			}
		}
		if c.kind == changeUpdate && sh.set == 0 {
			return sh, false
		}
	}
	if c.kind != changeInsert {
		for _, i := range c.rel.key {
			if i < len(c.old) && c.old[i].DataType != pglogrepl.TupleDataTypeToast {
				sh.where |= 1 << i
			}
		}
	}
	return sh, true
}

// changeArgs returns the parameters of c's statement in the order
// statement numbers them: the new tuple's values present, then the
// identity's.
func changeArgs(c *change) [][]byte {
	return appendChangeArgs(make([][]byte, 0, len(c.new)+len(c.rel.key)), c)
}

// moveOut runs a row move out of this shard in the open transaction on its
// own round trip: its RETURNING supplies the unchanged TOASTed values the
// source stream waits for. Values travel in text format with unspecified
// types, so the server infers each from its column.
func (a *applier) moveOut(ctx context.Context, c *change) error {
	rel := c.rel
	var sql strings.Builder
	var args [][]byte
	param := func(v []byte) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var ret []string
	var idx []int
	for i, v := range c.new {
		if v.DataType == pglogrepl.TupleDataTypeToast {
			ret = append(ret, quoteIdent(rel.cols[i])+"::text")
			idx = append(idx, i)
		}
	}
	fmt.Fprintf(&sql, "DELETE FROM %s WHERE %s RETURNING %s", rel.ident, rel.where(c.old, param), strings.Join(ret, ", "))
	res := a.conn.PgConn().ExecParams(ctx, sql.String(), args, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) == 0 {
		c.reply <- moveReply{missing: true}
		return nil
	}
	values := map[int][]byte{}
	for j, i := range idx {
		values[i] = res.Rows[0][j]
	}
	c.reply <- moveReply{values: values}
	return nil
}

// statement returns the SQL and parameters of a change other than a row
// move; ok is false when the change needs no statement.
func (a *applier) statement(c *change) (string, [][]byte, bool) {
	rel := c.rel
	var sql strings.Builder
	var args [][]byte
	param := func(v []byte) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	switch c.kind {
	case changeTruncate:
		sql.WriteString("TRUNCATE " + rel.ident)
	case changeInsert:
		var cols, vals []string
		for i, v := range c.new {
			if v.DataType == pglogrepl.TupleDataTypeToast {
				continue
			}
			cols = append(cols, quoteIdent(rel.cols[i]))
			vals = append(vals, param(value(v)))
		}
		fmt.Fprintf(&sql, "INSERT INTO %s (%s) VALUES (%s)", rel.ident, strings.Join(cols, ", "), strings.Join(vals, ", "))
	case changeUpdate:
		var set []string
		for i, v := range c.new {
			// Unchanged TOASTed values are not in the message: leave them.
			if v.DataType != pglogrepl.TupleDataTypeToast {
				set = append(set, quoteIdent(rel.cols[i])+" = "+param(value(v)))
			}
		}
		if len(set) == 0 {
			return "", nil, false
		}
		fmt.Fprintf(&sql, "UPDATE %s SET %s WHERE %s", rel.ident, strings.Join(set, ", "), rel.where(c.old, param))
	case changeDelete:
		fmt.Fprintf(&sql, "DELETE FROM %s WHERE %s", rel.ident, rel.where(c.old, param))
	default:
		return "", nil, false
	}
	return sql.String(), args, true
}

// value returns a column's text value, nil for NULL.
func value(v *pglogrepl.TupleDataColumn) []byte {
	if v.DataType == pglogrepl.TupleDataTypeNull {
		return nil
	}
	if v.Data == nil {
		return []byte{}
	}
	return v.Data
}

// where returns the condition that finds the row whose identity old holds.
// With REPLICA IDENTITY FULL, old holds the whole row and there may be
// duplicates, so one matching row is chosen by ctid, as PostgreSQL's own
// apply worker does.
func (r *relation) where(old []*pglogrepl.TupleDataColumn, param func([]byte) string) string {
	var conds []string
	for _, i := range r.key {
		if i >= len(old) || old[i].DataType == pglogrepl.TupleDataTypeToast {
			continue
		}
		if r.full {
			conds = append(conds, quoteIdent(r.cols[i])+" IS NOT DISTINCT FROM "+param(value(old[i])))
		} else {
			conds = append(conds, quoteIdent(r.cols[i])+" = "+param(value(old[i])))
		}
	}
	if len(conds) == 0 {
		return "false"
	}
	if r.full {
		return "ctid = (SELECT ctid FROM " + r.ident + " WHERE " + strings.Join(conds, " AND ") + " LIMIT 1)"
	}
	return strings.Join(conds, " AND ")
}

// truncateSource deletes, in the open destination transaction, every row of
// rel whose key the source's rule places on this applier's source shard.
// The keys are read through a cursor and deleted a page at a time, so
// memory stays bounded whatever the table's size.
func (a *applier) truncateSource(ctx context.Context, rel *relation) error {
	col := quoteIdent(rel.src.column)
	pg := a.conn.PgConn()
	if err := pg.Exec(ctx, "DECLARE sg_truncate NO SCROLL CURSOR FOR SELECT "+col+"::text FROM "+rel.ident).Close(); err != nil {
		return err
	}
	deleteSQL := "DELETE FROM " + rel.ident + " WHERE " + col + " = ANY($1)"
	var deleted int64
	for {
		res := pg.ExecParams(ctx, "FETCH 10000 FROM sg_truncate", nil, nil, nil, nil).Read()
		if res.Err != nil {
			return res.Err
		}
		var list []byte
		nulls := false
		for _, row := range res.Rows {
			s, err := rel.src.shardOfText(row[0], row[0] == nil)
			if err != nil {
				return fmt.Errorf("route by %s on the source: %w", rel.src.column, err)
			}
			if s != rel.s {
				continue
			}
			if row[0] == nil {
				nulls = true
				continue
			}
			list = appendArrayElem(list, row[0])
		}
		if len(list) > 0 {
			arr := append(append([]byte{'{'}, list[1:]...), '}')
			res := pg.ExecParams(ctx, deleteSQL, [][]byte{arr}, nil, nil, nil).Read()
			if res.Err != nil {
				return res.Err
			}
			deleted += res.CommandTag.RowsAffected()
		}
		if nulls {
			res := pg.ExecParams(ctx, "DELETE FROM "+rel.ident+" WHERE "+col+" IS NULL", nil, nil, nil, nil).Read()
			if res.Err != nil {
				return res.Err
			}
			deleted += res.CommandTag.RowsAffected()
		}
		if len(res.Rows) < 10000 {
			break
		}
	}
	if err := pg.Exec(ctx, "CLOSE sg_truncate").Close(); err != nil {
		return err
	}
	a.t.log.Info("TRUNCATE on one of several source shards: deleted that source's rows", "table", rel.name,
		"source", a.s, "destination", a.d, "rows", deleted)
	return nil
}

// appendArrayElem appends ",\"v\"" to an array literal's element list,
// escaping backslashes and double quotes.
func appendArrayElem(list, v []byte) []byte {
	list = append(list, ',', '"')
	for _, b := range v {
		if b == '"' || b == '\\' {
			list = append(list, '\\')
		}
		list = append(list, b)
	}
	return append(list, '"')
}
