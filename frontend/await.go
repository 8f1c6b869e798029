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
	var one [1]byte
	return rc.Read(func(fd uintptr) bool {
		// MSG_PEEK leaves the byte for the reader; a closed or failed
		// socket is "ready" too, and its reader gets the error.
		_, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN && err != unix.EINTR
	})
}
