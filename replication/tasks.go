package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// This file is the task manager behind the admin commands RESHARD,
// SCHEMA_SYNC, COPY_DATA, CUTOVER and STOP_TASK: it runs the engine's steps
// in the background and keeps their state for SHOW TASKS.

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

// Gate is what a cutover needs from the running proxy. The admin package
// implements it with the frontend.Listener.
type Gate interface {
	// Config is the running configuration.
	Config() *config.Config
	// Pause holds new transactions of db and waits for open ones to end.
	Pause(ctx context.Context, db string) error
	// Resume ends Pause.
	Resume(db string) error
	// Install makes cfg the running configuration.
	Install(cfg *config.Config) error
	// Disconnect ends the session-pooled sessions of db's clients (used when db goes from
	// one shard to several: a one-shard session would keep using shard 0).
	Disconnect(db string)
}

// Manager runs resharding tasks in the background. Its zero value is not
// usable; call NewManager.
type Manager struct {
	gate Gate
	log  *slog.Logger

	// MaxLagBytes and MaxLagTime are the lag under which a RESHARD task cuts
	// over by itself (default 1 MiB and 1s): every slot must be within both.
	// Set them before starting tasks, or with Set while tasks run.
	MaxLagBytes int64
	MaxLagTime  time.Duration
	// CutoverTimeout bounds the pause: waiting for open transactions, then
	// for the destinations to catch up (default 10s). A cutover that takes
	// longer is aborted: traffic resumes on the source and the task keeps
	// streaming.
	CutoverTimeout time.Duration
	// RetryInterval is how long a RESHARD task waits after an aborted
	// cutover before it tries again (default 10s).
	RetryInterval time.Duration
	// CopyParallelism is how many tables each source shard of a task
	// started from now on copies at once (default 4).
	CopyParallelism int
	// KnobsForTest are test seams handed to every task started from now
	// on; production leaves them zero. Set them before starting tasks.
	KnobsForTest Knobs

	mu     sync.Mutex
	tasks  []*Managed
	nextID int
}

// NewManager returns a manager that cuts over through gate.
func NewManager(gate Gate, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{gate: gate, log: log, MaxLagBytes: 1 << 20, MaxLagTime: time.Second,
		CutoverTimeout: 10 * time.Second, RetryInterval: 10 * time.Second, CopyParallelism: 4}
}

// limits returns the thresholds, which Set may change while tasks run.
func (m *Manager) limits() (maxBytes int64, maxTime, cutoverTimeout, retry time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.MaxLagBytes, m.MaxLagTime, m.CutoverTimeout, m.RetryInterval
}

// Settings are the names Set accepts.
var Settings = []string{"reshard_max_lag_bytes", "reshard_max_lag_time", "reshard_cutover_timeout", "reshard_copy_parallelism"}

// maxCopyParallelism bounds reshard_copy_parallelism: each table copy holds
// a source session and one session per destination shard.
const maxCopyParallelism = 64

// Set changes a threshold by name (Settings): reshard_max_lag_bytes (an
// integer), reshard_max_lag_time or reshard_cutover_timeout (Go durations),
// reshard_copy_parallelism (1 to 64, for tasks started afterwards). It
// reports whether name is one of them.
func (m *Manager) Set(name, value string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch name {
	case "reshard_max_lag_bytes":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < 0 {
			return true, fmt.Errorf("%s must be a non-negative integer, not %q", name, value)
		}
		m.MaxLagBytes = n
	case "reshard_copy_parallelism":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > maxCopyParallelism {
			return true, fmt.Errorf("%s must be an integer from 1 to %d, not %q", name, maxCopyParallelism, value)
		}
		m.CopyParallelism = n
	case "reshard_max_lag_time", "reshard_cutover_timeout":
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return true, fmt.Errorf("%s must be a positive Go duration such as 1s, not %q", name, value)
		}
		if name == "reshard_max_lag_time" {
			m.MaxLagTime = d
		} else {
			m.CutoverTimeout = d
		}
	default:
		return false, nil
	}
	return true, nil
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
		Finished: t.finished}
}

// Done is closed when the task stopped running.
func (t *Managed) Done() <-chan struct{} { return t.done }

func (t *Managed) setPhase(p Phase) {
	t.mu.Lock()
	t.phase = p
	t.mu.Unlock()
	t.Task.log.Info("reshard phase", "id", t.ID, "phase", p.String())
}

// Start starts a task of kind from database src to database dst of the
// running configuration, with the task's own publication and slots.
func (m *Manager) Start(kind TaskKind, src, dst string) (*Managed, error) {
	return m.StartNamed(kind, src, dst, Names{})
}

// StartNamed starts a task of kind from database src to database dst of the
// running configuration with the publication and slot of names (see
// Names). At most one task per pair runs at a time, and a pair recorded as
// running on the destination keeps the names it was recorded with. Named
// publications and slots are checked on the source shards before it
// returns (Task.CheckNames); a SCHEMA_SYNC, which uses neither, only
// checks their syntax.
func (m *Manager) StartNamed(kind TaskKind, src, dst string, names Names) (*Managed, error) {
	return m.start(kind, src, dst, names, true)
}

// start is StartNamed; Resume skips the checks against the servers
// (check), which the task runs anyway, so that a shard that is down at the
// proxy's start does not keep a recorded task from resuming.
func (m *Manager) start(kind TaskKind, src, dst string, names Names, check bool) (*Managed, error) {
	cfg := m.gate.Config()
	sdb, ddb := cfg.Database(src), cfg.Database(dst)
	switch {
	case sdb == nil:
		return nil, fmt.Errorf("source database %q does not exist", src)
	case ddb == nil:
		return nil, fmt.Errorf("destination database %q does not exist", dst)
	case src == dst:
		return nil, errors.New("source and destination are the same database")
	}
	user, password := Credentials(cfg, src)
	task, err := New(sdb, ddb, user, password, m.log)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	task.CopyParallelism = m.CopyParallelism
	m.mu.Unlock()
	if err := task.UseNames(names); err != nil {
		return nil, err
	}
	if check && kind != KindSchemaSync {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := task.checkRecordedNames(ctx); err != nil {
			return nil, err
		}
		if names != (Names{}) {
			if err := task.CheckNames(ctx); err != nil {
				return nil, err
			}
		}
	}
	return m.launch(kind, src, dst, task, nil)
}

// launch registers task and runs it in the background; with cutoverFrom
// set, it only finishes a cutover (finishCutover).
func (m *Manager) launch(kind TaskKind, src, dst string, task *Task, cutoverFrom *config.Database) (*Managed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tasks {
		if t.Task.Name == task.Name && t.Info().State == TaskRunning {
			if n := t.Task.Names(); n != task.Names() {
				return nil, fmt.Errorf("task %d already runs from %q to %q with %s", t.ID, src, dst, n)
			}
			return nil, fmt.Errorf("task %d already runs from %q to %q", t.ID, src, dst)
		}
	}
	task.knobs = m.KnobsForTest
	m.nextID++
	ctx, cancel := context.WithCancel(context.Background())
	t := &Managed{ID: m.nextID, Kind: kind, Source: src, Dest: dst, Started: time.Now(), Task: task, m: m,
		cancel: cancel, done: make(chan struct{}), cutover: make(chan chan error), cutoverFrom: cutoverFrom}
	m.tasks = append(m.tasks, t)
	m.log.Info("task started", "id", t.ID, "kind", kind.String(), "source", src, "destination", dst, "task", task.Name)
	go t.run(ctx)
	return t, nil
}

// Credentials returns the server user and password a task on database db
// uses: those of the first user allowed on db.
func Credentials(cfg *config.Config, db string) (user, password string) {
	if u := cfg.FirstUserFor(db); u != nil {
		return u.ServerUser, u.ServerPassword
	}
	return "", ""
}

// Tasks returns every task this manager started, oldest first.
func (m *Manager) Tasks() []*Managed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.tasks)
}

// Get returns task id, or nil.
func (m *Manager) Get(id int) *Managed {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tasks {
		if t.ID == id {
			return t
		}
	}
	return nil
}

// Cutover asks a running task that streams (id 0: the only such task) to
// cut over now, and waits for the outcome.
func (m *Manager) Cutover(ctx context.Context, id int) (*Managed, error) {
	var t *Managed
	if id != 0 {
		if t = m.Get(id); t == nil {
			return nil, fmt.Errorf("task %d not found", id)
		}
	} else {
		for _, c := range m.Tasks() {
			if c.Info().State == TaskRunning && c.Kind != KindSchemaSync {
				if t != nil {
					return nil, errors.New("several tasks run: CUTOVER needs a task id")
				}
				t = c
			}
		}
		if t == nil {
			return nil, errors.New("no running task to cut over")
		}
	}
	if t.Kind == KindSchemaSync {
		return t, fmt.Errorf("task %d only syncs the schema", t.ID)
	}
	reply := make(chan error, 1)
	select {
	case t.cutover <- reply:
	case <-t.done:
		return t, fmt.Errorf("task %d is not running (%s)", t.ID, t.Info().State)
	case <-ctx.Done():
		return t, ctx.Err()
	}
	select {
	case err := <-reply:
		return t, err
	case <-ctx.Done():
		return t, ctx.Err()
	}
}

// Stop stops task id and drops its slots, publications and origins (the
// destination keeps the rows copied so far).
func (m *Manager) Stop(ctx context.Context, id int) (*Managed, error) {
	t := m.Get(id)
	if t == nil {
		return nil, fmt.Errorf("task %d not found", id)
	}
	t.mu.Lock()
	t.stopping = true
	t.mu.Unlock()
	t.cancel()
	select {
	case <-t.done:
	case <-ctx.Done():
		return t, ctx.Err()
	}
	if t.Kind == KindSchemaSync {
		return t, nil
	}
	t.setPhase(PhaseDrop)
	err := t.Task.Drop(ctx)
	t.mu.Lock()
	if t.state != TaskDone {
		t.state = TaskStopped
		if err != nil {
			t.err = err
		}
	}
	t.phase = PhaseFinished
	t.mu.Unlock()
	return t, err
}

// Close stops every running task without dropping anything, so that a new
// process can resume them.
func (m *Manager) Close() {
	for _, t := range m.Tasks() {
		t.cancel()
		<-t.done
	}
}

// run works through the phases of the task.
func (t *Managed) run(ctx context.Context) {
	defer close(t.done)
	t.persist(ctx, TaskRunning, nil)
	var err error
	if t.cutoverFrom != nil {
		err = t.finishDrop(ctx)
	} else {
		err = t.phases(ctx)
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
	for retries := 0; ; retries++ {
		err := t.setup(ctx)
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
		if done || ctx.Err() != nil {
			return err
		}
		if err == nil { // an aborted cutover: stream again at once
			continue
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
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case wire.AdminShutdown, wire.CrashShutdown, wire.CannotConnectNow,
			wire.TooManyConnections, wire.SerializationFailure, wire.DeadlockDetected:
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) ||
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
		if reply != nil {
			reply <- err
		}
		if err == nil {
			return true, nil
		}
		var ab *abortError
		if !errors.As(err, &ab) {
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
