// Command proxy runs shardgate, a PostgreSQL wire-protocol sharding proxy.
//
//	proxy -config FILE            serve (the default subcommand)
//	proxy check-config FILE       validate FILE and print the effective config
//	proxy demo                    start local shards and serve them on 127.0.0.1:6432
//	proxy schema-sync -config FILE SRC DST   copy SRC's schema to DST's shards
//	proxy data-sync -config FILE SRC DST     copy SRC to DST's shards and stream until Ctrl-C
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "shardgate:", err)
		os.Exit(1)
	}
}
