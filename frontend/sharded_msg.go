package frontend

import (
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// The proxy decodes the messages of a sharded client's batch itself, in
// the order PostgreSQL's exec_*_message functions read them; a message
// that is short, long or malformed fails in its place with the ERROR 08P01
// PostgreSQL sends for it (wire.Body), and the batch is skipped to Sync.

// executesPortal reports whether an Execute body is well-formed and runs
// portal: a Describe of that portal can travel with it.
func executesPortal(executeBody, portal []byte) bool {
	name, _, err := executeMsg(executeBody)
	return err == nil && string(name) == string(portal)
}

// describeMsg decodes a Describe or Close body (typ 'D' or 'C'): its kind,
// 'S' for a statement or 'P' for a portal, and the name.
func describeMsg(typ byte, body []byte) (kind byte, name []byte, err error) {
	d := wire.NewBody(body)
	kind = d.Byte()
	name = d.CString()
	d.End()
	if err := d.Err(); err != nil {
		return 0, nil, err
	}
	if kind != 'S' && kind != 'P' {
		what := "DESCRIBE"
		if typ == 'C' {
			what = "CLOSE"
		}
		return 0, nil, wire.Errorf(wire.ProtocolViolation, "invalid %s message subtype %d", what, kind)
	}
	return kind, name, nil
}

// executeMsg decodes an Execute body.
func executeMsg(body []byte) (portal []byte, maxRows int32, err error) {
	d := wire.NewBody(body)
	portal = d.CString()
	maxRows = d.Int32()
	d.End()
	return portal, maxRows, d.Err()
}

// parseMsg decodes a Parse body: the statement name, the query, and the
// body after the name (query and parameter types), which names the
// proxy-wide statement.
func parseMsg(body []byte) (name, query, tail []byte, err error) {
	d := wire.NewBody(body)
	name = d.CString()
	tail = d.Rest()
	query = d.CString()
	for n := d.Uint16(); n > 0 && d.Err() == nil; n-- {
		d.Int32() // a parameter type OID
	}
	d.End()
	return name, query, tail, d.Err()
}

// parseBindParams decodes the parameter formats and values of a Bind body
// after the portal and statement names (the tail), and checks that the
// result formats end it. It appends to params[:0] and formats[:0], so a
// caller's arrays serve when they are big enough; the values are slices
// of tail.
func parseBindParams(tail []byte, params [][]byte, formats []int16) ([]int16, [][]byte, error) {
	d := wire.NewBody(tail)
	formats, params = formats[:0], params[:0]
	for n := d.Uint16(); n > 0 && d.Err() == nil; n-- {
		formats = append(formats, int16(d.Uint16()))
	}
	np := int(d.Uint16())
	if d.Err() == nil && len(formats) > 1 && len(formats) != np {
		return nil, nil, wire.Errorf(wire.ProtocolViolation, "bind message has %d parameter formats but %d parameters", len(formats), np)
	}
	for n := np; n > 0 && d.Err() == nil; n-- {
		l := d.Int32()
		if l == -1 {
			params = append(params, nil) // NULL
			continue
		}
		params = append(params, d.Bytes(int(l)))
	}
	for n := d.Uint16(); n > 0 && d.Err() == nil; n-- {
		d.Uint16() // a result format
	}
	d.End()
	if err := d.Err(); err != nil {
		return nil, nil, err
	}
	// Formats apply per parameter: none means text, one applies to all.
	switch len(formats) {
	case len(params):
	case 0, 1:
		f := int16(0)
		if len(formats) == 1 {
			f = formats[0]
		}
		formats = formats[:0]
		for range params {
			formats = append(formats, f)
		}
	}
	return formats, params, nil
}

// resultFormats returns the result-format part at the end of a Bind tail
// that parseBindParams accepted.
func resultFormats(tail []byte) []byte {
	d := wire.NewBody(tail)
	d.Bytes(2 * int(d.Uint16())) // parameter formats
	for n := d.Uint16(); n > 0 && d.Err() == nil; n-- {
		if l := d.Int32(); l != -1 {
			d.Bytes(int(l))
		}
	}
	return d.Rest()
}

// widenResultFormats adds format entries for the hidden columns the
// router appended, when the client's Bind lists one format per column:
// text, or the format of the visible column like names (lag's argument
// takes its window column's).
func widenResultFormats(tail []byte, hidden int, like []router.Column) []byte {
	rf := resultFormats(tail)
	d := wire.NewBody(rf)
	n := d.Uint16()
	formats := d.Bytes(2 * int(n))
	if d.Err() != nil || n <= 1 {
		return tail // none or one format: applies to every column
	}
	out := append([]byte{}, tail[:len(tail)-len(rf)]...)
	out = wire.AppendInt16(out, int16(int(n)+hidden))
	out = append(out, formats...)
	for i := 0; i < hidden; i++ {
		f := int16(0)
		if i < len(like) {
			// A value the merge copies into a visible column comes in
			// that column's format.
			if c := like[i].Index(int(n) + hidden); c >= 0 && c < int(n) {
				f = int16(uint16(formats[2*c])<<8 | uint16(formats[2*c+1]))
			}
		}
		out = wire.AppendInt16(out, f)
	}
	return out
}
