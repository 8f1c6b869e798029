package frontend

import (
	"errors"
	"net"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// watchServer relays what a session-mode (or pinned) server sends on its
// own while the client is between statements, in a transaction or not —
// NOTIFY payloads (LISTEN), notices, parameter changes, a FATAL error
// before it closes — while the client loop waits for the client's next
// message. It returns the function that stops it, which the loop calls
// before it touches the server or the client writer again; nil when there
// is nothing to watch.
func (c *client) watchServer() func() {
	s := c.server
	if c.mode != config.PoolSession && !c.pinned || s == nil || c.xs != nil || len(c.q) > 0 || c.pipe.has(pipeUnsynced) || c.r.Buffered() > 0 {
		return nil
	}
	c.offLoop() // the watcher reads the server beside the loop
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, n, err := s.R.PeekHeader()
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					s.Broken = true
				}
				return
			}
			if n > s.R.Size()-5 {
				return // not an asynchronous message: the loop will see it
			}
			typ, raw, body, err := s.R.Next()
			if err != nil {
				return // a timeout leaves the message unread (Next only peeks)
			}
			switch typ {
			case 'A', 'N':
			case 'S':
				s.NoteParameter(body)
			case 'E':
				s.NoteError(wire.ParseError(body))
			default:
				s.Broken = true
			}
			c.toClient(raw)
			c.flushClient()
			if s.Broken {
				// The session is gone with its server (a FATAL, or
				// something no idle server sends): like PostgreSQL, end
				// the connection; the loop's read fails and cleans up.
				c.conn.Close()
				return
			}
		}
	}()
	return func() {
		s.Conn.SetReadDeadline(time.Now())
		<-done
		s.Conn.SetReadDeadline(time.Time{})
	}
}
