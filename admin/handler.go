package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// Handler serves the admin database of a Proxy.
type Handler struct {
	p       Proxy
	reload  func() error
	log     *slog.Logger
	started time.Time

	// Shutdown, when set, starts a graceful shutdown of the proxy; SHUTDOWN
	// calls it after answering. It must not block.
	Shutdown func()

	// Tasks runs the resharding commands (reshard.go); when nil, a manager
	// cutting over through this handler's Proxy is made on first use.
	Tasks     *replication.Manager
	tasksOnce sync.Once

	// Cluster, when set, answers SHOW CLUSTER and SHOW TOPOLOGY, adds the
	// other proxies' tasks to SHOW TASKS and forwards CUTOVER and
	// STOP_TASK of their tasks.
	Cluster Cluster
	// ProxyName is this proxy's name in SHOW TASKS (its cluster name).
	ProxyName string
}

// New returns the admin handler for p. reload re-reads the configuration
// (SIGHUP and RELOAD share it, so both log and count the same way).
func New(p Proxy, reload func() error, log *slog.Logger) *Handler {
	return &Handler{p: p, reload: reload, log: log, started: time.Now()}
}

// conn is one admin session: its prepared statements and portals.
type conn struct {
	h        *Handler
	ac       Conn
	stmts    map[string]*call
	portals  map[string]*portal
	skipping bool   // an extended-protocol message failed: ignore until Sync
	buf      []byte // answers not yet flushed
	after    func() // runs once the answer that asked for it was flushed
}

// portal is a bound statement with its result formats.
type portal struct {
	call    *call
	formats []int16
}

// Serve runs one admin session until the client leaves, is killed, or the
// proxy shuts down.
func (h *Handler) Serve(ctx context.Context, ac Conn) error {
	c := &conn{h: h, ac: ac, stmts: map[string]*call{}, portals: map[string]*portal{}}
	log := h.log.With("admin_client", ac.ID())
	for {
		typ, body, err := ac.Next()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ac.Closing() {
				c.fatal(wire.Fatalf(wire.AdminShutdown, "terminating connection due to administrator command"))
				return nil
			}
			if e, ok := wire.AsError(err); ok {
				c.fatal(e)
			}
			return err
		}
		switch typ {
		case 'Q':
			err = c.simple(ctx, body, log)
		case 'P', 'B', 'D', 'E', 'C':
			if !c.skipping {
				if err := c.extended(ctx, typ, body, log); err != nil {
					c.fail(err)
					c.skipping = true
				}
			}
		case 'S':
			c.skipping = false
			c.buf = wire.AppendReadyForQuery(c.buf, 'I')
			err = c.flush()
		case 'H':
			err = c.flush()
		case 'X':
			return nil
		case 'F':
			c.fail(wire.Errorf(wire.FeatureNotSupported, "the admin database has no functions"))
			c.buf = wire.AppendReadyForQuery(c.buf, 'I')
			err = c.flush()
		case 'd', 'c', 'f':
			// CopyData/Done/Fail outside COPY: ignored, as PostgreSQL does.
		default:
			c.fatal(wire.Fatalf(wire.ProtocolViolation, "invalid frontend message type %d", typ))
			return nil
		}
		if err != nil {
			return err
		}
		if c.after != nil && len(c.buf) == 0 {
			// The client has the answer that asked for it.
			after := c.after
			c.after = nil
			after()
		}
	}
}
