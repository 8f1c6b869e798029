package admin

import (
	"context"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
)

// Proxy is what the admin database reads and changes of the running proxy:
// its configuration and pools, its clients, and the gate that PAUSE,
// MAINTENANCE and a resharding cutover close. internal/proxy adapts the
// frontend.Listener to it; admin does not import frontend, which sits in
// the same layer.
type Proxy interface {
	// Config is the running configuration.
	Config() *config.Config
	// Pools is the pool registry of the running configuration.
	Pools() *pool.Registry
	// Clients lists the connected clients, admin clients included.
	Clients() []Client
	// DatabaseStatus is the gate state of database db.
	DatabaseStatus(db string) DatabaseStatus
	// Pause closes the gate of database db ("" for every database) and
	// waits until no client of it holds a server; clients then wait before
	// their next transaction until Resume. The error of an unknown
	// database is a *wire.Error (3D000).
	Pause(ctx context.Context, db string) error
	// Resume opens the gate that Pause closed.
	Resume(db string) error
	// SetMaintenance turns maintenance mode of db ("" for all) on or off:
	// clients wait before their next transaction, and turning it on does
	// not wait for open ones.
	SetMaintenance(db string, on bool) error
	// Reconfigure installs cfg as the running configuration, as a reload
	// does.
	Reconfigure(cfg *config.Config) error
	// Kill closes client id at once (57P01), rolling back its transaction;
	// it reports whether the client was connected.
	Kill(id uint64) bool
	// InDoubt lists the prepared multi-shard transactions that the last
	// pass of the two-phase resolver left (undecided, or not finishable).
	InDoubt() []InDoubt
}

// InDoubt is a prepared transaction of a multi-shard commit, as SHOW
// TRANSACTIONS lists it.
type InDoubt struct {
	Database    string
	Shard       int
	GID         string
	TxID        string
	Coordinator int // the shard whose COMMIT PREPARED decides it
	Age         time.Duration
	State       string // what is known of its outcome, or why it was left
}

// Client is one client connection as SHOW CLIENTS lists it.
type Client struct {
	ID          uint64
	Addr        string
	User        string
	Database    string
	AppName     string
	State       string // login, idle, waiting (for a server), active (holding one) or closed
	TLS         bool
	ConnectedAt time.Time
	Queries     uint64
	Session     bool // session pooling: the client keeps its server
}

// The client states that SHOW LISTS counts.
const (
	clientWaiting = "waiting"
	clientActive  = "active"
)

// DatabaseStatus is the gate state of one database.
type DatabaseStatus struct {
	Paused      bool // by PAUSE of this database or of all
	Maintenance bool // by MAINTENANCE ON of this database or of all
	Waiting     int  // clients waiting at the gate
}

// Conn is one authenticated client of the admin database (the frontend's
// AdminConn).
type Conn interface {
	// ID is the client's id, as SHOW CLIENTS lists it.
	ID() uint64
	// Next reads the next message from the client. When Closing turns
	// true while it waits, it returns a timeout error.
	Next() (typ byte, body []byte, err error)
	// Write buffers b for the client; Flush sends what is buffered.
	Write(b []byte)
	Flush() error
	// Closing reports whether the client must go: it was killed or the
	// proxy is shutting down.
	Closing() bool
}
