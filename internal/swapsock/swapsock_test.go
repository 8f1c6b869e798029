package swapsock

import (
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestSwapUnderTLS: a TLS session set up over one pair of sockets goes on
// over another after both ends Swap, a record read ahead before the swap
// included; Under and Of find the socket and the Conn under the session,
// and deadlines reach the current socket.
func TestSwapUnderTLS(t *testing.T) {
	s1, c1 := pgtest.TCPPair(t)
	s2, c2 := pgtest.TCPPair(t)
	ss, cs := New(s1), New(c1)
	server := tls.Server(ss, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	client := tls.Client(cs, &tls.Config{InsecureSkipVerify: true})
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if Under(server) != s1 || Of(server) != ss || Under(ss) != s1 || Under(s1) != s1 || Of(s1) != nil {
		t.Fatal("Under or Of does not find the socket under the session")
	}
	// A session over a plain socket has no socket to give.
	if plain := tls.Client(c2, &tls.Config{}); Under(plain) != plain || Of(plain) != nil {
		t.Fatal("Under or Of looks under a TLS session without a Conn")
	}

	// Two records before the swap; crypto/tls reads one per Read, so the
	// second is read ahead into the session when the first is read.
	for _, m := range []string{"one", "two"} {
		if _, err := client.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 16)
	read := func(want string) {
		t.Helper()
		server.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := server.Read(buf); err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	// Wait until both records arrived, so that the first Read takes both
	// from the socket.
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; n < 2*(5+3+1+16); n = peekLen(t, s1) { // header, text, type, tag
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the two records arrived", n)
		}
		time.Sleep(time.Millisecond)
	}
	read("one")
	ss.Swap(s2)
	cs.Swap(c2)
	if Under(server) != s2 {
		t.Fatal("Under does not see the swap")
	}
	read("two") // read ahead: the new socket has nothing yet
	if _, err := client.Write([]byte("three")); err != nil {
		t.Fatal(err)
	}
	read("three") // over the new sockets
	server.SetReadDeadline(time.Now())
	if _, err := server.Read(buf); err == nil {
		t.Fatal("a deadline in the past did not reach the new socket")
	}
}

// peekLen returns how many bytes wait in c's receive queue.
func peekLen(t *testing.T, c net.Conn) int {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	rc.Control(func(fd uintptr) {
		buf := make([]byte, 4096)
		n, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	cert, err := pgtest.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
