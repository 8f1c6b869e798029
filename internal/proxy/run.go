package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/shardgate/shardgate/admin"
	"github.com/shardgate/shardgate/cluster"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/metrics"
	"github.com/shardgate/shardgate/replication"
)

// Options are what Run takes besides the configuration.
type Options struct {
	// Ready, if not nil, receives the client listen address once Run
	// serves.
	Ready chan<- string

	// KnobsForTest are test seams; production leaves them zero.
	KnobsForTest Knobs
}

// Knobs are the test seams of a running proxy, in the manner of
// CockroachDB's testing knobs: each package's own hooks, gathered so that a
// test binary can set them (integration/internal/crashproxy).
type Knobs struct {
	// TwoPhase becomes frontend.Listener.TwoPhaseHookForTest: it runs at
	// each stage of a two-phase commit ("prepared", "decided").
	TwoPhase func(stage string)
	// Replication becomes the resharding task manager's
	// replication.Manager.KnobsForTest.
	Replication replication.Knobs
}

// Run serves cfg until ctx ends (SIGINT/SIGTERM) or an admin runs SHUTDOWN,
// then shuts down gracefully: open transactions get cfg.ShutdownTimeout to
// finish. Resharding tasks recorded as running resume in the background.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, opts Options) error {
	ctx, shutdown := context.WithCancel(ctx)
	defer shutdown()
	member, cfg, err := joinCluster(ctx, cfg, log)
	if err != nil {
		return err
	}
	st, err := frontend.NewState(cfg, log)
	if err != nil {
		return err
	}
	l := frontend.NewListener(st, log)
	l.TwoPhaseHookForTest = opts.KnobsForTest.TwoPhase
	if cfg.TwoPhaseCommitLog != "" {
		log.Warn("two_phase_commit_log is no longer used: multi-shard commit decisions live on the shards", "file", cfg.TwoPhaseCommitLog)
	}
	if _, err := l.ResolveTwoPhase(ctx); err != nil {
		log.Error("two-phase commit recovery is incomplete; the resolver retries in the background", "err", err)
	}
	var resolver sync.WaitGroup
	resolver.Add(1)
	go func() {
		defer resolver.Done()
		l.RunTwoPhaseResolver(ctx)
	}()
	defer func() {
		shutdown() // ends the resolver
		resolver.Wait()
	}()
	m := metrics.New(l)
	reloadFn := func() error { return reload(l, m, member, log) }
	view := AdminView(l)
	ah := admin.New(view, reloadFn, log)
	ah.Shutdown = shutdown
	ah.Tasks = replication.NewManager(admin.Gate{L: view}, log)
	ah.Tasks.KnobsForTest = opts.KnobsForTest.Replication
	ah.Tasks.Pauses = m
	var joined sync.WaitGroup
	if member != nil {
		member.SetLocal(admin.Gate{L: view})
		member.SetPauseObserver(m)
		ah.Tasks.Cluster = member
		ah.Tasks.TaskID = member.TaskID
		ah.Cluster = ClusterView(member, l)
		ah.ProxyName = member.Name()
		member.SetTaskHooks(taskHooks(member, ah.Tasks))
		joined.Add(1)
		go func() {
			defer joined.Done()
			member.Run(ctx)
		}()
	}
	defer func() {
		shutdown()
		joined.Wait()
	}()
	defer ah.Tasks.Close() // tasks stay recorded as running: the next start resumes them
	l.Admin = AdminHandler(ah)
	var resumed sync.WaitGroup
	resumed.Add(1)
	go func() {
		defer resumed.Done()
		// A Run that ends early (its port taken, say) cancels ctx: the
		// error is then that one's, logged by the caller, not this.
		if _, err := ah.Tasks.Resume(ctx); err != nil && ctx.Err() == nil {
			log.Error("resuming resharding tasks", "err", err)
		}
		ah.Tasks.Watch(ctx) // tasks whose proxy stops later
	}()
	// Before Tasks.Close (deferred above, so run after): no task starts
	// once Close has stopped the running ones.
	defer func() {
		shutdown()
		resumed.Wait()
	}()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	var ms *metrics.Server
	if cfg.Metrics.Listen != "" {
		if ms, err = m.Listen(cfg.Metrics.Listen, log); err != nil {
			ln.Close()
			return err
		}
		log.Info("metrics listening", "addr", ms.Addr())
	}
	log.Info("shardgate listening", "addr", ln.Addr().String(), "databases", len(cfg.Databases))
	if opts.Ready != nil {
		opts.Ready <- ln.Addr().String()
	}

	stopHUP := reloadOnHUP(ctx, reloadFn)
	defer stopHUP()

	errc := make(chan error, 1)
	go func() { errc <- l.Serve(ctx, ln) }()
	select {
	case err := <-errc:
		shutdown()
		if ms != nil {
			ms.Shutdown(context.Background())
		}
		return err
	case <-ctx.Done():
	}
	return gracefulShutdown(l, ms, errc, log)
}

// joinCluster makes the member of cfg's cluster (nil without one) and
// returns cfg with the cluster's topology applied. A file that describes a
// database as it was before a recorded cutover, and cannot be brought
// forward, stops the start; a control database that cannot be reached
// does not (the member follows the topology once it reaches it, and the
// fence of a cutover keeps this proxy off old shards meanwhile).
func joinCluster(ctx context.Context, cfg *config.Config, log *slog.Logger) (*cluster.Member, *config.Config, error) {
	if cfg.Cluster == nil {
		return nil, cfg, nil
	}
	member, err := cluster.New(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := member.Overlay(octx, cfg)
	var stale *cluster.StaleFileError
	switch {
	case errors.As(err, &stale):
		return nil, nil, err
	case err != nil:
		log.Error("cluster: cannot read the topology at start; serving the file's until the control database answers", "err", err)
		return member, cfg, nil
	}
	return member, next, nil
}

// reloadOnHUP runs reload at every SIGHUP until ctx ends. stop stops the
// notifications and waits for the goroutine that runs reload.
func reloadOnHUP(ctx context.Context, reload func() error) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		for {
			select {
			case <-hup:
				reload() // logs and counts its outcome
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		<-hupDone
	}
}

// gracefulShutdown is the end of Run once its context ended: open
// transactions get the configuration's ShutdownTimeout to finish, then the
// pools and the metrics server ms (nil when there is none) close. errc
// delivers what l.Serve returned.
func gracefulShutdown(l *frontend.Listener, ms *metrics.Server, errc <-chan error, log *slog.Logger) error {
	timeout := l.State().Config.ShutdownTimeout
	log.Info("shutting down: waiting for transactions to finish", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := l.Shutdown(sctx)
	l.State().Pools.Close()
	if ms != nil {
		if merr := ms.Shutdown(sctx); merr != nil {
			log.Warn("metrics shutdown", "err", merr)
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	log.Info("shutdown complete")
	return err
}
