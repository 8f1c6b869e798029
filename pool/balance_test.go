package pool

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// lbConfig is database app with one shard on port 5432 and replicas on
// the given ports. Nothing connects unless a test checks a server out.
func lbConfig(t *testing.T, lb string, replicas ...int) *config.Config {
	t.Helper()
	reps := ""
	for i, p := range replicas {
		if i > 0 {
			reps += ", "
		}
		reps += fmt.Sprintf("{ host: 127.0.0.1, port: %d }", p)
	}
	text := fmt.Sprintf(`admin: { password: x }
load_balancing: { %s }
users: [{ name: u, password: pw }]
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 5432, replicas: [%s] }]
`, lb, reps)
	cfg, err := config.Parse([]byte(text), "")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return cfg
}

func roles(ps []*Pool) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s%d", p.Key.Role, p.Key.Replica))
	}
	return out
}

func TestBalanceRoundRobin(t *testing.T) {
	cfg := lbConfig(t, "strategy: round_robin", 6001, 6002, 6003)
	r := NewRegistry(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	db, u := cfg.Database("app"), cfg.User("u")
	var firsts []string
	for range 6 {
		ps := r.ReadPools(db, u, 0)
		if len(ps) != 4 || ps[3].Key.Role != "primary" {
			t.Fatalf("ReadPools = %v, want 3 replicas then the primary", roles(ps))
		}
		firsts = append(firsts, roles(ps)[0])
	}
	want := []string{"replica0", "replica1", "replica2", "replica0", "replica1", "replica2"}
	if fmt.Sprint(firsts) != fmt.Sprint(want) {
		t.Fatalf("round robin picked %v, want %v", firsts, want)
	}

	// A banned replica leaves the rotation; with all banned, the primary.
	r.Ban(r.Replica(db, u, 0, 1), errors.New("test"))
	if !r.Banned(r.Replica(db, u, 0, 1)) || r.Banned(r.Get(db, u, 0)) {
		t.Fatal("ban not recorded, or the primary banned")
	}
	r.Ban(r.Get(db, u, 0), errors.New("test"))
	if r.Banned(r.Get(db, u, 0)) {
		t.Fatal("the primary was banned")
	}
	for range 4 {
		for _, p := range r.ReadPools(db, u, 0) {
			if p.Key.Role == "replica" && p.Key.Replica == 1 {
				t.Fatal("a banned replica is still offered")
			}
		}
	}
	r.Ban(r.Replica(db, u, 0, 0), errors.New("test"))
	r.Ban(r.Replica(db, u, 0, 2), errors.New("test"))
	if ps := r.ReadPools(db, u, 0); len(ps) != 1 || ps[0].Key.Role != "primary" {
		t.Fatalf("all replicas banned: ReadPools = %v, want the primary", roles(ps))
	}
}

func TestBalanceIncludePrimaryAndRandom(t *testing.T) {
	cfg := lbConfig(t, "include_primary: true", 6001)
	r := NewRegistry(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	db, u := cfg.Database("app"), cfg.User("u")
	seen := map[string]bool{}
	for range 200 {
		ps := r.ReadPools(db, u, 0)
		if len(ps) != 2 {
			t.Fatalf("ReadPools = %v, want the replica and the primary", roles(ps))
		}
		seen[roles(ps)[0]] = true
	}
	if !seen["primary0"] || !seen["replica0"] {
		t.Fatalf("random with include_primary picked only %v", seen)
	}
	// No replicas: no read pools.
	cfg2 := lbConfig(t, "")
	r2 := NewRegistry(cfg2, slog.New(slog.DiscardHandler))
	defer r2.Close()
	if ps := r2.ReadPools(cfg2.Database("app"), cfg2.User("u"), 0); ps != nil {
		t.Fatalf("ReadPools without replicas = %v", roles(ps))
	}
}

func TestBalanceLeastConnections(t *testing.T) {
	cfg := lbConfig(t, "strategy: least_connections", 6001, 6002)
	r := NewRegistry(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	db, u := cfg.Database("app"), cfg.User("u")
	busy := r.Replica(db, u, 0, 0)
	busy.mu.Lock()
	busy.active = 3
	busy.mu.Unlock()
	for range 5 {
		if got := roles(r.ReadPools(db, u, 0))[0]; got != "replica1" {
			t.Fatalf("least_connections picked %s, want replica1", got)
		}
	}
	busy.mu.Lock()
	busy.active = 0
	busy.mu.Unlock()
}

// TestReplicaPoolsAcrossReload checks that replica pools are carried over
// like primary pools, and retired when their replica is gone.
func TestReplicaPoolsAcrossReload(t *testing.T) {
	cfg1 := lbConfig(t, "", 6001, 6002)
	r1 := NewRegistry(cfg1, slog.New(slog.DiscardHandler))
	db1, u1 := cfg1.Database("app"), cfg1.User("u")
	a, b := r1.Replica(db1, u1, 0, 0), r1.Replica(db1, u1, 0, 1)
	r1.Ban(a, errors.New("down"))
	cfg2 := lbConfig(t, "", 6001)
	r2, retired := r1.Next(cfg2)
	defer r2.Close()
	if len(retired) != 1 || retired[0] != b {
		t.Fatalf("retired %v, want replica 1", retired)
	}
	if got := r2.Replica(cfg2.Database("app"), cfg2.User("u"), 0, 0); got != a {
		t.Fatal("an unchanged replica pool was not carried over")
	}
	if !r2.Banned(a) {
		t.Fatal("a ban did not survive the reload")
	}
	if r2.Replica(cfg2.Database("app"), cfg2.User("u"), 0, 1) != nil {
		t.Fatal("a removed replica still has a pool")
	}
	if a.Key.String() != "app/u/shard0/replica0" {
		t.Fatalf("Key.String() = %s", a.Key)
	}
}

// TestHealthCheckBans checks that the background health check bans a
// replica that refuses connections, and that bans expire only through a
// passed check.
func TestHealthCheckBans(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	cfg := lbConfig(t, "health_check_interval: 20ms, health_check_timeout: 500ms, ban_time: 10ms", port)
	r := NewRegistry(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	p := r.Replica(cfg.Database("app"), cfg.User("u"), 0, 0)
	deadline := time.Now().Add(5 * time.Second)
	for !r.Banned(p) {
		if time.Now().After(deadline) {
			t.Fatal("the health check did not ban an unreachable replica")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h := r.Health(t.Context())
	for _, s := range h {
		if s.Role == "replica" && s.Healthy {
			t.Fatalf("banned replica reported healthy: %+v", s)
		}
	}

	b := newBans()
	k := banKey{db: "app", addr: "x"}
	b.ban(k, time.Hour, errors.New("down"))
	if b.passed(k) || !b.banned(k) {
		t.Fatal("a passed check lifted a ban before ban_time")
	}
	b.ban(k, 0, errors.New("down"))
	if !b.banned(k) || !b.passed(k) || b.banned(k) {
		t.Fatal("an expired ban was not lifted by a passed check")
	}
}

// TestBanIgnoresStartupRejection: a server that refused a client's startup
// parameter is not banned for it.
func TestBanIgnoresStartupRejection(t *testing.T) {
	cfg := lbConfig(t, "strategy: round_robin", 6001)
	r := NewRegistry(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	p := r.Replica(cfg.Database("app"), cfg.User("u"), 0, 0)
	err := fmt.Errorf("server x: connect: %w", &pgconn.PgError{Severity: "FATAL", Code: wire.InsufficientPrivilege})
	r.Ban(p, &StartupRejectedError{Startup: NewStartup(map[string]string{"log_statement": "all"}), Err: err})
	if r.Banned(p) {
		t.Fatal("a replica was banned for refusing a client's startup parameter")
	}
	r.Ban(p, err)
	if !r.Banned(p) {
		t.Fatal("a replica was not banned for a failed connection")
	}
}
