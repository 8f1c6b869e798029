//go:build !linux

package frontend

import (
	"errors"
	"sync/atomic"
	"syscall"
)

// evloop needs epoll; elsewhere clients never park (see park.go).
type evloop struct{}

type parkKey struct{ fd, token int32 }

func unpackParkKey(v uint64) parkKey { return parkKey{} }

var errEvloopClosed = errors.New("evloop: closed")

func newEvloop() (*evloop, error) { return nil, errors.New("evloop: needs Linux (epoll)") }

func (e *evloop) park(rc syscall.RawConn, armed *bool, last *atomic.Uint64, fn resumer) (parkKey, error) {
	return parkKey{}, errEvloopClosed
}
func (e *evloop) wake(key parkKey) bool   { return false }
func (e *evloop) unpark(key parkKey) bool { return false }
func (e *evloop) parked() int             { return 0 }
func (e *evloop) parks() uint64           { return 0 }
func (e *evloop) close()                  {}

func (c *client) parkConn()   {}
func (c *client) unparkConn() {}
