package wire

import "encoding/binary"

// Body reads the fields of one message body in order, the way
// PostgreSQL's pqformat.c does (pq_getmsgbyte, pq_getmsgint,
// pq_getmsgstring, pq_getmsgbytes, pq_getmsgend): a field that is not
// there fails the message with the ERROR 08P01 PostgreSQL sends for it,
// and every read after the first failure returns a zero value. The proxy
// decodes the client messages it answers itself with Body, so that a short
// or malformed message is an error, never an index out of range.
type Body struct {
	b   []byte
	err *Error
}

// NewBody returns a Body reading b.
func NewBody(b []byte) Body { return Body{b: b} }

// The messages of pqformat.c for a field that is not there.
const (
	msgNoData       = "no data left in message"
	msgInsufficient = "insufficient data left in message"
	msgBadString    = "invalid string in message"
	msgBadFormat    = "invalid message format"
)

// fail records PostgreSQL's error for msg unless the body failed already.
func (d *Body) fail(msg string) {
	if d.err == nil {
		d.err = Errorf(ProtocolViolation, "%s", msg)
		d.b = nil
	}
}

// Byte reads one byte.
func (d *Body) Byte() byte {
	if len(d.b) < 1 {
		d.fail(msgNoData)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Uint16 reads a big-endian 16-bit integer (a count, or a format code as
// int16).
func (d *Body) Uint16() uint16 {
	if len(d.b) < 2 {
		d.fail(msgInsufficient)
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

// Int32 reads a big-endian signed 32-bit integer.
func (d *Body) Int32() int32 {
	if len(d.b) < 4 {
		d.fail(msgInsufficient)
		return 0
	}
	v := int32(binary.BigEndian.Uint32(d.b))
	d.b = d.b[4:]
	return v
}

// CString reads a NUL-terminated string, without its NUL.
func (d *Body) CString() []byte {
	s, rest, ok := CString(d.b)
	if !ok {
		d.fail(msgBadString)
		return nil
	}
	d.b = rest
	return s
}

// Bytes reads n bytes; a negative n fails as PostgreSQL's pq_getmsgbytes
// does. Zero bytes read are an empty slice, not nil (nil is a NULL
// parameter to callers).
func (d *Body) Bytes(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.fail(msgInsufficient)
		return nil
	}
	if n == 0 {
		return []byte{}
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// Rest returns what has not been read.
func (d *Body) Rest() []byte { return d.b }

// End fails the body if anything is left unread.
func (d *Body) End() {
	if len(d.b) > 0 {
		d.fail(msgBadFormat)
	}
}

// Err returns the first failure, or nil.
func (d *Body) Err() error {
	if d.err == nil {
		return nil
	}
	return d.err
}
