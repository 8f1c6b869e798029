package frontend

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

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
		c.shards, c.rt = nil, nil // the database's first shard, served as a one-shard database
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
		for i := range c.shards {
			if err := c.attachShard(ctx, i); err != nil {
				t.Fatal(err)
			}
		}
		c.server = c.shards[1].server // the relay's current server is one of them
		c.dropServers()
		for i, s := range r.servers {
			if s.State() != pool.ServerClosed {
				t.Errorf("shard %d's server is %v, want closed", i, s.State())
			}
		}
		if c.server != nil || c.holdsShards() {
			t.Fatal("the client still holds a server")
		}
		for i := range c.shards {
			if n := c.shards[i].pool.Stats.Closed.Load(); n != 1 {
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
	for i := range c.shards {
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
