package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// Coordinator makes a cutover act on every proxy of a cluster
// (cluster.Member implements it); Manager.Cluster nil: this proxy alone.
type Coordinator interface {
	// BeginCutover tells the other proxies to pause db for the cutover of
	// task id; timeout bounds their drain as it bounds this proxy's.
	BeginCutover(ctx context.Context, db string, task int, timeout time.Duration) (ClusterCutover, error)
}

// The outcomes of a cutover's pause, as PauseObserver and the cluster's
// record of each proxy's pause name them.
const (
	PauseDone    = "done"    // cut over: traffic resumed on the new shards
	PauseAborted = "aborted" // resumed on the source
)

// PauseObserver records how long each cutover held this proxy's traffic
// (metrics.Metrics implements it). The Manager observes the cutovers this
// proxy coordinates; in a cluster the member observes those it pauses for.
type PauseObserver interface {
	ObserveCutoverPause(db, outcome string, pause time.Duration)
}

// ClusterCutover is one cutover across the cluster.
type ClusterCutover interface {
	// WaitPaused waits until every other live proxy paused the database
	// (a proxy that does not answer at all is left out).
	WaitPaused(ctx context.Context) error
	// ServerPIDs lists the other proxies' server connections to shard of
	// the source: the fence spares them.
	ServerPIDs(shard int) []uint32
	// Switch records the new generation — the database takes the shards
	// of database from; before is its entry until now, next the
	// configuration being installed. Its commit is the cutover's commit
	// point: the other proxies follow it.
	Switch(ctx context.Context, before *config.Database, from string, next *config.Config) error
	// Abort tells the other proxies to resume on the source.
	Abort(ctx context.Context, reason error)
	// Resumed records this proxy's pause and its outcome (PauseDone,
	// PauseAborted) next to the other proxies' own, once traffic resumed.
	Resumed(ctx context.Context, pause time.Duration, outcome string)
	// Close releases the cutover's control session.
	Close()
}

// abortError is a cutover that gave up before the configuration changed:
// traffic resumed on the source. streamStopped says whether the stream was
// stopped already (the caller restarts it).
type abortError struct {
	err           error
	streamStopped bool
}

func (e *abortError) Error() string {
	return "cutover aborted, traffic resumed on the source: " + e.err.Error()
}

func (e *abortError) Unwrap() error { return e.err }

// cutoverNow pauses the source database, waits for the destinations to
// catch up, stops the stream, syncs sequences, records the source's shards
// in the task's row (so that a restart can finish the drop), points the
// source database's name at the destination's shards (file and live),
// resumes traffic, and drops the task's slots. Any failure before the new
// configuration is installed resumes traffic on the source, forgets the
// recorded shards and returns an *abortError.
func (t *Managed) cutoverNow(ctx context.Context, stopStream func() error) error {
	t.setPhase(PhaseCutover)
	g := t.m.gate
	log := t.Task.log.With("id", t.ID)
	start := time.Now()
	_, _, timeout, _ := t.m.limits()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cc ClusterCutover // nil: this proxy alone
	// record ends the pause: SHOW TASKS, the metric, and in a cluster
	// the control database's record of each proxy's pause.
	record := func(outcome string) time.Duration {
		pause := time.Since(start)
		t.mu.Lock()
		t.pause = pause
		t.mu.Unlock()
		if o := t.m.Pauses; o != nil {
			o.ObserveCutoverPause(t.Source, outcome, pause)
		}
		if cc != nil {
			cc.Resumed(ctx, pause, outcome)
		}
		return pause
	}
	// steps times each step of the pause, for the log line of its end.
	var steps []any
	last := start
	step := func(name string) {
		now := time.Now()
		steps = append(steps, name, now.Sub(last).Round(time.Microsecond))
		last = now
	}
	fenced := false
	abort := func(err error, stopped bool) error {
		if cc != nil {
			cc.Abort(ctx, err)
		}
		undo := undoSteps{record: t.cutoverFrom != nil, fence: fenced}
		t.cutoverFrom = nil
		if undo != (undoSteps{}) {
			if uerr := t.undoFence(context.WithoutCancel(ctx), undo); uerr != nil {
				t.undo.record = t.undo.record || undo.record
				t.undo.fence = t.undo.fence || undo.fence
				err = errors.Join(err, fmt.Errorf("%w (tried again before the stream starts again)", uerr))
			}
		}
		if rerr := g.Resume(t.Source); rerr != nil {
			err = errors.Join(err, fmt.Errorf("resume: %w", rerr))
		}
		log.Warn("cutover aborted; traffic resumed on the source", "pause", record(PauseAborted), "err", err, slog.Group("steps", steps...))
		return &abortError{err: err, streamStopped: stopped}
	}
	log.Info("cutover: pausing", "database", t.Source)
	if c := t.m.Cluster; c != nil {
		var err error
		if cc, err = c.BeginCutover(cctx, t.Source, t.ID, timeout); err != nil {
			return abort(err, false)
		}
		defer cc.Close()
		step("cluster_begin")
	}
	if err := g.Pause(cctx, t.Source); err != nil {
		return abort(fmt.Errorf("pause %q: %w", t.Source, err), false)
	}
	step("drain")
	if cc != nil {
		if err := cc.WaitPaused(cctx); err != nil {
			return abort(err, false)
		}
		step("cluster_drain")
	}
	// Before the last catch-up: whatever another proxy wrote to the
	// source before the fence is streamed, and nothing after it commits.
	fenced = true
	spare := func(s int) []uint32 {
		pids := g.ServerPIDs(t.Source, s)
		if cc != nil {
			pids = append(pids, cc.ServerPIDs(s)...)
		}
		return pids
	}
	var target []pglogrepl.LSN
	err := t.Task.underClaim(cctx, func(pgx.Tx) error {
		var err error
		if target, err = t.Task.Fence(cctx, spare); err != nil {
			return fmt.Errorf("%w (the server user must own the source databases)", err)
		}
		return nil
	})
	if err != nil {
		return abort(err, false)
	}
	if slices.Contains(target, 0) { // a source shard that is also a destination is not fenced
		current, err := t.Task.CurrentLSN(cctx)
		if err != nil {
			return abort(err, false)
		}
		for s, lsn := range target {
			if lsn == 0 {
				target[s] = current[s]
			}
		}
	}
	step("fence")
	t.Task.knobs.atCutoverStage("fenced")
	if err := t.Task.WaitCaughtUp(cctx, target); err != nil {
		return abort(err, false)
	}
	step("catch_up")
	if err := stopStream(); err != nil {
		return abort(fmt.Errorf("stream: %w", err), true)
	}
	step("stop_stream")
	// The timeout bounds waiting (pause, catch-up); the steps after it
	// take what they take.
	if err := t.Task.SyncSequences(ctx); err != nil {
		return abort(err, true)
	}
	step("sequences")
	old := g.Config()
	next, backup, err := t.switchConfig(ctx, old, start, cc)
	if err != nil {
		return abort(err, true)
	}
	step("switch")
	rerr := g.Resume(t.Source)
	pause := record(PauseDone)
	log.Info("cutover: done", "database", t.Source, "shards", len(next.Database(t.Source).Shards),
		"pause", pause, "config", old.Path, "backup", backup, slog.Group("steps", steps...))
	if rerr != nil {
		return fmt.Errorf("cut over, but resume %q: %w", t.Source, rerr)
	}
	t.Task.knobs.atCutoverStage("before-drop")
	t.setPhase(PhaseDrop)
	if err := t.Task.Drop(ctx); err != nil {
		return &dropPending{err: err}
	}
	return nil
}

// dropPending is cutoverNow's outcome when the cutover is done but the
// drop of what the task left on the old source shards failed: the task
// goes on dropping (dropAfterCutover), CUTOVER answers that it cut over.
type dropPending struct{ err error }

func (e *dropPending) Error() string { return "cut over, but the drop failed: " + e.err.Error() }
func (e *dropPending) Unwrap() error { return e.err }

// dropAfterCutover drops what the task left on the old source shards and
// its bookkeeping, again after a growing pause while that fails (a source
// shard out of reach): the slots hold WAL on the old sources until they
// are gone. failed is the last attempt's error (nil: none was made).
// Drop keeps the task's record until the sources are clean, so the proxy
// that resumes the task (this one restarted, or another) finishes the
// drop. SHOW TASKS shows the last failure meanwhile.
func (t *Managed) dropAfterCutover(ctx context.Context, failed error) error {
	t.setPhase(PhaseDrop)
	if failed == nil {
		if failed = t.Task.Drop(ctx); failed == nil {
			return nil
		}
	}
	backoff := streamRetryMin
	for retries := 0; ; retries++ {
		if !t.wait(ctx, "drop", retries, backoff, failed) {
			return nil // closing: the record stays, the next runner drops
		}
		if failed = t.Task.Drop(ctx); failed == nil {
			return nil
		}
		backoff = min(2*backoff, streamRetryMax)
	}
}

// switchConfig is the step of cutoverNow that points the source database's
// name at the destination's shards: it records the source's shards in the
// task's row, rewrites the config file old.Path (when there is one; the
// backup's name carries start) and installs next, restoring the file when
// Install fails. On an error the caller aborts the cutover. In a cluster
// (cc not nil) the switch recorded in the control database is the commit
// point instead: after it nothing aborts, since the other proxies follow
// it; a file that cannot be written is logged (the cluster's topology
// overrides the old file at the next start or reload).
func (t *Managed) switchConfig(ctx context.Context, old *config.Config, start time.Time, cc ClusterCutover) (next *config.Config, backup string, err error) {
	if cc != nil {
		return t.switchCluster(ctx, old, start, cc)
	}
	next, err = CutoverConfig(old, t.Source, t.Dest)
	if err != nil {
		return nil, "", err
	}
	// From here on a restart may load a file that names the destination's
	// shards: record the source's first, so that it can drop their slots.
	if err := t.recordSource(ctx, old.Database(t.Source)); err != nil {
		return nil, "", err
	}
	t.Task.knobs.atCutoverStage("before-config-write")
	if old.Path != "" {
		if next, backup, err = WriteCutoverFile(old.Path, t.Source, t.Dest, next, start); err != nil {
			return nil, "", err
		}
		t.Task.knobs.atCutoverStage("after-config-write")
	}
	if err := t.m.gate.Install(next); err != nil {
		if backup != "" {
			if rerr := restoreFile(backup, old.Path); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restore %s: %w", old.Path, rerr))
			}
		}
		return nil, "", fmt.Errorf("install the new configuration: %w", err)
	}
	return next, backup, nil
}

// switchCluster is switchConfig in a cluster.
func (t *Managed) switchCluster(ctx context.Context, old *config.Config, start time.Time, cc ClusterCutover) (next *config.Config, backup string, err error) {
	if next, err = CutoverConfig(old, t.Source, t.Dest); err != nil {
		return nil, "", err
	}
	if err := t.recordSource(ctx, old.Database(t.Source)); err != nil {
		return nil, "", err
	}
	t.Task.knobs.atCutoverStage("before-config-write")
	if err := cc.Switch(ctx, old.Database(t.Source), t.Dest, next); err != nil {
		return nil, "", err
	}
	log := t.Task.log.With("id", t.ID)
	if old.Path != "" {
		if written, b, err := WriteCutoverFile(old.Path, t.Source, t.Dest, next, start); err != nil {
			log.Error("cutover: switched, but the config file could not be rewritten; the cluster's topology overrides it at the next start or reload",
				"file", old.Path, "err", err)
		} else {
			next, backup = written, b
		}
		t.Task.knobs.atCutoverStage("after-config-write")
	}
	if err := t.m.gate.Install(next); err != nil {
		log.Error("cutover: switched, but installing the new configuration failed; the cluster member retries", "err", err)
	}
	return next, backup, nil
}

// recordSource records db as the task's source before the cutover
// (Managed.cutoverFrom): from then on the cutover is the task's own, and
// a run that takes the task over leaves the fence up (claim.go). It fails
// with errClaimLost when another run claimed the task meanwhile.
func (t *Managed) recordSource(ctx context.Context, db *config.Database) error {
	return t.Task.underClaim(ctx, func(tx pgx.Tx) error {
		t.cutoverFrom = db
		if err := t.writeRecord(ctx, tx, TaskRunning, nil, false); err != nil {
			t.cutoverFrom = nil
			return fmt.Errorf("record the task: %w", err)
		}
		return nil
	})
}

// undoSteps are the steps of an aborted cutover to undo: its record of
// the source's shards, its fence.
type undoSteps struct{ record, fence bool }

// undoFence undoes an aborted cutover's steps on the task's record and
// the source: it forgets the recorded source shards (so that a restart
// streams again instead of dropping) and lifts the fence. A run whose task
// another run claimed meanwhile does neither: the fence and the record
// are that run's now (claim.go); it logs that and returns nil.
func (t *Managed) undoFence(ctx context.Context, undo undoSteps) error {
	err := t.Task.underClaim(ctx, func(tx pgx.Tx) error {
		var errs []error
		if undo.record {
			if err := t.writeRecord(ctx, tx, TaskRunning, nil, true); err != nil {
				errs = append(errs, fmt.Errorf("record the task: %w", err))
			}
		}
		if undo.fence {
			errs = append(errs, t.Task.Unfence(ctx))
		}
		return errors.Join(errs...)
	})
	if errors.Is(err, errClaimLost) {
		t.Task.log.Warn("cutover aborted after another proxy took the task over: the fence and the task's record are left to it", "id", t.ID)
		return nil
	}
	return err
}

// finishDrop is the rest of a cutover that a stopped proxy left after
// rewriting the config file: t.Task's source is the database as it was
// before (t.cutoverFrom, rebuilt from the task's record by
// Manager.Resume), and Drop removes its slots and publications, the
// destination's origins and the task's bookkeeping.
func (t *Managed) finishDrop(ctx context.Context) error {
	t.setPhase(PhaseDrop)
	log := t.Task.log.With("id", t.ID)
	slots := make([]string, len(t.cutoverFrom.Shards))
	for s := range t.cutoverFrom.Shards {
		slots[s] = shardDesc("source", t.cutoverFrom, s) + ": " + t.Task.slotName(s)
	}
	log.Info("finishing an interrupted cutover: dropping the slots and publications", "database", t.Source, "slots", slots)
	if err := t.dropAfterCutover(ctx, nil); err != nil {
		return fmt.Errorf("finish the cutover: %w", err)
	}
	log.Info("finished an interrupted cutover: slots, publications, origins and bookkeeping dropped", "database", t.Source)
	return nil
}

// CutoverConfig returns a copy of cfg in which database src has dst's
// shards and sharding rules (sharded tables and schemas, omni tables),
// keeping its name and pool settings, so that clients keep connecting with
// the same name. dst stays as it is. The result is validated.
func CutoverConfig(cfg *config.Config, src, dst string) (*config.Config, error) {
	next := cfg.Clone()
	s := next.Database(src)
	d := cfg.Clone().Database(dst) // a copy that shares nothing with next
	if s == nil || d == nil {
		return nil, fmt.Errorf("cutover: database %q or %q is not in the configuration", src, dst)
	}
	s.Shards = d.Shards
	s.ShardedTables = d.ShardedTables
	s.ShardedSchemas = d.ShardedSchemas
	s.OmniTables = d.OmniTables
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("cutover: the new configuration is not valid: %w", err)
	}
	return next, nil
}

// writeAtomic writes data to a temporary file next to path, syncs it and
// renames it over path.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func restoreFile(backup, path string) error {
	data, err := os.ReadFile(backup)
	if err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(backup); err == nil {
		mode = fi.Mode().Perm()
	}
	return writeAtomic(path, data, mode)
}
