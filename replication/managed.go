package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// This file is a managed task: its kind, state and phase (SHOW TASKS), and
// the run goroutine that works through the phases, retries what failed
// for a transient reason and cuts over when asked or when the lag is small.

// TaskKind is what a managed task does.
type TaskKind uint8

const (
	// KindReshard: schema sync, copy, stream, then cutover once the lag is
	// small (RESHARD).
	KindReshard TaskKind = iota + 1
	// KindSchemaSync: the pre-data schema only (SCHEMA_SYNC).
	KindSchemaSync
	// KindCopyData: schema sync, copy, and stream until CUTOVER or
	// STOP_TASK (COPY_DATA).
	KindCopyData
)

func (k TaskKind) String() string {
	switch k {
	case KindReshard:
		return "reshard"
	case KindSchemaSync:
		return "schema_sync"
	case KindCopyData:
		return "copy_data"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// TaskState is the life cycle of a managed task.
type TaskState uint8

const (
	// TaskRunning: the task is working through its phases.
	TaskRunning TaskState = iota
	// TaskDone: finished (for a reshard: cut over and dropped).
	TaskDone
	// TaskFailed: a phase failed; Err says why. Slots are kept, so that a
	// new task with the same databases resumes.
	TaskFailed
	// TaskStopped: STOP_TASK stopped it and dropped its slots.
	TaskStopped
)

func (s TaskState) String() string {
	switch s {
	case TaskRunning:
		return "running"
	case TaskDone:
		return "done"
	case TaskFailed:
		return "failed"
	case TaskStopped:
		return "stopped"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Phase is the step a managed task is in.
type Phase uint8

const (
	PhaseStarting   Phase = iota // connecting, reading the recorded step
	PhaseSchemaSync              // SchemaSync
	PhaseCopy                    // Copy
	PhasePostSchema              // SchemaSyncPost
	PhaseStream                  // Stream, waiting for cutover
	PhaseCutover                 // traffic paused, catching up, swapping the config
	PhaseDrop                    // Drop
	PhaseFinished                // nothing left to do
)

func (p Phase) String() string {
	switch p {
	case PhaseStarting:
		return "starting"
	case PhaseSchemaSync:
		return "schema_sync"
	case PhaseCopy:
		return "copy"
	case PhasePostSchema:
		return "post_schema"
	case PhaseStream:
		return "stream"
	case PhaseCutover:
		return "cutover"
	case PhaseDrop:
		return "drop"
	case PhaseFinished:
		return "finished"
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Managed is one task the Manager runs.
type Managed struct {
	ID       int
	Kind     TaskKind
	Source   string
	Dest     string
	Started  time.Time
	Task     *Task
	m        *Manager
	cancel   context.CancelFunc
	done     chan struct{}
	cutover  chan chan error // CUTOVER requests
	stopping bool
	// cutoverFrom is the source database as it was before the cutover,
	// set (by the run goroutine, or before it starts) once the cutover is
	// about to rewrite the config file; persist records its shards, so that
	// a restart finishes the drop (persist.go). A task started with it set
	// only drops.
	cutoverFrom *config.Database
	lease       *lease // nil for schema syncs, which need none (lease.go)
	// recorded: launch wrote the task's "running" record before RESHARD
	// answered, so the run need not.
	recorded bool
	// undo is what an aborted cutover could not undo (undoFence: its
	// record of the source's shards, its fence), with destination shard 0
	// out of reach: the run goroutine tries again before each stream.
	undo undoSteps

	mu       sync.Mutex
	state    TaskState
	phase    Phase
	err      error
	finished time.Time
	pause    time.Duration // traffic pause of the last cutover attempt
}

// TaskInfo is a snapshot of a managed task, for SHOW TASKS.
type TaskInfo struct {
	ID       int
	Kind     TaskKind
	Source   string
	Dest     string
	State    TaskState
	Phase    Phase
	Started  time.Time
	Elapsed  time.Duration
	Pause    time.Duration // how long the last cutover held traffic
	Err      error
	Name     string // the engine's task name (slots, origins)
	Finished time.Time
	// Resumable: the task stopped without being finished or stopped by
	// an operator (the process closes, or another proxy took its lease):
	// its record still asks for a runner, which resumes it under the
	// same id.
	Resumable bool
}

// Info returns a snapshot of the task.
func (t *Managed) Info() TaskInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	end := t.finished
	if end.IsZero() {
		end = time.Now()
	}
	return TaskInfo{ID: t.ID, Kind: t.Kind, Source: t.Source, Dest: t.Dest, State: t.state, Phase: t.phase,
		Started: t.Started, Elapsed: end.Sub(t.Started), Pause: t.pause, Err: t.err, Name: t.Task.Name,
		Finished: t.finished, Resumable: t.state == TaskStopped && !t.stopping}
}

// Done is closed when the task stopped running.
func (t *Managed) Done() <-chan struct{} { return t.done }

func (t *Managed) setPhase(p Phase) {
	t.mu.Lock()
	t.phase = p
	t.mu.Unlock()
	t.Task.log.Info("reshard phase", "id", t.ID, "phase", p.String())
}

// run works through the phases of the task.
func (t *Managed) run(ctx context.Context) {
	defer close(t.done)
	t.Task.knobs.atRunStart()
	if t.lease != nil {
		defer func() {
			t.mu.Lock()
			stopping := t.stopping
			t.mu.Unlock()
			if !stopping { // Stop releases it once it dropped the task
				t.lease.release()
			}
		}()
		kctx, stop := context.WithCancel(ctx)
		defer stop()
		go t.lease.keep(kctx, t.Task, func(err error) {
			t.Task.log.Error("task lease lost to another proxy, which resumes the task: stopping it here", "id", t.ID, "err", err)
			t.cancel()
		})
	}
	var err error
	if t.cutoverFrom != nil {
		t.persist(ctx, TaskRunning, nil)
		err = t.finishDrop(ctx)
	} else {
		err = t.phases(ctx)
	}
	gone := false
	if err != nil || ctx.Err() != nil {
		gone = t.tidyAfterOther(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finished = time.Now()
	switch {
	case t.stopping:
		t.state = TaskStopped
	case ctx.Err() != nil:
		// Manager.Close: the record stays "running", so that the next
		// process resumes the task.
		t.state = TaskStopped
	case errors.Is(err, errFinishedElsewhere), gone && err != nil:
		t.state, t.phase, t.err = TaskDone, PhaseFinished, nil
		t.Task.log.Warn("task finished by another proxy while this one ran it too (its lease was lost for a moment): stopping it here", "id", t.ID)
	case err != nil && (errors.Is(err, errClaimLost) || t.leaseLost(ctx)):
		// Its failure is the other runner's doing (its slot, its
		// bookkeeping), or another run claimed the task (claim.go), even
		// if that run has since died and left the lease free: the record
		// stays "running", for the other runner or for Watch, on any
		// proxy, to resume.
		t.state, t.err = TaskStopped, fmt.Errorf("another proxy runs the task now; here: %w", err)
		t.Task.log.Warn("task stopped: another proxy holds its lease", "id", t.ID, "err", err)
	case err != nil:
		t.state, t.err = TaskFailed, err
		t.Task.log.Error("task failed", "id", t.ID, "phase", t.phase.String(), "err", err)
		t.persist(ctx, TaskFailed, err)
	default:
		t.state, t.phase, t.err = TaskDone, PhaseFinished, nil
		t.Task.log.Info("task done", "id", t.ID, "took", t.finished.Sub(t.Started))
	}
}

func (t *Managed) phases(ctx context.Context) error {
	// Schema sync and copy can be run again and continue where they
	// stopped: when a shard goes away under them they are retried like a
	// failed stream. Other failures (a check, a schema error) end the task.
	backoff := streamRetryMin
	recorded := t.recorded
	for retries := 0; ; retries++ {
		// The record first: until it is written, a restart of this
		// proxy, or its death, would lose the task (no proxy resumes a
		// task it cannot read). A destination shard 0 out of reach at
		// the start is retried as in the steps; a record refused for
		// another reason is logged, and the task runs without it.
		var err error
		if !recorded {
			err = t.persist(ctx, TaskRunning, nil)
			if err == nil || !transient(err) {
				recorded, err = true, nil
			}
		}
		if err == nil {
			err = t.claim(ctx)
		}
		if err == nil {
			err = t.setup(ctx)
		}
		if err == nil || ctx.Err() != nil || !transient(err) {
			if err != nil || t.Kind == KindSchemaSync {
				return err
			}
			break
		}
		if !t.wait(ctx, t.phaseName(), retries, backoff, err) {
			return nil
		}
		backoff = min(2*backoff, streamRetryMax)
	}
	// A stream that fails — a shard restarting, a network error, a row the
	// destination rejects — is started again after a growing pause, as
	// PostgreSQL's apply worker is: the slots keep their position and the
	// origins skip what was applied, so nothing is lost or applied twice.
	// SHOW TASKS shows the last failure meanwhile.
	backoff = streamRetryMin
	for retries := 0; ; retries++ {
		started := time.Now()
		done, err := t.stream(ctx)
		if done {
			var pending *dropPending
			if errors.As(err, &pending) {
				return t.dropAfterCutover(ctx, pending.err)
			}
			return err
		}
		if ctx.Err() != nil || errors.Is(err, errClaimLost) {
			return err
		}
		if err == nil { // an aborted cutover: stream again at once
			continue
		}
		if t.finishedElsewhere(ctx) {
			return errFinishedElsewhere
		}
		if time.Since(started) > streamRetryMax {
			backoff = streamRetryMin // it had been streaming for a while
		}
		if !t.wait(ctx, "stream", retries, backoff, err) {
			return nil
		}
		backoff = min(2*backoff, streamRetryMax)
	}
}

// errFinishedElsewhere ends a task whose record is gone: another proxy
// took its lease while this one had lost it for a moment, cut over and
// dropped it.
var errFinishedElsewhere = errors.New("the task was finished by another proxy")

// finishedElsewhere reports whether the task's record no longer asks for
// a runner (the stream fails then, its slots and bookkeeping dropped).
func (t *Managed) finishedElsewhere(ctx context.Context) bool {
	if t.lease == nil {
		return false
	}
	r, err := t.Task.recordNow(ctx)
	return err == nil && !r.wanted()
}

// tidyAfterOther drops what this runner may have left on the destinations
// after another proxy had finished the task and dropped its bookkeeping
// (a runner that lost its lease for a moment and created an origin while
// the other proxy's drop ran; the appliers and Step create nothing once
// the bookkeeping is gone). It does nothing while the record asks for a
// runner: the other proxy's, or the next process's after Manager.Close.
//
// It reports whether the record is gone: the task was finished (or
// stopped) elsewhere, and its failure here is not to be recorded (which
// would write a record again).
func (t *Managed) tidyAfterOther(ctx context.Context) bool {
	t.mu.Lock()
	stopping := t.stopping // Stop drops the task itself
	t.mu.Unlock()
	if t.lease == nil || stopping {
		return false
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if !t.finishedElsewhere(cctx) {
		return false
	}
	for d := range t.Task.dst.Shards {
		if err := t.Task.dropDest(cctx, d); err != nil {
			t.Task.log.Warn("task finished by another proxy: could not drop what this runner left on a destination", "id", t.ID, "err", err)
		}
	}
	return true
}

// leaseLost reports whether another session than this runner's holds the
// task's lease (keep may not have noticed yet).
func (t *Managed) leaseLost(ctx context.Context) bool {
	if t.lease == nil {
		return false
	}
	t.lease.mu.Lock()
	own := t.lease.pid
	t.lease.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, err := t.Task.connect(cctx, t.Task.dst, 0) // not connectDest: see recordNow
	if err != nil {
		return false
	}
	defer conn.Close(cctx)
	var other bool
	err = conn.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND ((classid::bigint << 32) | objid::bigint) = hashtext($1)::bigint AND pid <> $2)`,
		leaseKey(t.Task), int64(own)).Scan(&other)
	return err == nil && other
}

// claim claims the task on the destinations for this run, before it
// writes there (claim.go), once per run of a task that has a lease.
// Failing, it is retried as a lost server is.
func (t *Managed) claim(ctx context.Context) error {
	if t.lease == nil || t.Task.claim.token != "" {
		return nil
	}
	if err := t.Task.Claim(ctx); err != nil {
		return &claimError{err}
	}
	return nil
}

// setup runs the steps before the stream: schema sync, copy, post-data
// schema (only the first for a SCHEMA_SYNC task).
func (t *Managed) setup(ctx context.Context) error {
	t.setPhase(PhaseSchemaSync)
	if err := t.Task.SchemaSync(ctx); err != nil || t.Kind == KindSchemaSync {
		return err
	}
	t.setPhase(PhaseCopy)
	if err := t.Task.Copy(ctx); err != nil {
		return err
	}
	t.setPhase(PhasePostSchema)
	return t.Task.SchemaSyncPost(ctx)
}

func (t *Managed) phaseName() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.phase.String()
}

// wait records a failure of what for SHOW TASKS and the log, then waits
// backoff; it returns false when ctx ended first.
func (t *Managed) wait(ctx context.Context, what string, retries int, backoff time.Duration, err error) bool {
	t.mu.Lock()
	t.err = fmt.Errorf("%s failed at %s, retrying in %s: %w", what, time.Now().UTC().Format(time.TimeOnly), backoff, err)
	t.mu.Unlock()
	t.Task.log.Warn(what+" failed; retrying", "id", t.ID, "in", backoff, "retries", retries, "err", err)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(backoff):
		return true
	}
}

// transient reports whether err comes from a server or connection that
// went away (connection failures, shutdowns, too many connections) rather
// than from what the task asked: retrying can succeed. A connection that
// pgconn closed after a network error answers later calls with
// pgconn.ErrConnClosed; which of the two a task sees first is a race.
func transient(err error) bool {
	var claimErr *claimError
	if errors.As(err, &claimErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case wire.AdminShutdown, wire.CrashShutdown, wire.CannotConnectNow,
			wire.TooManyConnections, wire.SerializationFailure, wire.DeadlockDetected:
			return true
		case wire.DuplicateObject:
			// A slot or publication created meanwhile: by a second runner
			// of the task while its lease changed hands (lease.go). The
			// retry finds it and takes the re-run's path.
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	var lost *lostServerError
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.As(err, &lost) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// The pause before a failed stream starts again grows from streamRetryMin
// to streamRetryMax.
const (
	streamRetryMin = time.Second
	streamRetryMax = 30 * time.Second
)

// stream runs Stream until a cutover succeeds (done) or the stream fails.
// An aborted cutover restarts it.
func (t *Managed) stream(ctx context.Context) (done bool, err error) {
	t.setPhase(PhaseStream)
	if t.undo != (undoSteps{}) {
		// Until then the source may refuse writes (the fence) for a
		// cutover that did not happen.
		if err := t.undoFence(ctx, t.undo); err != nil {
			return false, fmt.Errorf("undo an aborted cutover: %w", err)
		}
		t.undo = undoSteps{}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- t.Task.Stream(sctx) }()
	stopStream := func() error {
		stop()
		return <-errc
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var retryAt time.Time
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return false, stopStream()
		case err := <-errc:
			if err == nil {
				err = ctx.Err()
			}
			return false, err
		case reply = <-t.cutover:
		case <-tick.C:
			if t.Kind != KindReshard || time.Now().Before(retryAt) || !t.lagSmall(ctx) {
				continue
			}
		}
		err := t.cutoverNow(ctx, stopStream)
		var pending *dropPending
		if errors.As(err, &pending) || err == nil {
			if reply != nil {
				reply <- nil // cut over; the drop goes on
			}
			return true, err
		}
		if reply != nil {
			reply <- err
		}
		var ab *abortError
		if !errors.As(err, &ab) {
			return false, err
		}
		if errors.Is(err, errClaimLost) {
			// Another run claimed the task: this one ends (Managed.run),
			// and the run that holds the lease, here or elsewhere, takes
			// it on with a claim of its own.
			if !ab.streamStopped {
				stopStream()
			}
			return false, err
		}
		t.mu.Lock()
		t.err = err
		t.phase = PhaseStream
		t.mu.Unlock()
		_, _, _, retry := t.m.limits()
		retryAt = time.Now().Add(retry)
		if ab.streamStopped {
			return false, nil // the caller starts a new stream
		}
	}
}

// lagSmall reports whether every slot is within the automatic cutover's
// lag thresholds.
func (t *Managed) lagSmall(ctx context.Context) bool {
	lags, err := t.Task.Lag(ctx)
	if err != nil {
		return false
	}
	maxBytes, maxTime, _, _ := t.m.limits()
	for _, l := range lags {
		if l.Bytes > maxBytes || l.Seconds > maxTime.Seconds() {
			return false
		}
	}
	return true
}
