package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Login: startup negotiation is in startup.go, authentication in auth.go;
// this file runs them in order and answers a login that fails.

// loginFailed tells the client why its login failed, as PostgreSQL would
// (a FATAL, or the old-protocol error for a pre-3.0 client), unless the
// client went away, and returns err.
func (c *client) loginFailed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return err
	}
	var old *oldProtocolError
	if errors.As(err, &old) {
		c.conn.SetWriteDeadline(time.Now().Add(time.Second))
		c.w.Write(old.message())
		c.w.Flush()
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.log.Info("client login timed out")
		c.sendFatal(wire.Fatalf(wire.ProtocolViolation, "client_login_timeout: startup and authentication took too long"))
		return err
	}
	if e, ok := wire.AsError(err); ok {
		if e.Code == wire.InvalidPassword || e.Code == wire.InvalidAuthorizationSpecification {
			c.log.Info("client authentication failed", "err", e.Message)
		}
		e.Severity = "FATAL"
		c.sendFatal(e)
		return err
	}
	c.log.Warn("client login failed", "err", err)
	c.sendFatal(wire.Fatalf(wire.ConnectionFailure, "%v", err))
	return err
}

// login authenticates the client, attaches it to its pool and sends the
// startup parameters.
func (c *client) login(ctx context.Context, st *State, s *startup) error {
	cfg := st.Config
	if s.database == cfg.Admin.Database && c.l.Admin != nil {
		return c.adminLogin(ctx, s)
	}
	u := cfg.User(s.user)
	method := cfg.AuthType
	password := ""
	if u != nil {
		method = u.AuthType
		password = u.Password
	}
	if method == "" {
		method = config.AuthSCRAM
	}
	if err := c.authenticate(s.user, method, password, u != nil); err != nil {
		return err
	}
	db := cfg.Database(s.database)
	if db == nil {
		return wire.Fatalf(wire.InvalidCatalogName, "database \"%s\" does not exist", s.database)
	}
	if !u.Allows(db.Name) {
		return &wire.Error{Severity: "FATAL", Code: wire.InsufficientPrivilege,
			Message: fmt.Sprintf("permission denied for database %q", db.Name),
			Detail:  fmt.Sprintf("user %q is not allowed to connect to database %q", u.Name, db.Name)}
	}
	c.user, c.db, c.mode = u, db, db.Pool.Mode
	c.pool = st.Pools.Get(db, u, 0)
	if len(db.Shards) > 1 {
		if err := c.initShards(st); err != nil {
			return err
		}
	}
	c.startup = c.l.startups.intern(pool.NewStartup(serverStartup(s.params)))
	c.infoMu.Lock()
	c.appName = c.startup.Params()["application_name"] // the shared set's string
	c.infoMu.Unlock()

	// Servers are opened with the client's startup parameters, so that
	// PostgreSQL knows them as the session's reset values. The first
	// client of a pool with a given parameter set attaches once: that
	// proves the server accepts them (a bad value fails this login with
	// the server's own error) and yields the ParameterStatus values to
	// report. Other clients log in without waiting for a server, so that
	// a busy pool does not block logins.
	if params := c.pool.CachedParamsFor(c.startup); params != nil {
		for k, v := range params {
			c.w.Write(wire.AppendParameterStatus(nil, k, v))
		}
		c.nonStandardLogin = params["standard_conforming_strings"] == "off"
		return nil
	}
	c.loggingIn = true
	defer func() { c.loggingIn = false }()
	err := c.attach(ctx)
	if err == errBecameSharded {
		// Resharded while the login waited at the gate: log in to the
		// new shard set.
		if err = c.becomeSharded(); err == nil {
			err = c.attach(ctx)
		}
	}
	if err != nil {
		e, _ := wire.AsError(err)
		if e == nil {
			return err
		}
		fatal := *e // the server's fields and all
		fatal.Severity = "FATAL"
		return &fatal
	}
	for k, v := range c.server.Params {
		c.w.Write(wire.AppendParameterStatus(nil, k, v))
	}
	c.nonStandardLogin = c.server.Params["standard_conforming_strings"] == "off"
	return nil
}

// startupSet shares the startup parameter sets of the Listener's clients:
// clients that sent the same parameters (most clients of an application
// send the same application_name and settings) hold one pool.Startup, a
// map and its key, instead of one each. That is about 360 bytes a client
// with a single parameter, which every idle client kept for its whole
// life (docs/benchmarks.md, issue 13, fifth step). The set is read-only
// once made, so clients and pools may share it.
//
// Sets are never dropped: at most maxStartupSets are kept, and a client
// whose set is not among them (parameters that differ per client, such as
// an application_name with a host name in it) keeps its own.
type startupSet struct {
	mu   sync.Mutex // guards sets
	sets map[string]pool.Startup
}

// maxStartupSets bounds what startupSet keeps: about 0.5 MB of sets when
// full.
const maxStartupSets = 1024

// intern returns the kept set equal to st, keeping st if there is none
// and room for it.
func (s *startupSet) intern(st pool.Startup) pool.Startup {
	if st.IsZero() {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if kept, ok := s.sets[st.Key()]; ok {
		return kept
	}
	if len(s.sets) < maxStartupSets {
		if s.sets == nil {
			s.sets = map[string]pool.Startup{}
		}
		s.sets[st.Key()] = st
	}
	return st
}
