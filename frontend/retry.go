package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardgate/shardgate/internal/clock"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Retrying a round trip on another server.
//
// The pool lends a server that was idle for less than a second without
// probing it (pool.aliveCheckAfter), so a backend that died meanwhile —
// pg_terminate_backend, a restart, idle_session_timeout — is found by the
// first round trip of its checkout: the write fails before a byte left
// (pool.NothingSent), or the server's first answer is the FATAL it sent
// while it was idle. Neither ran anything of the client's: a write that
// failed delivered nothing, and PostgreSQL flushes its output at every
// ReadyForQuery and keeps its messages in order, so a FATAL that comes
// before any other answer followed no completed statement, and the
// implicit transaction of whatever had started died with the backend. The
// batch then runs again on another server, as if the pool had noticed
// first. Only a client that holds no session on the server qualifies (not
// in a transaction, not pinned, not session mode), and only a whole batch:
// a simple Query, or extended-protocol messages up to Sync.
//
// The batch in c.out was rewritten for the dead server's prepared
// statements (prepared.go): a Parse sent where it lacked a statement, none
// where it had one. adapt gives the new server the same statements, for
// the names the batch uses, before the batch goes out again. A batch that
// depends on state adapt cannot reproduce (SQL-level prepared statements)
// is not retried: the client hears the error, as before.

// deadServerWindow bounds how soon after the batch went out the FATAL must
// come for a retry: a backend that died idle in the pool answers at once
// (its FATAL and end of stream were waiting in the socket), while one ended
// by pg_terminate_backend while it ran the client's statement — an
// operator stopping a runaway query — answers later and must not be run
// again; that client gets the FATAL as an ERROR, as before.
const deadServerWindow = 100 * time.Millisecond

// diedIdle reports whether e, a server's first answer to what the proxy
// sent it at sent (clock.Mono), says that the server had died idle in the
// pool: a FATAL within deadServerWindow.
func diedIdle(e *wire.Error, sent time.Duration) bool {
	return e.Fatal() && clock.Mono()-sent < deadServerWindow
}

// serverClosed is the error of a server that ended the connection with e,
// its FATAL.
func serverClosed(e *wire.Error) error {
	return fmt.Errorf("server closed the connection: %s (SQLSTATE %s)", e.Message, e.Code)
}

// retryTries bounds how many servers one round trip is tried on.
const retryTries = 3

// batchRetryable reports whether the batch in flight on s may run again on
// another server if s turns out dead before answering anything of it.
func (c *client) batchRetryable(s *pool.Server) bool {
	if c.sessionBound() || c.loggingIn || c.xs != nil || c.pipe.has(pipeUnsynced) || len(c.q) == 0 || c.answers > 1 ||
		len(c.out) > flushWriteThreshold {
		return false
	}
	switch last := c.q[len(c.q)-1].kind; {
	case len(c.q) == 1 && last == reqQuery:
	case last == reqSync:
		for i := range c.q {
			if k := c.q[i].kind; k == reqQuery || k == reqInternal {
				return false
			}
		}
	default:
		return false
	}
	for name := range s.Prepared {
		if !isProxyName([]byte(name)) {
			return false // SQL-level statements: not reproduced by adapt
		}
	}
	_, ok := batchUses(c.out)
	return ok
}

// retryElsewhere runs the batch again on other servers while err says the
// server died before it answered anything (see retryable). It returns the
// round trip's error, or local: an error to answer the client with, when
// no other server could be checked out.
func (c *client) retryElsewhere(err error) (rerr, local error) {
	for try := 0; try < retryTries && retryable(err); try++ {
		dead := c.server
		c.log.Info("server died before answering; running the batch on another server", "server", dead.Addr, "err", err)
		if p := dead.Pool(); p != nil {
			p.CloseDeadIdle()
		}
		prepared, unnamed := dead.Prepared, dead.Unnamed
		c.pipe.set(pipeErrored, false)
		dead.Broken = true
		c.detach()
		// A read that went to a replica is balanced again rather than
		// sent to the primary; checkout takes the decision (takeRead).
		c.lb.read = dead.OfReplica()
		if aerr := c.attach(context.Background()); aerr != nil {
			c.dropBatch()
			return nil, aerr
		}
		s := c.server
		if err = c.adapt(s, prepared, unnamed); err != nil {
			return err, nil
		}
		c.tripStart = clock.Mono()
		s.W.Write(c.out)
		if err = s.Flush(); err != nil {
			err = c.unsent(s, err)
			continue
		}
		c.answers = 0
		err = c.relay()
	}
	return err, nil
}

// unsent turns a failed first write of a retryable batch into a retryable
// error.
func (c *client) unsent(s *pool.Server, err error) error {
	if pool.NothingSent(err) && c.batchRetryable(s) {
		return &serverGone{retry: true, err: err}
	}
	return err
}

// dropBatch forgets the batch that could not be sent, as rollback does.
func (c *client) dropBatch() {
	for i := len(c.q) - 1; i >= 0; i-- { // last first, as relayError
		c.notParsed(&c.q[i], false)
	}
	c.q = c.q[:0]
	c.out = c.out[:0]
	c.batchOps = c.batchOps[:0]
}

// stmtUse is the first use of a statement name in a batch: parsed when
// the batch creates (Parse) or drops (Close) it before anything uses it.
type stmtUse struct {
	name   string
	parsed bool
}

// batchUses lists the first use of each statement name that the
// extended-protocol messages in out use: the unnamed statement and the
// proxy-wide ones (other names are the client's own, unknown to every
// server alike). ok is false for a batch adapt cannot reproduce on another
// server: malformed, injecting SQL-level statements, or using the unnamed
// statement the server had and parsing another one later (the dead
// server's record then holds the later one).
func batchUses(out []byte) (uses []stmtUse, ok bool) {
	seen := map[string]bool{}
	usedUnnamed := false
	for len(out) >= 5 {
		typ := out[0]
		n := int(uint32(out[1])<<24 | uint32(out[2])<<16 | uint32(out[3])<<8 | uint32(out[4]))
		if n < 4 || 1+n > len(out) {
			return nil, false
		}
		body := out[5 : 1+n]
		out = out[1+n:]
		name, ok := stmtName(typ, body)
		if !ok {
			return nil, false
		}
		if name == nil || len(name) > 0 && !isProxyName(name) {
			if string(name) == "shardgate_inject" {
				return nil, false
			}
			continue
		}
		parsed := typ == 'P' || typ == 'C'
		if len(name) == 0 && parsed && usedUnnamed {
			return nil, false
		}
		if seen[string(name)] {
			continue
		}
		seen[string(name)] = true
		if len(name) == 0 && !parsed {
			usedUnnamed = true
		}
		uses = append(uses, stmtUse{name: string(name), parsed: parsed})
	}
	return uses, len(out) == 0
}

// stmtName returns the statement a message names (nil when it names
// none: Execute, Sync, a portal's Describe or Close).
func stmtName(typ byte, body []byte) (name []byte, ok bool) {
	switch typ {
	case 'P':
		name, _, ok = wire.CString(body)
	case 'B':
		var rest []byte
		if _, rest, ok = wire.CString(body); ok {
			name, _, ok = wire.CString(rest)
		}
	case 'D', 'C':
		if len(body) < 2 {
			return nil, false
		}
		if body[0] != 'S' {
			return nil, true
		}
		name, _, ok = wire.CString(body[1:])
	default:
		return nil, true
	}
	if ok && name == nil {
		name = []byte{} // the unnamed statement, not "none"
	}
	return name, ok
}

// adapt gives s the statements that the batch in c.out expects of the
// server it was built for, whose prepared statements and unnamed statement
// were prepared and unnamed: a statement the batch uses before parsing it
// is parsed on s, one the batch parses is closed on s first, in one
// exchange of the proxy's own.
func (c *client) adapt(s *pool.Server, prepared map[string]struct{}, unnamed []byte) error {
	uses, _ := batchUses(c.out)
	var msgs []byte
	var closed, parsed []string
	touchesUnnamed := false
	for _, u := range uses {
		_, has := s.Prepared[u.name]
		switch {
		case u.name == "":
			touchesUnnamed = true
			if !u.parsed && len(unnamed) > 0 && !bytes.Equal(s.Unnamed, unnamed) {
				msgs = wire.FinishMessage(append(append(msgs, 'P', 0, 0, 0, 0), unnamed...), len(msgs))
			}
		case u.parsed && has:
			msgs = wire.FinishMessage(append(append(append(msgs, 'C', 0, 0, 0, 0, 'S'), u.name...), 0), len(msgs))
			closed = append(closed, u.name)
		case !u.parsed && !has:
			if _, had := prepared[u.name]; !had {
				continue // the batch fails on s as it would have on the dead server
			}
			st := c.l.stmts.byName(u.name)
			if st == nil {
				return fmt.Errorf("server %s: statement %s to prepare again is unknown", s.Addr, u.name)
			}
			msgs = append(msgs, st.parse...)
			parsed = append(parsed, st.name)
		}
	}
	if len(msgs) > 0 {
		if err := exchange(s, msgs); err != nil {
			s.Broken = true
			return err
		}
	}
	for _, name := range closed {
		delete(s.Prepared, name)
	}
	for _, name := range parsed {
		s.Prepared[name] = struct{}{}
	}
	if touchesUnnamed {
		// What the batch leaves in the unnamed slot, as recorded for the
		// dead server when the batch was built.
		s.Unnamed = append(s.Unnamed[:0], unnamed...)
	}
	return nil
}

// exchange sends msgs and a Sync to the idle server s and reads the
// answers up to ReadyForQuery; any ErrorResponse fails it.
func exchange(s *pool.Server, msgs []byte) error {
	s.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer s.Conn.SetDeadline(time.Time{})
	s.W.Write(msgs)
	s.W.Write([]byte{'S', 0, 0, 0, 4})
	if err := s.Flush(); err != nil {
		return err
	}
	var failed error
	for {
		typ, _, body, err := s.R.Next()
		if err != nil {
			return fmt.Errorf("server %s: read: %w", s.Addr, err)
		}
		switch typ {
		case 'E':
			e := wire.ParseError(body)
			s.NoteError(e)
			failed = errors.Join(failed, e)
		case 'S':
			s.NoteParameter(body)
		case 'Z':
			if failed != nil {
				return fmt.Errorf("server %s: preparing the statements of a batch to run again: %w", s.Addr, failed)
			}
			return nil
		}
	}
}

// Retrying a single-shard statement on another server of its shard.
//
// A sharded database's pools lend servers as the one-shard pool does, so a
// shard's server may have died idle in its pool too. A statement routed to
// one shard, whose server there carried nothing of the client's when the
// statement started (nothing written to or read from it since its
// checkout: pool.Server.Untouched, c.freshShard), runs again on another
// server of the shard when that one turns out dead before answering
// anything of it:
//   - a write that failed before a byte left (pool.NothingSent);
//   - a FATAL as the server's first answer to the client's statement,
//     within deadServerWindow of sending it, as for one shard;
//   - an I/O failure of the proxy's own statements before the client's
//     (the settings sync, the shard's BEGIN and the transaction's replay,
//     SQL-level PREPAREs: lostOwnStatement).
// Nothing of the client's ran on the dead server and the transaction's
// other shards are untouched, so a transaction qualifies too: the shard
// joins it afresh on the new server (executor.Session.Discard). Statements
// fanned out to several shards are not retried: another shard may have
// answered part of them already.

// onShard runs step, a single-shard step of the client's statement on
// shard i's server, which the client holds, again on another server of
// the shard while retryShard says so. It returns step's last error, or
// cerr: the failure to check out another server, which nothing answered
// yet.
func (c *client) onShard(i int, step func() error) (err, cerr error) {
	defer func() { c.freshShard = false }()
	for try := 0; ; try++ {
		c.freshShard = c.xs.Server(i).Untouched()
		err = step()
		again, cerr := c.retryShard(err, i, try)
		if cerr != nil || !again {
			return err, cerr
		}
	}
}

// onShardOrFail is onShard for a step whose caller answers both kinds of
// error alike.
func (c *client) onShardOrFail(i int, step func() error) error {
	err, cerr := c.onShard(i, step)
	if cerr != nil {
		return cerr
	}
	return err
}

// retryShard prepares the try+1-th run of a single-shard statement on
// shard i after err, the failure of its try-th, when err says the shard's
// server died before answering anything of the client's (a *shardLost
// with retry) and that server was fresh at the statement's start. It
// reports whether to run the statement again; cerr is a failure to check
// out another server, which answers the statement instead.
func (c *client) retryShard(err error, i, try int) (again bool, cerr error) {
	if err == nil || !c.freshShard || try+1 >= retryTries {
		// Before errors.As, whose target escapes: a statement that ran
		// (every routed one, as a rule) allocates nothing here.
		return false, nil
	}
	var lost *shardLost
	if !errors.As(err, &lost) || !lost.retry || lost.server != c.xs.Server(i) {
		return false, nil
	}
	c.log.Info("server died before answering; running the statement on another server of the shard", "shard", i, "server", lost.server.Addr, "err", lost.err)
	// The Parse the proxy added on the dead server (ensureParsed) is not
	// pending on the new one.
	c.pendingPrepare = ""
	c.server = nil
	if err := c.replaceShardServer(context.Background(), i); err != nil {
		return false, err
	}
	return true, nil
}

// replaceShardServer gives shard i another server in place of the dead one
// the client holds there, which carried nothing of the client's: the dead
// one's pool closes its other dead idle servers, and the shard joins the
// transaction afresh (executor.Session.Discard). What the statement may
// leave on the session (ranOn) stays: it will have run on the new server.
func (c *client) replaceShardServer(ctx context.Context, i int) error {
	dead := c.xs.Server(i)
	if p := dead.Pool(); p != nil {
		p.CloseDeadIdle()
	}
	c.ext[i] = shardExt{eff: c.ext[i].eff}
	c.xs.Discard(i)
	c.lb.read = dead.OfReplica() // a read that went to a replica goes to one again
	err := c.attachHeld(ctx, i)
	c.lb.read = false
	return err
}

// liveShard replaces shard i's server, which the client holds for a
// statement fanned out to several shards, when it carries nothing of the
// client's yet and its socket says it died (pool.Server.Alive: one
// non-blocking MSG_PEEK recv, which sees a backend's FATAL and end of
// stream waiting). retryShard cannot serve such a statement: another shard
// may have answered part of it by the time one fails. The probe costs a
// system call per shard of a fan-out, small beside the fan-out; a routed
// statement, the hot path, is not probed.
func (c *client) liveShard(ctx context.Context, i int) error {
	for try := 0; try < retryTries; try++ {
		s := c.xs.Server(i)
		if s == nil || !s.Untouched() || s.Alive() {
			return nil
		}
		c.log.Info("server found dead before a statement fanned out to several shards; taking another server of the shard", "shard", i, "server", s.Addr)
		if err := c.replaceShardServer(ctx, i); err != nil {
			return err
		}
	}
	return nil
}
