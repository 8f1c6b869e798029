package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/internal/proxy"
)

// demoSchema is loaded on every shard: accounts is sharded by id, countries
// is an omni table (the same rows everywhere).
const demoSchema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL, balance numeric NOT NULL DEFAULT 0);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO countries VALUES ('fr', 'France'), ('jp', 'Japan'), ('br', 'Brazil');
`

// demo starts two throwaway PostgreSQL shards, loads a sample schema and
// serves them until ctx ends; everything is removed on the way out.
func demo(ctx context.Context, listen string, log *slog.Logger) error {
	if _, err := pgtest.Binaries(); err != nil {
		return fmt.Errorf("demo needs the PostgreSQL server binaries: %w", err)
	}
	var shards []config.Shard
	for i := 0; i < 2; i++ {
		log.Info("starting local PostgreSQL shard", "shard", i)
		cl, err := pgtest.Start(ctx, pgtest.Options{})
		if err != nil {
			return fmt.Errorf("demo: shard %d: %w", i, err)
		}
		defer cl.Stop()
		db := fmt.Sprintf("app_%d", i)
		if err := cl.CreateDatabase(ctx, db); err != nil {
			return fmt.Errorf("demo: shard %d: %w", i, err)
		}
		if err := cl.Exec(ctx, db, demoSchema); err != nil {
			return fmt.Errorf("demo: shard %d: schema: %w", i, err)
		}
		shards = append(shards, config.Shard{Host: cl.Host, Port: cl.Port, Database: db})
	}
	// The two-phase commit log lives with the shards and goes with them.
	dir, err := os.MkdirTemp("", "shardgate-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	cfg := &config.Config{
		Listen:          listen,
		ShutdownTimeout: 10 * time.Second,
		Admin:           config.Admin{Database: "admin", User: "admin", Password: "admin"},
		Pool: config.Pool{Mode: config.PoolTransaction, Size: 10, CheckoutTimeout: 5 * time.Second,
			IdleTimeout: time.Minute, ServerLifetime: time.Hour, ConnectTimeout: 5 * time.Second},
		Limits:   config.Limits{MaxClientConn: 1000, ClientLoginTimeout: time.Minute, MaxMessageSize: 1 << 30},
		AuthType: config.AuthSCRAM,
		Users: []config.User{{Name: "app", Password: "app", AuthType: config.AuthSCRAM,
			ServerUser: "postgres", ServerPassword: ""}},
		Databases: []config.Database{{
			Name:          "app",
			Shards:        shards,
			ShardedTables: []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint", Function: "hash"}},
			OmniTables:    []string{"countries"},
		}},
	}
	cfg.Databases[0].Pool = cfg.Pool
	ready := make(chan string, 1)
	go func() {
		addr := <-ready
		fmt.Printf("\nshardgate demo is running with 2 shards.\n\n  psql \"postgres://app:app@%s/app\"\n  psql \"postgres://admin:admin@%s/admin\"   (admin database)\n\nPress Ctrl-C to stop and remove everything.\n\n", addr, addr)
	}()
	return proxy.Run(ctx, cfg, log, proxy.Options{Ready: ready})
}
