package frontend

import (
	"errors"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// runCopy runs COPY … FROM STDIN on several shards
// (executor.Session.CopyIn) and answers the client.
func (c *client) runCopy(p *routePlan) error {
	tag, err := c.xs.CopyIn(&p.Plan, copyClient{c})
	var se *executor.ShardError
	var ce *executor.ClientError
	switch {
	case errors.As(err, &se):
		return c.shardFailed(err)
	case errors.As(err, &ce):
		return ce.Err
	case err != nil:
		c.releaseIfIdle()
		return c.shardedError(err)
	}
	c.w.Write(wire.AppendCommandComplete(nil, tag))
	c.releaseIfIdle()
	c.readyForQuery(c.shardedStatus())
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// copyClient is the client end of a sharded COPY FROM STDIN.
type copyClient struct{ c *client }

func (cc copyClient) Write(b []byte) (int, error) {
	cc.c.toClient(b)
	return len(b), nil
}

func (cc copyClient) Flush() error { return cc.c.flushClient() }

func (cc copyClient) Next() (byte, []byte, error) {
	typ, _, body, err := cc.c.r.Next()
	return typ, body, err
}
