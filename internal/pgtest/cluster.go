package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Timeouts for starting and stopping a server. Starting is slow when many
// clusters start at once on a small CI machine.
const (
	startTimeout     = 60 * time.Second
	fastStopTimeout  = 20 * time.Second
	immediateTimeout = 5 * time.Second
	killTimeout      = 10 * time.Second
	portAttempts     = 5
)

// Options configure a cluster.
type Options struct {
	// Settings are extra postgresql.conf lines, e.g. {"wal_level": "logical",
	// "max_prepared_transactions": "10"}. They override pgtest's defaults.
	Settings map[string]string
	// Auth is the pg_hba method for host connections, replication included:
	// "trust" (default), "scram-sha-256", "md5" or "password".
	Auth string
	// Password is the superuser's password, required when Auth is not
	// trust. The superuser is always "postgres".
	Password string
	// SSL turns ssl on, with a self-signed certificate for 127.0.0.1
	// (host connections may use TLS or not, as clients ask).
	SSL bool
	// Logf, if set, receives a line when a server starts or stops.
	Logf func(format string, args ...any)
}

var authMethods = []string{"trust", "scram-sha-256", "md5", "password"}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func (o *Options) validate() error {
	if o.Auth == "" {
		o.Auth = "trust"
	}
	if !slices.Contains(authMethods, o.Auth) {
		return fmt.Errorf("pgtest: auth method %q is not one of %v", o.Auth, authMethods)
	}
	if o.Auth != "trust" && o.Password == "" {
		return fmt.Errorf("pgtest: auth method %q needs a password", o.Auth)
	}
	for k, v := range o.Settings {
		if !settingName.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("pgtest: bad setting %q = %q", k, v)
		}
	}
	return nil
}

// Cluster is a running (or stopped) PostgreSQL server with its own data
// directory. Its methods are safe for concurrent use.
type Cluster struct {
	Host     string // "127.0.0.1"
	Port     int    // fixed for the cluster's life, Restart included
	User     string // "postgres", a superuser
	Password string // the superuser's, if Options had one
	DataDir  string

	env     *env
	opts    Options
	dir     string // holds DataDir and logPath; removed by Stop
	sockDir string // the Unix socket's directory, usually dir
	logPath string

	mu    sync.Mutex // guards the following; held for whole state changes
	state state
	proc  *postmaster // nil unless state is stateRunning
}

// state is where a Cluster is in its life.
type state int

const (
	// stateNew: the data directory exists but the server never started.
	stateNew state = iota
	// stateRunning: pgtest started the postmaster and has not stopped it.
	// The postmaster may still have died on its own.
	stateRunning
	// stateStopped: the postmaster was stopped or killed; the data
	// directory is kept for Restart.
	stateStopped
	// stateRemoved: stopped and the directories removed. Final.
	stateRemoved
)

func (s state) String() string {
	switch s {
	case stateNew:
		return "new"
	case stateRunning:
		return "running"
	case stateStopped:
		return "stopped"
	case stateRemoved:
		return "removed"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Start creates a cluster from the template data directory, starts it on a
// free port and returns once it accepts connections over TCP.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.env.copyTree(c.env.template, c.DataDir); err != nil {
		return nil, c.abandon(fmt.Errorf("pgtest: copy template: %w", err))
	}
	if err := c.configure(); err != nil {
		return nil, c.abandon(err)
	}
	if err := c.startNew(ctx, c.setPassword); err != nil {
		return nil, c.abandon(err)
	}
	return c, nil
}

// newCluster makes the directories of a cluster, but not its data directory.
func newCluster(opts Options) (*Cluster, error) {
	e, err := getEnv()
	if err != nil {
		return nil, err
	}
	dir, sockDir, err := e.newClusterDir()
	if err != nil {
		return nil, err
	}
	return &Cluster{
		Host:     "127.0.0.1",
		User:     "postgres",
		Password: opts.Password,
		DataDir:  filepath.Join(dir, "data"),
		env:      e,
		opts:     opts,
		dir:      dir,
		sockDir:  sockDir,
		// The log sits beside the data directory so that pg_basebackup
		// does not copy it into replicas.
		logPath: filepath.Join(dir, "postgres.log"),
	}, nil
}

// configure writes the per-cluster configuration into a copy of the template:
// pg_hba.conf for opts.Auth and opts.Settings in postgresql.auto.conf, which
// PostgreSQL reads after postgresql.conf.
func (c *Cluster) configure() error {
	hba := "# Written by pgtest.\n" +
		"local all all trust\n" +
		"local replication all trust\n"
	for _, db := range []string{"all", "replication"} {
		for _, addr := range []string{"127.0.0.1/32", "::1/128"} {
			hba += fmt.Sprintf("host %s all %s %s\n", db, addr, c.opts.Auth)
		}
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return fmt.Errorf("pgtest: configure: %w", err)
	}
	settings := map[string]string{}
	if c.opts.Auth == "md5" {
		// Store passwords as MD5 so that md5 auth is really MD5 rather
		// than SCRAM, which PostgreSQL uses for SCRAM-hashed passwords.
		settings["password_encryption"] = "md5"
	}
	if c.opts.SSL {
		if err := c.writeSSLFiles(); err != nil {
			return err
		}
		settings["ssl"] = "on"
	}
	maps.Copy(settings, c.opts.Settings)
	if len(settings) == 0 {
		return nil
	}
	conf := "# Added by pgtest.\n"
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		conf += fmt.Sprintf("%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	if err := appendFile(filepath.Join(c.DataDir, "postgresql.auto.conf"), conf); err != nil {
		return fmt.Errorf("pgtest: configure: %w", err)
	}
	return nil
}

// startNew starts a new cluster's server on a free port, trying other ports
// when the chosen one was taken in the meantime, and then runs setup.
func (c *Cluster) startNew(ctx context.Context, setup func(context.Context) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for range portAttempts {
		if c.Port, err = reservePort(); err != nil {
			return err
		}
		err = c.launch(ctx, setup)
		if !errors.Is(err, errPortInUse) {
			break
		}
		c.logf("pgtest: port %d was taken, trying another", c.Port)
		releasePort(c.Port)
		c.Port = 0
	}
	return err
}

// abandon removes what a failed Start or StartReplica left and returns err.
func (c *Cluster) abandon(err error) error {
	return errors.Join(err, c.Stop())
}

// DSN returns a URL connecting to database as the superuser over TCP.
func (c *Cluster) DSN(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(c.User),
		Host:     net.JoinHostPort(c.Host, strconv.Itoa(c.Port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	if c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	}
	return u.String()
}

// Stop shuts the server down (fast, then immediate after a timeout, then
// SIGKILL) and removes its directories. Calling it again does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateRemoved {
		return nil
	}
	err := c.shutdown()
	if c.state != stateNew {
		c.logf("pgtest: stopped PostgreSQL on port %d", c.Port)
	}
	if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("pgtest: remove cluster: %w", rmErr))
	}
	if c.sockDir != c.dir {
		err = errors.Join(err, os.RemoveAll(c.sockDir))
	}
	if c.Port != 0 {
		releasePort(c.Port)
	}
	c.state = stateRemoved
	return err
}

// StopKeep shuts the server down like Stop but keeps the data directory for
// Restart.
func (c *Cluster) StopKeep() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateRemoved {
		return fmt.Errorf("pgtest: stop cluster on port %d: already removed", c.Port)
	}
	err := c.shutdown()
	c.state = stateStopped
	c.logf("pgtest: stopped PostgreSQL on port %d, keeping %s", c.Port, c.DataDir)
	return err
}

// Kill simulates a crash for fault tests: it SIGKILLs the postmaster and all
// its server processes, so every connection drops at once. The data
// directory stays; Restart recovers from it.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateRunning {
		return fmt.Errorf("pgtest: kill cluster on port %d: %v", c.Port, c.state)
	}
	err := c.kill()
	c.state = stateStopped
	c.logf("pgtest: killed PostgreSQL on port %d", c.Port)
	return err
}

// Restart starts a stopped or killed cluster again, on the same port and data
// directory, and returns once it accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateStopped:
	case stateRunning:
		if !c.proc.hasExited() {
			return fmt.Errorf("pgtest: restart cluster on port %d: still running", c.Port)
		}
		c.proc = nil // it crashed on its own
	default:
		return fmt.Errorf("pgtest: restart cluster on port %d: %v", c.Port, c.state)
	}
	return c.launch(ctx, nil)
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}
