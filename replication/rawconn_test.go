package replication

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestRawConn: a rawConn's writes larger than sockio.MaxRaw and larger than
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
	peer, dialed := pgtest.TCPPair(t)
	c, ok := newRawConn(dialed).(*rawConn)
	if !ok {
		t.Fatal("a TCP connection did not become a rawConn")
	}
	return c, peer
}
