package admin

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/shardgate/shardgate/wire"
)

// simple answers a Query: the command's rows, CommandComplete and
// ReadyForQuery, or an ErrorResponse and ReadyForQuery.
func (c *conn) simple(ctx context.Context, body []byte, log *slog.Logger) error {
	sql, _, _ := wire.CString(body)
	x, err := parse(string(sql))
	switch {
	case err != nil:
		c.fail(err)
	case x == nil:
		c.buf = wire.AppendEmptyQueryResponse(c.buf)
	default:
		res, err := c.exec(ctx, x, log)
		if err != nil {
			c.fail(err)
			break
		}
		if cols := x.spec.columns; cols != nil {
			c.buf = appendRowDescription(c.buf, cols, nil)
			c.buf = appendRows(c.buf, cols, nil, res.rows)
		}
		c.buf = wire.AppendCommandComplete(c.buf, tag(x, res))
	}
	c.buf = wire.AppendReadyForQuery(c.buf, 'I')
	return c.flush()
}

// extended handles Parse, Bind, Describe, Execute and Close. Commands run
// at Execute; Describe answers from the command's static columns, so a
// driver can describe a statement without running it. Every result column
// is text, bigint or boolean, in the formats Bind asked for.
func (c *conn) extended(ctx context.Context, typ byte, body []byte, log *slog.Logger) error {
	switch typ {
	case 'P':
		name, rest, ok1 := wire.CString(body)
		query, _, ok2 := wire.CString(rest)
		if !ok1 || !ok2 {
			return malformed("Parse")
		}
		x, err := parse(string(query))
		if err != nil {
			return err
		}
		c.stmts[string(name)] = x
		c.buf = wire.AppendParseComplete(c.buf)
	case 'B':
		return c.bind(body)
	case 'D':
		return c.describe(body)
	case 'E':
		return c.execute(ctx, body, log)
	case 'C':
		if len(body) < 2 {
			return malformed("Close")
		}
		name, _, _ := wire.CString(body[1:])
		if body[0] == 'S' {
			delete(c.stmts, string(name))
		} else {
			delete(c.portals, string(name))
		}
		c.buf = wire.AppendCloseComplete(c.buf)
	}
	return nil
}

// describe handles Describe of a statement or a portal, from the command's
// static columns.
func (c *conn) describe(body []byte) error {
	if len(body) < 2 {
		return malformed("Describe")
	}
	name, _, _ := wire.CString(body[1:])
	var cols []column
	var formats []int16
	if body[0] == 'S' {
		x, ok := c.stmts[string(name)]
		if !ok {
			return wire.Errorf(wire.InvalidSQLStatementName, "prepared statement %q does not exist", name)
		}
		c.buf = wire.AppendParameterDescription(c.buf, nil)
		if x != nil {
			cols = x.spec.columns
		}
	} else {
		p, ok := c.portals[string(name)]
		if !ok {
			return wire.Errorf(wire.InvalidCursorName, "portal %q does not exist", name)
		}
		if p.call != nil {
			cols = p.call.spec.columns
		}
		formats = p.formats
	}
	if cols == nil {
		c.buf = wire.AppendNoData(c.buf)
	} else {
		c.buf = appendRowDescription(c.buf, cols, formats)
	}
	return nil
}

// execute handles Execute: it runs the portal's command.
func (c *conn) execute(ctx context.Context, body []byte, log *slog.Logger) error {
	name, _, ok := wire.CString(body)
	if !ok {
		return malformed("Execute")
	}
	p, found := c.portals[string(name)]
	if !found {
		return wire.Errorf(wire.InvalidCursorName, "portal %q does not exist", name)
	}
	if p.call == nil {
		c.buf = wire.AppendEmptyQueryResponse(c.buf)
		return nil
	}
	res, err := c.exec(ctx, p.call, log)
	if err != nil {
		return err
	}
	// Execute ignores the row limit: admin results are small and
	// complete.
	c.buf = appendRows(c.buf, p.call.spec.columns, p.formats, res.rows)
	c.buf = wire.AppendCommandComplete(c.buf, tag(p.call, res))
	return nil
}

// bind handles Bind: admin commands take no parameters.
func (c *conn) bind(body []byte) error {
	pname, rest, ok1 := wire.CString(body)
	sname, rest, ok2 := wire.CString(rest)
	if !ok1 || !ok2 {
		return malformed("Bind")
	}
	x, ok := c.stmts[string(sname)]
	if !ok {
		return wire.Errorf(wire.InvalidSQLStatementName, "prepared statement %q does not exist", sname)
	}
	n, rest, ok := wire.Uint16(rest)
	if !ok || len(rest) < 2*int(n) {
		return malformed("Bind")
	}
	rest = rest[2*int(n):] // parameter format codes
	nparams, rest, ok := wire.Uint16(rest)
	if !ok {
		return malformed("Bind")
	}
	if nparams > 0 {
		return wire.Errorf(wire.ProtocolViolation,
			"bind message supplies %d parameters, but prepared statement %q requires 0", nparams, sname)
	}
	nres, rest, ok := wire.Uint16(rest)
	if !ok || len(rest) < 2*int(nres) {
		return malformed("Bind")
	}
	formats := make([]int16, nres)
	for i := range formats {
		f, r, _ := wire.Uint16(rest)
		rest = r
		formats[i] = int16(f)
		if formats[i] != wire.FormatText && formats[i] != wire.FormatBinary {
			return wire.Errorf(wire.ProtocolViolation, "unsupported format code: %d", formats[i])
		}
	}
	c.portals[string(pname)] = &portal{call: x, formats: formats}
	c.buf = wire.AppendBindComplete(c.buf)
	return nil
}

func malformed(msg string) error {
	return wire.Errorf(wire.ProtocolViolation, "malformed %s message", msg)
}

// exec runs a command. Commands that change state are logged.
func (c *conn) exec(ctx context.Context, x *call, log *slog.Logger) (*result, error) {
	res, err := x.spec.run(c.h, ctx, x)
	if x.spec.words[0] != "SHOW" {
		cmd := strings.TrimSpace(strings.Join(x.spec.words, " ") + " " + strings.Join(x.args, " "))
		if err != nil {
			log.Warn("admin command failed", "command", cmd, "err", err)
		} else {
			log.Info("admin command", "command", cmd)
		}
	}
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = &result{}
	}
	if res.after != nil {
		c.after = res.after
	}
	return res, nil
}

func tag(x *call, res *result) string {
	if res.tag != "" {
		return res.tag
	}
	return x.spec.tag
}

// fail queues err as an ErrorResponse.
func (c *conn) fail(err error) {
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	if e.Severity == "" {
		e.Severity = "ERROR"
	}
	c.buf = wire.AppendError(c.buf, e)
}

// fatal sends e and gives up on flushing errors: the session ends.
func (c *conn) fatal(e *wire.Error) {
	e.Severity = "FATAL"
	c.buf = wire.AppendError(c.buf, e)
	c.flush()
}

func (c *conn) flush() error {
	c.ac.Write(c.buf)
	c.buf = c.buf[:0]
	if err := c.ac.Flush(); err != nil {
		return fmt.Errorf("admin: write: %w", err)
	}
	return nil
}
