package wire

import (
	"bytes"
	"encoding/binary"
)

// FinishMessage fills in the length of the message that starts at
// buf[start] (its type byte) and returns buf.
func FinishMessage(buf []byte, start int) []byte {
	binary.BigEndian.PutUint32(buf[start+1:], uint32(len(buf)-start-1))
	return buf
}

// AppendReadyForQuery appends ReadyForQuery with the transaction status.
func AppendReadyForQuery(buf []byte, status byte) []byte {
	return append(buf, 'Z', 0, 0, 0, 5, status)
}

// AppendCommandComplete appends CommandComplete with tag.
func AppendCommandComplete(buf []byte, tag string) []byte {
	start := len(buf)
	buf = append(buf, 'C', 0, 0, 0, 0)
	buf = append(buf, tag...)
	buf = append(buf, 0)
	return FinishMessage(buf, start)
}

// AppendParameterStatus appends ParameterStatus name=value.
func AppendParameterStatus(buf []byte, name, value string) []byte {
	start := len(buf)
	buf = append(buf, 'S', 0, 0, 0, 0)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = append(buf, value...)
	buf = append(buf, 0)
	return FinishMessage(buf, start)
}

// AppendQuery appends a simple Query message.
func AppendQuery(buf []byte, sql string) []byte {
	start := len(buf)
	buf = append(buf, 'Q', 0, 0, 0, 0)
	buf = append(buf, sql...)
	buf = append(buf, 0)
	return FinishMessage(buf, start)
}

// AppendInt32 appends v big-endian.
func AppendInt32(buf []byte, v int32) []byte {
	return binary.BigEndian.AppendUint32(buf, uint32(v))
}

// AppendInt16 appends v big-endian.
func AppendInt16(buf []byte, v int16) []byte {
	return binary.BigEndian.AppendUint16(buf, uint16(v))
}

// CString splits a NUL-terminated string off the front of b. ok is false
// when b holds no NUL.
func CString(b []byte) (s []byte, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, b, false
}

// CText is CString for a long string, a statement's text: it finds the NUL
// with bytes.IndexByte, a few instructions for the whole text where
// CString's loop takes about five a byte. A short string (a name) costs
// less in CString's loop than in IndexByte's call.
func CText(b []byte) (s []byte, rest []byte, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return nil, b, false
	}
	return b[:i], b[i+1:], true
}

// Uint32 reads a big-endian uint32 off the front of b.
func Uint32(b []byte) (uint32, []byte, bool) {
	if len(b) < 4 {
		return 0, b, false
	}
	return binary.BigEndian.Uint32(b), b[4:], true
}

// Uint16 reads a big-endian uint16 off the front of b.
func Uint16(b []byte) (uint16, []byte, bool) {
	if len(b) < 2 {
		return 0, b, false
	}
	return binary.BigEndian.Uint16(b), b[2:], true
}
