package proxy

import (
	"log/slog"
	"time"

	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/metrics"
)

// reload re-reads the config file and swaps the state in (SIGHUP and admin
// RELOAD). A bad file leaves the running configuration in place; the error
// lists every problem as file:line.
func reload(l *frontend.Listener, m *metrics.Metrics, log *slog.Logger) error {
	start := time.Now()
	old := l.State().Config
	err := l.Reload()
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
