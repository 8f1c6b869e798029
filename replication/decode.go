package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// This file decodes pgoutput's row changes (Insert, Update, Delete), most
// of what a stream receives, with fewer allocations than pglogrepl.Parse:
// that allocates each column and each value on its own and copies values
// a byte at a time, about a dozen allocations for a row of three columns.
// Here one message costs one copy of its bytes (the reader's buffer is
// reused by the next read, and changes outlive it in the appliers'
// queues), into which the values point, and per tuple one array of
// columns and one of pointers to them, all three carved out of the
// reader's arena. It also checks every length against the message, so
// that a malformed message is an error, not a panic. Begin and Commit are
// decoded into the reader's own messages (pglogrepl's Decode methods);
// other messages go through pglogrepl.Parse.

// Sizes of an arena's blocks.
const (
	arenaBytes   = 64 << 10
	arenaColumns = 1024
)

// arena hands out the memory of decoded changes from blocks, so that the
// reader allocates once per block instead of three times per change. A
// block is never reused: the garbage collector frees it once no change in
// it is referenced, i.e. once the appliers applied them all, so an arena
// keeps at most one block of each kind alive beyond what the appliers'
// queues hold. A nil arena allocates each piece on its own (tests).
type arena struct {
	bytes []byte
	vals  []pglogrepl.TupleDataColumn
	ptrs  []*pglogrepl.TupleDataColumn
}

// clone returns a copy of b.
func (a *arena) clone(b []byte) []byte {
	if a == nil || len(b) > arenaBytes/4 {
		return bytes.Clone(b)
	}
	if len(b) > cap(a.bytes)-len(a.bytes) {
		a.bytes = make([]byte, 0, arenaBytes)
	}
	n := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	return a.bytes[n:len(a.bytes):len(a.bytes)]
}

// columns returns n zeroed columns and n pointers, the i-th to the i-th
// column.
func (a *arena) columns(n int) ([]pglogrepl.TupleDataColumn, []*pglogrepl.TupleDataColumn) {
	if a == nil || n > arenaColumns/4 {
		return make([]pglogrepl.TupleDataColumn, n), make([]*pglogrepl.TupleDataColumn, n)
	}
	if n > cap(a.vals)-len(a.vals) {
		a.vals = make([]pglogrepl.TupleDataColumn, 0, arenaColumns)
	}
	if n > cap(a.ptrs)-len(a.ptrs) {
		a.ptrs = make([]*pglogrepl.TupleDataColumn, 0, arenaColumns)
	}
	i, j := len(a.vals), len(a.ptrs)
	a.vals, a.ptrs = a.vals[:i+n], a.ptrs[:j+n]
	return a.vals[i : i+n : i+n], a.ptrs[j : j+n : j+n]
}

// rowChange is one decoded Insert, Update or Delete.
type rowChange struct {
	kind     changeKind // changeInsert, changeUpdate or changeDelete
	relation uint32
	new      []*pglogrepl.TupleDataColumn // insert, update
	old      []*pglogrepl.TupleDataColumn // update (nil unless the key changed or REPLICA IDENTITY FULL), delete
}

// isRowChange reports whether the pgoutput message data is a row change.
func isRowChange(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate, pglogrepl.MessageTypeDelete:
		return true
	}
	return false
}

var errShortMessage = errors.New("message too short")

// decodeRowChange decodes the pgoutput message data, an Insert, Update or
// Delete (isRowChange). The result does not share memory with data.
func decodeRowChange(data []byte) (rowChange, error) {
	return (*arena)(nil).decodeRowChange(data)
}

// decodeRowChange is decodeRowChange with the result's memory taken from a.
func (a *arena) decodeRowChange(data []byte) (rowChange, error) {
	var c rowChange
	if len(data) < 6 {
		return c, fmt.Errorf("row change: %w", errShortMessage)
	}
	typ := pglogrepl.MessageType(data[0])
	c.relation = binary.BigEndian.Uint32(data[1:])
	buf := a.clone(data[5:])
	part, buf := buf[0], buf[1:]
	var err error
	switch typ {
	case pglogrepl.MessageTypeInsert:
		c.kind = changeInsert
		if part != 'N' {
			return c, fmt.Errorf("insert: tuple type %q, want 'N'", part)
		}
		c.new, _, err = a.decodeTuple(buf)
	case pglogrepl.MessageTypeUpdate:
		c.kind = changeUpdate
		if part == 'K' || part == 'O' {
			if c.old, buf, err = a.decodeTuple(buf); err != nil {
				return c, fmt.Errorf("update: old tuple: %w", err)
			}
			if len(buf) == 0 {
				return c, fmt.Errorf("update: %w", errShortMessage)
			}
			part, buf = buf[0], buf[1:]
		}
		if part != 'N' {
			return c, fmt.Errorf("update: tuple type %q, want 'N'", part)
		}
		c.new, _, err = a.decodeTuple(buf)
	case pglogrepl.MessageTypeDelete:
		c.kind = changeDelete
		if part != 'K' && part != 'O' {
			return c, fmt.Errorf("delete: tuple type %q, want 'K' or 'O'", part)
		}
		c.old, _, err = a.decodeTuple(buf)
	default:
		return c, fmt.Errorf("message type %q is not a row change", byte(typ))
	}
	if err != nil {
		return c, fmt.Errorf("row change %q: %w", byte(typ), err)
	}
	return c, nil
}

// decodeTuple decodes a TupleData at the start of buf and returns the
// rest of buf; the values point into buf.
func (a *arena) decodeTuple(buf []byte) ([]*pglogrepl.TupleDataColumn, []byte, error) {
	if len(buf) < 2 {
		return nil, nil, errShortMessage
	}
	n := int(binary.BigEndian.Uint16(buf))
	buf = buf[2:]
	if n > len(buf) { // each column takes a byte at least
		return nil, nil, errShortMessage
	}
	vals, cols := a.columns(n)
	for i := range vals {
		if len(buf) == 0 {
			return nil, nil, errShortMessage
		}
		v := &vals[i]
		v.DataType, buf = buf[0], buf[1:]
		switch v.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(buf) < 4 {
				return nil, nil, errShortMessage
			}
			v.Length, buf = binary.BigEndian.Uint32(buf), buf[4:]
			if uint64(v.Length) > uint64(len(buf)) {
				return nil, nil, errShortMessage
			}
			v.Data, buf = buf[:v.Length:v.Length], buf[v.Length:]
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return nil, nil, fmt.Errorf("column %d: unknown type %q", i, v.DataType)
		}
		cols[i] = v
	}
	return cols, buf, nil
}
