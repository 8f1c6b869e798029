package frontend

import (
	"encoding/binary"
	"iter"
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Row-limited Execute of a portal that runs on several shards.
//
// Drivers fetch results in chunks (JDBC with a fetch size: Execute with a
// row limit, PortalSuspended, Execute again). A portal on one shard keeps
// its rows on its server (sharded_portal.go); a read merged from several
// shards pauses its merge between Executes (sharded_stream.go). Other
// portals — writes with RETURNING, whose rows PostgreSQL too computes
// before the first is returned, and streams the client interrupted with
// other statements — run to their end at once and the proxy keeps the
// merged DataRows, up to maxChunkedResult bytes, to hand out a chunk per
// Execute. As in
// PostgreSQL, an Execute that returns exactly its row limit answers
// PortalSuspended (the next may return no rows), and the CommandComplete
// that ends the portal counts the rows of its own Execute. A statement
// without rows (an UPDATE or DELETE without RETURNING) runs to completion
// at the first Execute whatever its limit, as PostgreSQL's
// PORTAL_MULTI_QUERY does.

// maxChunkedResult bounds the merged rows the proxy keeps for a portal
// fetched in chunks.
const maxChunkedResult = 64 << 20

// bufferedRows are the rows of a cross-shard portal not yet fetched.
type bufferedRows struct {
	rows [][]byte // DataRow messages, whole
	tag  string   // the command tag of the whole result, "SELECT 1000"
	err  error    // the error after the last row, if the statement failed
}

// errChunkedTooLarge answers a portal whose rows the proxy could not keep.
func errChunkedTooLarge() error {
	return &wire.Error{Severity: "ERROR", Code: wire.ProgramLimitExceeded,
		Message: "a cross-shard result fetched in chunks (Execute with a row limit) is larger than the proxy keeps (64 MiB)",
		Hint:    "Fetch it without a row limit (turn the driver's fetch size off), or narrow the query to one shard."}
}

// rowRecorder is the sink of a cross-shard portal run for chunks: DataRows
// are kept, everything else (RowDescription, NoData, notices) goes to the
// client at once.
type rowRecorder struct {
	c    *client
	b    *bufferedRows
	size int
	over bool
}

func (r *rowRecorder) Write(msgs []byte) (int, error) {
	for m := range messages(msgs) {
		r.record(m)
	}
	return len(msgs), nil
}

// record keeps DataRow m, or sends any other message to the client.
func (r *rowRecorder) record(m []byte) {
	if m[0] != 'D' {
		r.c.toClient(m)
		return
	}
	r.size += len(m)
	if r.size > maxChunkedResult {
		r.over = true
		return
	}
	r.b.rows = append(r.b.rows, append([]byte(nil), m...))
}

// messages yields the whole messages of b, which the merger writes.
func messages(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(b) >= 5 {
			l := 1 + int(binary.BigEndian.Uint32(b[1:5]))
			if l > len(b) || !yield(b[:l]) {
				return
			}
			b = b[l:]
		}
	}
}

// execManyChunked runs portal p on several shards for an Execute with a
// row limit and answers its first chunk.
func (c *client) execManyChunked(p *sPortal, name []byte, maxRows int32, describe bool) error {
	if p.plan.Kind == executor.RouteRead {
		return c.execManyStreamed(p, name, maxRows, describe)
	}
	rec := &rowRecorder{c: c, b: &bufferedRows{}}
	tag, err := c.execMany(p, describe, rec)
	if err != nil {
		return err
	}
	if rec.over {
		return errChunkedTooLarge()
	}
	if len(rec.b.rows) == 0 && !strings.HasPrefix(tag, "SELECT") {
		c.completeMany(p.plan, tag) // no rows: ran to completion
		return nil
	}
	c.applyManyOps(p.plan)
	rec.b.tag = tag
	p.chunks = rec.b
	return c.serveChunk(p, maxRows)
}

// serveChunk answers an Execute of a cross-shard portal from its kept
// rows: up to maxRows rows (0: all), then PortalSuspended when it returned
// exactly maxRows, else CommandComplete counting the rows it returned (or
// the statement's error).
func (c *client) serveChunk(p *sPortal, maxRows int32) error {
	b := p.chunks
	n := len(b.rows)
	if maxRows > 0 && int(maxRows) < n {
		n = int(maxRows)
	}
	for _, row := range b.rows[:n] {
		c.toClient(row)
	}
	b.rows = b.rows[n:]
	if maxRows > 0 && n == int(maxRows) {
		p.suspended = true
		c.toClient(portalSuspended)
		return nil
	}
	p.suspended, p.chunks = false, nil
	if b.err != nil {
		return b.err
	}
	c.w.Write(wire.AppendCommandComplete(nil, withCount(b.tag, n)))
	return nil
}

// withCount is tag with its row count replaced by n: "SELECT 1000" with 7
// is "SELECT 7", "INSERT 0 3" with 1 is "INSERT 0 1".
func withCount(tag string, n int) string {
	i := strings.LastIndexByte(tag, ' ')
	if i < 0 {
		return tag
	}
	return tag[:i+1] + strconv.Itoa(n)
}

// ColumnOrders implements executor.OrderSource, as clientSink does.
func (r *rowRecorder) ColumnOrders(p *executor.Plan, cols []executor.Column, need []int) ([]executor.ColumnOrder, error) {
	return r.c.columnOrders(p, cols, need)
}
