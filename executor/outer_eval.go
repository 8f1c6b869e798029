package executor

import (
	"github.com/shardgate/shardgate/wire"
)

// shardEval runs Outer statements on the server of one shard's reader,
// once that shard's answer to the fan-out statement is read: in the same
// session and transaction, so with the client's settings (DateStyle,
// search_path, extra_float_digits) and snapshot.
//
// The statement is the server's unnamed statement: Parse and Describe,
// then Bind and Execute for each group, in batches that each end with
// Sync. A batch is at most outerBatch bytes (or one group), so that it
// fits in the sockets' buffers however much the server answers before
// reading all of it: writing a batch whole, then reading its answers,
// cannot deadlock. The first error ends the evaluation, as it ends the
// statement on one PostgreSQL.
type shardEval struct{ r *ShardRows }

// outerBatch bounds the bytes of Bind and Execute messages sent before
// their answers are read.
const outerBatch = 32 << 10

// Eval implements OuterEval.
func (e shardEval) Eval(q OuterQuery, n int, params func(int) [][]byte, row func(int, [][]byte) error) ([]Field, error) {
	r := e.r
	r.Finish()
	if r.ioErr != nil {
		return nil, r.ioErr
	}
	if r.serr != nil {
		return nil, r.serr
	}
	srv := r.srv
	srv.Unnamed = srv.Unnamed[:0] // the unnamed statement is not the client's now
	buf := appendParse(nil, q.SQL, q.ParamOIDs)
	buf = append(buf, 'D', 0, 0, 0, 6, 'S', 0)
	var fields []Field
	for i, first := 0, true; first || i < n; first = false {
		start := i
		for i < n {
			mark := len(buf)
			buf = appendOuterBind(buf, q, params(i))
			buf = append(buf, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
			if i > start && len(buf) > outerBatch {
				buf = buf[:mark] // the next batch's first group
				break
			}
			i++
		}
		buf = append(buf, 'S', 0, 0, 0, 4)
		srv.W.Write(buf)
		if err := srv.Flush(); err != nil {
			r.ioErr = err
			return nil, err
		}
		buf = buf[:0]
		f, err := e.answers(start, row)
		if err != nil {
			return nil, err
		}
		if first {
			fields = f
		}
	}
	return fields, nil
}

// answers reads the server's answers to one batch, up to ReadyForQuery:
// the statement's fields in the first batch, and a row or none for each
// execution, the first counted as group start.
func (e shardEval) answers(start int, row func(int, [][]byte) error) ([]Field, error) {
	r := e.r
	srv := r.srv
	var fields []Field
	var cols [][]byte
	var fail error // the first error, reported at ReadyForQuery
	cur := start - 1
	for {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			srv.Broken = true
			r.ioErr = err
			return nil, err
		}
		switch typ {
		case '1', 't', 'C':
		case 'T':
			if fields, err = parseFields(body); err != nil && fail == nil {
				fail = wire.Errorf(wire.ProtocolViolation, "outer statement: %v", err)
			}
		case 'n':
			fields = []Field{}
		case '2':
			cur++
		case 'D':
			if fail != nil {
				continue
			}
			if cols, err = SplitRow(body, cols); err != nil {
				fail = wire.Errorf(wire.ProtocolViolation, "outer statement: %v", err)
				continue
			}
			fail = row(cur, cols)
		case 'E':
			serr := wire.ParseError(body)
			srv.NoteError(serr)
			if fail == nil {
				fail = serr
			}
		case 'N', 'A':
			r.sink.Write(raw)
		case 'S':
			srv.NoteParameter(body)
		case 'Z':
			r.ready(body)
			if r.ioErr != nil {
				return nil, r.ioErr
			}
			return fields, fail
		default:
			if fail == nil {
				fail = wire.Errorf(wire.ProtocolViolation, "unexpected message %q from server", typ)
			}
		}
	}
}

// appendOuterBind appends a Bind of the unnamed statement to the unnamed
// portal, in q's parameter and result formats.
func appendOuterBind(buf []byte, q OuterQuery, params [][]byte) []byte {
	start := len(buf)
	buf = append(buf, 'B', 0, 0, 0, 0, 0, 0)
	buf = wire.AppendInt16(buf, int16(len(q.ParamFormats)))
	for _, f := range q.ParamFormats {
		buf = wire.AppendInt16(buf, f)
	}
	buf = wire.AppendInt16(buf, int16(len(params)))
	for _, v := range params {
		if v == nil {
			buf = wire.AppendInt32(buf, -1)
			continue
		}
		buf = wire.AppendInt32(buf, int32(len(v)))
		buf = append(buf, v...)
	}
	buf = wire.AppendInt16(buf, int16(len(q.ResultFormats)))
	for _, f := range q.ResultFormats {
		buf = wire.AppendInt16(buf, f)
	}
	return wire.FinishMessage(buf, start)
}
