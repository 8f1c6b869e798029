package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Fan-out: one statement on several shards, one answer for the client.
//
// Each shard's answer is read by a ShardRows: the header (RowDescription,
// CommandComplete, EmptyQueryResponse or ErrorResponse), the rows, then
// ReadyForQuery. Gather merges the rows of all shards through a Merger, or
// adds their command tags, writes the result into the client's sink, reads
// every shard to ReadyForQuery, and settles the implicit transaction of a
// write outside a transaction block: two-phase commit when every shard
// succeeded, rollback everywhere otherwise.

// ShardRows reads one shard's answer to a single statement. Notices and
// notifications go straight to the sink; ParameterStatus updates the
// server's record. It implements Rows.
type ShardRows struct {
	srv    *pool.Server
	sink   io.Writer
	desc   []byte // RowDescription body (owned copy)
	tag    string
	serr   *wire.Error
	ioErr  error
	empty  bool
	inRows bool
	status byte

	notices noticeCounter // see ShareNotices

	// Extended: the answer to Parse/Bind/Describe/Execute/Sync, whose
	// ParseComplete, BindComplete and NoData the reader skips.
	Extended bool
	// Parsing is the statement whose Parse leads the messages, until its
	// ParseComplete: an error before that means the server does not have
	// it (it is dropped from the server's record).
	Parsing string
	// Bound: the server answered the Bind with BindComplete, so that an
	// error after it is the Execute's, not the Bind's.
	Bound bool

	// cursor: the shard runs the read as this cursor (Answer.Cursor);
	// declared once its DECLARE's CommandComplete was read, batch the
	// rows the FETCH under way asked for, rows the rows read in all.
	// finishing: Finish drains the rows, so a cursor fetches no more.
	cursor    *ShardCursor
	declared  bool
	finishing bool
	batch     int
	rows      int64

	// parked: Park read the rest of the batch under way (held, then the
	// tag of its FETCH in heldTag or its error in heldErr) and the
	// ReadyForQuery after it, so that the server is free for other
	// statements until the merge wants a row beyond the held ones.
	parked  bool
	held    [][]byte
	heldTag []byte
	heldErr *wire.Error
}

// NewShardRows returns a reader of srv's answer; messages for the client
// go to sink.
func NewShardRows(srv *pool.Server, sink io.Writer) *ShardRows {
	return &ShardRows{srv: srv, sink: sink}
}

// ShareNotices makes the reader one of n's, the readers of one statement
// on several shards: a notice that they all raise once per statement goes
// to the sink once (notices.go).
func (r *ShardRows) ShareNotices(n *Notices) { r.notices.share = n }

// Server is the server the reader reads.
func (r *ShardRows) Server() *pool.Server { return r.srv }

// Err is the error the shard answered, nil if none.
func (r *ShardRows) Err() *wire.Error { return r.serr }

// IOErr is the failure of the shard's server, nil if none.
func (r *ShardRows) IOErr() error { return r.ioErr }

// Tag is the shard's command tag.
func (r *ShardRows) Tag() string { return r.tag }

func (r *ShardRows) next() (typ byte, body []byte, ok bool) {
	for {
		typ, _, body, err := r.srv.R.Next()
		if err != nil {
			r.ioErr = err
			r.srv.Broken = true
			return 0, nil, false
		}
		if typ == '1' {
			r.Parsing = ""
		}
		if typ == 'E' && r.Parsing != "" {
			delete(r.srv.Prepared, r.Parsing)
			r.Parsing = ""
		}
		if typ == '2' {
			r.Bound = true
		}
		if r.Extended && (typ == '1' || typ == '2' || typ == 'n') {
			continue
		}
		switch typ {
		case 'N', 'A':
			if typ == 'N' && r.Parsing != "" {
				// Raised by the Parse the proxy added: PostgreSQL
				// raised it at the client's Parse, not again.
				continue
			}
			if r.notices.send(typ, body) {
				r.sink.Write(wire.FinishMessage(append([]byte{typ, 0, 0, 0, 0}, body...), 0))
			}
			continue
		case 'S':
			r.srv.NoteParameter(body)
			continue
		}
		return typ, body, true
	}
}

// Header reads up to the first message that says what the result is.
func (r *ShardRows) Header() {
	typ, body, ok := r.next()
	if !ok {
		return
	}
	if typ == 'C' && r.cursor != nil && !r.declared {
		// DECLARE CURSOR; its FETCH 0 describes the rows.
		r.declared = true
		if typ, body, ok = r.next(); !ok {
			return
		}
	}
	switch typ {
	case 'T':
		r.desc = append([]byte{}, body...)
		r.inRows = true
	case 'C':
		r.tag = string(trimNul(body))
	case 'I':
		r.empty = true
	case 'E':
		if r.fail(body).Fatal() {
			r.srv.Broken = true
		}
	case 'Z':
		r.ready(body)
	default:
		r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q from server", typ)
	}
}

// fail records the shard's ErrorResponse body as the reader's error (and
// the server's, see pool.Server.NoteError) and returns it.
func (r *ShardRows) fail(body []byte) *wire.Error {
	r.serr = wire.ParseError(body)
	r.srv.NoteError(r.serr)
	return r.serr
}

// ready records the status of the shard's ReadyForQuery; a malformed one
// breaks the server.
func (r *ShardRows) ready(body []byte) {
	if len(body) != 1 {
		r.ioErr = errors.New("malformed ReadyForQuery from server")
		r.srv.Broken = true
		return
	}
	r.status = body[0]
}

// Next implements Rows.
func (r *ShardRows) Next() ([]byte, error) {
	if !r.inRows {
		return nil, nil
	}
	if r.parked {
		return r.unpark()
	}
	typ, body, ok := r.next()
	for ok && typ == 'C' && r.cursor != nil {
		more, err := r.nextBatch(body, false)
		if err != nil || !more {
			r.inRows = false
			return nil, err
		}
		typ, body, ok = r.next()
	}
	if !ok {
		r.inRows = false
		return nil, r.ioErr
	}
	switch typ {
	case 'D':
		r.rows++
		if r.cursor != nil {
			// The merge holds this row while the reader may be parked,
			// which reads on into the server's buffer.
			return bytes.Clone(body), nil
		}
		return body, nil
	case 'C':
		r.tag = string(trimNul(body))
	case 'E':
		r.fail(body)
		r.inRows = false
		return nil, r.serr
	default:
		r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q in rows from server", typ)
	}
	r.inRows = false
	return nil, nil
}

// nextBatch ends a batch of a shard cursor, whose FETCH answered
// CommandComplete body: more is true when the next batch's rows follow
// (its FETCH sent and its RowDescription read). A batch with fewer rows
// than it asked for was the last; Stop closes the cursor instead of
// fetching on. The tag is then the one a plain read would have had.
// atReady: Park has read the batch's ReadyForQuery already.
func (r *ShardRows) nextBatch(body []byte, atReady bool) (more bool, err error) {
	tag := string(trimNul(body))
	n, perr := strconv.Atoi(strings.TrimPrefix(tag, "FETCH "))
	if perr != nil {
		r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected command tag %q in a cursor's rows from server", tag)
		return false, r.serr
	}
	r.tag = SelectTag(r.rows)
	if n < r.batch {
		return false, nil // the shard has no more rows
	}
	if atReady {
		r.status = 0 // what Finish waits for is the next statement's
	} else if err := r.toReady(); err != nil {
		return false, err
	}
	name := wire.QuoteIdent(r.cursor.Name)
	if r.cursor.Stop || r.finishing {
		r.srv.W.Write(wire.AppendQuery(nil, "CLOSE "+name))
		if err := r.srv.Flush(); err != nil {
			r.ioErr = err
			return false, err
		}
		return false, nil // Finish reads its answer
	}
	r.batch = min(max(2*r.batch, firstCursorBatch), maxCursorBatch)
	r.srv.W.Write(wire.AppendQuery(nil, "FETCH FORWARD "+strconv.Itoa(r.batch)+" FROM "+name))
	if err := r.srv.Flush(); err != nil {
		r.ioErr = err
		return false, err
	}
	typ, body, ok := r.next()
	switch {
	case !ok:
		return false, r.ioErr
	case typ == 'T':
		return true, nil
	case typ == 'E':
		return false, r.fail(body)
	}
	r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q from server", typ)
	return false, r.serr
}

// Park frees the server of a shard cursor's reader while the merge is
// paused: it reads the rest of the batch under way into memory, with the
// tag or the error that ends it, and the ReadyForQuery after it. The
// shard's cursor stays open in its transaction; Next hands out the held
// rows, then the held end, and fetches the next batch as before. A reader
// whose rows ended is read to its ReadyForQuery, as Finish does. At most
// one batch is held per shard (maxCursorBatch rows), which the shard had
// computed or was computing anyway. An error is the server's failure.
func (r *ShardRows) Park() error {
	if r.cursor == nil || r.parked || r.ioErr != nil || r.status != 0 {
		return r.ioErr
	}
	if !r.inRows {
		r.Finish()
		return r.ioErr
	}
	for r.heldTag == nil && r.heldErr == nil {
		typ, body, ok := r.next()
		if !ok {
			return r.ioErr
		}
		switch typ {
		case 'D':
			r.held = append(r.held, bytes.Clone(body))
			r.rows++
		case 'C':
			r.heldTag = bytes.Clone(body)
		case 'E':
			r.heldErr = wire.ParseError(body)
			r.srv.NoteError(r.heldErr)
		default:
			r.heldErr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q in rows from server", typ)
		}
	}
	for {
		typ, body, ok := r.next()
		if !ok {
			return r.ioErr
		}
		if typ == 'Z' {
			r.ready(body)
			r.parked = r.ioErr == nil
			return r.ioErr
		}
	}
}

// unpark is Next of a parked reader: a held row, else the held end of the
// batch, after which the next batch is fetched (or the cursor closed).
func (r *ShardRows) unpark() ([]byte, error) {
	if len(r.held) > 0 {
		row := r.held[0]
		r.held[0] = nil
		r.held = r.held[1:]
		return row, nil
	}
	r.parked = false
	r.held = nil
	if e := r.heldErr; e != nil {
		r.heldErr = nil
		r.serr = e
		r.inRows = false
		return nil, e
	}
	tag := r.heldTag
	r.heldTag = nil
	more, err := r.nextBatch(tag, true)
	if err != nil || !more {
		r.inRows = false
		return nil, err
	}
	return r.Next()
}

// toReady reads to the ReadyForQuery that ends a batch of a shard cursor,
// which the reader then leaves behind: the status Finish waits for is the
// next statement's.
func (r *ShardRows) toReady() error {
	for {
		typ, body, ok := r.next()
		if !ok {
			return r.ioErr
		}
		switch typ {
		case 'Z':
			if r.ready(body); r.ioErr != nil {
				return r.ioErr
			}
			r.status = 0
			return nil
		case 'E':
			return r.fail(body)
		}
	}
}

// Finish reads to ReadyForQuery.
func (r *ShardRows) Finish() {
	if r.ioErr != nil || r.status != 0 {
		return
	}
	r.finishing = true
	for r.inRows {
		if _, err := r.Next(); err != nil {
			break
		}
	}
	for {
		typ, body, ok := r.next()
		if !ok {
			return
		}
		switch typ {
		case 'E':
			if r.serr == nil {
				r.fail(body)
			}
		case 'C':
			if r.tag == "" {
				r.tag = string(trimNul(body))
			}
		case 'Z':
			r.ready(body)
			return
		}
	}
}

func trimNul(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == 0 {
		return b[:n-1]
	}
	return b
}

// SumTags adds the row counts of command tags from several shards:
// "UPDATE 2" + "UPDATE 3" = "UPDATE 5", "INSERT 0 1" + "INSERT 0 2" =
// "INSERT 0 3".
func SumTags(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	var total int64
	prefix := ""
	for _, t := range tags {
		i := strings.LastIndexByte(t, ' ')
		if i < 0 {
			return tags[0]
		}
		n, err := strconv.ParseInt(t[i+1:], 10, 64)
		if err != nil {
			return tags[0]
		}
		total += n
		prefix = t[:i+1]
	}
	return prefix + strconv.FormatInt(total, 10)
}

// Describe says whether a merged answer carries its RowDescription.
type Describe uint8

const (
	// DescribeRows sends the RowDescription (a simple Query).
	DescribeRows Describe = iota
	// DescribeNone sends none (an extended-protocol Execute the client did
	// not Describe).
	DescribeNone
	// DescribeAll sends the RowDescription, or NoData for a statement
	// without rows (an Execute after Describe of the portal).
	DescribeAll
)

func (d Describe) String() string {
	switch d {
	case DescribeRows:
		return "rows"
	case DescribeNone:
		return "none"
	case DescribeAll:
		return "all"
	}
	return "Describe(" + strconv.Itoa(int(d)) + ")"
}

// Answer is how the answers of several shards to one statement become the
// client's.
type Answer struct {
	Plan      *Plan
	Collation string   // the database's collation, for ORDER BY on text
	Describe  Describe // RowDescription or not
	Sink      io.Writer
	// Cursor, when set, runs the read on each shard as a cursor of the
	// shards' open transaction, fetched in batches as the merge needs
	// rows (see ShardCursor). Execute only, inside a transaction.
	Cursor *ShardCursor
}

// ShardCursor is a read that each shard runs as a cursor of its own, for a
// cursor the proxy holds over several shards: DECLARE, then FETCH FORWARD
// in batches as the merge asks for rows, so that each shard plans the query
// for a fast start (cursor_tuple_fraction) and computes only the rows
// fetched so far, as PostgreSQL does for one cursor. An error in a row is
// then raised by the FETCH that reaches it (give or take the merge's
// look-ahead of one row per shard), not at DECLARE, and a cursor closed
// early has not read the rest. The DECLARE is followed by FETCH 0, which
// describes the rows without computing one.
type ShardCursor struct {
	Name string // the shards' cursor (NewCursor)
	// Stop makes the readers fetch no further batch: at the end of the one
	// under way they close the shards' cursor and end the rows, which the
	// merge then drains in a few rows rather than to the end.
	Stop bool

	readers []*ShardRows // one per shard, set by Execute
}

// Park frees the shards' servers between two reads of the cursor's merge
// (ShardRows.Park), so that other statements of the transaction can run
// on them while the cursor waits for its next FETCH. An error is a
// server's failure: the server is broken and the merge fails when it
// reads that shard again.
func (c *ShardCursor) Park() error {
	var first error
	for _, r := range c.readers {
		if err := r.Park(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Batches of a shard cursor: the first FETCH asks for firstCursorBatch
// rows and each next one for twice as many, up to maxCursorBatch. Small
// first batches keep a shard from computing rows far beyond the ones a
// small FETCH wants; doubling keeps the round trips of a long read few.
const (
	firstCursorBatch = 1
	maxCursorBatch   = 1024
)

// NewCursor returns a ShardCursor with a name no other cursor of the
// session's transaction has.
func (s *Session) NewCursor() *ShardCursor {
	s.cursorSeq++
	return &ShardCursor{Name: "__shardgate_c" + strconv.FormatUint(s.cursorSeq, 10)}
}

// Gather finishes a statement that ran on the plan's shards, whose readers
// have read their headers (firstErr is the first error among them): it
// merges their answers into the sink, reads every shard to ReadyForQuery
// and settles an implicit transaction — rolled back on error, committed
// (with two-phase commit) otherwise. It returns the command tag ("" for an
// empty query), the statement's error, or a *ShardError for a broken
// server.
func (s *Session) Gather(a *Answer, readers []*ShardRows, implicit bool, firstErr *wire.Error) (string, error) {
	tag := ""
	if firstErr == nil {
		var err error
		if tag, err = a.combine(readers); err != nil {
			if e, ok := wire.AsError(err); ok {
				firstErr = e
			} else {
				firstErr = wire.Errorf(wire.InternalError, "merge: %v", err)
			}
		}
	}
	for k, r := range readers {
		r.Finish()
		if r.ioErr != nil {
			return "", &ShardError{Shard: a.Plan.Shards[k], Server: r.srv, Err: r.ioErr}
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
	}
	if firstErr != nil {
		if implicit {
			s.Rollback()
		}
		return "", firstErr
	}
	if implicit {
		if err := s.Commit(a.Plan.Shards); err != nil {
			return "", err
		}
	}
	return tag, nil
}

// combine writes the rows of a multi-shard answer and returns its tag.
func (a *Answer) combine(readers []*ShardRows) (string, error) {
	p := a.Plan
	first := readers[0]
	if p.Merge != nil && p.Merge.Probe != nil {
		// The shards ran a statement naming a table the router cannot
		// place only to report its error; they answered instead.
		return "", p.Merge.Probe
	}
	if a.Describe == DescribeAll && first.desc == nil && !first.empty {
		a.Sink.Write([]byte{'n', 0, 0, 0, 4})
	}
	if first.empty {
		return "", nil
	}
	tags := func() string {
		if p.Kind == RouteOmniWrite {
			return first.tag
		}
		all := make([]string, len(readers))
		for k, r := range readers {
			all[k] = r.tag
		}
		return SumTags(all)
	}
	if first.desc == nil {
		return tags(), nil
	}
	cols, err := ParseRowDescription(first.desc)
	if err != nil {
		return "", err
	}
	for _, r := range readers[1:] {
		other, err := ParseRowDescription(r.desc)
		if err != nil || len(other) != len(cols) {
			return "", wire.Errorf(wire.InternalError, "shards returned different result columns; are their schemas the same?")
		}
	}
	spec := Spec{Limit: -1}
	sources := make([]Rows, len(readers))
	for k, r := range readers {
		sources[k] = r
	}
	switch p.Kind {
	case RouteRead:
		if spec, err = p.Spec(len(cols)); err != nil {
			return "", err
		}
		spec.Collation = a.Collation
		spec.Eval = shardEval{readers[0]}
		if spec.Outer != nil {
			// A count describes its one column itself.
			spec.Outer.bind(readers[0], first.desc, a.Describe != DescribeNone && !spec.Count)
		}
	case RouteOmniWrite:
		sources = sources[:1]
	}
	m, err := NewMerger(spec, cols, a.Sink)
	if err != nil {
		return "", err
	}
	// With an Outer statement the merger describes the rows, once the
	// statement has typed its columns (outer.go).
	switch {
	case a.Describe == DescribeNone:
	case spec.Count:
		a.Sink.Write(countRowDescription(p.Merge.CountName, spec.Exists, cols[0].Format))
	case spec.Outer == nil:
		a.Sink.Write(mergedRowDescription(first.desc, cols, spec))
	}
	n, err := m.Run(sources)
	if err != nil {
		return "", err
	}
	if p.Kind == RouteRead {
		return SelectTag(n), nil
	}
	return tags(), nil
}

// Execute runs the plan's statement on each of its shards as a simple
// Query, after what Prefix asks for, and writes the combined answer into
// a.Sink (see Gather; implicit: the statement runs in a transaction of the
// proxy's own, a write to several shards outside a transaction block).
func (s *Session) Execute(a *Answer, implicit bool) (string, error) {
	p := a.Plan
	if p.Merge != nil && p.Merge.ParseOnly {
		return "", s.parseProbe(a) // the statement must not run (probe.go)
	}
	prefixed := make([]int, len(p.Shards)) // internal Queries sent ahead
	for k, i := range p.Shards {
		srv := s.shards[i].server
		if s.Ready != nil {
			if err := s.Ready(i); err != nil {
				return "", s.lost(i, err)
			}
		}
		for _, q := range s.Prefix(i, implicit) {
			srv.W.Write(wire.AppendQuery(nil, q))
			prefixed[k]++
		}
		sql := p.SQLFor(i)
		if a.Cursor != nil {
			// A newline ends a trailing comment of the query.
			name := wire.QuoteIdent(a.Cursor.Name)
			sql = "DECLARE " + name + " NO SCROLL CURSOR FOR " + sql + "\n; FETCH FORWARD 0 FROM " + name
		}
		srv.W.Write(wire.AppendQuery(nil, sql))
		if err := srv.Flush(); err != nil {
			return "", s.lost(i, err)
		}
	}
	readers := make([]*ShardRows, len(p.Shards))
	var firstErr *wire.Error
	notices := NewNotices()
	for k, i := range p.Shards {
		srv := s.shards[i].server
		r := NewShardRows(srv, a.Sink)
		r.ShareNotices(notices)
		r.cursor = a.Cursor
		readers[k] = r
		if a.Cursor != nil {
			a.Cursor.readers = readers
		}
		for n := 0; n < prefixed[k] && r.ioErr == nil; n++ {
			_, serr, err := ReadToReady(srv)
			if err != nil {
				r.ioErr = err
			}
			if serr != nil {
				// What the server's session is now is unknown.
				srv.Broken = true
				if firstErr == nil {
					firstErr = serr
				}
			}
		}
		if r.ioErr == nil {
			r.Header()
		}
	}
	for k, r := range readers {
		if r.ioErr != nil {
			return "", &ShardError{Shard: p.Shards[k], Server: r.srv, Err: r.ioErr}
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
	}
	return s.Gather(a, readers, implicit, firstErr)
}

// countRowDescription is the RowDescription of SELECT count(*) [AS name]
// FROM (subquery) s — one bigint column, not of a table — or of SELECT
// EXISTS (subquery), a boolean one; in format, the client's one result
// format, which the shards used for every column of the subquery.
func countRowDescription(name string, exists bool, format int16) []byte {
	out := []byte{'T', 0, 0, 0, 0, 0, 1}
	out = append(append(out, name...), 0)
	out = wire.AppendInt32(out, 0) // table OID
	out = wire.AppendInt16(out, 0) // attribute number
	if exists {
		out = wire.AppendInt32(out, oidBool)
		out = wire.AppendInt16(out, 1)
	} else {
		out = wire.AppendInt32(out, oidInt8)
		out = wire.AppendInt16(out, 8)
	}
	out = wire.AppendInt32(out, -1)
	out = wire.AppendInt16(out, format)
	return wire.FinishMessage(out, 0)
}

// existsValue is b as a boolean in format (0 text, 1 binary).
func existsValue(b bool, format int16) []byte {
	switch {
	case format == 1 && b:
		return []byte{1}
	case format == 1:
		return []byte{0}
	case b:
		return []byte("t")
	}
	return []byte("f")
}

// countValue is n as a bigint in format (0 text, 1 binary).
func countValue(n int64, format int16) []byte {
	if format == 1 {
		return binary.BigEndian.AppendUint64(nil, uint64(n))
	}
	return strconv.AppendInt(nil, n, 10)
}

// mergedRowDescription is the RowDescription of a merged answer: the
// shards' without the hidden columns the router appended, and with the
// type avg has in PostgreSQL for the columns the shards computed as
// sum(x) — numeric for integer and numeric sums, float8 for float ones,
// interval for intervals.
func mergedRowDescription(desc []byte, cols []Column, spec Spec) []byte {
	visible := len(cols)
	if spec.Visible > 0 && spec.Visible < visible {
		visible = spec.Visible
	}
	out := TrimRowDescription(desc, visible)
	for _, a := range spec.Aggs {
		if a.Kind != AggAvg || a.Col >= visible {
			continue
		}
		oid, size := uint32(oidNumeric), int16(-1)
		switch cols[a.Col].OID {
		case oidFloat4, oidFloat8:
			oid, size = oidFloat8, 8
		case oidInterval:
			oid, size = oidInterval, 16
		}
		// The column's fields follow its name: table OID (4), attribute
		// number (2), type OID (4), type size (2), type modifier (4),
		// format (2).
		at := 7 // 'T', length, field count
		for k := 0; k < a.Col; k++ {
			at += bytes.IndexByte(out[at:], 0) + 1 + 18
		}
		at += bytes.IndexByte(out[at:], 0) + 1
		binary.BigEndian.PutUint32(out[at+6:], oid)
		binary.BigEndian.PutUint16(out[at+10:], uint16(size))
		binary.BigEndian.PutUint32(out[at+12:], 0xffffffff)
	}
	return out
}
