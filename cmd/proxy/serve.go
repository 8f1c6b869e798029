package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
)

// serve runs the proxy until ctx ends (SIGINT/SIGTERM), then shuts down
// gracefully. ready, if not nil, receives the listen address once serving.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, ready chan<- string) error {
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		return err
	}
	l := frontend.NewListener(st, log)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	log.Info("shardgate listening", "addr", ln.Addr().String(), "databases", len(cfg.Databases))
	if ready != nil {
		ready <- ln.Addr().String()
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := reload(l, log); err != nil {
				log.Error("reload failed; the previous configuration stays in effect", "err", err)
			}
		}
	}()

	errc := make(chan error, 1)
	go func() { errc <- l.Serve(ctx, ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	timeout := l.State().Config.ShutdownTimeout
	log.Info("shutting down: waiting for transactions to finish", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = l.Shutdown(sctx)
	l.State().Pools.Close()
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	log.Info("shutdown complete")
	return err
}

// reload re-reads the config file and swaps the state in.
func reload(l *frontend.Listener, log *slog.Logger) error {
	old := l.State()
	if old.Config.Path == "" {
		return errors.New("reload: the configuration did not come from a file")
	}
	start := time.Now()
	cfg, err := config.Load(old.Config.Path)
	if err != nil {
		return err
	}
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		return err
	}
	l.SetState(st)
	log.Info("configuration reloaded", "file", cfg.Path, "took", time.Since(start))
	return nil
}
