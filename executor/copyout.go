package executor

import (
	"encoding/binary"
	"io"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// COPY (query) TO STDOUT over several shards (router/copyout.go): the
// shards run the query as a merged read, and CopyOut writes the merged
// rows to the client as PostgreSQL's COPY TO writes them — CopyOutResponse
// once the rows are described, one CopyData message a row (the header line
// first, with HEADER), and CopyDone once the merge ended — in the text or
// CSV format, escaping and quoting each value as copyto.c's
// CopyAttributeOutText and CopyAttributeOutCSV do. The values are the
// shards' text, already in the client's encoding (which the frontend
// checks is one whose multibyte characters never contain an ASCII byte).

// CopyOut is the sink of a merged read that answers a COPY TO STDOUT; it
// wraps the client's sink.
type CopyOut struct {
	out      io.Writer
	opts     *router.CopyOut
	quote    []bool // per column: FORCE_QUOTE
	started  bool
	rows     int64
	buf      []byte
	writeErr error
}

// NewCopyOut returns the sink that writes a merged read into out as the
// COPY data opts describes.
func NewCopyOut(out io.Writer, opts *router.CopyOut) *CopyOut {
	return &CopyOut{out: out, opts: opts}
}

// Write implements io.Writer for the merge's messages: RowDescription
// starts the COPY, DataRows become its rows, the rest (notices) pass.
func (s *CopyOut) Write(msgs []byte) (int, error) {
	n := len(msgs)
	for len(msgs) >= 5 {
		l := 1 + int(binary.BigEndian.Uint32(msgs[1:5]))
		if l > len(msgs) || l < 5 {
			break
		}
		m := msgs[:l]
		msgs = msgs[l:]
		switch m[0] {
		case 'T':
			if err := s.start(m[5:]); err != nil {
				return 0, err
			}
		case 'D':
			if err := s.row(m[5:]); err != nil {
				return 0, err
			}
		default:
			s.send(m)
		}
	}
	return n, s.writeErr
}

// ColumnOrders implements OrderSource through the wrapped sink, so that
// the merge orders text and enums as for the client's own reads.
func (s *CopyOut) ColumnOrders(p *Plan, cols []Column, need []int) ([]ColumnOrder, error) {
	if o, ok := s.out.(OrderSource); ok {
		return o.ColumnOrders(p, cols, need)
	}
	return nil, wire.Errorf(wire.FeatureNotSupported, "the order of these columns across shards is unknown")
}

// Rows is the number of rows written, for the command tag (COPY n).
func (s *CopyOut) Rows() int64 { return s.rows }

// Done ends the COPY data (CopyDone).
func (s *CopyOut) Done() {
	s.send([]byte{'c', 0, 0, 0, 4})
}

func (s *CopyOut) send(m []byte) {
	if _, err := s.out.Write(m); err != nil && s.writeErr == nil {
		s.writeErr = err
	}
}

// start answers the RowDescription body desc with CopyOutResponse, and
// the header line with HEADER.
func (s *CopyOut) start(desc []byte) error {
	if s.started {
		return nil
	}
	s.started = true
	cols, err := ParseRowDescription(desc)
	if err != nil {
		return err
	}
	s.quote = make([]bool, len(cols))
	for i, c := range cols {
		if s.opts.QuoteAll {
			s.quote[i] = true
			continue
		}
		for _, name := range s.opts.ForceQuote {
			if name == c.Name {
				s.quote[i] = true
			}
		}
	}
	msg := []byte{'H', 0, 0, 0, 0, 0}
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(cols)))
	for range cols {
		msg = append(msg, 0, 0)
	}
	s.send(wire.FinishMessage(msg, 0))
	if s.opts.Header {
		s.buf = append(s.buf[:0], 'd', 0, 0, 0, 0)
		for i, c := range cols {
			if i > 0 {
				s.buf = append(s.buf, s.opts.Delimiter)
			}
			s.buf = s.appendValue(s.buf, []byte(c.Name), false, len(cols) == 1)
		}
		s.buf = append(s.buf, '\n')
		s.send(wire.FinishMessage(s.buf, 0))
	}
	return nil
}

// row writes the DataRow body d as one CopyData message.
func (s *CopyOut) row(d []byte) error {
	if len(d) < 2 {
		return wire.Errorf(wire.ProtocolViolation, "malformed DataRow from server")
	}
	n := int(binary.BigEndian.Uint16(d))
	d = d[2:]
	s.buf = append(s.buf[:0], 'd', 0, 0, 0, 0)
	for i := range n {
		if len(d) < 4 {
			return wire.Errorf(wire.ProtocolViolation, "malformed DataRow from server")
		}
		l := int32(binary.BigEndian.Uint32(d))
		d = d[4:]
		if i > 0 {
			s.buf = append(s.buf, s.opts.Delimiter)
		}
		if l < 0 {
			s.buf = append(s.buf, s.opts.Null...)
			continue
		}
		if int(l) > len(d) {
			return wire.Errorf(wire.ProtocolViolation, "malformed DataRow from server")
		}
		s.buf = s.appendValue(s.buf, d[:l], i < len(s.quote) && s.quote[i], n == 1)
		d = d[l:]
	}
	s.buf = append(s.buf, '\n')
	s.rows++
	s.send(wire.FinishMessage(s.buf, 0))
	return nil
}

// appendValue appends one non-NULL value in the COPY format.
func (s *CopyOut) appendValue(out, v []byte, force, single bool) []byte {
	if s.opts.Format == "csv" {
		return appendCSV(out, v, s.opts, force, single)
	}
	return appendCopyText(out, v, s.opts.Delimiter)
}

// appendCopyText appends v escaped as CopyAttributeOutText does: a
// backslash and the delimiter get a backslash before them, and the control
// characters \b \f \n \r \t \v their C escapes.
func appendCopyText(out, v []byte, delim byte) []byte {
	for _, c := range v {
		switch {
		case c < 0x20:
			if e := copyEscapes[c]; e != 0 {
				out = append(out, '\\', e)
			} else if c == delim {
				out = append(out, '\\', c)
			} else {
				out = append(out, c)
			}
		case c == '\\' || c == delim:
			out = append(out, '\\', c)
		default:
			out = append(out, c)
		}
	}
	return out
}

// copyEscapes are the C escapes of the control characters COPY writes so.
var copyEscapes = [0x20]byte{'\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't', '\v': 'v'}

// appendCSV appends v as CopyAttributeOutCSV does: quoted when FORCE_QUOTE
// says so, when it equals the NULL string, when it is \. alone in a row
// of one column, or when it holds the delimiter, the quote, CR or LF; in
// quotes, the quote and escape characters get the escape before them.
func appendCSV(out, v []byte, o *router.CopyOut, force, single bool) []byte {
	quote := force || string(v) == o.Null || single && string(v) == `\.`
	for _, c := range v {
		if quote {
			break
		}
		quote = c == o.Delimiter || c == o.Quote || c == '\n' || c == '\r'
	}
	if !quote {
		return append(out, v...)
	}
	out = append(out, o.Quote)
	for _, c := range v {
		if c == o.Quote || c == o.Escape {
			out = append(out, o.Escape)
		}
		out = append(out, c)
	}
	return append(out, o.Quote)
}

// ProbeOn runs sql on shard i after what Prefix asks for (the settings,
// the transaction's BEGIN and log) and reads its answer, whatever its
// messages, to ReadyForQuery: the error the server answered, if any. A
// failed server is a *ShardError.
func (s *Session) ProbeOn(i int, sql string) (*wire.Error, error) {
	if s.Ready != nil {
		if err := s.Ready(i); err != nil {
			return nil, s.lost(i, err)
		}
	}
	srv := s.shards[i].server
	pre := s.Prefix(i, false)
	for _, q := range pre {
		srv.W.Write(wire.AppendQuery(nil, q))
	}
	srv.W.Write(wire.AppendQuery(nil, sql))
	if err := srv.Flush(); err != nil {
		return nil, s.lost(i, err)
	}
	var first *wire.Error
	for range pre {
		_, serr, err := ReadToReady(srv)
		if err != nil {
			return nil, s.lost(i, err)
		}
		if serr != nil {
			srv.Broken = true // what the server's session is now is unknown
			if first == nil {
				first = serr
			}
		}
	}
	_, serr, err := ReadToReady(srv)
	if err != nil {
		return nil, s.lost(i, err)
	}
	if first != nil {
		return first, nil
	}
	return serr, nil
}
