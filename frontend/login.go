package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	c.startup = pool.NewStartup(serverStartup(s.params))
	c.infoMu.Lock()
	c.appName = s.params["application_name"]
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
