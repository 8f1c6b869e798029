package config

import "time"

// Config is one immutable snapshot of the proxy's configuration. The loader
// fills every default, so consumers never look at zero values to mean
// "unset": Pool in each Database is the effective pool (global defaults with
// the database's overrides applied), and every Shard has its credentials
// resolved at connection time from the User (see ServerCredentials).
type Config struct {
	// Path is the file this snapshot was loaded from ("" when built in code).
	Path string `yaml:"-"`

	Listen          string        `yaml:"listen"`           // client listener, default 127.0.0.1:6432
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"` // default 30s
	Admin           Admin         `yaml:"admin"`
	Metrics         Metrics       `yaml:"metrics"`
	Pool            Pool          `yaml:"pool"` // defaults for every pool
	// LoadBalancing is the default read load balancing of databases with
	// replicas; each database may override it.
	LoadBalancing LoadBalancing `yaml:"load_balancing"`
	Limits        Limits        `yaml:"limits"`
	TLS           *TLS          `yaml:"tls"` // nil: no TLS towards clients, sslmode prefer towards servers
	// AuthType is the default client authentication method for users:
	// scram (default) | md5 | plain | trust.
	AuthType AuthType `yaml:"auth_type"`
	// TwoPhaseCommitLog is no longer used: multi-shard commit decisions
	// live on the shards (see executor/twopc.go). The key is accepted, and
	// ignored with a warning, so that existing files keep loading.
	TwoPhaseCommitLog string `yaml:"two_phase_commit_log"`
	// NodeID (0–1023) goes into every shardgate.unique_id() this proxy
	// generates, so that several proxies never hand out the same id.
	NodeID int `yaml:"node_id"`
	// Cluster ties this proxy to the other proxies in front of the same
	// databases (docs/cluster.md); nil: this proxy alone.
	Cluster   *Cluster   `yaml:"cluster"`
	Users     []User     `yaml:"users"`
	Databases []Database `yaml:"databases"`
}

// Cluster is this proxy's place among the proxies in front of the same
// databases: they share each database's topology (which shards a cutover
// moved it to, with a generation number) through a PostgreSQL control
// database, and a cutover pauses and switches all of them.
type Cluster struct {
	// Name identifies this proxy in the cluster; unique among the
	// proxies. Default: the host name and the listen port.
	Name string `yaml:"name"`
	// Control is a PostgreSQL connection string (URL or key=value) of the
	// control database; may hold ${ENV}. "" (default): shard 0 of the
	// first database, with its first user's server credentials.
	Control string `yaml:"control"`
	// AckTimeout is how long a cutover waits for another proxy to answer
	// its pause before it leaves that proxy out (default 2s); the fence on
	// the old shards keeps a proxy left out from writing there.
	AckTimeout time.Duration `yaml:"ack_timeout"`
}

// AuthType is how the proxy authenticates clients.
type AuthType string

const (
	AuthSCRAM AuthType = "scram" // SCRAM-SHA-256 (default)
	AuthMD5   AuthType = "md5"   // md5 password; needs a plaintext password in the config
	AuthPlain AuthType = "plain" // cleartext password over the (ideally TLS) connection
	AuthTrust AuthType = "trust" // no password
)

// PoolMode says how long a client keeps a server connection.
type PoolMode string

const (
	// PoolTransaction gives a client a server connection for one transaction.
	PoolTransaction PoolMode = "transaction"
	// PoolSession gives a client a server connection until it disconnects.
	PoolSession PoolMode = "session"
)

// Admin holds the credentials of the virtual admin database.
type Admin struct {
	Database string `yaml:"database"` // default "admin"
	User     string `yaml:"user"`     // default "admin"
	Password string `yaml:"password"` // required when any admin access is wanted; may be ${ENV}
}

// Metrics configures the optional HTTP listener for /metrics and /healthz.
type Metrics struct {
	Listen string `yaml:"listen"` // "" (default): off
}

// Pool holds pool settings. At the top level they are the defaults; the
// loader resolves each database's overrides into Database.Pool.
type Pool struct {
	Mode            PoolMode      `yaml:"mode"`             // default transaction
	Size            int           `yaml:"size"`             // default 20, per database × user × shard
	MinSize         int           `yaml:"min_size"`         // default 0
	CheckoutTimeout time.Duration `yaml:"checkout_timeout"` // default 5s
	IdleTimeout     time.Duration `yaml:"idle_timeout"`     // default 60s; 0 disables
	ServerLifetime  time.Duration `yaml:"server_lifetime"`  // default 1h; 0 disables
	ConnectTimeout  time.Duration `yaml:"connect_timeout"`  // default 5s
}

// LBStrategy is how reads pick a replica.
type LBStrategy string

const (
	LBRandom           LBStrategy = "random"            // a random healthy replica (default)
	LBRoundRobin       LBStrategy = "round_robin"       // healthy replicas in turn
	LBLeastConnections LBStrategy = "least_connections" // the healthy replica with the fewest checked-out connections
)

// LoadBalancing configures how reads are spread over a shard's replicas
// and how replica health is checked. At the top level it holds the
// defaults; the loader resolves each database's overrides into
// Database.LoadBalancing.
type LoadBalancing struct {
	Strategy LBStrategy `yaml:"strategy"` // default random
	// IncludePrimary adds the primary to the replicas that serve reads.
	IncludePrimary bool `yaml:"include_primary"`
	// BanTime is how long a failing replica gets no reads (at least: it
	// comes back only after passing a health check). Default 60s.
	BanTime             time.Duration `yaml:"ban_time"`
	HealthCheckInterval time.Duration `yaml:"health_check_interval"` // default 10s
	HealthCheckTimeout  time.Duration `yaml:"health_check_timeout"`  // default 2s
}

// Limits bounds what clients may do.
type Limits struct {
	MaxClientConn      int           `yaml:"max_client_conn"`      // default 10000
	ClientLoginTimeout time.Duration `yaml:"client_login_timeout"` // default 60s
	// MaxMessageSize is the largest message a client may send, in bytes.
	// Default 1 GiB (PostgreSQL's own limit); larger ones get 08P01.
	MaxMessageSize int `yaml:"max_message_size"`
	// InDoubtTimeout is how long a multi-shard transaction may stay
	// prepared on its coordinating shard without a decision before any
	// proxy's resolver rolls it back (default 10s). It bounds how long a
	// proxy that died in the middle of COMMIT leaves locks held.
	InDoubtTimeout time.Duration `yaml:"in_doubt_timeout"`
	// ClientParkAfter is how long a transaction-mode client waits idle
	// before its connection is parked: served by an epoll set instead of
	// a goroutine of its own (frontend/park.go); during a login burst the
	// sweep that parks them runs every 100 ms instead. 0 parks at every
	// idle point; negative never parks.
	ClientParkAfter time.Duration `yaml:"client_park_after"`
	// EventLoop serves eligible clients (transaction mode, a database that
	// is not sharded, plain TCP or Unix socket, not admin) on one event
	// loop over raw non-blocking sockets instead of a goroutine each
	// (frontend/hotloop.go). On by default: it costs less CPU and fewer
	// syscalls per transaction than a goroutine each (docs/benchmarks.md).
	EventLoop bool `yaml:"event_loop"`
}

// TLS configures TLS towards clients and the sslmode towards servers.
type TLS struct {
	Cert          string  `yaml:"cert"` // PEM file; with Key, clients may use TLS
	Key           string  `yaml:"key"`
	ServerSSLMode SSLMode `yaml:"server_sslmode"` // default prefer
	// ServerCA is an optional PEM bundle to verify servers with verify-full.
	ServerCA string `yaml:"server_ca"`
}

// SSLMode is the libpq-like sslmode used towards PostgreSQL servers.
type SSLMode string

const (
	SSLDisable    SSLMode = "disable"
	SSLPrefer     SSLMode = "prefer"
	SSLRequire    SSLMode = "require"
	SSLVerifyFull SSLMode = "verify-full"
)

// User is a client identity the proxy accepts.
type User struct {
	Name string `yaml:"name"`
	// Password is plaintext or a SCRAM-SHA-256 verifier
	// ("SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>").
	Password  string   `yaml:"password"`
	Databases []string `yaml:"databases"` // empty: all databases
	// AuthType overrides Config.AuthType for this user ("" = inherit; the
	// loader fills the effective value).
	AuthType AuthType `yaml:"auth_type"`
	// ServerUser and ServerPassword are what the proxy uses towards
	// PostgreSQL; the loader defaults them to Name and Password (a SCRAM
	// verifier cannot be used towards servers: then ServerPassword must be
	// given unless the servers trust the user).
	ServerUser     string `yaml:"server_user"`
	ServerPassword string `yaml:"server_password"`
}

// Database is a logical database that clients name in their URL.
type Database struct {
	Name string `yaml:"name"`
	// Pool is the effective pool for this database after the loader applied
	// the database's `pool:` overrides to the global defaults.
	Pool Pool `yaml:"pool"`
	// LoadBalancing is the effective load balancing of this database: the
	// top-level one with the database's `load_balancing:` overrides.
	LoadBalancing  LoadBalancing   `yaml:"load_balancing"`
	Shards         []Shard         `yaml:"shards"` // shard 0, 1, … in this order
	ShardedTables  []ShardedTable  `yaml:"sharded_tables"`
	ShardedSchemas []ShardedSchema `yaml:"sharded_schemas"`
	OmniTables     []string        `yaml:"omni_tables"`
}

// Shard is one PostgreSQL primary (with optional replicas) holding a slice
// of a logical database.
type Shard struct {
	Host     string    `yaml:"host"`
	Port     int       `yaml:"port"`     // default 5432
	Database string    `yaml:"database"` // default: the logical database's name
	User     string    `yaml:"user"`     // optional: overrides the user's server_user
	Password string    `yaml:"password"` // optional: overrides the user's server_password
	Replicas []Replica `yaml:"replicas"`
}

// Replica is a read-only copy of a shard's primary.
type Replica struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"` // default 5432
}

// ShardedTable says how one table (or every table with Column) is split.
type ShardedTable struct {
	Table        string         `yaml:"table"`    // optional; "" means every table with Column
	Column       string         `yaml:"column"`   // required
	Type         string         `yaml:"type"`     // bigint | integer | smallint | text | varchar | uuid
	Function     string         `yaml:"function"` // hash (default) | list | range
	Mapping      []ShardMapping `yaml:"mapping"`  // list and range only
	DefaultShard *int           `yaml:"default_shard"`
	Line         int            `yaml:"-"` // line in the file, for later error messages
}

// ShardMapping maps list values or a [From, To) range to a shard.
type ShardMapping struct {
	Values []string `yaml:"values"` // list: values as text
	From   *string  `yaml:"from"`   // range: inclusive lower bound as text; nil = unbounded
	To     *string  `yaml:"to"`     // range: exclusive upper bound as text; nil = unbounded
	Shard  int      `yaml:"shard"`
}

// ShardedSchema pins every table of a schema to one shard.
type ShardedSchema struct {
	Schema string `yaml:"schema"`
	Shard  int    `yaml:"shard"`
}

// ServerCredentials returns the user name and password the proxy uses
// towards the servers of shard s for client user u.
func ServerCredentials(u *User, s *Shard) (user, password string) {
	user, password = u.ServerUser, u.ServerPassword
	if s.User != "" {
		user = s.User
	}
	if s.Password != "" {
		password = s.Password
	}
	return user, password
}

// Database returns the logical database with this name, or nil.
func (c *Config) Database(name string) *Database {
	for i := range c.Databases {
		if c.Databases[i].Name == name {
			return &c.Databases[i]
		}
	}
	return nil
}

// User returns the user with this name, or nil.
func (c *Config) User(name string) *User {
	for i := range c.Users {
		if c.Users[i].Name == name {
			return &c.Users[i]
		}
	}
	return nil
}

// FirstUserFor returns the first user allowed on database db, or nil.
func (c *Config) FirstUserFor(db string) *User {
	for i := range c.Users {
		if c.Users[i].Allows(db) {
			return &c.Users[i]
		}
	}
	return nil
}

// Allows reports whether user u may connect to database db.
func (u *User) Allows(db string) bool {
	if len(u.Databases) == 0 {
		return true
	}
	for _, d := range u.Databases {
		if d == db {
			return true
		}
	}
	return false
}
