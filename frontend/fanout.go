package frontend

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// shardRows reads one shard's answer to a single-statement Query: the
// header (RowDescription, CommandComplete, EmptyQueryResponse or
// ErrorResponse), then rows (as executor.Rows), then ReadyForQuery.
// Notices go straight to the client.
type shardRows struct {
	c      *client
	s      *pool.Server
	desc   []byte // RowDescription body (owned copy)
	tag    string
	serr   *wire.Error
	ioErr  error
	empty  bool
	inRows bool
	status byte
	// extended: the answer to Parse/Bind/Describe/Execute/Sync, whose
	// ParseComplete, BindComplete and NoData the reader skips.
	extended  bool
	quietDesc bool
	// parsing is the statement whose Parse leads the messages (see
	// ensureParsed) until its ParseComplete: an error before that means
	// the server does not have it.
	parsing string
}

func (r *shardRows) next() (typ byte, body []byte, ok bool) {
	for {
		typ, _, body, err := r.s.R.Next()
		if err != nil {
			r.ioErr = err
			r.s.Broken = true
			return 0, nil, false
		}
		if typ == '1' {
			r.parsing = ""
		}
		if typ == 'E' && r.parsing != "" {
			delete(r.s.Prepared, r.parsing)
			r.parsing = ""
		}
		if r.extended && (typ == '1' || typ == '2' || typ == 'n') {
			continue
		}
		switch typ {
		case 'N', 'A':
			r.c.toClient(wire.FinishMessage(append([]byte{typ, 0, 0, 0, 0}, body...), 0))
			continue
		case 'S':
			r.s.NoteParameter(body)
			continue
		}
		return typ, body, true
	}
}

// header reads up to the first message that says what the result is.
func (r *shardRows) header() {
	typ, body, ok := r.next()
	if !ok {
		return
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
		r.serr = wire.ParseError(body)
		r.s.NoteError(r.serr)
		if r.serr.Fatal() {
			r.s.Broken = true
		}
	case 'Z':
		r.ready(body)
	default:
		r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q from server", typ)
	}
}

// ready records the status of the shard's ReadyForQuery; a malformed one
// breaks the server.
func (r *shardRows) ready(body []byte) {
	if len(body) != 1 {
		r.ioErr = errors.New("malformed ReadyForQuery from server")
		r.s.Broken = true
		return
	}
	r.status = body[0]
}

// Next implements executor.Rows.
func (r *shardRows) Next() ([]byte, error) {
	if !r.inRows {
		return nil, nil
	}
	typ, body, ok := r.next()
	if !ok {
		r.inRows = false
		return nil, r.ioErr
	}
	switch typ {
	case 'D':
		return body, nil
	case 'C':
		r.tag = string(trimNul(body))
	case 'E':
		r.serr = wire.ParseError(body)
		r.s.NoteError(r.serr)
		r.inRows = false
		return nil, r.serr
	default:
		r.serr = wire.Errorf(wire.ProtocolViolation, "unexpected message %q in rows from server", typ)
	}
	r.inRows = false
	return nil, nil
}

// finish reads to ReadyForQuery.
func (r *shardRows) finish() {
	if r.ioErr != nil || r.status != 0 {
		return
	}
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
				r.serr = wire.ParseError(body)
				r.s.NoteError(r.serr)
				r.s.NoteError(r.serr)
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

// sumTags adds the row counts of command tags from several shards:
// "UPDATE 2" + "UPDATE 3" = "UPDATE 5", "INSERT 0 1" + "INSERT 0 2" =
// "INSERT 0 3".
func sumTags(tags []string) string {
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

// runMany runs a statement on several shards and combines the answers.
func (c *client) runMany(ctx context.Context, p *routePlan) error {
	implicit := !c.xs.InTx() && (p.Kind == executor.RouteWrite || p.Kind == executor.RouteOmniWrite)
	prefixed := make([]int, len(p.Shards)) // internal Queries sent ahead
	for k, i := range p.Shards {
		s := c.xs.Server(i)
		if err := c.useShard(i); err != nil {
			c.server = s
			return c.shardFailed(err)
		}
		for _, q := range c.prefix(i, implicit) {
			s.W.Write(wire.AppendQuery(nil, q))
			prefixed[k]++
		}
		s.W.Write(wire.AppendQuery(nil, p.SQLFor(i)))
		if err := s.Flush(); err != nil {
			c.server = s
			return c.shardFailed(err)
		}
	}
	readers := make([]*shardRows, len(p.Shards))
	var firstErr *wire.Error
	for k, i := range p.Shards {
		s := c.xs.Server(i)
		r := &shardRows{c: c, s: s}
		readers[k] = r
		for n := 0; n < prefixed[k] && r.ioErr == nil; n++ {
			_, serr, err := executor.ReadToReady(s)
			if err != nil {
				r.ioErr = err
			}
			if serr != nil {
				// What the server's session is now is unknown.
				s.Broken = true
				if firstErr == nil {
					firstErr = serr
				}
			}
		}
		if r.ioErr != nil {
			continue
		}
		r.header()
	}
	for _, r := range readers {
		if r.ioErr != nil {
			c.server = r.s
			return c.shardFailed(r.ioErr)
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
	}
	ioErr, err := c.gatherMany(p, readers, implicit, firstErr, func() (string, error) { return c.combine(p, readers) })
	c.ranOn(p.Shards)
	if ioErr != nil {
		return c.shardFailed(ioErr)
	}
	if err != nil {
		c.releaseIfIdle()
		return c.shardedError(err)
	}
	c.releaseIfIdle()
	c.w.Write(wire.AppendReadyForQuery(nil, c.shardedStatus()))
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// gatherMany finishes a statement that ran on several shards, whose
// readers have read their headers (firstErr is the first error among
// them): it merges the answers with combine, reads every shard to
// ReadyForQuery, and settles an implicit multi-shard write — rolled back
// on error, committed with two-phase commit otherwise. On success it
// writes the command tag and commits the statement's session changes. It
// returns a broken server's error (with c.server pointing at it) or the
// statement's error.
func (c *client) gatherMany(p *routePlan, readers []*shardRows, implicit bool, firstErr *wire.Error, combine func() (string, error)) (ioErr, stmtErr error) {
	tag := ""
	if firstErr == nil {
		var err error
		if tag, err = combine(); err != nil {
			if e, ok := wire.AsError(err); ok {
				firstErr = e
			} else {
				firstErr = wire.Errorf(wire.InternalError, "merge: %v", err)
			}
		}
	}
	for _, r := range readers {
		r.finish()
		if r.ioErr != nil {
			c.server = r.s
			return r.ioErr, nil
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
	}
	if firstErr != nil {
		if implicit {
			c.rollbackShards()
		}
		return nil, firstErr
	}
	if implicit {
		if err := c.commitShards(p.Shards); err != nil {
			return nil, err
		}
	}
	if tag != "" {
		c.w.Write(wire.AppendCommandComplete(nil, tag))
	} else {
		c.w.Write([]byte{'I', 0, 0, 0, 4})
	}
	if len(p.ops) > 0 && !c.xs.InTx() {
		c.applyOpsAll(p.ops)
	}
	return nil, nil
}

// combine writes the rows of a multi-shard answer and returns its tag.
func (c *client) combine(p *routePlan, readers []*shardRows) (string, error) {
	first := readers[0]
	if first.empty {
		return "", nil
	}
	if first.desc == nil {
		tags := make([]string, len(readers))
		for k, r := range readers {
			tags[k] = r.tag
		}
		if p.Kind == executor.RouteOmniWrite {
			return first.tag, nil
		}
		return sumTags(tags), nil
	}
	cols, err := executor.ParseRowDescription(first.desc)
	if err != nil {
		return "", err
	}
	for _, r := range readers[1:] {
		other, err := executor.ParseRowDescription(r.desc)
		if err != nil || len(other) != len(cols) {
			return "", wire.Errorf(wire.InternalError, "shards returned different result columns; are their schemas the same?")
		}
	}
	spec := executor.Spec{Limit: -1}
	sources := make([]executor.Rows, len(readers))
	for k, r := range readers {
		sources[k] = r
	}
	switch p.Kind {
	case executor.RouteRead:
		if spec, err = p.Spec(len(cols)); err != nil {
			return "", err
		}
		spec.Collation = c.collation()
	case executor.RouteOmniWrite:
		sources = sources[:1]
	}
	m, err := executor.NewMerger(spec, cols, writerFunc(func(b []byte) (int, error) { c.toClient(b); return len(b), nil }))
	if err != nil {
		return "", err
	}
	visible := spec.Visible
	switch {
	case c.suppressDesc:
	case visible > 0 && visible < len(cols):
		c.toClient(executor.TrimRowDescription(first.desc, visible))
	default:
		c.toClient(wire.FinishMessage(append([]byte{'T', 0, 0, 0, 0}, first.desc...), 0))
	}
	n, err := m.Run(sources)
	if err != nil {
		return "", err
	}
	if p.Kind == executor.RouteRead {
		return executor.SelectTag(n), nil
	}
	if p.Kind == executor.RouteOmniWrite {
		return first.tag, nil
	}
	tags := make([]string, len(readers))
	for k, r := range readers {
		tags[k] = r.tag
	}
	return sumTags(tags), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// applyOpsAll commits session changes of a statement that ran on several
// shards to the client and every server that ran it.
func (c *client) applyOpsAll(ops []setOp) {
	saved := c.server
	for i := range c.ext {
		if c.xs.Server(i) != nil {
			c.server = c.xs.Server(i)
			c.applyOps(ops)
		}
	}
	c.server = saved
}
