package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// The resharding commands: RESHARD, SCHEMA_SYNC, COPY_DATA, CUTOVER,
// STOP_TASK, SHOW TASKS, SHOW TABLE_COPIES, SHOW REPLICATION. The tasks run
// in a replication.Manager whose cutover pauses, reconfigures and resumes
// this handler's Proxy.

// RESHARD, SCHEMA_SYNC and COPY_DATA take an optional publication and slot
// (replication.Names), as PgDog's commands do; SCHEMA_SYNC uses neither and
// only checks them.
var reshardSpecs = []*spec{
	{words: []string{"RESHARD"}, usage: "RESHARD source_db destination_db [publication [slot]]",
		help:    "move source_db to destination_db's shards: schema, copy, stream, then cut over when the lag is small",
		columns: taskColumns, tag: "RESHARD", minArgs: 2, maxArgs: 4, run: (*Handler).reshardStart},
	{words: []string{"SCHEMA_SYNC"}, usage: "SCHEMA_SYNC source_db destination_db [publication [slot]]",
		help:    "copy the schema (tables, types, sequences) to every destination shard",
		columns: taskColumns, tag: "SCHEMA_SYNC", minArgs: 2, maxArgs: 4, run: (*Handler).reshardStart},
	{words: []string{"COPY_DATA"}, usage: "COPY_DATA source_db destination_db [publication [slot]]",
		help:    "schema, copy, then keep streaming changes until CUTOVER or STOP_TASK",
		columns: taskColumns, tag: "COPY_DATA", minArgs: 2, maxArgs: 4, run: (*Handler).reshardStart},
	{words: []string{"CUTOVER"}, usage: "CUTOVER [task_id]",
		help:    "pause the source, catch up, point its name at the destination's shards (file and live), resume",
		columns: taskColumns, tag: "CUTOVER", maxArgs: 1, run: (*Handler).reshardCutover},
	{words: []string{"STOP_TASK"}, usage: "STOP_TASK task_id",
		help:    "stop a resharding task and drop its slots, publications and origins",
		columns: taskColumns, tag: "STOP_TASK", minArgs: 1, maxArgs: 1, run: (*Handler).reshardStop},
	{words: []string{"SHOW", "TASKS"}, usage: "SHOW TASKS", help: "resharding tasks (elapsed and pause in microseconds)",
		columns: taskColumns, tag: "SHOW", run: (*Handler).showTasks},
	{words: []string{"SHOW", "TABLE_COPIES"}, usage: "SHOW TABLE_COPIES", help: "table copies of resharding tasks (rate in bytes/s)",
		columns: tableCopyColumns, tag: "SHOW", run: (*Handler).showTableCopies},
	{words: []string{"SHOW", "REPLICATION"}, usage: "SHOW REPLICATION", help: "replication slots of streaming resharding tasks and their lag",
		columns: replicationColumns, tag: "SHOW", run: (*Handler).showReplication},
}

// Gate adapts a Proxy to what a resharding cutover needs
// (replication.Gate).
type Gate struct{ L Proxy }

func (g Gate) Config() *config.Config                     { return g.L.Config() }
func (g Gate) Pause(ctx context.Context, db string) error { return g.L.Pause(ctx, db) }
func (g Gate) Resume(db string) error                     { return g.L.Resume(db) }
func (g Gate) Install(cfg *config.Config) error           { return g.L.Reconfigure(cfg) }

// ServerPIDs lists the backend pids of the proxy's server connections to
// shard of db.
func (g Gate) ServerPIDs(db string, shard int) []uint32 {
	var out []uint32
	for _, p := range g.L.Pools().Pools() {
		if p.Key.Database != db || p.Key.Shard != shard {
			continue
		}
		for _, s := range p.Servers() {
			out = append(out, s.PID)
		}
	}
	return out
}

// tasks returns the handler's task manager, creating it on first use.
func (h *Handler) tasks() *replication.Manager {
	h.tasksOnce.Do(func() {
		if h.Tasks == nil {
			h.Tasks = replication.NewManager(Gate{h.p}, h.log)
		}
	})
	return h.Tasks
}

var taskColumns = []column{
	num("id"), text("kind"), text("source"), text("destination"), text("state"), text("phase"),
	text("started"), num("elapsed"), num("pause"), text("error"), text("publications"), text("slots"), text("proxy"),
}

func addTask(r *result, t *replication.Managed, proxyName string) {
	i := t.Info()
	why := ""
	if i.Err != nil {
		why = i.Err.Error()
	}
	pubs, slots := "", ""
	if i.Kind != replication.KindSchemaSync {
		pubs = strings.Join(t.Task.Publications(), ",")
		slots = strings.Join(t.Task.SlotNames(), ",")
	}
	r.add(i.ID, i.Kind.String(), i.Source, i.Dest, i.State.String(), i.Phase.String(), i.Started, i.Elapsed, i.Pause, why,
		pubs, slots, proxyName)
}

// addClusterTask adds a task another proxy of the cluster runs.
func addClusterTask(r *result, t ClusterTask) {
	r.add(t.ID, t.Kind, t.Source, t.Dest, t.State, t.Phase, t.Started, t.Elapsed, t.Pause, t.Error, t.Publications, t.Slots, t.Proxy)
}

// reshardSetError reports a bad value of a SET of the task manager.
func reshardSetError(err error) error {
	if err != nil {
		return wire.Errorf(wire.InvalidParameterValue, "%v", err)
	}
	return nil
}

func taskError(err error) error {
	if e, ok := wire.AsError(err); ok {
		return e
	}
	return wire.Errorf(wire.ObjectInUse, "%v", err)
}

func (h *Handler) reshardStart(ctx context.Context, x *call) (*result, error) {
	kind := map[string]replication.TaskKind{"RESHARD": replication.KindReshard,
		"SCHEMA_SYNC": replication.KindSchemaSync, "COPY_DATA": replication.KindCopyData}[x.spec.words[0]]
	var names replication.Names
	if len(x.args) > 2 {
		names.Publication = x.args[2]
	}
	if len(x.args) > 3 {
		names.Slot = x.args[3]
	}
	t, err := h.tasks().StartNamed(kind, x.args[0], x.args[1], names)
	if err != nil {
		return nil, wire.Errorf(wire.InvalidParameterValue, "%s: %v", x.spec.words[0], err)
	}
	r := &result{}
	addTask(r, t, h.ProxyName)
	return r, nil
}

func taskID(x *call, i int) (int, error) {
	if i >= len(x.args) {
		return 0, nil
	}
	id, err := strconv.Atoi(x.args[i])
	if err != nil || id <= 0 {
		return 0, wire.Errorf(wire.InvalidParameterValue, "%s takes a task id from SHOW TASKS, not %q", x.spec.words[0], x.args[i])
	}
	return id, nil
}

func (h *Handler) reshardCutover(ctx context.Context, x *call) (*result, error) {
	id, err := taskID(x, 0)
	if err != nil {
		return nil, err
	}
	if h.forwards(id) {
		return h.forward(ctx, "cutover", id)
	}
	t, err := h.tasks().Cutover(ctx, id)
	if err != nil {
		return nil, taskError(fmt.Errorf("cutover: %w", err))
	}
	r := &result{}
	addTask(r, t, h.ProxyName)
	return r, nil
}

// forwards reports whether task id (0: the only running one) runs on
// another proxy of the cluster rather than here.
func (h *Handler) forwards(id int) bool {
	if h.Cluster == nil {
		return false
	}
	if id != 0 {
		t := h.tasks().Get(id)
		return t == nil || t.Info().State != replication.TaskRunning
	}
	for _, t := range h.tasks().Tasks() {
		if t.Info().State == replication.TaskRunning && t.Kind != replication.KindSchemaSync {
			return false
		}
	}
	return true
}

// forward runs command on the proxy of the cluster that runs task id (0:
// the only running task of the cluster) and answers with its row.
func (h *Handler) forward(ctx context.Context, command string, id int) (*result, error) {
	others, err := h.Cluster.Tasks(ctx)
	if err != nil {
		return nil, wire.Errorf(wire.SystemError, "%v", err)
	}
	if id == 0 {
		for _, t := range others {
			if t.State == replication.TaskRunning.String() && t.Kind != replication.KindSchemaSync.String() {
				if id != 0 {
					return nil, taskError(fmt.Errorf("%s: several tasks run: CUTOVER needs a task id", command))
				}
				id = t.ID
			}
		}
		if id == 0 {
			return nil, taskError(fmt.Errorf("%s: no running task to cut over", command))
		}
	}
	if err := h.Cluster.Forward(ctx, command, id); err != nil {
		return nil, taskError(fmt.Errorf("%s: %w", command, err))
	}
	r := &result{}
	if others, err = h.Cluster.Tasks(ctx); err == nil {
		for _, t := range others {
			if t.ID == id {
				addClusterTask(r, t)
			}
		}
	}
	return r, nil
}

func (h *Handler) reshardStop(ctx context.Context, x *call) (*result, error) {
	id, err := taskID(x, 0)
	if err != nil {
		return nil, err
	}
	if id != 0 && h.forwards(id) && h.tasks().Get(id) == nil {
		return h.forward(ctx, "stop", id)
	}
	t, err := h.tasks().Stop(ctx, id)
	if t == nil {
		return nil, wire.Errorf(wire.UndefinedObject, "%v", err)
	}
	if err != nil {
		return nil, taskError(fmt.Errorf("stop task %d: %w", id, err))
	}
	r := &result{}
	addTask(r, t, h.ProxyName)
	return r, nil
}

func (h *Handler) showTasks(ctx context.Context, x *call) (*result, error) {
	// A task id is the same on every proxy of a cluster: a task that
	// stopped here because another proxy took it over is shown as that
	// proxy has it.
	var others []ClusterTask
	remote := map[int]bool{}
	if h.Cluster != nil {
		var err error
		if others, err = h.Cluster.Tasks(ctx); err != nil {
			return nil, wire.Errorf(wire.SystemError, "%v", err)
		}
		for _, t := range others {
			remote[t.ID] = true
		}
	}
	r := &result{}
	local := map[int]bool{}
	for _, t := range h.tasks().Tasks() {
		if remote[t.ID] && t.Info().State != replication.TaskRunning {
			continue
		}
		addTask(r, t, h.ProxyName)
		local[t.ID] = true
	}
	for _, t := range others {
		if !local[t.ID] {
			addClusterTask(r, t)
		}
	}
	return r, nil
}

var tableCopyColumns = []column{
	num("task"), text("table"), num("source_shard"), num("rows"), num("bytes"), num("rate"),
	text("state"), num("elapsed"), text("error"),
}

func (h *Handler) showTableCopies(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, t := range h.tasks().Tasks() {
		for _, c := range t.Task.TableCopies() {
			end := c.Finished
			if end.IsZero() {
				end = time.Now()
			}
			took := end.Sub(c.Started)
			rate := int64(0)
			if took > 0 {
				rate = int64(float64(c.Bytes) / took.Seconds())
			}
			why := ""
			if c.Err != nil {
				why = c.Err.Error()
			}
			r.add(t.ID, c.Table, c.Source, c.Rows, c.Bytes, rate, c.State.String(), took, why)
		}
	}
	return r, nil
}

var replicationColumns = []column{
	num("task"), num("source_shard"), text("slot"), text("confirmed_lsn"), text("current_lsn"),
	num("lag_bytes"), text("lag_seconds"), text("last_applied_lsn"), text("last_commit_time"), text("last_applied_at"),
}

// showReplication lists the slots of the running tasks that stream. It asks
// every source shard, so it takes a round trip per slot.
func (h *Handler) showReplication(ctx context.Context, x *call) (*result, error) {
	r := &result{}
	for _, t := range h.tasks().Tasks() {
		i := t.Info()
		if i.State != replication.TaskRunning || i.Phase < replication.PhasePostSchema || i.Phase > replication.PhaseCutover {
			continue
		}
		lags, err := t.Task.Lag(ctx)
		if err != nil {
			return nil, wire.Errorf(wire.ConnectionFailure, "task %d: %v", t.ID, err)
		}
		applied := t.Task.LastApplied()
		for _, l := range lags {
			var last replication.AppliedTxn
			for _, a := range applied {
				if a.Source == l.Source && a.End > last.End {
					last = a
				}
			}
			lastLSN := ""
			if last.End != 0 {
				lastLSN = last.End.String()
			}
			r.add(t.ID, l.Source, l.Slot, l.Confirmed.String(), l.Current.String(), l.Bytes,
				strconv.FormatFloat(l.Seconds, 'f', 3, 64), lastLSN, last.CommitTime, last.AppliedAt)
		}
	}
	return r, nil
}
