//go:build linux

package frontend

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestParkedConnReopen: a parked socket keeps its addresses, loses
// nothing the peer sent while it was parked, and becomes a net.Conn once.
func TestParkedConnReopen(t *testing.T) {
	srv, cli := pgtest.TCPPair(t)
	p, err := newParkedConn(srv)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if got, want := p.RemoteAddr().String(), cli.LocalAddr().String(); got != want {
		t.Errorf("remote address %s, want %s", got, want)
	}
	if got, want := p.LocalAddr().String(), cli.RemoteAddr().String(); got != want {
		t.Errorf("local address %s, want %s", got, want)
	}
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, errParkedConn) {
		t.Errorf("read while parked: %v, want %v", err, errParkedConn)
	}
	if _, err := cli.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	nc, err := p.reopen(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, ok := nc.(*net.TCPConn); !ok {
		t.Errorf("reopened as %T, want *net.TCPConn", nc)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(nc, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read after reopen: %q, %v", buf, err)
	}
	if _, err := nc.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cli, buf[:3]); err != nil || string(buf[:3]) != "bye" {
		t.Fatalf("peer read: %q, %v", buf[:3], err)
	}
	if _, err := p.reopen(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second reopen: %v, want %v", err, net.ErrClosed)
	}
	if err := p.Close(); err != nil {
		t.Errorf("close after reopen: %v", err)
	}
}
