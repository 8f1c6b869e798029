package frontend

import (
	"errors"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// runMany runs a statement on several shards (executor.Session.Execute)
// and answers the client.
func (c *client) runMany(p *routePlan) error {
	implicit := !c.xs.InTx() && (p.Kind == executor.RouteWrite || p.Kind == executor.RouteOmniWrite)
	tag, err := c.xs.Execute(c.answer(p, executor.DescribeRows), implicit)
	return c.answerMany(p, tag, err)
}

// answerMany answers a simple Query that ran on several shards: its
// command tag (tag) or its error, then ReadyForQuery; a lost server ends
// the client's transaction (shardFailed).
func (c *client) answerMany(p *routePlan, tag string, err error) error {
	c.ranOn(p.Shards)
	var se *executor.ShardError
	if errors.As(err, &se) {
		return c.shardFailed(err)
	}
	if err != nil {
		c.releaseIfIdle()
		return c.shardedError(err)
	}
	c.completeMany(p, tag)
	c.releaseIfIdle()
	c.readyForQuery(c.shardedStatus())
	c.tx = c.shardedStatus()
	return c.flushClient()
}

// answer describes how the answers of p's shards become the client's.
func (c *client) answer(p *routePlan, d executor.Describe) *executor.Answer {
	return &executor.Answer{Plan: &p.Plan, Collation: c.collation(), Describe: d, Sink: clientSink{c}}
}

// completeMany writes the command tag of a statement that ran on several
// shards (tag "": an empty query) and, outside a transaction, commits its
// session changes.
func (c *client) completeMany(p *routePlan, tag string) {
	if tag != "" {
		c.w.Write(wire.AppendCommandComplete(nil, tag))
		if isSchemaChange([]byte(tag)) {
			// DDL on every shard: statements prepared before it may
			// resolve differently now (see genKey), as after one server's.
			c.l.ddlGen.Add(1)
		}
	} else {
		c.w.Write([]byte{'I', 0, 0, 0, 4})
	}
	c.applyManyOps(p)
}

// applyManyOps commits, outside a transaction, the session changes of a
// statement that ran on several shards.
func (c *client) applyManyOps(p *routePlan) {
	if len(p.ops) > 0 && !c.xs.InTx() {
		c.applyOpsAll(p.ops)
	}
}

// clientSink writes messages of a merged answer to the client.
type clientSink struct{ c *client }

func (s clientSink) Write(b []byte) (int, error) {
	s.c.toClient(b)
	return len(b), nil
}

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
