package frontend

import (
	"context"
	"fmt"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Row-limited Execute on sharded databases.
//
// A portal that runs on one shard may be fetched in chunks (Execute with a
// row limit, PortalSuspended, Execute again), as drivers do with a fetch
// size. The proxy keeps such a portal open on its shard's server: it sends
// the Execute followed by Flush instead of Sync, which leaves the server
// inside the client's batch (shardConn.unsynced) with the portal
// suspended in its unnamed portal (shardConn.portal), and sends each
// further Execute of the portal the same way. The server's batch ends when
// the client's does, at its Sync (syncShards), or before the proxy sends
// that server anything else (useShard): a server inside a batch skips
// everything up to Sync after an error, a simple Query included. A portal
// that runs on several shards is merged from all of them and pauses its
// merge instead (sharded_stream.go).

// errPortalLost is the answer to an Execute of a suspended portal whose
// server portal is gone: the proxy ran something else on its server, or
// the transaction that held it ended.
func errPortalLost(name []byte) error {
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
		Message: fmt.Sprintf("fetching the rest of portal \"%s\" is not supported on sharded databases after other statements ran on its shard", name),
		Hint:    "Fetch the whole result before running other statements, or execute the portal without a row limit (turn the driver's fetch size off)."}
}

// useShard readies shard i's server for something other than the next
// chunk of its suspended portal: a batch a row-limited Execute left open
// is synced, and the suspended portal is lost (the proxy binds the
// server's unnamed portal anew).
func (c *client) useShard(i int) error {
	if c.stream != nil && c.stream.usesShard(i) {
		c.settleStream(streamKeep)
	}
	if err := c.syncShard(i); err != nil {
		return err
	}
	c.ext[i].portal = nil
	return nil
}

// syncShards ends the batches row-limited Executes left open; on an I/O
// error c.server points at the broken server.
func (c *client) syncShards() error {
	for i := range c.ext {
		if err := c.syncShard(i); err != nil {
			c.server = c.xs.Server(i)
			return err
		}
	}
	return nil
}

// syncShard sends Sync to shard i's server if it is inside a batch and
// reads its answers to ReadyForQuery. The session ops of the batch's
// statements count when the batch's implicit transaction committed. A
// server portal survives the Sync only inside a transaction block.
func (c *client) syncShard(i int) error {
	sc := &c.ext[i]
	if !sc.unsynced || c.xs.Server(i) == nil {
		return nil
	}
	s := c.xs.Server(i)
	ops, failed := sc.batchOps, sc.failed
	sc.unsynced, sc.failed, sc.batchOps = false, false, nil
	s.W.Write([]byte{'S', 0, 0, 0, 4})
	if err := s.Flush(); err != nil {
		s.Broken = true
		return err
	}
	status, serr, err := executor.ReadToReady(s)
	if err != nil {
		return err
	}
	if status != 'T' {
		sc.portal = nil
	}
	if status == 'E' && c.xs.InTx() {
		c.xs.Abort()
	}
	if !failed && serr == nil && status == 'I' && len(ops) > 0 {
		saved := c.server
		c.server = s
		c.applyOps(ops)
		c.server = saved
	}
	return nil
}

// flushExchange writes out, which ends with Execute and Flush, to shard
// i's server and hands every answer up to the Execute's
// (CommandComplete, EmptyQueryResponse, PortalSuspended) to fn. It returns
// the server's error, after which the server skips to the batch's Sync.
func (c *client) flushExchange(i int, out []byte, fn func(typ byte, raw []byte)) error {
	return c.flushExchangeTo(i, out, 0, fn)
}

// flushExchangeTo is flushExchange that also ends at an answer of type end
// (not 0), after handing it to fn.
func (c *client) flushExchangeTo(i int, out []byte, end byte, fn func(typ byte, raw []byte)) error {
	sc := &c.ext[i]
	srv := c.xs.Server(i)
	sc.unsynced = true
	srv.W.Write(out)
	if err := srv.Flush(); err != nil {
		return c.lostWrite(err)
	}
	sent := c.mono()
	for first := true; ; first = false {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			srv.Broken = true
			return c.lostShard(err)
		}
		if typ == end {
			fn(typ, raw)
			return nil
		}
		switch typ {
		case 'E':
			serr := wire.ParseError(body)
			srv.NoteError(serr)
			if serr.Fatal() {
				srv.Broken = true
				if first && diedIdle(serr, sent) {
					// The server died before it answered anything
					// (retryShard).
					sc.unsynced = false
					return c.lostAnswer(serverClosed(serr), true)
				}
			}
			if c.pendingPrepare != "" {
				delete(srv.Prepared, c.pendingPrepare) // the Parse failed
				c.pendingPrepare = ""
			}
			sc.failed = true
			return serr
		case '1':
			c.pendingPrepare = "" // the statement exists, whatever fails next
			fn(typ, raw)
		case 'N', 'A':
			if typ == 'N' && c.pendingPrepare != "" {
				continue // the proxy's own Parse (see serverExchange)
			}
			c.toClient(raw)
		case 'S':
			srv.NoteParameter(body)
		case 'Z':
			srv.Broken = true
			return c.lostShard(fmt.Errorf("server %s: ReadyForQuery inside a batch", srv.Addr))
		case 'C', 'I', 's':
			c.pendingPrepare = ""
			fn(typ, raw)
			return nil
		default:
			fn(typ, raw)
		}
	}
}

// resumePortal fetches the next chunk of suspended portal p (the client's
// name) on its shard; with describe, it answers the portal's Describe that
// came before the Execute first.
func (c *client) resumePortal(ctx context.Context, p *sPortal, name []byte, maxRows int32, describe bool) error {
	if describe && (p.stream != nil || p.chunks != nil) {
		// The Describe of the portal that came before the Execute.
		if err := c.sDescribe(ctx, 'P', name); err != nil {
			return err
		}
	}
	if p.stream != nil {
		return c.resumeStream(p.stream, maxRows)
	}
	if p.chunks != nil {
		return c.serveChunk(p, maxRows)
	}
	sc := &c.ext[p.shard]
	p.suspended = false
	if c.xs.Server(p.shard) == nil || sc.portal != p {
		return errPortalLost(name)
	}
	c.server = c.xs.Server(p.shard)
	var out []byte
	if describe {
		// The Describe of the portal that came before the Execute, of
		// the server's unnamed portal, which holds it.
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
	}
	out = wire.AppendInt32(append(out, 'E', 0, 0, 0, 9, 0), maxRows)
	out = append(out, 'H', 0, 0, 0, 4)
	err := c.flushExchange(p.shard, out, func(typ byte, raw []byte) {
		if typ == 's' {
			p.suspended = true
		}
		c.toClient(raw)
	})
	if !p.suspended {
		sc.portal = nil
	}
	return err
}
