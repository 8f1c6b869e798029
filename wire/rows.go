package wire

// Type OIDs of the column types the proxy produces itself (the admin
// database). They are PostgreSQL's own (pg_type.oid).
const (
	OIDBool uint32 = 16
	OIDInt8 uint32 = 20
	OIDText uint32 = 25
)

// Format codes of column values.
const (
	FormatText   int16 = 0
	FormatBinary int16 = 1
)

// Field describes one column of a RowDescription.
type Field struct {
	Name   string
	OID    uint32 // type OID
	Size   int16  // pg_type.typlen: -1 for variable length
	Format int16  // FormatText or FormatBinary
}

// AppendRowDescription appends a RowDescription for fields. Columns do not
// come from a table, so the table OID and attribute number are 0, and the
// type modifier is -1.
func AppendRowDescription(buf []byte, fields []Field) []byte {
	start := len(buf)
	buf = append(buf, 'T', 0, 0, 0, 0)
	buf = AppendInt16(buf, int16(len(fields)))
	for _, f := range fields {
		buf = append(buf, f.Name...)
		buf = append(buf, 0)
		buf = AppendInt32(buf, 0) // table OID
		buf = AppendInt16(buf, 0) // attribute number
		buf = AppendInt32(buf, int32(f.OID))
		buf = AppendInt16(buf, f.Size)
		buf = AppendInt32(buf, -1) // type modifier
		buf = AppendInt16(buf, f.Format)
	}
	return FinishMessage(buf, start)
}

// AppendDataRow appends a DataRow with values; a nil value is NULL.
func AppendDataRow(buf []byte, values [][]byte) []byte {
	start := len(buf)
	buf = append(buf, 'D', 0, 0, 0, 0)
	buf = AppendInt16(buf, int16(len(values)))
	for _, v := range values {
		if v == nil {
			buf = AppendInt32(buf, -1)
			continue
		}
		buf = AppendInt32(buf, int32(len(v)))
		buf = append(buf, v...)
	}
	return FinishMessage(buf, start)
}

// AppendParameterDescription appends a ParameterDescription for parameters
// of the given type OIDs.
func AppendParameterDescription(buf []byte, oids []uint32) []byte {
	start := len(buf)
	buf = append(buf, 't', 0, 0, 0, 0)
	buf = AppendInt16(buf, int16(len(oids)))
	for _, oid := range oids {
		buf = AppendInt32(buf, int32(oid))
	}
	return FinishMessage(buf, start)
}

// AppendParseComplete appends ParseComplete.
func AppendParseComplete(buf []byte) []byte { return append(buf, '1', 0, 0, 0, 4) }

// AppendBindComplete appends BindComplete.
func AppendBindComplete(buf []byte) []byte { return append(buf, '2', 0, 0, 0, 4) }

// AppendCloseComplete appends CloseComplete.
func AppendCloseComplete(buf []byte) []byte { return append(buf, '3', 0, 0, 0, 4) }

// AppendNoData appends NoData, the answer to Describe of a statement that
// returns no rows.
func AppendNoData(buf []byte) []byte { return append(buf, 'n', 0, 0, 0, 4) }

// AppendEmptyQueryResponse appends EmptyQueryResponse, the answer to an
// empty query string.
func AppendEmptyQueryResponse(buf []byte) []byte { return append(buf, 'I', 0, 0, 0, 4) }
