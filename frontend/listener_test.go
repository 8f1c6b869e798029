package frontend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
)

// TestDropServers checks what the recover of a client goroutine gives
// back: every server the client holds, closed (its state is unknown), and
// the client's place at the gate.
func TestDropServers(t *testing.T) {
	ctx := context.Background()
	t.Run("one shard", func(t *testing.T) {
		r, done := newShardedClient(t, t.TempDir(), &fakeConn{r: bytes.NewReader(nil), w: &bytes.Buffer{}})
		defer done()
		c := r.client
		c.xs, c.ext, c.rt = nil, nil, nil // the database's first shard, served as a one-shard database
		if err := c.attach(ctx); err != nil {
			t.Fatal(err)
		}
		c.dropServers()
		if c.server != nil || r.servers[0].State() != pool.ServerClosed {
			t.Fatalf("the server is %v, held %v: want it closed and given back", r.servers[0].State(), c.server != nil)
		}
		checkDropped(t, c)
	})
	t.Run("sharded", func(t *testing.T) {
		r, done := newShardedClient(t, t.TempDir(), &fakeConn{r: bytes.NewReader(nil), w: &bytes.Buffer{}})
		defer done()
		c := r.client
		for i := range c.ext {
			if err := c.attachShard(ctx, i); err != nil {
				t.Fatal(err)
			}
		}
		c.server = c.xs.Server(1) // the relay's current server is one of them
		c.dropServers()
		for i, s := range r.servers {
			if s.State() != pool.ServerClosed {
				t.Errorf("shard %d's server is %v, want closed", i, s.State())
			}
		}
		if c.server != nil || c.holdsShards() {
			t.Fatal("the client still holds a server")
		}
		for i := range c.ext {
			if n := c.xs.Pool(i).Stats.Closed.Load(); n != 1 {
				t.Errorf("shard %d's pool closed %d servers, want 1", i, n)
			}
		}
		checkDropped(t, c)
	})
}

func checkDropped(t *testing.T, c *client) {
	t.Helper()
	if n := c.l.DatabaseStatus("app").Holders; n != 0 {
		t.Errorf("%d holders of the database's gate after dropServers, want 0", n)
	}
	if c.cancelTarget.Load() != nil {
		t.Error("the client still has a cancel target")
	}
}

// TestCancelReachesEveryShard sends a CancelRequest for a sharded client
// that holds a server of each shard (a fan-out in progress): each server
// must get a cancel for its own backend.
func TestCancelReachesEveryShard(t *testing.T) {
	r, done := newShardedClient(t, t.TempDir(), &fakeConn{r: bytes.NewReader(nil), w: &bytes.Buffer{}})
	defer done()
	c := r.client
	type cancel struct {
		pid    uint32
		secret string
	}
	got := make([]chan cancel, len(r.servers))
	for i, s := range r.servers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		s.Addr, s.PID, s.Secret = ln.Addr().String(), uint32(100+i), []byte{1, 2, 3, byte(i)}
		got[i] = make(chan cancel, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			var b [16]byte
			if _, err := io.ReadFull(conn, b[:]); err == nil && binary.BigEndian.Uint32(b[4:]) == codeCancelRequest {
				got[i] <- cancel{binary.BigEndian.Uint32(b[8:]), string(b[12:])}
			}
		}()
	}
	for i := range c.ext {
		if err := c.attachShard(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	c.l.register(c)
	defer c.l.unregister(c)
	c.l.cancel(c.pid, c.secret[:])
	for i, s := range r.servers {
		select {
		case cr := <-got[i]:
			if cr.pid != s.PID || cr.secret != string(s.Secret) {
				t.Errorf("shard %d got a cancel for %d/%x, want %d/%x", i, cr.pid, cr.secret, s.PID, s.Secret)
			}
		default:
			t.Errorf("shard %d got no cancel", i)
		}
	}
	c.detachShards()
	if c.cancelTarget.Load() != nil {
		t.Error("a client that holds no server still has cancel targets")
	}
}

// handListener is a net.Listener whose Accept returns the connections the
// test hands it, whether or not it was closed: a connection accepted just
// before Shutdown closed the listener.
type handListener struct {
	accepting chan struct{} // a token each time Accept waits
	conns     chan net.Conn // closed: Accept fails
}

func (l *handListener) Accept() (net.Conn, error) {
	l.accepting <- struct{}{}
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func (l *handListener) Close() error   { return nil }
func (l *handListener) Addr() net.Addr { return fakeAddr{} }

// newTestListener returns a Listener of the one-shard fuzz configuration.
func newTestListener(t *testing.T) *Listener {
	cfg, err := config.Parse([]byte(fuzzConfig), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st := &State{Config: cfg, Pools: pool.NewRegistry(cfg, log)}
	t.Cleanup(st.Pools.Close)
	return NewListener(st, log)
}

// TestAcceptDuringShutdown hands Serve a connection after Shutdown began
// (and, with no client, returned): it must be closed unserved, not run
// by a client goroutine Shutdown no longer waits for.
func TestAcceptDuringShutdown(t *testing.T) {
	l := newTestListener(t)
	ln := &handListener{accepting: make(chan struct{}, 1), conns: make(chan net.Conn)}
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background(), ln) }()
	<-ln.accepting
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	defer client.Close()
	ln.conns <- server
	close(ln.conns)
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	// A client goroutine would wait for the startup packet; a refused
	// connection is closed.
	client.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from a connection accepted during Shutdown: %v, want EOF", err)
	}
	if n := l.clientsNum.Load(); n != 0 {
		t.Fatalf("%d client goroutines after Shutdown", n)
	}
}

// TestServeAfterShutdown checks that Serve called after Shutdown closes
// its listener at once instead of serving.
func TestServeAfterShutdown(t *testing.T) {
	l := newTestListener(t)
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background(), ln) }()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		ln.Close()
		<-served
		t.Fatal("Serve after Shutdown went on accepting")
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Serve returned: %v, want the listener closed", err)
	}
}
