package admin

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/shardgate/shardgate/wire"
)

// colType is the SQL type of a result column.
type colType uint8

const (
	colText colType = iota // text
	colInt                 // bigint
	colBool                // boolean
)

// column is one result column.
type column struct {
	name string
	typ  colType
}

func text(name string) column { return column{name, colText} }
func num(name string) column  { return column{name, colInt} }
func flag(name string) column { return column{name, colBool} }

func (c column) oid() (oid uint32, size int16) {
	switch c.typ {
	case colInt:
		return wire.OIDInt8, 8
	case colBool:
		return wire.OIDBool, 1
	}
	return wire.OIDText, -1
}

// result is what a command returns: rows for the columns of its spec, and
// an action to run once the client has the answer.
type result struct {
	rows  [][]string // values in text format; the column type says how to send them in binary
	tag   string     // CommandComplete tag; "" means the spec's tag
	after func()
}

// add appends a row, formatting each value for its column: integers and
// durations (as microseconds) for bigint columns, t/f for booleans, UTC
// timestamps without fractions.
func (r *result) add(vals ...any) {
	row := make([]string, len(vals))
	for i, v := range vals {
		row[i] = format(v)
	}
	r.rows = append(r.rows, row)
}

func format(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case bool:
		if v {
			return "t"
		}
		return "f"
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	case time.Duration:
		return strconv.FormatInt(v.Microseconds(), 10)
	}
	return fmt.Sprint(v)
}

// formatFor returns the format code of column i given a Bind's result
// format codes (none: all text; one: for every column; else one each).
func formatFor(formats []int16, i int) int16 {
	switch {
	case len(formats) == 0:
		return wire.FormatText
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return wire.FormatText
}

// appendRowDescription appends the RowDescription of cols in formats.
func appendRowDescription(buf []byte, cols []column, formats []int16) []byte {
	fields := make([]wire.Field, len(cols))
	for i, c := range cols {
		oid, size := c.oid()
		fields[i] = wire.Field{Name: c.name, OID: oid, Size: size, Format: formatFor(formats, i)}
	}
	return wire.AppendRowDescription(buf, fields)
}

// appendRows appends a DataRow per row, encoding each value in its
// column's requested format.
func appendRows(buf []byte, cols []column, formats []int16, rows [][]string) []byte {
	vals := make([][]byte, len(cols))
	for _, row := range rows {
		for i := range cols {
			v := ""
			if i < len(row) {
				v = row[i]
			}
			vals[i] = encode(cols[i].typ, formatFor(formats, i), v)
		}
		buf = wire.AppendDataRow(buf, vals)
	}
	return buf
}

// encode returns v in format f. The binary format of text is its bytes; of
// bigint eight big-endian bytes; of boolean one byte.
func encode(t colType, f int16, v string) []byte {
	if f != wire.FormatBinary {
		return []byte(v)
	}
	switch t {
	case colInt:
		n, _ := strconv.ParseInt(v, 10, 64)
		return binary.BigEndian.AppendUint64(nil, uint64(n))
	case colBool:
		if v == "t" {
			return []byte{1}
		}
		return []byte{0}
	}
	return []byte(v)
}
