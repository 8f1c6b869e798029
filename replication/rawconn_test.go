package replication

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestRawConn: a rawConn's writes larger than rawIOMax and larger than
// the sockets' buffers arrive whole and in order, its reads stop at the
// read deadline with a timeout error, its writes at the write deadline,
// and a closed peer ends its reads with io.EOF.
func TestRawConn(t *testing.T) {
	c, peer := rawPair(t)

	// A write of 8 MiB waits for the peer to read, in pieces.
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(want))))
		got <- b
	}()
	if n, err := c.Write(want); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(want))
	}

	// Reads: what the peer sent, then a timeout at the deadline, then
	// the end of the stream.
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	if n, err := io.ReadFull(c, buf[:5]); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var netErr net.Error
	if _, err := c.Read(buf); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if n, err := c.Read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %d, %v, want io.EOF", n, err)
	}

	// A write the peer does not read stops at the write deadline.
	c, _ = rawPair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write(want); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("write past the deadline: %v, want a timeout", err)
	}
}

// rawPair returns a rawConn on a loopback TCP connection and its peer,
// closed when t ends.
func rawPair(t *testing.T) (*rawConn, net.Conn) {
	t.Helper()
	dialed, peer := tcpPair(t)
	c, ok := newRawConn(dialed).(*rawConn)
	if !ok {
		t.Fatal("a TCP connection did not become a rawConn")
	}
	return c, peer
}

// tcpPair returns the two ends of a loopback TCP connection, the dialed
// one first, closed when t ends.
func tcpPair(t *testing.T) (dialed, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- conn
	}()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close() })
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { peer.Close() })
	return dialed, peer
}
