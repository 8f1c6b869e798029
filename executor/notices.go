package executor

import (
	"sync"

	"github.com/shardgate/shardgate/wire"
)

// Notices of a statement that runs on several shards.
//
// PostgreSQL raises some notices once per statement: the scanner's
// (`nonstandard use of \\ in a string literal`), DDL's (`table "t" does not
// exist, skipping`), the parser's. Each shard raises them too, so that a
// statement on two shards would show the client each twice. Others are
// raised once per row or call (a PL/pgSQL RAISE): a client of one
// PostgreSQL sees as many as all shards together send.
//
// What tells them apart is the CONTEXT field: a notice raised inside a
// function, a trigger or a COPY row has one; one raised by the statement
// itself has none. So a notice without CONTEXT that several shards send
// the same (byte for byte) is sent once — as many times, when one shard
// sends it several times, as the shard that sends it most — and every
// other notice goes on as it came.

// Notices filters the notices of one statement's shards. Its zero value
// is not usable: make it with NewNotices. It is safe for concurrent use.
type Notices struct {
	mu   sync.Mutex
	sent map[string]int // a context-free notice's body → copies sent
}

// NewNotices returns a filter for one statement.
func NewNotices() *Notices { return &Notices{} }

// pass reports whether a reader that has now read its count-th copy of
// the context-free notice body should send it.
func (n *Notices) pass(body []byte, count int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sent == nil {
		n.sent = make(map[string]int)
	}
	key := string(body)
	if count <= n.sent[key] {
		return false
	}
	n.sent[key] = count
	return true
}

// noticeCounter is one reader's part: the copies of each context-free
// notice it has read.
type noticeCounter struct {
	share *Notices
	seen  map[string]int
}

// send reports whether the notice or notification body (of type typ)
// goes to the client.
func (c *noticeCounter) send(typ byte, body []byte) bool {
	if c.share == nil || typ != 'N' || hasContext(body) {
		return true
	}
	if c.seen == nil {
		c.seen = make(map[string]int)
	}
	c.seen[string(body)]++
	return c.share.pass(body, c.seen[string(body)])
}

// hasContext reports whether a NoticeResponse body has a CONTEXT ('W')
// field.
func hasContext(body []byte) bool {
	for len(body) > 0 && body[0] != 0 {
		if body[0] == 'W' {
			return true
		}
		_, rest, ok := wire.CString(body[1:])
		if !ok {
			return false
		}
		body = rest
	}
	return false
}
