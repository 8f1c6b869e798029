package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardgate/shardgate/config"
)

// This file is the task manager behind the admin commands RESHARD,
// SCHEMA_SYNC, COPY_DATA, CUTOVER and STOP_TASK: it runs the engine's steps
// in the background and keeps their state for SHOW TASKS.

// Gate is what a cutover needs from the running proxy. admin.Gate
// implements it over an admin.Proxy, which internal/proxy implements for
// the frontend.Listener (AdminView).
type Gate interface {
	// Config is the running configuration.
	Config() *config.Config
	// Pause holds new transactions of db and waits for open ones to end.
	Pause(ctx context.Context, db string) error
	// Resume ends Pause.
	Resume(db string) error
	// Install makes cfg the running configuration.
	Install(cfg *config.Config) error
	// ServerPIDs lists the backend pids of this proxy's server connections
	// to shard of db: the cutover's fence spares them (its own sessions,
	// paused, move or close by themselves).
	ServerPIDs(db string, shard int) []uint32
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
	// Cluster, when set, makes every cutover pause and switch the other
	// proxies of the cluster too. Set it before starting tasks.
	Cluster Coordinator
	// TaskID, when set, numbers tasks across the cluster: the same task
	// (by its engine name) has the same id on every proxy, also after
	// another proxy took it over. Set it before starting tasks.
	TaskID func(ctx context.Context, name string) (int, error)
	// Pauses, when set, records each cutover's pause (metrics.Metrics).
	// Set it before starting tasks.
	Pauses PauseObserver
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
	return m.launch(kind, src, dst, task, nil, !check)
}

// launch registers task and runs it in the background; with cutoverFrom
// set, it only finishes a cutover (finishCutover). A resumed task (found
// in the records by Resume) is launched only if its record still asks for
// it once the lease is held: the proxy that ran it may have finished it
// and dropped the record between Resume's read and the lease.
func (m *Manager) launch(kind TaskKind, src, dst string, task *Task, cutoverFrom *config.Database, resumed bool) (*Managed, error) {
	if err := m.checkNotRunning(src, dst, task); err != nil {
		return nil, err
	}
	var l *lease
	if kind != KindSchemaSync {
		lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		l, err = task.acquireLease(lctx)
		if err == nil && resumed {
			if err = stillRecorded(lctx, l.conn, task); err != nil { // keep does not run yet
				l.release()
			}
		}
		lcancel()
		if err != nil {
			return nil, err
		}
	}
	id, err := m.taskID(task.Name)
	if err != nil {
		if l != nil {
			l.release()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Managed{ID: id, Kind: kind, Source: src, Dest: dst, Started: time.Now(), Task: task, m: m,
		cancel: cancel, done: make(chan struct{}), cutover: make(chan chan error), cutoverFrom: cutoverFrom, lease: l}
	if !resumed && cutoverFrom == nil {
		// The record before RESHARD answers: a task its client was told of
		// survives this proxy dying a moment later (another proxy, or this
		// one restarted, resumes it). A shard out of reach only delays
		// the answer a little: the run then retries the record before
		// it copies anything (phases).
		t.recorded = t.persistWithin(ctx, recordAtStartTimeout, TaskRunning, nil) == nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkNotRunningLocked(src, dst, task); err != nil {
		cancel()
		if l != nil {
			l.release()
		}
		return nil, err
	}
	task.knobs = m.KnobsForTest
	if id == 0 {
		m.nextID++
		t.ID = m.nextID
	} else {
		// A cluster numbers a task once: an earlier run of it here that
		// stopped (another proxy took its lease) is superseded by this
		// one, which SHOW TASKS, CUTOVER and STOP_TASK mean by that id.
		m.tasks = slices.DeleteFunc(m.tasks, func(o *Managed) bool { return o.ID == id })
	}
	m.tasks = append(m.tasks, t)
	m.log.Info("task started", "id", t.ID, "kind", kind.String(), "source", src, "destination", dst, "task", task.Name)
	go t.run(ctx)
	return t, nil
}

// recordAtStartTimeout bounds launch's first record of a new task, which
// RESHARD's answer waits for.
const recordAtStartTimeout = 3 * time.Second

// taskID is the cluster-wide id of the task named name (TaskID), or 0:
// the next local number.
func (m *Manager) taskID(name string) (int, error) {
	if m.TaskID == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := m.TaskID(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("number the task: %w", err)
	}
	return id, nil
}

// checkNotRunning fails when this proxy runs task already.
func (m *Manager) checkNotRunning(src, dst string, task *Task) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkNotRunningLocked(src, dst, task)
}

func (m *Manager) checkNotRunningLocked(src, dst string, task *Task) error {
	for _, t := range m.tasks {
		if t.Task.Name == task.Name && t.Info().State == TaskRunning {
			if n := t.Task.Names(); n != task.Names() {
				return fmt.Errorf("task %d already runs from %q to %q with %s", t.ID, src, dst, n)
			}
			return fmt.Errorf("task %d already runs from %q to %q", t.ID, src, dst)
		}
	}
	return nil
}

// runsLocally reports whether this proxy runs the task named name.
func (m *Manager) runsLocally(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tasks {
		if t.Task.Name == name && t.Info().State == TaskRunning {
			return true
		}
	}
	return false
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

// Get returns task id (the latest of that id: a cluster-wide id comes
// back when a task of the same databases starts again), or nil.
func (m *Manager) Get(id int) *Managed {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.tasks) - 1; i >= 0; i-- {
		if m.tasks[i].ID == id {
			return m.tasks[i]
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
		if err == nil {
			// Cut over: the task drops the source's slots and
			// publications, then ends. Its row says "done" once it has,
			// which takes a moment unless a source shard is out of reach.
			wait := time.NewTimer(cutoverDropWait)
			defer wait.Stop()
			select {
			case <-t.done:
			case <-wait.C:
			case <-ctx.Done():
			}
		}
		return t, err
	case <-ctx.Done():
		return t, ctx.Err()
	}
}

// cutoverDropWait bounds how long CUTOVER waits for the task to end after
// the cutover (its drop of the source's replication objects) before it
// answers with the task still running.
const cutoverDropWait = 10 * time.Second

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
		if t.lease != nil {
			go func() { <-t.done; t.lease.release() }()
		}
		return t, ctx.Err()
	}
	if t.Kind == KindSchemaSync {
		return t, nil
	}
	t.setPhase(PhaseDrop)
	err := t.Task.Drop(ctx)
	if t.lease != nil {
		// Held until the record is gone, so that no other proxy resumes
		// the task meanwhile.
		defer t.lease.release()
	}
	t.mu.Lock()
	cutOver := t.state == TaskDone || t.cutoverFrom != nil
	t.mu.Unlock()
	if !cutOver {
		// The source serves the database still: lift a fence an
		// interrupted cutover left.
		err = errors.Join(err, t.Task.Unfence(ctx))
	}
	if err != nil && !cutOver {
		// Drop kept the record (a source shard out of reach): it must not
		// look running, or a proxy would resume the stopped task. STOP_TASK
		// again drops what is left.
		t.persist(ctx, TaskStopped, err)
	}
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
