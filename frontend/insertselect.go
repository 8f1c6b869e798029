package frontend

import (
	"errors"

	"github.com/shardgate/shardgate/executor"
)

// runInsertSelect runs INSERT … SELECT into a sharded table for a simple
// Query (executor.Session.InsertSelect) and answers the client.
func (c *client) runInsertSelect(p *routePlan) error {
	tag, err := c.xs.InsertSelect(c.answer(p, executor.DescribeNone), nil)
	return c.answerMany(p, tag, err)
}

// execInsertSelect runs a portal of INSERT … SELECT into a sharded table,
// with the parameter types of the client's Parse.
func (c *client) execInsertSelect(p *sPortal, describe bool) error {
	d := executor.DescribeNone
	if describe {
		d = executor.DescribeAll
	}
	tag, err := c.xs.InsertSelect(c.answer(p.plan, d), p.stmt.tailTypes())
	c.ranOn(p.plan.Shards)
	var se *executor.ShardError
	if errors.As(err, &se) {
		return c.lostShard(err)
	}
	if err != nil {
		return err
	}
	c.completeMany(p.plan, tag)
	return nil
}
