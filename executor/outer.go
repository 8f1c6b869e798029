package executor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// Outer is how the combined groups of a grouped query get the values only
// the combined aggregates determine (router.Outer): expressions over
// aggregates in the select list, ORDER BY keys and HAVING terms. A server
// computes them — once per group, with the group's Inputs as parameters —
// so that their operators, casts, result types, NULLs and errors are
// PostgreSQL's. Memory stays one entry per group: the groups are already
// held for sorting, and each execution's answer is read before the next
// batch is sent.
type Outer struct {
	// SQL is the router's statement, which reads __shardgate_in.
	SQL string
	// Inputs are the result columns passed as $1…$n.
	Inputs []int
	// Outputs are the result columns the statement's columns fill.
	Outputs []int

	// Eval runs the statement (Answer.combine: on the first shard).
	Eval OuterEval
	// Describe makes the merger write the client's RowDescription, once
	// the statement's result types are known.
	Describe bool
	// Desc is the RowDescription body the shards answered.
	Desc []byte
}

// OuterQuery is an Outer statement ready to prepare.
type OuterQuery struct {
	SQL           string
	ParamOIDs     []uint32
	ParamFormats  []int16
	ResultFormats []int16
}

// An OuterEval runs an Outer statement over groups: it prepares q and
// executes it once for each of n groups, with the parameters params(i)
// returns for group i (valid until the next call), and calls row for each
// execution that returned a row (values valid during the call). It returns
// the statement's result fields (formats as in q), or the first error: a
// *wire.Error from the server, or a failure of the server.
type OuterEval interface {
	Eval(q OuterQuery, n int, params func(i int) [][]byte, row func(i int, values [][]byte) error) ([]Field, error)
}

// Field is one column of a RowDescription.
type Field struct {
	Name   string
	Table  uint32
	Attnum int16
	OID    uint32
	Size   int16
	Typmod int32
	Format int16
}

// parseFields decodes the columns of a RowDescription body.
func parseFields(body []byte) ([]Field, error) {
	d := wire.NewBody(body)
	n := int(d.Uint16())
	fields := make([]Field, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		f := Field{Name: string(d.CString())}
		f.Table = uint32(d.Int32())
		f.Attnum = int16(d.Uint16())
		f.OID = uint32(d.Int32())
		f.Size = int16(d.Uint16())
		f.Typmod = d.Int32()
		f.Format = int16(d.Uint16())
		fields = append(fields, f)
	}
	if d.Err() != nil {
		return nil, fmt.Errorf("malformed RowDescription: %w", d.Err())
	}
	return fields, nil
}

// appendRowDescription appends a RowDescription message of fields.
func appendRowDescription(buf []byte, fields []Field) []byte {
	start := len(buf)
	buf = append(buf, 'T', 0, 0, 0, 0)
	buf = wire.AppendInt16(buf, int16(len(fields)))
	for _, f := range fields {
		buf = append(buf, f.Name...)
		buf = append(buf, 0)
		buf = wire.AppendInt32(buf, int32(f.Table))
		buf = wire.AppendInt16(buf, f.Attnum)
		buf = wire.AppendInt32(buf, int32(f.OID))
		buf = wire.AppendInt16(buf, f.Size)
		buf = wire.AppendInt32(buf, f.Typmod)
		buf = wire.AppendInt16(buf, f.Format)
	}
	return wire.FinishMessage(buf, start)
}

// outerOf is the executor's form of the router's Outer; idx maps a router
// column to its result column.
func outerOf(o *router.Outer, idx func(router.Column) (int, error)) (*Outer, error) {
	out := &Outer{SQL: o.SQL}
	for _, c := range o.Inputs {
		i, err := idx(c)
		if err != nil {
			return nil, err
		}
		out.Inputs = append(out.Inputs, i)
	}
	for _, c := range o.Outputs {
		i, err := idx(c)
		if err != nil {
			return nil, err
		}
		out.Outputs = append(out.Outputs, i)
	}
	return out, nil
}

// bind makes the Outer statement run on the server of r, after r's answer,
// and says whether the merger describes the rows (desc: the shards'
// RowDescription body).
func (o *Outer) bind(r *ShardRows, desc []byte, describe bool) {
	o.Eval, o.Desc, o.Describe = shardEval{r}, desc, describe
}

// fills reports whether the statement computes column col.
func (o *Outer) fills(col int) bool {
	if o == nil {
		return false
	}
	for _, c := range o.Outputs {
		if c == col {
			return true
		}
	}
	return false
}

// statement returns the SQL to prepare: the router's statement after the
// one-row relation of its inputs, each cast to its type modifier.
func (o *Outer) statement(oids []uint32, typmods []int32) string {
	var b strings.Builder
	b.WriteString("WITH __shardgate_in")
	for k := range o.Inputs {
		sep := ", "
		if k == 0 {
			sep = "("
		}
		b.WriteString(sep + "i" + strconv.Itoa(k+1))
	}
	if len(o.Inputs) > 0 {
		b.WriteString(")")
	}
	// MATERIALIZED: the planner must not fold the inputs into the
	// statement as constants — it would compute the select list's
	// count(*) / count(x) of a group that HAVING drops, and fail where
	// PostgreSQL, which never evaluates it, does not.
	b.WriteString(" AS MATERIALIZED (SELECT ")
	for k := range o.Inputs {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(k+1) + typmodCast(oids[k], typmods[k]))
	}
	b.WriteString(") ")
	b.WriteString(o.SQL)
	return b.String()
}

// typmodCast returns the cast that gives a parameter of type oid the type
// modifier of the column it comes from (a parameter has none), "" when
// there is none or the type is not one the proxy knows how to write. The
// modifier matters where an expression keeps it: CASE WHEN count(*) > 1
// THEN name ELSE other END is varchar(20) when both are.
func typmodCast(oid uint32, typmod int32) string {
	if typmod < 0 {
		return ""
	}
	switch oid {
	case oidVarchar:
		return fmt.Sprintf("::pg_catalog.varchar(%d)", typmod-4)
	case oidBPChar:
		return fmt.Sprintf("::pg_catalog.bpchar(%d)", typmod-4)
	case oidNumeric:
		// numeric's typmod: precision << 16 | scale (11 bits, signed), + 4.
		p := (typmod - 4) >> 16 & 0xffff
		s := ((typmod-4)&0x7ff ^ 1024) - 1024
		return fmt.Sprintf("::pg_catalog.numeric(%d,%d)", p, s)
	case oidTimestamp, oidTimestamptz, oidTime, oidTimetz:
		name := map[uint32]string{oidTimestamp: "timestamp", oidTimestamptz: "timestamptz", oidTime: "time", oidTimetz: "timetz"}[oid]
		return fmt.Sprintf("::pg_catalog.%s(%d)", name, typmod)
	case oidBit, oidVarbit:
		name := map[uint32]string{oidBit: "bit", oidVarbit: "varbit"}[oid]
		return fmt.Sprintf("::pg_catalog.%s(%d)", name, typmod)
	}
	return ""
}

// avgField is the RowDescription field of avg(x) for shards' sum(x) field
// f: numeric over integers and numeric, float8 over floats, as
// PostgreSQL's avg is.
func avgField(f Field) Field {
	f.Table, f.Attnum, f.Typmod = 0, 0, -1
	switch f.OID = avgOID(f.OID); f.OID {
	case oidFloat8:
		f.Size = 8
	case oidNumeric:
		f.Size = -1
	}
	return f
}

// evalOuter runs the Outer statement over the combined groups: it fills
// each group's Outputs, keeps the groups for which the statement returned
// a row (the rest fail HAVING), types the Output columns as the statement
// does and, when asked, writes the client's RowDescription.
func (m *Merger) evalOuter(groups []*group) ([]*group, error) {
	o := m.spec.Outer
	if o.Eval == nil {
		return nil, wire.Errorf(wire.InternalError, "merge: no server to compute expressions over aggregates")
	}
	var shardFields []Field
	if o.Desc != nil {
		var err error
		if shardFields, err = parseFields(o.Desc); err != nil || len(shardFields) != len(m.cols) {
			return nil, wire.Errorf(wire.InternalError, "merge: the shards' RowDescription does not match their rows")
		}
	}
	avg := map[int]bool{}
	for _, a := range m.spec.Aggs {
		if a.Kind == AggAvg {
			avg[a.Col] = true
		}
	}
	q := OuterQuery{}
	typmods := make([]int32, len(o.Inputs))
	for k, in := range o.Inputs {
		f := Field{OID: m.cols[in].OID, Typmod: -1}
		if shardFields != nil {
			f = shardFields[in]
		}
		if avg[in] {
			f = avgField(f)
		}
		q.ParamOIDs = append(q.ParamOIDs, f.OID)
		q.ParamFormats = append(q.ParamFormats, m.cols[in].Format)
		typmods[k] = f.Typmod
	}
	for _, out := range o.Outputs {
		q.ResultFormats = append(q.ResultFormats, m.cols[out].Format)
	}
	q.SQL = o.statement(q.ParamOIDs, typmods)
	args := make([][]byte, len(o.Inputs))
	kept := make([]*group, 0, len(groups))
	fields, err := o.Eval.Eval(q, len(groups), func(i int) [][]byte {
		for k, in := range o.Inputs {
			args[k] = groups[i].cols[in]
		}
		return args
	}, func(i int, values [][]byte) error {
		if len(values) != len(o.Outputs) || i < 0 || i >= len(groups) {
			return wire.Errorf(wire.InternalError, "merge: unexpected row from the outer statement")
		}
		g := groups[i]
		for k, out := range o.Outputs {
			g.cols[out] = nil
			if v := values[k]; v != nil {
				g.cols[out] = append(make([]byte, 0, len(v)), v...)
			}
		}
		kept = append(kept, g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(fields) != len(o.Outputs) {
		return nil, wire.Errorf(wire.InternalError, "merge: the outer statement returned %d columns, want %d", len(fields), len(o.Outputs))
	}
	var need []int
	for k, out := range o.Outputs {
		m.cols[out].OID, m.cols[out].Name = fields[k].OID, fields[k].Name
		m.cmp[out] = nil
	}
	for _, k := range m.spec.OrderBy {
		if m.cmp[k.Col] == nil {
			need = addNeed(need, k.Col)
		}
	}
	if err := m.buildComparators(need); err != nil {
		return nil, err
	}
	if o.Describe && shardFields != nil {
		if _, err := m.out.Write(m.describeOuter(shardFields, fields, avg)); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// describeOuter is the client's RowDescription: the shards' visible
// fields, with each output column's field the Outer statement's (in the
// shards' format) and each avg's field avg's own.
func (m *Merger) describeOuter(shard, outer []Field, avg map[int]bool) []byte {
	fields := make([]Field, m.visible)
	copy(fields, shard)
	for col := range avg {
		if col < m.visible {
			fields[col] = avgField(fields[col])
		}
	}
	for k, col := range m.spec.Outer.Outputs {
		if col < m.visible {
			f := outer[k]
			f.Format = fields[col].Format
			fields[col] = f
		}
	}
	return appendRowDescription(nil, fields)
}
