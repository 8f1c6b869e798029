package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
	// The demo's config is a file's, parsed as one: every option it does
	// not name keeps its default, as in a config file a user writes.
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "listen: %q\nadmin: { password: admin }\npool: { size: 10 }\nlimits: { max_client_conn: 1000 }\n", listen)
	yaml.WriteString("users:\n  - { name: app, password: app, server_user: postgres, server_password: \"\" }\n")
	yaml.WriteString("databases:\n  - name: app\n    shards:\n")
	for _, s := range shards {
		fmt.Fprintf(&yaml, "      - { host: %q, port: %d, database: %q }\n", s.Host, s.Port, s.Database)
	}
	yaml.WriteString("    sharded_tables: [{ table: accounts, column: id, type: bigint }]\n    omni_tables: [countries]\n")
	cfg, err := config.Parse([]byte(yaml.String()), "")
	if err != nil {
		return fmt.Errorf("demo: config: %w", err)
	}
	ready := make(chan string, 1)
	go func() {
		addr := <-ready
		fmt.Printf("\nshardgate demo is running with 2 shards.\n\n  psql \"postgres://app:app@%s/app\"\n  psql \"postgres://admin:admin@%s/admin\"   (admin database)\n\nPress Ctrl-C to stop and remove everything.\n\n", addr, addr)
	}()
	return proxy.Run(ctx, cfg, log, proxy.Options{Ready: ready})
}
