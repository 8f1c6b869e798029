package executor

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// INSERT … SELECT into a sharded table.
//
// The SELECT runs on the shards the router's Source plan names, through a
// cursor on each (DECLARE … NO SCROLL CURSOR, then FETCH in batches). All
// the cursors are declared before the first row is written, and a cursor
// reads the rows as they were when it was declared, so the SELECT never
// sees a row the statement inserted: the snapshot PostgreSQL gives INSERT
// … SELECT on one server, shard by shard. Between two FETCHes a reader's
// server is idle and takes INSERTs like any other shard's, so one server
// per shard suffices. The rows of several readers merge as a cross-shard
// read's do (Merger, with the Source's Merge); each row goes to the shard
// of its sharding key, gathered per shard and sent as one multi-row INSERT
// once insertBatch bytes are waiting. Every shard that took part commits
// together (Session.Commit), or the statement is part of the open
// transaction (the client's, or the implicit one of a pipeline).
//
// Values travel as typed literals: the text the SELECT gave, cast to the
// type it had ('2.5'::numeric). The shard then applies the INSERT's own
// assignment casts to the target columns, as INSERT … SELECT on one server
// does: numeric 2.5 into an integer column is 3, a text value into a date
// column is an error, char(4) 'ab  ' into text is 'ab'. COPY would read
// each column's text with the column type's input function instead ('2.5'
// into an integer column is an error, text '2020-01-01' becomes a date,
// 'ab  ' keeps its blanks) and could not carry ON CONFLICT. The select
// list's untyped literals ('x', NULL) are sent untyped, as INSERT … SELECT
// coerces them to the column's type. A value's text reads back as the same
// value: on the readers, float output is made exact (extra_float_digits)
// and dates unambiguous (DateStyle ISO) for the statement when the
// session's settings are otherwise.
//
// Before anything runs, the first reader parses the client's statement
// (Parse and Describe, never executed), so that PostgreSQL's own error for
// a wrong column list or a type that does not fit comes first, and infers
// the types of its parameters as the INSERT does; the cursor's query is
// prepared with them.
//
// Memory: about fetchBytes per reader (one FETCH), insertBatch per shard.

const (
	insertCursor = "__shardgate_insert_select"
	insertBatch  = 256 << 10 // bytes of rows in one INSERT sent to a shard
	fetchBytes   = 1 << 20   // what one FETCH should bring at most
	fetchFirst   = 100       // rows in the first FETCH, before their size is known
	fetchMax     = 10000
)

// insertSelect is one INSERT … SELECT in progress.
type insertSelect struct {
	s        *Session
	a        *Answer
	is       *router.InsertSelect
	implicit bool     // the statement runs in a transaction of its own
	joined   []bool   // by shard: the statement sent its prefix
	types    []string // by column: the type of its literals, "" for untyped
	bufs     [][]byte // by shard: rows not yet sent, "(…), (…)"
	pending  []bool   // by shard: an INSERT was sent, its answer not read
	rows     int64    // rows the shards inserted
	restore  string   // the Query that restores a reader's output settings
	cells    [][]byte
	msg      []byte
	notices  map[int]*noticeCounter // by shard: what the statement's shards raise once goes once (notices.go)
	share    *Notices
}

// InsertSelect runs the plan's INSERT … SELECT into a sharded table and
// returns its command tag, INSERT 0 n. paramTypes are the parameter types
// the client gave at Parse (none for a simple Query); a.Plan carries the
// parameters. The transaction is the open one, or (none open) one of the
// statement's own, committed on every shard that took part together, or
// rolled back everywhere on an error. Notices go to a.Sink, and NoData
// first for DescribeAll. Errors other than a *ShardError leave the
// session usable.
func (s *Session) InsertSelect(a *Answer, paramTypes []uint32) (string, error) {
	x := &insertSelect{s: s, a: a, is: a.Plan.InsertSelect, implicit: !s.tx.open,
		joined: make([]bool, len(s.shards)), bufs: make([][]byte, len(s.shards)), pending: make([]bool, len(s.shards))}
	if x.is == nil || x.is.Source == nil || len(x.is.Source.Shards) == 0 {
		return "", wire.Errorf(wire.InternalError, "INSERT … SELECT without a source plan")
	}
	if a.Describe == DescribeAll {
		a.Sink.Write(wire.AppendNoData(nil))
	}
	err := x.run(paramTypes)
	if err != nil {
		x.drain()
	}
	if err == nil && x.implicit {
		err = s.Commit(x.joinedShards())
	}
	if err != nil {
		var se *ShardError
		if x.implicit && !errors.As(err, &se) {
			s.Rollback()
		}
		return "", err
	}
	return "INSERT 0 " + strconv.FormatInt(x.rows, 10), nil
}

// run reads the SELECT and sends its rows on.
func (x *insertSelect) run(paramTypes []uint32) error {
	src := x.is.Source
	readers, query := src.Shards, x.is.Query
	var merge *router.Merge
	switch src.Kind {
	case router.OmniRead, router.Any:
		readers = []int{x.pick(src.Shards)}
	default:
		if len(readers) > 1 && src.Merge != nil {
			merge = src.Merge
			if merge.Rewritten != "" {
				query = merge.Rewritten
			}
		}
	}
	for _, i := range readers {
		if err := x.join(i); err != nil {
			return err
		}
	}
	cols, types, err := x.describe(readers[0], query, paramTypes)
	if err != nil {
		return err
	}
	visible := len(cols)
	if merge != nil {
		visible -= merge.HiddenColumns
	}
	if visible < 0 {
		return wire.Errorf(wire.InternalError, "INSERT … SELECT: %d result columns, %d of them hidden", len(cols), merge.HiddenColumns)
	}
	set, err := x.prepare(readers[0], cols[:visible])
	if err != nil {
		return err
	}
	sources := make([]Rows, len(readers))
	for k, i := range readers {
		if err := x.declare(i, set, query, types); err != nil {
			return err
		}
		sources[k] = &cursorRows{x: x, shard: i, fetch: fetchFirst}
	}
	if err := x.merge(merge, cols, sources); err != nil {
		return err
	}
	for i := range x.bufs {
		if err := x.flush(i); err != nil {
			return err
		}
	}
	for i := range x.pending {
		if err := x.settle(i); err != nil {
			return err
		}
	}
	for _, i := range readers {
		if err := x.query(i, "CLOSE "+insertCursor+x.restore); err != nil {
			return err
		}
	}
	return nil
}

// merge routes the rows of sources: one after the other, or combined by
// the Source's Merge.
func (x *insertSelect) merge(merge *router.Merge, cols []Column, sources []Rows) error {
	if merge == nil {
		for _, src := range sources {
			for {
				b, err := src.Next()
				if err != nil {
					return err
				}
				if b == nil {
					break
				}
				if err := x.row(b); err != nil {
					return err
				}
			}
		}
		return nil
	}
	p := Plan{Merge: merge, Params: x.a.Plan.Params, Formats: x.a.Plan.Formats}
	spec, err := p.Spec(len(cols))
	if err != nil {
		return err
	}
	spec.Collation = x.a.Collation
	m, err := NewMerger(spec, cols, x)
	if err != nil {
		return err
	}
	_, err = m.Run(sources)
	return err
}

// pick returns the shard that runs a SELECT any shard can answer: one the
// transaction is open on, else a random one.
func (x *insertSelect) pick(shards []int) int {
	for _, i := range shards {
		if x.s.InTxOn(i) {
			return i
		}
	}
	return shards[rand.IntN(len(shards))]
}

// joinedShards lists the shards the statement sent its prefix to.
func (x *insertSelect) joinedShards() []int {
	var out []int
	for i, ok := range x.joined {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// join sends shard i what Prefix asks for before the statement's first
// message to it: the settings sync and, in a transaction, BEGIN.
func (x *insertSelect) join(i int) error {
	if x.joined[i] {
		return nil
	}
	s := x.s
	srv := s.shards[i].server
	if srv == nil {
		return wire.Errorf(wire.InternalError, "INSERT … SELECT: no server held for shard %d", i)
	}
	x.joined[i] = true
	if s.Ready != nil {
		if err := s.Ready(i); err != nil {
			return s.lost(i, err)
		}
	}
	for _, q := range s.Prefix(i, x.implicit) {
		if err := x.query(i, q); err != nil {
			if _, ok := err.(*wire.Error); ok {
				// What the server's session is now is unknown.
				srv.Broken = true
			}
			return err
		}
	}
	return nil
}

// describe parses the client's statement on shard i, for PostgreSQL's
// errors and the parameter types it infers (starting from given), then
// the query the cursor will run, for its result columns.
func (x *insertSelect) describe(i int, query string, given []uint32) ([]Column, []uint32, error) {
	out := appendParse(nil, x.a.Plan.SQL, given)
	out = append(out, 'D', 0, 0, 0, 6, 'S', 0, 'S', 0, 0, 0, 4)
	types, _, err := x.exchange(i, out)
	if err != nil {
		return nil, nil, err
	}
	params := x.a.Plan.Params
	switch {
	case params == nil && len(types) > 0:
		return nil, nil, wire.Errorf(wire.UndefinedParameter, "there is no parameter $1")
	case len(params) != len(types):
		return nil, nil, wire.Errorf(wire.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"\" requires %d", len(params), len(types))
	}
	out = appendParse(out[:0], query, types)
	out = append(out, 'D', 0, 0, 0, 6, 'S', 0, 'S', 0, 0, 0, 4)
	_, desc, err := x.exchange(i, out)
	if err != nil {
		return nil, nil, err
	}
	cols, perr := ParseRowDescription(desc)
	if desc == nil || perr != nil {
		return nil, nil, wire.Errorf(wire.InternalError, "INSERT … SELECT: the SELECT has no result columns")
	}
	return cols, types, nil
}

// Type OIDs of values that cannot be sent as literals of their type.
const (
	unknownOID     = 705
	recordOID      = 2249
	recordArrayOID = 2287
)

// prepare names the type of each column's literals, checks that the rows
// can be routed, and returns the Query that makes a reader's output
// settings exact ("" when they are), setting x.restore to undo it.
func (x *insertSelect) prepare(i int, cols []Column) (string, error) {
	var oids []uint32
	q := "SELECT pg_catalog.current_setting('extra_float_digits'), pg_catalog.current_setting('DateStyle'), pg_catalog.current_setting('client_encoding')"
	for c, col := range cols {
		if !x.is.IsUntyped(c, len(cols)) && col.OID != unknownOID && !slices.Contains(oids, col.OID) {
			oids = append(oids, col.OID)
			q += ", pg_catalog.format_type(" + strconv.FormatUint(uint64(col.OID), 10) + ", -1)"
		}
	}
	vals, err := x.queryRow(i, q)
	if err != nil {
		return "", err
	}
	if len(vals) != 3+len(oids) {
		return "", wire.Errorf(wire.InternalError, "INSERT … SELECT: %d values describe %d types", len(vals), len(oids))
	}
	if multibyteEscapes(vals[2]) {
		return "", &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "INSERT … SELECT into sharded table " + x.is.Table + " in client encoding " + vals[2],
			Hint:    "Run it with SET client_encoding = 'UTF8': the proxy quotes values as literals, which this encoding cannot do byte by byte."}
	}
	x.types = make([]string, len(cols))
	for c, col := range cols {
		if k := slices.Index(oids, col.OID); k >= 0 && !x.is.IsUntyped(c, len(cols)) {
			x.types[c] = vals[3+k]
		}
		if col.OID == recordOID || col.OID == recordArrayOID {
			return "", &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
				Message: "INSERT … SELECT into sharded table " + x.is.Table + ": column " + strconv.Quote(col.Name) + " is of an anonymous record type",
				Hint:    "Cast the row to the target column's type: ROW(…)::type."}
		}
	}
	keyOID, keyType := uint32(0), ""
	if x.is.Key < len(cols) {
		keyOID, keyType = cols[x.is.Key].OID, x.types[x.is.Key]
	}
	if err := x.is.CheckKey(len(cols), keyOID, keyType); err != nil {
		return "", err
	}
	var set, restore []string
	if n, err := strconv.Atoi(vals[0]); err != nil || n < 1 {
		set = append(set, "pg_catalog.set_config('extra_float_digits', '3', true)")
		restore = append(restore, "pg_catalog.set_config('extra_float_digits', "+wire.QuoteLiteral(vals[0])+", true)")
	}
	if !strings.HasPrefix(vals[1], "ISO") {
		set = append(set, "pg_catalog.set_config('DateStyle', 'ISO', true)")
		restore = append(restore, "pg_catalog.set_config('DateStyle', "+wire.QuoteLiteral(vals[1])+", true)")
	}
	if len(set) == 0 {
		return "", nil
	}
	x.restore = "; SELECT " + strings.Join(restore, ", ")
	return "SELECT " + strings.Join(set, ", "), nil
}

// multibyteEscapes reports whether a client encoding has characters with a
// byte that reads as a backslash or quote: literals cannot be quoted byte
// by byte in it.
func multibyteEscapes(encoding string) bool {
	switch strings.ToUpper(strings.ReplaceAll(encoding, "_", "")) {
	case "SJIS", "SHIFTJIS2004", "BIG5", "GBK", "UHC", "GB18030", "JOHAB":
		return true
	}
	return false
}

// declare opens the cursor on reader i, after set ("" for none).
func (x *insertSelect) declare(i int, set, query string, types []uint32) error {
	if set != "" {
		if err := x.query(i, set); err != nil {
			return err
		}
	}
	out := appendParse(nil, "DECLARE "+insertCursor+" NO SCROLL CURSOR FOR "+query, types)
	out = appendBind(out, x.a.Plan.Params, x.a.Plan.Formats)
	out = append(out, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0, 'S', 0, 0, 0, 4)
	_, _, err := x.exchange(i, out)
	return err
}

// Write takes the merged rows (DataRow messages) and sends each on: it is
// the Merger's Sink.
func (x *insertSelect) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) >= 5 {
		l := int(binary.BigEndian.Uint32(b[1:]))
		if l < 4 || 1+l > len(b) {
			return 0, wire.Errorf(wire.InternalError, "INSERT … SELECT: malformed merged row")
		}
		if b[0] == 'D' {
			if err := x.row(b[5 : 1+l]); err != nil {
				return 0, err
			}
		}
		b = b[1+l:]
	}
	return n, nil
}

// row adds one row to the INSERT of its key's shard.
func (x *insertSelect) row(body []byte) error {
	cols, err := SplitRow(body, x.cells)
	if err != nil {
		return err
	}
	x.cells = cols
	if len(cols) != len(x.types) || x.is.Key >= len(cols) {
		return wire.Errorf(wire.InternalError, "INSERT … SELECT: a row of %d columns, want %d", len(cols), len(x.types))
	}
	shard, err := x.is.Shard(cols[x.is.Key])
	if err != nil {
		return err
	}
	if shard < 0 || shard >= len(x.bufs) {
		return wire.Errorf(wire.InternalError, "INSERT … SELECT: a row for shard %d of %d", shard, len(x.bufs))
	}
	buf := x.bufs[shard]
	if len(buf) > 0 {
		buf = append(buf, ", "...)
	}
	buf = append(buf, '(')
	for c, v := range cols {
		if c > 0 {
			buf = append(buf, ", "...)
		}
		if v == nil {
			buf = append(buf, "NULL"...)
		} else {
			buf = appendLiteral(buf, v)
		}
		if x.types[c] != "" {
			buf = append(buf, "::"...)
			buf = append(buf, x.types[c]...)
		}
	}
	x.bufs[shard] = append(buf, ')')
	if len(x.bufs[shard]) >= insertBatch {
		return x.flush(shard)
	}
	return nil
}

// appendLiteral appends v as a string literal, E'…' when it holds a
// backslash, so that it reads alike whatever standard_conforming_strings
// says.
func appendLiteral(buf, v []byte) []byte {
	esc := slices.Contains(v, '\\')
	if esc {
		buf = append(buf, 'E')
	}
	buf = append(buf, '\'')
	for _, c := range v {
		switch {
		case c == '\'':
			buf = append(buf, '\'', '\'')
		case c == '\\':
			buf = append(buf, '\\', '\\')
		default:
			buf = append(buf, c)
		}
	}
	return append(buf, '\'')
}

// flush sends shard i the INSERT of the rows waiting for it. Its answer is
// read later (settle), before the next message to the shard, so that the
// shards insert while the proxy reads on.
func (x *insertSelect) flush(i int) error {
	if len(x.bufs[i]) == 0 {
		return nil
	}
	if err := x.join(i); err != nil {
		return err
	}
	if err := x.settle(i); err != nil {
		return err
	}
	srv := x.s.shards[i].server
	msg := append(x.msg[:0], 'Q', 0, 0, 0, 0)
	msg = append(msg, x.is.Prefix...)
	msg = append(msg, x.bufs[i]...)
	msg = append(msg, x.is.Suffix...)
	x.msg = wire.FinishMessage(append(msg, 0), 0)
	x.bufs[i] = x.bufs[i][:0]
	srv.W.Write(x.msg)
	if err := srv.Flush(); err != nil {
		return x.s.lost(i, err)
	}
	x.pending[i] = true
	return nil
}

// settle reads the answer to the INSERT sent to shard i, if one is
// pending.
func (x *insertSelect) settle(i int) error {
	if !x.pending[i] {
		return nil
	}
	x.pending[i] = false
	r := NewShardRows(x.s.shards[i].server, x.a.Sink)
	r.Header()
	r.Finish()
	if r.ioErr != nil {
		return x.s.lost(i, r.ioErr)
	}
	if r.serr != nil {
		return r.serr
	}
	if k := strings.LastIndexByte(r.tag, ' '); k >= 0 {
		n, _ := strconv.ParseInt(r.tag[k+1:], 10, 64)
		x.rows += n
	}
	return nil
}

// drain reads the answers still pending after a failure, so that every
// server is back at ReadyForQuery (or broken) for the rollback.
func (x *insertSelect) drain() {
	for i := range x.pending {
		x.settle(i)
	}
}

// query runs sql on shard i and reads the answers to ReadyForQuery,
// returning the server's error.
func (x *insertSelect) query(i int, sql string) error {
	_, err := x.queryRowOf(i, sql, false)
	return err
}

// queryRow runs sql, a query of one row, on shard i and returns its
// values as text (NULL as "").
func (x *insertSelect) queryRow(i int, sql string) ([]string, error) {
	return x.queryRowOf(i, sql, true)
}

func (x *insertSelect) queryRowOf(i int, sql string, keep bool) ([]string, error) {
	srv := x.s.shards[i].server
	srv.W.Write(wire.AppendQuery(nil, sql))
	if err := srv.Flush(); err != nil {
		return nil, x.s.lost(i, err)
	}
	var vals []string
	var serr *wire.Error
	err := x.read(i, func(typ byte, body []byte) {
		switch typ {
		case 'D':
			if keep && vals == nil {
				cells, _ := SplitRow(body, nil)
				for _, c := range cells {
					vals = append(vals, string(c))
				}
			}
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	return vals, nil
}

// exchange sends out, extended-protocol messages that end with Sync, to
// shard i and reads the answers: the ParameterDescription's types, the
// RowDescription's body, the first error.
func (x *insertSelect) exchange(i int, out []byte) (types []uint32, desc []byte, err error) {
	srv := x.s.shards[i].server
	srv.W.Write(out)
	if err := srv.Flush(); err != nil {
		return nil, nil, x.s.lost(i, err)
	}
	var serr *wire.Error
	err = x.read(i, func(typ byte, body []byte) {
		switch typ {
		case 't':
			n, rest, _ := wire.Uint16(body)
			types = make([]uint32, 0, n)
			for range n {
				var oid uint32
				oid, rest, _ = wire.Uint32(rest)
				types = append(types, oid)
			}
		case 'T':
			desc = append([]byte{}, body...)
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	if serr != nil {
		return nil, nil, serr
	}
	return types, desc, nil
}

// notice returns shard i's notice counter.
func (x *insertSelect) notice(i int) *noticeCounter {
	if x.share == nil {
		x.share, x.notices = NewNotices(), make(map[int]*noticeCounter)
	}
	c := x.notices[i]
	if c == nil {
		c = &noticeCounter{share: x.share}
		x.notices[i] = c
	}
	return c
}

// read hands the answers of shard i's server up to ReadyForQuery to fn;
// notices go to the client, ParameterStatus to the server's record.
func (x *insertSelect) read(i int, fn func(typ byte, body []byte)) error {
	srv := x.s.shards[i].server
	for {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			return x.s.lost(i, err)
		}
		switch typ {
		case 'N', 'A':
			if x.notice(i).send(typ, body) {
				x.a.Sink.Write(raw)
			}
		case 'S':
			srv.NoteParameter(body)
		case 'E':
			e := wire.ParseError(body)
			srv.NoteError(e)
			fn(typ, body)
		case 'Z':
			return nil
		default:
			fn(typ, body)
		}
	}
}

// cursorRows reads the cursor of one reader, a FETCH at a time, each read
// whole so that the server is idle (and can take INSERTs) while its rows
// are routed. It implements Rows.
type cursorRows struct {
	x     *insertSelect
	shard int
	fetch int // rows the next FETCH asks for
	buf   []byte
	ends  []int // end of each row in buf
	next  int
	done  bool // the cursor has no more rows
}

func (r *cursorRows) Next() ([]byte, error) {
	for r.next >= len(r.ends) {
		if r.done {
			return nil, nil
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	start := 0
	if r.next > 0 {
		start = r.ends[r.next-1]
	}
	r.next++
	return r.buf[start:r.ends[r.next-1]], nil
}

// fill runs the next FETCH and sizes the one after it by the rows' size to
// bring about fetchBytes (growing at most fourfold, as the first rows
// need not be typical).
func (r *cursorRows) fill() error {
	x := r.x
	if err := x.settle(r.shard); err != nil {
		return err
	}
	srv := x.s.shards[r.shard].server
	r.buf, r.ends, r.next = r.buf[:0], r.ends[:0], 0
	srv.W.Write(wire.AppendQuery(nil, "FETCH FORWARD "+strconv.Itoa(r.fetch)+" FROM "+insertCursor))
	if err := srv.Flush(); err != nil {
		return x.s.lost(r.shard, err)
	}
	var serr *wire.Error
	err := x.read(r.shard, func(typ byte, body []byte) {
		switch typ {
		case 'D':
			r.buf = append(r.buf, body...)
			r.ends = append(r.ends, len(r.buf))
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
			}
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	r.done = len(r.ends) < r.fetch
	if n := len(r.ends); n > 0 {
		avg := max(len(r.buf)/n, 1)
		r.fetch = min(max(fetchBytes/avg, 1), 4*r.fetch, fetchMax)
	}
	return nil
}

// appendParse appends Parse of the unnamed statement.
func appendParse(out []byte, sql string, types []uint32) []byte {
	start := len(out)
	out = append(out, 'P', 0, 0, 0, 0, 0)
	out = append(out, sql...)
	out = append(out, 0)
	out = wire.AppendInt16(out, int16(len(types)))
	for _, t := range types {
		out = wire.AppendInt32(out, int32(t))
	}
	return wire.FinishMessage(out, start)
}

// appendBind appends Bind of the unnamed portal to the unnamed statement
// with the client's parameters; results in text.
func appendBind(out []byte, params [][]byte, formats []int16) []byte {
	start := len(out)
	out = append(out, 'B', 0, 0, 0, 0, 0, 0)
	out = wire.AppendInt16(out, int16(len(formats)))
	for _, f := range formats {
		out = wire.AppendInt16(out, f)
	}
	out = wire.AppendInt16(out, int16(len(params)))
	for _, p := range params {
		if p == nil {
			out = wire.AppendInt32(out, -1)
			continue
		}
		out = wire.AppendInt32(out, int32(len(p)))
		out = append(out, p...)
	}
	out = wire.AppendInt16(out, 0)
	return wire.FinishMessage(out, start)
}

var _ Rows = (*cursorRows)(nil)
