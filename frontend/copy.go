package frontend

import (
	"errors"

	"github.com/shardgate/shardgate/executor"
)

// runCopy runs COPY … FROM STDIN on several shards
// (executor.Session.CopyIn) and answers the client.
func (c *client) runCopy(p *routePlan) error {
	tag, err := c.xs.CopyIn(&p.Plan, copyClient{c})
	var ce *executor.ClientError
	if errors.As(err, &ce) {
		return ce.Err // the client is gone: nothing to answer
	}
	return c.answerMany(p, tag, err)
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
