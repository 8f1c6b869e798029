package pool

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"

	"github.com/shardgate/shardgate/config"
)

func registryConfig(t *testing.T, port, size int, users ...string) *config.Config {
	t.Helper()
	text := fmt.Sprintf("admin: { password: x }\npool: { size: %d }\nusers:\n", size)
	for _, u := range users {
		text += fmt.Sprintf("  - { name: %s, password: pw }\n", u)
	}
	text += fmt.Sprintf("databases:\n  - name: app\n    shards: [{ host: 127.0.0.1, port: %d }]\n", port)
	cfg, err := config.Parse([]byte(text), "")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return cfg
}

func get(r *Registry, cfg *config.Config, user string) *Pool {
	return r.Get(cfg.Database("app"), cfg.User(user), 0)
}

// TestRegistryNext checks which pools a reload carries over, replaces and
// retires. No pool connects: pools open connections on first checkout.
func TestRegistryNext(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cfg1 := registryConfig(t, 5432, 4, "a", "b")
	r1 := NewRegistry(cfg1, log)
	a1, b1 := get(r1, cfg1, "a"), get(r1, cfg1, "b")

	// b removed, a unchanged: a is carried over as is.
	cfg2 := registryConfig(t, 5432, 4, "a")
	r2, retired := r1.Next(cfg2)
	if a2 := get(r2, cfg2, "a"); a2 != a1 {
		t.Fatal("an unchanged pool was not carried over")
	}
	if !slices.Equal(retired, []*Pool{b1}) {
		t.Fatalf("retired %v, want b's pool", retired)
	}
	if len(r2.Pools()) != 1 {
		t.Fatalf("%d pools after removing b", len(r2.Pools()))
	}
	// The superseded registry hands out closed pools for new keys.
	if p := get(r1, cfg1, "b"); p != b1 {
		t.Fatal("existing pool of a superseded registry changed")
	}
	cfgC := registryConfig(t, 5432, 4, "a", "c")
	if _, err := get(r1, cfgC, "c").Checkout(context.Background()); err != ErrClosed {
		t.Fatalf("checkout from a superseded registry: %v, want ErrClosed", err)
	}

	// A new size replaces a's pool; the new one shares its counters.
	cfg3 := registryConfig(t, 5432, 6, "a")
	r3, retired := r2.Next(cfg3)
	a3 := get(r3, cfg3, "a")
	if a3 == a1 || a3.Config.Size != 6 || a3.Stats != a1.Stats {
		t.Fatalf("replaced pool: same=%v size=%d shared stats=%v", a3 == a1, a3.Config.Size, a3.Stats == a1.Stats)
	}
	if !slices.Equal(retired, []*Pool{a1}) {
		t.Fatalf("retired %v, want a's old pool", retired)
	}
	for _, p := range append(retired, b1) {
		p.Close()
	}
	r3.Close()
}

// TestRegistryHealth: a shard whose port refuses connections is unhealthy,
// one where something answers the SSLRequest is healthy.
func TestRegistryHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var req [8]byte
			c.Read(req[:])
			c.Write([]byte{'N'})
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	up := NewRegistry(registryConfig(t, port, 1, "a"), log).Health(ctx)
	if len(up) != 1 || !up[0].Healthy || up[0].Role != "primary" {
		t.Fatalf("health of an answering server: %+v", up)
	}
	ln.Close()
	<-done
	down := NewRegistry(registryConfig(t, port, 1, "a"), log).Health(ctx)
	if len(down) != 1 || down[0].Healthy || down[0].Err == nil {
		t.Fatalf("health of a closed port: %+v", down)
	}
}
