//go:build !linux

package frontend

import (
	"errors"
	"net"
	"sync/atomic"
)

// The event loop needs epoll; elsewhere limits.event_loop leaves every
// client on its goroutine (hot.go).

type hotLoop struct{}

type coro struct{ onLoop atomic.Bool }

type fdConn struct {
	net.Conn
	co atomic.Pointer[coro]
}

func newHotLoop() (*hotLoop, error) { return nil, errNoEpoll }

func newFDConn(l *hotLoop, c net.Conn) (*fdConn, error) { return nil, errNotSocket }

func (l *hotLoop) start(co *coro, body func()) error { return errors.New("hot loop: needs Linux") }
func (l *hotLoop) close()                            {}
func (l *hotLoop) running() int                      { return 0 }
func (co *coro) off()                                {}
func (co *coro) on()                                 {}
