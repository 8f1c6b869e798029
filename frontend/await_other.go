//go:build !unix

package frontend

import "net"

// awaitReadable returns at once where the socket cannot be polled without
// reading it: the client's buffers come at its login's start.
func awaitReadable(net.Conn) error { return nil }

// peekReady says every socket is ready where it cannot be polled without
// reading it.
func peekReady(uintptr) bool { return true }
