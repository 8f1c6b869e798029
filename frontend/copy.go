package frontend

import (
	"context"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// runCopy runs COPY … FROM STDIN on several shards: every row goes to the
// shard its sharding key names (or, for omni tables, to every shard), in
// one transaction per shard committed together, and the client sees one
// COPY with the total row count (counted once for omni tables).
func (c *client) runCopy(ctx context.Context, p *routePlan) error {
	implicit := !c.xs.InTx()
	servers := make([]*pool.Server, len(p.Shards))
	byShard := map[int]int{} // shard → index in p.shards
	for k, i := range p.Shards {
		s := c.xs.Server(i)
		servers[k] = s
		byShard[i] = k
		if err := c.useShard(i); err != nil {
			c.server = s
			return c.shardFailed(err)
		}
		for _, q := range c.prefix(i, implicit) {
			s.W.Write(wire.AppendQuery(nil, q))
			if err := s.Flush(); err != nil {
				c.server = s
				return c.shardFailed(err)
			}
			if _, serr, err := executor.ReadToReady(s); err != nil {
				c.server = s
				return c.shardFailed(err)
			} else if serr != nil {
				// What the server's session is now is unknown.
				s.Broken = true
				c.rollbackShards()
				c.releaseIfIdle()
				return c.shardedError(serr)
			}
		}
		s.W.Write(wire.AppendQuery(nil, p.SQL))
		if err := s.Flush(); err != nil {
			c.server = s
			return c.shardFailed(err)
		}
	}
	// Every shard answers CopyInResponse, or an error.
	var firstErr *wire.Error
	var copyIn []byte
	inCopy := make([]bool, len(servers))
	for k, s := range servers {
		for {
			typ, raw, body, err := s.R.Next()
			if err != nil {
				c.server = s
				return c.shardFailed(err)
			}
			if typ == 'G' {
				inCopy[k] = true
				if copyIn == nil {
					copyIn = append([]byte{}, raw...)
				}
				break
			}
			if typ == 'E' && firstErr == nil {
				firstErr = wire.ParseError(body)
			}
			if typ == 'Z' {
				break
			}
		}
	}
	var split *executor.CopySplitter
	if firstErr == nil {
		f, err := executor.NewCopyFormat(p.Copy.Format, p.Copy.Delimiter, p.Copy.Null, p.Copy.Quote, p.Copy.Escape, p.Copy.Header, max(p.Copy.Column, 0))
		if err != nil {
			firstErr, _ = wire.AsError(err)
		}
		split = executor.NewCopySplitter(f)
	}
	if firstErr != nil {
		c.endCopy(servers, inCopy, "COPY aborted: "+firstErr.Message)
		c.rollbackShards()
		c.releaseIfIdle()
		return c.shardedError(firstErr)
	}
	// Rows are gathered per shard and sent in CopyData messages of up to
	// 64 KiB.
	bufs := make([][]byte, len(servers))
	flushShard := func(k int) error {
		if len(bufs[k]) == 0 {
			return nil
		}
		msg := []byte{'d', 0, 0, 0, 0}
		msg = append(msg, bufs[k]...)
		_, err := servers[k].W.Write(wire.FinishMessage(msg, 0))
		bufs[k] = bufs[k][:0]
		return err
	}
	add := func(k int, raw []byte) error {
		bufs[k] = append(bufs[k], raw...)
		if len(bufs[k]) >= 64<<10 {
			return flushShard(k)
		}
		return nil
	}
	split.All = func(raw []byte) error {
		for k := range servers {
			if err := add(k, raw); err != nil {
				return err
			}
		}
		return nil
	}
	split.Row = func(raw, key []byte) error {
		if p.Copy.Column < 0 {
			return split.All(raw)
		}
		shard, err := p.Copy.Shard(key)
		if err != nil {
			return err
		}
		k, ok := byShard[shard]
		if !ok {
			return wire.Errorf(wire.InternalError, "COPY row for shard %d, which the statement does not target", shard)
		}
		return add(k, raw)
	}
	c.toClient(copyIn)
	if err := c.flushClient(); err != nil {
		c.endCopy(servers, inCopy, "client connection lost during COPY")
		c.rollbackShards()
		return err
	}
	var copyErr error
	done := false
	for !done {
		typ, _, body, err := c.r.Next()
		if err != nil {
			c.endCopy(servers, inCopy, "client connection lost during COPY")
			c.rollbackShards()
			return err
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
	if copyErr == nil {
		for k := range servers {
			if err := flushShard(k); err != nil {
				copyErr = err
			}
		}
	}
	if copyErr != nil {
		c.endCopy(servers, inCopy, "COPY aborted by shardgate: "+copyErr.Error())
		c.rollbackShards()
		c.releaseIfIdle()
		return c.shardedError(copyErr)
	}
	tags := make([]string, len(servers))
	for k, s := range servers {
		s.W.Write([]byte{'c', 0, 0, 0, 4})
		if err := s.Flush(); err != nil {
			c.server = s
			return c.shardFailed(err)
		}
		r := &shardRows{c: c, s: s}
		r.header()
		r.finish()
		if r.ioErr != nil {
			c.server = s
			return c.shardFailed(r.ioErr)
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
		tags[k] = r.tag
	}
	if firstErr == nil && implicit {
		if err := c.commitShards(p.Shards); err != nil {
			firstErr, _ = wire.AsError(err)
			if firstErr == nil {
				firstErr = wire.Errorf(wire.InternalError, "%v", err)
			}
		}
	}
	if firstErr != nil {
		c.rollbackShards()
		c.releaseIfIdle()
		return c.shardedError(firstErr)
	}
	tag := sumTags(tags)
	if p.Copy.Column < 0 {
		tag = tags[0]
	}
	c.w.Write(wire.AppendCommandComplete(nil, tag))
	c.releaseIfIdle()
	c.w.Write(wire.AppendReadyForQuery(nil, c.shardedStatus()))
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// endCopy aborts COPY on the servers still in copy-in mode and reads them
// back to ReadyForQuery.
func (c *client) endCopy(servers []*pool.Server, inCopy []bool, reason string) {
	for k, s := range servers {
		if !inCopy[k] {
			continue
		}
		msg := []byte{'f', 0, 0, 0, 0}
		msg = append(msg, reason...)
		msg = append(msg, 0)
		s.W.Write(wire.FinishMessage(msg, 0))
		if s.Flush() != nil {
			s.Broken = true
			continue
		}
		if _, _, err := executor.ReadToReady(s); err != nil {
			s.Broken = true
		}
	}
}
