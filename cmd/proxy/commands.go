package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/proxy"
)

const usage = `usage:
  proxy [serve] -config FILE [-cpuprofile OUT]
                                  run the proxy (OUT: a CPU profile of the whole run, for go tool pprof)
  proxy check-config FILE         validate FILE and print the effective config (passwords redacted)
  proxy demo [-listen ADDR]       start two local PostgreSQL shards and the proxy in front of them
  proxy schema-sync -config FILE SRC DST
                                  copy SRC's schema to every shard of DST (databases of FILE)
  proxy data-sync -config FILE [-publication PUB] [-slot SLOT] [-parallel N] SRC DST
                                  copy SRC's rows to DST's shards, then stream changes until Ctrl-C
                                  (only PUB's tables; through slot SLOT, or SLOT_<n> per source shard)
`

func run(ctx context.Context, args []string) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		path := fs.String("config", "shardgate.yaml", "config file")
		level := fs.String("log-level", "info", "debug | info | warn | error")
		cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the whole run to this file")
		if err := fs.Parse(args); err != nil {
			return err
		}
		log := newLogger(os.Stderr, *level)
		cfg, err := config.Load(*path)
		if err != nil {
			return err
		}
		if *cpuProfile != "" {
			stop, err := startCPUProfile(*cpuProfile)
			if err != nil {
				return err
			}
			defer func() {
				if err := stop(); err != nil {
					log.Error("cpu profile", "file", *cpuProfile, "err", err)
				}
			}()
		}
		return proxy.Run(ctx, cfg, log, proxy.Options{})
	case "check-config":
		if len(args) != 1 {
			return fmt.Errorf("check-config takes one file\n%s", usage)
		}
		cfg, err := config.Load(args[0])
		if err != nil {
			return err
		}
		out, err := cfg.Redacted().YAML()
		if err != nil {
			return err
		}
		fmt.Printf("# %s is valid; effective configuration:\n%s", args[0], out)
		return nil
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		listen := fs.String("listen", "127.0.0.1:6432", "client listen address")
		level := fs.String("log-level", "info", "debug | info | warn | error")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return demo(ctx, *listen, newLogger(os.Stderr, *level))
	case "schema-sync":
		return schemaSync(ctx, args)
	case "data-sync":
		return dataSync(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
