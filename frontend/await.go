//go:build unix

package frontend

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitReadable waits until conn has bytes to read, is at its end, or
// fails, without reading anything, on Go's netpoller (so it honours the
// connection's read deadline and Close). A connection that is not a
// socket returns at once.
func awaitReadable(conn net.Conn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil // the reads that follow find out
	}
	return rc.Read(peekReady)
}

// peekReady reports whether the socket fd has bytes to read, is at its
// end, or failed, without reading: MSG_PEEK leaves the byte for the
// reader, and a closed or failed socket's reader gets the error.
func peekReady(fd uintptr) bool {
	var one [1]byte
	_, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err != unix.EAGAIN && err != unix.EINTR
}
