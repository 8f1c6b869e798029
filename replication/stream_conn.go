package replication

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Read coalescing of the WAL stream. A walsender writes every message to
// its socket as soon as it is decoded, and a reader that keeps up receives
// them one read (and one wake-up) at a time: under a write load that was
// half of the reader's CPU. After a read that brought less than
// coalesceBytes, the reader waits coalesceWait before it reads again, so
// that the messages sent meanwhile arrive in one read. The wait adds at
// most coalesceWait to the apply's latency (more on a machine short of
// CPU, where the wait oversleeps), and nothing when the reader is behind:
// its reads then come back full.
//
// The messages are read through a buffer of streamReadBuffer bytes, so that
// a reader that is behind takes that much per read rather than the 8 KiB of
// pgproto3's own buffer.
const (
	coalesceBytes    = 4096
	coalesceWait     = 500 * time.Microsecond
	streamReadBuffer = 256 << 10
)

// coalescingConn is a connection whose reads wait a moment after a short
// read, one that neither brought coalesceBytes nor filled its buffer (see
// coalesceWait).
type coalescingConn struct {
	net.Conn
	short bool // the last read brought less than coalesceBytes
}

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.short && len(p) >= coalesceBytes {
		time.Sleep(coalesceWait)
	}
	n, err := c.Conn.Read(p)
	// A read that filled p found more waiting, whatever its size.
	c.short = n < coalesceBytes && n < len(p)
	return n, err
}

// connectReplication opens a replication connection to source shard s
// whose reads are coalesced.
func (t *Task) connectReplication(ctx context.Context, s int) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(t.dsn(t.src, s, true))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err)
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &coalescingConn{Conn: conn}, nil
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, streamReadBuffer), w)
	}
	return pgconn.ConnectConfig(ctx, cfg)
}
