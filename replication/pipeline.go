package replication

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// This file is an applier's round trip. The applier encodes the messages
// of a round trip itself into one buffer that it reuses: a Parse for each
// statement new to the session, Bind and Execute for each statement, one
// Sync; it writes them at once and reads the responses until
// ReadyForQuery. pgconn.Batch did the same with a buffer, two slices and
// a result reader per round trip that it cannot reuse, a Describe per
// statement that the server answered with NoData, a command tag string
// per statement, a context watcher per round trip, and a round trip of
// its own for each statement prepared; here a new statement's Parse goes
// in the round trip that first uses it.
//
// The buffer is written straight to the connection, not through pgconn,
// which reads in the background while it writes only for its own writes.
// The server answers each statement with a few dozen bytes, and a round
// trip holds about batchStatements statements (a little more: the count
// is checked between ops), so the answers stay well within the sockets'
// buffers and the server does not wait for the applier to read while the
// applier writes. A round trip that fails ends the applier's
// session (its stream restarts), so what the server skipped after an
// error never matters beyond forgetting the statements whose Parse it
// skipped.

// stmt is a statement prepared on an applier's session.
type stmt struct {
	name string
	sql  string
}

// step is what one response of a round trip completes: a statement's
// Parse (parse set) or its execution.
type step struct {
	s     *stmt
	parse bool
}

// pipeline is the applier's next round trip.
type pipeline struct {
	buf        []byte // the encoded messages
	steps      []step // in the order the server answers them
	statements int    // statements executed (not counting Parses)
	sent       bool   // written; its answers are still to be read
	bind       pgproto3.Bind
	execute    pgproto3.Execute
	sync       pgproto3.Sync
}

// parse queues the Parse of s, with parameters of types oids (nil:
// inferred).
func (p *pipeline) parse(s *stmt, oids []uint32) error {
	buf, err := (&pgproto3.Parse{Name: s.name, Query: s.sql, ParameterOIDs: oids}).Encode(p.buf)
	if err != nil {
		return fmt.Errorf("prepare %q: %w", s.sql, err)
	}
	p.buf = buf
	p.steps = append(p.steps, step{s: s, parse: true})
	return nil
}

// exec queues the execution of s with the text parameters args (nil:
// NULL). args may be reused as soon as exec returns.
func (p *pipeline) exec(s *stmt, args [][]byte) error {
	p.bind.PreparedStatement, p.bind.Parameters = s.name, args
	buf, err := p.bind.Encode(p.buf)
	p.bind.Parameters = nil
	if err == nil {
		buf, err = p.execute.Encode(buf)
	}
	if err != nil {
		return fmt.Errorf("%q: %w", s.sql, err)
	}
	p.buf = buf
	p.steps = append(p.steps, step{s: s})
	p.statements++
	return nil
}

// prepare returns the statement of sql with parameters of types oids
// (nil: inferred), whose Parse is queued when it is new. Past maxPrepared
// statements, the round trip is sent and every statement deallocated.
func (a *applier) prepare(ctx context.Context, sql string, oids []uint32) (*stmt, error) {
	key := sql
	if oids != nil {
		key += "\x00" + fmt.Sprint(oids)
	}
	if s := a.prepared[key]; s != nil {
		return s, nil
	}
	if len(a.prepared) >= maxPrepared {
		// Only what is queued: the runs being flushed follow it.
		if err := a.sendBatch(ctx); err != nil {
			return nil, err
		}
		if err := a.conn.PgConn().Exec(ctx, "DEALLOCATE ALL").Close(); err != nil {
			return nil, fmt.Errorf("deallocate: %w", err)
		}
		a.forgetPrepared()
	}
	s := &stmt{name: "sg_apply_" + strconv.Itoa(a.nextName()), sql: sql}
	if err := a.pipe.parse(s, oids); err != nil {
		return nil, err
	}
	a.prepared[key] = s
	return s, nil
}

func (a *applier) forgetPrepared() {
	clear(a.prepared)
	clear(a.byShape)
	clear(a.runs.multi)
}

// sendBatch sends the queued messages in one round trip and reads every
// response; it returns the first error the server reported.
func (a *applier) sendBatch(ctx context.Context) error {
	if err := a.writeBatch(); err != nil {
		return err
	}
	return a.readBatch()
}

// writeBatch writes the queued messages with a Sync; readBatch reads the
// answers. Nothing is written when nothing is queued, and then readBatch
// reads nothing.
func (a *applier) writeBatch() error {
	p := &a.pipe
	if len(p.steps) == 0 {
		return nil
	}
	a.t.prog.statements.Add(int64(p.statements))
	a.t.prog.roundTrips.Add(1)
	if a.collapsed > 0 {
		a.t.prog.collapsed.Add(int64(a.collapsed))
		a.collapsed = 0
	}
	buf, err := p.sync.Encode(p.buf)
	if err != nil {
		p.reset()
		return err
	}
	p.buf = buf
	if _, err := a.conn.PgConn().Conn().Write(p.buf); err != nil {
		n := p.statements
		p.reset()
		return fmt.Errorf("send %d statements: %w", n, err)
	}
	p.sent = true
	return nil
}

// readBatch reads the answers of the round trip writeBatch sent, up to
// ReadyForQuery; it returns the first error the server reported.
func (a *applier) readBatch() error {
	p := &a.pipe
	if !p.sent {
		return nil
	}
	defer p.reset()
	pg := a.conn.PgConn()
	// Cancellation reaches the socket as a deadline (streamSource), so the
	// reads need no context of their own, which would cost a watcher per
	// message.
	var first error
	failed, done := -1, 0 // the step that failed; steps completed
read:
	for {
		msg, err := pg.ReceiveMessage(context.Background())
		if err != nil {
			if first == nil {
				first = fmt.Errorf("receive: %w", err)
			}
			break
		}
		switch msg := msg.(type) {
		case *pgproto3.ParseComplete, *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse:
			done++
		case *pgproto3.ErrorResponse:
			if first == nil {
				first, failed = pgconn.ErrorResponseToPgError(msg), done
			}
		case *pgproto3.ReadyForQuery:
			break read
		}
	}
	if first == nil {
		return nil
	}
	// The server skipped every message after the one that failed, Parses
	// too: forget what this round trip prepared.
	a.forgetPrepared()
	if failed >= 0 && failed < len(p.steps) && p.steps[failed].parse {
		return fmt.Errorf("prepare %q: %w", p.steps[failed].s.sql, first)
	}
	return first
}

// reset empties the pipeline for the next round trip, keeping its memory.
func (p *pipeline) reset() {
	p.buf, p.steps, p.statements, p.sent = p.buf[:0], p.steps[:0], 0, false
}
