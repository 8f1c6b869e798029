package pgtest

import (
	"net"
	"testing"
)

// TCPPair returns both ends of a loopback TCP connection, the accepted
// one first; both are closed when tb ends.
func TCPPair(tb testing.TB) (accepted, dialed net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dialed.Close() })
	accepted = <-ch
	if accepted == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { accepted.Close() })
	return accepted, dialed
}
