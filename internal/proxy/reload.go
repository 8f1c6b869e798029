package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/shardgate/shardgate/cluster"
	"github.com/shardgate/shardgate/config"

	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/metrics"
)

// reload re-reads the config file and swaps the state in (SIGHUP and admin
// RELOAD). A bad file leaves the running configuration in place; the error
// lists every problem as file:line.
func reload(l *frontend.Listener, m *metrics.Metrics, member *cluster.Member, log *slog.Logger) error {
	start := time.Now()
	old := l.State().Config
	err := reloadFile(l, member)
	m.Reloaded(err)
	if err != nil {
		log.Error("reload failed; the previous configuration stays in effect", "file", old.Path, "err", err)
		return err
	}
	cfg := l.State().Config
	if cfg.Listen != old.Listen {
		log.Warn("listen changed; it takes effect at restart", "running", old.Listen, "file", cfg.Listen)
	}
	if cfg.Metrics.Listen != old.Metrics.Listen {
		log.Warn("metrics.listen changed; it takes effect at restart", "running", old.Metrics.Listen, "file", cfg.Metrics.Listen)
	}
	log.Info("configuration reloaded", "file", cfg.Path, "took", time.Since(start))
	return nil
}

// reloadFile loads the file again and installs it, with the cluster's
// topology applied (a cutover that another proxy made is never undone by
// this file): when the control database cannot be read, the reload fails.
func reloadFile(l *frontend.Listener, member *cluster.Member) error {
	if member == nil {
		return l.Reload()
	}
	return l.ReloadWith(func(cfg *config.Config) (*config.Config, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return member.Overlay(ctx, cfg)
	})
}
