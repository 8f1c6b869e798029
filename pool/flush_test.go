package pool

import (
	"bufio"
	"net"
	"testing"
)

// TestFlushNothingSent: a Flush that fails before any byte of the checkout
// reached the connection says so; one after bytes went out does not.
func TestFlushNothingSent(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	s := &Server{Conn: a, Addr: "pipe"}
	s.W = bufio.NewWriter(countingWriter{a, &s.bytesOut})
	s.W.WriteString("Q")
	err := s.Flush()
	if err == nil || !NothingSent(err) || !s.Broken {
		t.Fatalf("first write on a closed connection: err %v, NothingSent %v, Broken %v", err, NothingSent(err), s.Broken)
	}
	s.bytesOut = 5 // bytes of this checkout already went out
	s.W = bufio.NewWriter(countingWriter{a, &s.bytesOut})
	s.W.WriteString("Q")
	if err := s.Flush(); err == nil || NothingSent(err) {
		t.Fatalf("a later write: err %v, NothingSent %v; want an error that may have sent something", err, NothingSent(err))
	}
}
