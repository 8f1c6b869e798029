package executor

import (
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// COPY … FROM STDIN over several shards: every row goes to the shard its
// sharding key names (or, for omni tables, to every shard), in one
// transaction per shard committed together, and the client sees one COPY
// with the total row count (counted once for omni tables).

// CopyClient is the client end of a COPY FROM STDIN.
type CopyClient interface {
	// Write takes a message for the client (CopyInResponse, notices).
	Write(msg []byte) (int, error)
	// Flush sends what Write took.
	Flush() error
	// Next returns the client's next message.
	Next() (typ byte, body []byte, err error)
}

// ClientError is the failure of the client's connection during a COPY.
type ClientError struct{ Err error }

func (e *ClientError) Error() string { return "client connection: " + e.Err.Error() }
func (e *ClientError) Unwrap() error { return e.Err }

// copyIn is one COPY FROM STDIN in progress on the plan's shards.
type copyIn struct {
	s       *Session
	p       *Plan
	servers []*pool.Server // by index in p.Shards
	inCopy  []bool         // the server is in copy-in mode
	bufs    [][]byte       // rows not yet sent, per server
	byShard map[int]int    // shard → index in p.Shards
	lines   *copyLines     // which of the client's lines went where (copylines.go)
}

// CopyIn runs the plan's COPY FROM STDIN on its shards, reading the rows
// from cl, and returns the command tag. The transaction is the open one,
// or (none open) one of the copy's own, committed on every shard together.
// On an error other than a *ShardError or *ClientError the copy is rolled
// back everywhere and the client can carry on.
func (s *Session) CopyIn(p *Plan, cl CopyClient) (string, error) {
	cp := &copyIn{s: s, p: p, servers: make([]*pool.Server, len(p.Shards)), inCopy: make([]bool, len(p.Shards)),
		bufs: make([][]byte, len(p.Shards)), byShard: map[int]int{}}
	implicit := !s.tx.open
	response, err := cp.start(implicit)
	if err != nil {
		return "", err
	}
	split, err := cp.splitter()
	if err == nil {
		err = cp.relay(cl, response, split)
	}
	if err != nil {
		if ce, ok := err.(*ClientError); ok {
			cp.abort("client connection lost during COPY")
			s.Rollback()
			return "", ce
		}
		cp.abort("COPY aborted by shardgate: " + err.Error())
		if implicit {
			s.Rollback()
		}
		// Else the client's transaction is aborted, on every shard that
		// ran the COPY as in PostgreSQL, until its ROLLBACK.
		return "", err
	}
	return cp.finish(cl, implicit)
}

// start sends the statement (after what Prefix asks for) to every shard
// and reads their CopyInResponses, returning one for the client.
func (cp *copyIn) start(implicit bool) ([]byte, error) {
	s := cp.s
	for k, i := range cp.p.Shards {
		srv := s.shards[i].server
		cp.servers[k], cp.byShard[i] = srv, k
		if s.Ready != nil {
			if err := s.Ready(i); err != nil {
				return nil, s.lost(i, err)
			}
		}
		for _, q := range s.Prefix(i, implicit) {
			srv.W.Write(wire.AppendQuery(nil, q))
			if err := srv.Flush(); err != nil {
				return nil, s.lost(i, err)
			}
			if _, serr, err := ReadToReady(srv); err != nil {
				return nil, s.lost(i, err)
			} else if serr != nil {
				// What the server's session is now is unknown.
				srv.Broken = true
				s.Rollback()
				return nil, serr
			}
		}
		srv.W.Write(wire.AppendQuery(nil, cp.p.SQL))
		if err := srv.Flush(); err != nil {
			return nil, s.lost(i, err)
		}
	}
	// Every shard answers CopyInResponse, or an error.
	var firstErr *wire.Error
	var response []byte
	for k, srv := range cp.servers {
	read:
		for {
			typ, raw, body, err := srv.R.Next()
			if err != nil {
				return nil, s.lost(cp.p.Shards[k], err)
			}
			switch typ {
			case 'G':
				cp.inCopy[k] = true
				if response == nil {
					response = append([]byte{}, raw...)
				}
				break read
			case 'E':
				if firstErr == nil {
					firstErr = wire.ParseError(body)
				}
			case 'Z':
				break read
			}
		}
	}
	if firstErr != nil {
		cp.abort("COPY aborted: " + firstErr.Message)
		if implicit {
			s.Rollback()
		}
		return nil, firstErr
	}
	return response, nil
}

// splitter returns the row splitter of the plan's COPY format: rows are
// gathered per shard and sent in CopyData messages of up to 64 KiB.
func (cp *copyIn) splitter() (*CopySplitter, error) {
	c := cp.p.Copy
	f, err := NewCopyFormat(c.Format, c.Delimiter, c.Null, c.Quote, c.Escape, c.Header, max(c.Column, 0))
	if err != nil {
		return nil, err
	}
	if c.Column >= 0 {
		f.Table, f.KeyName, f.Fields = c.Table, c.KeyName, c.Fields
	}
	split := NewCopySplitter(f)
	cp.lines = newCopyLines(len(cp.servers), f)
	all := make([]int, len(cp.servers))
	for k := range all {
		all[k] = k
	}
	toAll := func(raw []byte, row bool) error {
		for k := range cp.servers {
			if err := cp.add(k, raw); err != nil {
				return err
			}
		}
		cp.lines.sent(raw, row, all...)
		return nil
	}
	split.All = func(raw []byte) error { return toAll(raw, false) }
	split.Row = func(raw, key []byte) error {
		if c.Column < 0 {
			return toAll(raw, true)
		}
		shard, err := c.Shard(key)
		if err != nil {
			return err
		}
		k, ok := cp.byShard[shard]
		if !ok {
			return wire.Errorf(wire.InternalError, "COPY row for shard %d, which the statement does not target", shard)
		}
		cp.lines.sent(raw, true, k)
		return cp.add(k, raw)
	}
	return split, nil
}

func (cp *copyIn) add(k int, raw []byte) error {
	cp.bufs[k] = append(cp.bufs[k], raw...)
	if len(cp.bufs[k]) >= 64<<10 {
		return cp.flush(k)
	}
	return nil
}

func (cp *copyIn) flush(k int) error {
	if len(cp.bufs[k]) == 0 {
		return nil
	}
	msg := append([]byte{'d', 0, 0, 0, 0}, cp.bufs[k]...)
	_, err := cp.servers[k].W.Write(wire.FinishMessage(msg, 0))
	cp.bufs[k] = cp.bufs[k][:0]
	return err
}

// relay hands the client the CopyInResponse and splits its CopyData over
// the shards until CopyDone or CopyFail.
func (cp *copyIn) relay(cl CopyClient, response []byte, split *CopySplitter) error {
	cl.Write(response)
	if err := cl.Flush(); err != nil {
		return &ClientError{Err: err}
	}
	var copyErr error
	for done := false; !done; {
		typ, body, err := cl.Next()
		if err != nil {
			return &ClientError{Err: err}
		}
		switch typ {
		case 'd':
			if copyErr == nil {
				copyErr = split.Feed(body)
			}
		case 'c':
			if copyErr == nil {
				copyErr = split.Finish()
			}
			done = true
		case 'f':
			msg, _, _ := wire.CString(body)
			copyErr = wire.Errorf(wire.QueryCanceled, "COPY from stdin failed: %s", msg)
			done = true
		case 'H', 'S':
		default:
			copyErr = wire.Errorf(wire.ProtocolViolation, "unexpected message type %q during COPY from stdin", typ)
			done = true
		}
	}
	if copyErr != nil {
		return copyErr
	}
	for k := range cp.servers {
		if err := cp.flush(k); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the copy on every shard and, for a copy of its own,
// commits it.
func (cp *copyIn) finish(cl CopyClient, implicit bool) (string, error) {
	s := cp.s
	var firstErr *wire.Error
	tags := make([]string, len(cp.servers))
	for k, srv := range cp.servers {
		srv.W.Write([]byte{'c', 0, 0, 0, 4})
		if err := srv.Flush(); err != nil {
			return "", s.lost(cp.p.Shards[k], err)
		}
		r := NewShardRows(srv, cl)
		r.Header()
		r.Finish()
		if r.ioErr != nil {
			return "", s.lost(cp.p.Shards[k], r.ioErr)
		}
		if r.serr != nil && firstErr == nil {
			firstErr = cp.lines.fix(k, r.serr)
		}
		tags[k] = r.tag
	}
	if firstErr == nil && implicit {
		if err := s.Commit(cp.p.Shards); err != nil {
			var ok bool
			if firstErr, ok = wire.AsError(err); !ok {
				firstErr = wire.Errorf(wire.InternalError, "%v", err)
			}
		}
	}
	if firstErr != nil {
		if implicit {
			s.Rollback()
		}
		return "", firstErr
	}
	if cp.p.Copy.Column < 0 {
		return tags[0], nil
	}
	return SumTags(tags), nil
}

// abort ends COPY with CopyFail on the servers still in copy-in mode and
// reads them back to ReadyForQuery.
func (cp *copyIn) abort(reason string) {
	for k, srv := range cp.servers {
		if !cp.inCopy[k] {
			continue
		}
		cp.inCopy[k] = false
		msg := append([]byte{'f', 0, 0, 0, 0}, reason...)
		srv.W.Write(wire.FinishMessage(append(msg, 0), 0))
		if srv.Flush() != nil {
			srv.Broken = true
			continue
		}
		if _, _, err := ReadToReady(srv); err != nil {
			srv.Broken = true
		}
	}
}
