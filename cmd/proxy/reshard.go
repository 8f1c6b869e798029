package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
)

// The offline resharding commands: they run the engine from the command
// line against the databases of a config file, without a proxy.
//
//	proxy schema-sync -config FILE SRC DST
//	proxy data-sync -config FILE [-publication PUB] [-slot SLOT] [-parallel N] SRC DST   (copy, then stream until Ctrl-C)

// reshardTask parses the flags and arguments of schema-sync and data-sync
// and returns the engine task.
func reshardTask(name string, args []string) (*replication.Task, *slog.Logger, time.Duration, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := fs.String("config", "shardgate.yaml", "config file")
	level := fs.String("log-level", "info", "debug | info | warn | error")
	every := fs.Duration("progress", 5*time.Second, "data-sync: how often to print a progress line")
	parallel := fs.Int("parallel", 4, "data-sync: tables each source shard copies at once (1 to 64)")
	var names replication.Names
	fs.StringVar(&names.Publication, "publication", "", "a publication on every source shard whose tables are copied and streamed (default: the task creates one FOR ALL TABLES)")
	fs.StringVar(&names.Slot, "slot", "", "the replication slot on the source, with _<shard> appended when there are several source shards; reused when it exists (default: the task's name)")
	if err := fs.Parse(args); err != nil {
		return nil, nil, 0, err
	}
	if fs.NArg() != 2 {
		return nil, nil, 0, fmt.Errorf("%s takes a source and a destination database\n%s", name, usage)
	}
	if *parallel < 1 || *parallel > 64 {
		return nil, nil, 0, fmt.Errorf("%s: -parallel must be from 1 to 64, not %d", name, *parallel)
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return nil, nil, 0, err
	}
	src, dst := cfg.Database(fs.Arg(0)), cfg.Database(fs.Arg(1))
	if src == nil {
		return nil, nil, 0, fmt.Errorf("database %q is not in %s", fs.Arg(0), *path)
	}
	if dst == nil {
		return nil, nil, 0, fmt.Errorf("database %q is not in %s", fs.Arg(1), *path)
	}
	log := newLogger(os.Stderr, *level)
	user, password := replication.Credentials(cfg, src.Name)
	task, err := replication.New(src, dst, user, password, log)
	if err == nil {
		task.CopyParallelism = *parallel
		err = task.UseNames(names)
	}
	return task, log, *every, err
}

func schemaSync(ctx context.Context, args []string) error {
	task, log, _, err := reshardTask("schema-sync", args)
	if err != nil {
		return err
	}
	if err := task.SchemaSync(ctx); err != nil {
		return err
	}
	log.Info("schema synced", "task", task.Name)
	return nil
}

// dataSync copies and then streams until ctx ends (Ctrl-C), printing a
// progress line to stdout every few seconds. The slots stay, so that a
// later data-sync or a RESHARD/COPY_DATA task of the proxy resumes.
func dataSync(ctx context.Context, args []string) error {
	// One P before any goroutine of the task starts; see dataSyncProcs.
	procs := dataSyncProcs(os.LookupEnv("GOMAXPROCS"))
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
	task, log, every, err := reshardTask("data-sync", args)
	if err != nil {
		return err
	}
	if procs > 0 {
		log.Info("data-sync runs on one P (GOMAXPROCS=1); set the GOMAXPROCS environment variable to override", "task", task.Name, "cpus", runtime.NumCPU())
	}
	if err := task.SchemaSync(ctx); err != nil {
		return err
	}
	stop := startProgress(ctx, os.Stdout, task, every)
	defer stop()
	if err := task.Copy(ctx); err != nil {
		return err
	}
	if err := task.SchemaSyncPost(ctx); err != nil {
		return err
	}
	log.Info("copy done; streaming changes until interrupted", "task", task.Name)
	err = task.Stream(ctx)
	if err == nil && ctx.Err() != nil {
		log.Info("stopped; the slots are kept: run data-sync again or RESHARD/COPY_DATA in the proxy to resume, STOP_TASK to drop them")
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// dataSyncProcs returns the GOMAXPROCS that data-sync sets for itself
// from the GOMAXPROCS environment variable (os.LookupEnv's result): 1 when
// it is unset or empty, 0 (leave the runtime's choice) when it is set, so
// an explicit GOMAXPROCS always wins.
//
// data-sync runs nothing but the task, and the stream's pace is set by the
// source's walsender (docs/benchmarks.md, issue 12 §5): the reader and the
// appliers hand each batch from one goroutine to another and wait on
// sockets at every round trip. With one P the goroutine readied runs on the
// same thread when the current one blocks; with more, the runtime wakes and
// parks a second thread each time, whose wake-ups take CPU from the
// walsender and the destination backends on a machine shared with the
// database. The proxy that serves clients keeps Go's default: its clients
// need the Ps, and a RESHARD inside it does not come here.
func dataSyncProcs(env string, set bool) int {
	if set && env != "" {
		return 0
	}
	return 1
}

// startProgress prints a progress line every interval until stopped.
func startProgress(ctx context.Context, w io.Writer, task *replication.Task, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var lastBytes int64
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				copies := task.TableCopies()
				var doneN int
				var rows, bytes int64
				for _, c := range copies {
					if c.State == replication.CopyDone {
						doneN++
					}
					rows += c.Rows
					bytes += c.Bytes
				}
				rate := float64(bytes-lastBytes) / now.Sub(last).Seconds() / (1 << 20)
				lastBytes, last = bytes, now
				line := fmt.Sprintf("tables %d/%d done, %d rows, %.1f MB/s", doneN, len(copies), rows, rate)
				if lags, err := task.Lag(ctx); err == nil {
					var lagBytes int64
					var lagSec float64
					for _, l := range lags {
						lagBytes += l.Bytes
						lagSec = max(lagSec, l.Seconds)
					}
					line += fmt.Sprintf(", lag %d bytes (%.1fs)", lagBytes, lagSec)
				}
				fmt.Fprintln(w, line)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
