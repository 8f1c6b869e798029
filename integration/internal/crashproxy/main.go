// Command crashproxy is the proxy that the integration crash tests start as
// a process of its own, so that it can really die: cmd/proxy's serve, with
// test knobs set from flags.
//
//	crashproxy -config FILE [-crash-2pc STAGE] [-crash-cutover STAGE] [-stall-copy TABLE]
//
// -crash-2pc kills the process (SIGKILL) at a two-phase commit stage
// ("prepared", "decided"), -crash-cutover at a cutover stage
// ("before-config-write", "after-config-write"), and -stall-copy holds the
// resharding copy of TABLE (schema.table) after it has sent its rows and
// before any destination commits (replication.Knobs).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/proxy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "crashproxy:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	path := flag.String("config", "shardgate.yaml", "config file")
	crash2PC := flag.String("crash-2pc", "", "SIGKILL the process at this two-phase commit stage")
	crashCutover := flag.String("crash-cutover", "", "SIGKILL the process at this cutover stage")
	stallCopy := flag.String("stall-copy", "", "hold the resharding copy of this table (schema.table) before it commits")
	flag.Parse()
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	var k proxy.Knobs
	if *crash2PC != "" {
		k.TwoPhase = crashAt(*crash2PC)
	}
	if *crashCutover != "" {
		k.Replication.AtCutoverStage = crashAt(*crashCutover)
	}
	if *stallCopy != "" {
		k.Replication.StallCopy = func(table string) bool { return table == *stallCopy }
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return proxy.Run(ctx, cfg, log, proxy.Options{KnobsForTest: k})
}

// crashAt returns a stage hook that kills the process, like a crash, at
// stage.
func crashAt(stage string) func(string) {
	return func(s string) {
		if s == stage {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}
