package replication

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shardgate/shardgate/config"
)

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
// catch up, stops the stream, syncs sequences, points the source database's
// name at the destination's shards (file and live), resumes traffic, and
// drops the task's slots. Any failure before the new configuration is
// installed resumes traffic on the source and returns an *abortError.
func (t *Managed) cutoverNow(ctx context.Context, stopStream func() error) error {
	t.setPhase(PhaseCutover)
	g := t.m.gate
	log := t.Task.log.With("id", t.ID)
	start := time.Now()
	_, _, timeout, _ := t.m.limits()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	record := func() time.Duration {
		pause := time.Since(start)
		t.mu.Lock()
		t.pause = pause
		t.mu.Unlock()
		return pause
	}
	abort := func(err error, stopped bool) error {
		if rerr := g.Resume(t.Source); rerr != nil {
			err = errors.Join(err, fmt.Errorf("resume: %w", rerr))
		}
		log.Warn("cutover aborted; traffic resumed on the source", "pause", record(), "err", err)
		return &abortError{err: err, streamStopped: stopped}
	}
	log.Info("cutover: pausing", "database", t.Source)
	if err := g.Pause(cctx, t.Source); err != nil {
		return abort(fmt.Errorf("pause %q: %w", t.Source, err), false)
	}
	if err := t.Task.WaitCaughtUp(cctx, nil); err != nil {
		return abort(err, false)
	}
	if err := stopStream(); err != nil {
		return abort(fmt.Errorf("stream: %w", err), true)
	}
	// The timeout bounds waiting (pause, catch-up); the steps after it
	// take what they take.
	if err := t.Task.SyncSequences(ctx); err != nil {
		return abort(err, true)
	}
	old := g.Config()
	next, err := CutoverConfig(old, t.Source, t.Dest)
	if err != nil {
		return abort(err, true)
	}
	var backup string
	if old.Path != "" {
		if next, backup, err = WriteCutoverFile(old.Path, t.Source, t.Dest, next, start); err != nil {
			return abort(err, true)
		}
	}
	if err := g.Install(next); err != nil {
		if backup != "" {
			if rerr := restoreFile(backup, old.Path); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restore %s: %w", old.Path, rerr))
			}
		}
		return abort(fmt.Errorf("install the new configuration: %w", err), true)
	}
	if len(old.Database(t.Source).Shards) < 2 && len(next.Database(t.Source).Shards) >= 2 {
		// One-shard sessions would keep using shard 0 only: end them, so
		// that clients reconnect as sharded sessions.
		g.Disconnect(t.Source)
	}
	rerr := g.Resume(t.Source)
	pause := record()
	log.Info("cutover: done", "database", t.Source, "shards", len(next.Database(t.Source).Shards),
		"pause", pause, "config", old.Path, "backup", backup)
	if rerr != nil {
		return fmt.Errorf("cut over, but resume %q: %w", t.Source, rerr)
	}
	t.setPhase(PhaseDrop)
	if err := t.Task.Drop(ctx); err != nil {
		return fmt.Errorf("cut over, but: %w", err)
	}
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
