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
// columns and one of pointers to them. It also checks every length
// against the message, so that a malformed message is an error, not a
// panic. Other messages go through pglogrepl.Parse.

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
	var c rowChange
	if len(data) < 6 {
		return c, fmt.Errorf("row change: %w", errShortMessage)
	}
	typ := pglogrepl.MessageType(data[0])
	c.relation = binary.BigEndian.Uint32(data[1:])
	buf := bytes.Clone(data[5:])
	part, buf := buf[0], buf[1:]
	var err error
	switch typ {
	case pglogrepl.MessageTypeInsert:
		c.kind = changeInsert
		if part != 'N' {
			return c, fmt.Errorf("insert: tuple type %q, want 'N'", part)
		}
		c.new, _, err = decodeTuple(buf)
	case pglogrepl.MessageTypeUpdate:
		c.kind = changeUpdate
		if part == 'K' || part == 'O' {
			if c.old, buf, err = decodeTuple(buf); err != nil {
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
		c.new, _, err = decodeTuple(buf)
	case pglogrepl.MessageTypeDelete:
		c.kind = changeDelete
		if part != 'K' && part != 'O' {
			return c, fmt.Errorf("delete: tuple type %q, want 'K' or 'O'", part)
		}
		c.old, _, err = decodeTuple(buf)
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
func decodeTuple(buf []byte) ([]*pglogrepl.TupleDataColumn, []byte, error) {
	if len(buf) < 2 {
		return nil, nil, errShortMessage
	}
	n := int(binary.BigEndian.Uint16(buf))
	buf = buf[2:]
	if n > len(buf) { // each column takes a byte at least
		return nil, nil, errShortMessage
	}
	vals := make([]pglogrepl.TupleDataColumn, n)
	cols := make([]*pglogrepl.TupleDataColumn, n)
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
