package frontend

import (
	"fmt"
	"strings"
)

// The states of a client connection, each one typed value with a String
// method (as net/http's ConnState): ClientState (client.go) is where the
// client is in its life; binding is what it holds; pipe is where its
// extended-protocol pipeline is.

// ClientState is where a client connection is in its life.
type ClientState int32

const (
	// ClientLogin is negotiating startup and authentication.
	ClientLogin ClientState = iota
	// ClientIdle is logged in and holds no server connection.
	ClientIdle
	// ClientWaiting is waiting for a server connection from the pool.
	ClientWaiting
	// ClientActive holds a server connection.
	ClientActive
	// ClientClosed is gone.
	ClientClosed
)

func (s ClientState) String() string {
	switch s {
	case ClientLogin:
		return "login"
	case ClientIdle:
		return "idle"
	case ClientWaiting:
		return "waiting"
	case ClientActive:
		return "active"
	case ClientClosed:
		return "closed"
	}
	return fmt.Sprintf("ClientState(%d)", int32(s))
}

// binding is what a logged-in client is bound to.
type binding uint8

const (
	// boundNone: the client holds no server (between transactions in
	// transaction mode, or before its first statement).
	boundNone binding = iota
	// boundServer: the client holds one server of a database that is not
	// sharded (c.server), for a transaction, a session or a pin.
	boundServer
	// boundShards: the client of a sharded database holds servers of one
	// or more of its shards (c.xs).
	boundShards
	// boundAdmin: the client talks to the admin database, answered by
	// the proxy itself.
	boundAdmin
)

func (b binding) String() string {
	switch b {
	case boundNone:
		return "none"
	case boundServer:
		return "server"
	case boundShards:
		return "shards"
	case boundAdmin:
		return "admin"
	}
	return fmt.Sprintf("binding(%d)", uint8(b))
}

// bound says what the client is bound to.
func (c *client) bound() binding {
	switch {
	case c.admin:
		return boundAdmin
	case c.holdsShards():
		return boundShards
	case c.server != nil:
		return boundServer
	}
	return boundNone
}

// pipe is the client's extended-protocol pipeline as the proxy relays it
// to one server: a set of conditions, each set and cleared at the points
// named below. The zero value is a pipeline at rest: the server's last
// batch ended with Sync (or was a simple Query) and it was answered.
type pipe uint8

const (
	// pipeUnsynced: the messages written to the server last did not end
	// with Sync or a Query (the client sent Flush, or the proxy ran a
	// row-limited Execute): the server is inside the client's batch.
	// Set or cleared whenever a batch is written (roundTrip), cleared
	// when the proxy syncs the server itself (syncServer, detach).
	pipeUnsynced pipe = 1 << iota
	// pipeSkipping: the server failed a message of the batch and
	// discards what follows up to Sync; the proxy answers the client's
	// messages the server skips as PostgreSQL would. Set by the relay at
	// the ErrorResponse, cleared at the ReadyForQuery that answers the
	// Sync.
	pipeSkipping
	// pipeDropping: the proxy failed one of the client's messages itself
	// (a Bind of an unknown statement, a malformed message): it drops the
	// client's messages up to Sync and answers that Sync. Set where the
	// proxy fails, cleared at the Sync.
	pipeDropping
	// pipeErrored: an ErrorResponse reached the client since the last
	// ReadyForQuery, so a COMMIT that ends the transaction answers
	// ROLLBACK. Set by the relay, cleared at ReadyForQuery.
	pipeErrored
)

var pipeNames = [...]string{"unsynced", "skipping", "dropping", "errored"}

func (p pipe) String() string {
	if p == 0 {
		return "rest"
	}
	var parts []string
	for i, name := range pipeNames {
		if p&(1<<i) != 0 {
			parts = append(parts, name)
			p &^= 1 << i
		}
	}
	if p != 0 {
		parts = append(parts, fmt.Sprintf("pipe(%#x)", uint8(p)))
	}
	return strings.Join(parts, "|")
}

// has reports whether every condition of f holds.
func (p pipe) has(f pipe) bool { return p&f == f }

// set sets (on) or clears the conditions f.
func (p *pipe) set(f pipe, on bool) {
	if on {
		*p |= f
	} else {
		*p &^= f
	}
}

func (k reqKind) String() string {
	switch k {
	case reqParse:
		return "parse"
	case reqBind:
		return "bind"
	case reqDescribe:
		return "describe"
	case reqExecute:
		return "execute"
	case reqClose:
		return "close"
	case reqSync:
		return "sync"
	case reqQuery:
		return "query"
	case reqInternal:
		return "internal"
	}
	return fmt.Sprintf("reqKind(%d)", uint8(k))
}

func (k opKind) String() string {
	switch k {
	case opSet:
		return "set"
	case opReset:
		return "reset"
	case opResetAll:
		return "reset-all"
	case opDiscardAll:
		return "discard-all"
	case opDeallocAll:
		return "deallocate-all"
	case opHint:
		return "hint"
	case opDeallocate:
		return "deallocate"
	case opLocal:
		return "local"
	}
	return fmt.Sprintf("opKind(%d)", uint8(k))
}
