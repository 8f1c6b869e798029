package frontend

import (
	"context"
	"time"

	"github.com/shardgate/shardgate/wire"
)

// AdminConn is a client connected to the admin database, handed to the
// AdminHandler after authentication.
type AdminConn struct {
	c *client
}

// User is the admin user name.
func (a *AdminConn) User() string { return a.c.st.Config.Admin.User }

// Next reads the next message from the client.
func (a *AdminConn) Next() (typ byte, body []byte, err error) {
	typ, _, body, err = a.c.r.Next()
	return typ, body, err
}

// Write buffers b for the client.
func (a *AdminConn) Write(b []byte) { a.c.w.Write(b) }

// Flush sends buffered messages.
func (a *AdminConn) Flush() error { return a.c.w.Flush() }

// Listener returns the listener the admin connection came through.
func (a *AdminConn) Listener() *Listener { return a.c.l }

// adminLogin authenticates an admin client and hands it to the admin
// handler; it returns once the admin session ends.
func (c *client) adminLogin(ctx context.Context, s *startup) error {
	cfg := c.st.Config
	known := s.user == cfg.Admin.User && cfg.Admin.Password != ""
	if err := c.authenticate(s.user, cfg.AuthType, cfg.Admin.Password, known); err != nil {
		return err
	}
	c.conn.SetDeadline(time.Time{})
	c.l.register(c)
	defer c.l.unregister(c)
	key := []byte{'K', 0, 0, 0, 12}
	key = wire.AppendInt32(key, int32(c.pid))
	key = append(key, c.secret[:]...)
	c.w.Write(wire.AppendParameterStatus(nil, "server_version", "15.0 (shardgate admin)"))
	c.w.Write(wire.AppendParameterStatus(nil, "server_encoding", "UTF8"))
	c.w.Write(wire.AppendParameterStatus(nil, "client_encoding", "UTF8"))
	c.w.Write(wire.AppendParameterStatus(nil, "DateStyle", "ISO, MDY"))
	c.w.Write(wire.AppendParameterStatus(nil, "integer_datetimes", "on"))
	c.w.Write(wire.AppendParameterStatus(nil, "standard_conforming_strings", "on"))
	c.w.Write(key)
	c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), 'I'))
	if err := c.w.Flush(); err != nil {
		return err
	}
	c.setState(ClientActive)
	c.admin = true
	err := c.l.Admin.Serve(ctx, &AdminConn{c: c})
	return &adminDone{err}
}

// adminDone ends login() after an admin session without sending an error.
type adminDone struct{ err error }

func (e *adminDone) Error() string { return "admin session ended" }
