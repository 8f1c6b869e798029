package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Resharding tasks across the cluster. Every member publishes its tasks
// (TaskRow, one row per task id in shardgate_cluster.tasks) at each poll,
// so that SHOW TASKS on any proxy lists the tasks of every live proxy;
// task ids are numbered in the control database (TaskID), so that a task
// has the same id everywhere, also after another proxy took it over. A
// command for a task another proxy runs (CUTOVER, STOP_TASK) is forwarded
// to it as a row of shardgate_cluster.requests and a notification; the
// runner answers in the same row.

// TaskRow is one task as SHOW TASKS shows it.
type TaskRow struct {
	ID           int
	Proxy        string
	Kind         string
	Source       string
	Dest         string
	State        string
	Phase        string
	Started      time.Time
	Elapsed      time.Duration
	Pause        time.Duration
	Error        string
	Publications string
	Slots        string
	// Resumable: stopped here, but not finished: the task keeps its id
	// for the proxy that resumes it.
	Resumable bool `json:",omitempty"`
}

// TaskHooks connect a member to its proxy's task manager.
type TaskHooks struct {
	// Tasks lists this proxy's tasks.
	Tasks func() []TaskRow
	// Run runs a forwarded command ("cutover" or "stop") on this proxy's
	// task id.
	Run func(ctx context.Context, command string, id int) error
}

// SetTaskHooks connects the member to its task manager.
func (m *Member) SetTaskHooks(h TaskHooks) {
	m.mu.Lock()
	m.hooks = h
	m.mu.Unlock()
}

func (m *Member) taskHooks() TaskHooks {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hooks
}

// TaskID returns the cluster-wide id of the task named name: the id of
// its active row, or a new one.
func (m *Member) TaskID(ctx context.Context, name string) (int, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var id int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('shardgate_cluster task ' || $1)::bigint)", name); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, "SELECT id FROM shardgate_cluster.task_ids WHERE name = $1 AND active ORDER BY id DESC LIMIT 1", name).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, "INSERT INTO shardgate_cluster.task_ids (name) VALUES ($1) RETURNING id", name).Scan(&id)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: task id: %w", err)
	}
	return id, nil
}

// publishTasks records this proxy's tasks; a task that stopped running
// gives its id up (the next task of the same databases gets a new one).
func (m *Member) publishTasks(ctx context.Context, conn *pgx.Conn) error {
	h := m.taskHooks()
	if h.Tasks == nil {
		return nil
	}
	tasks := h.Tasks()
	ids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		ids = append(ids, t.ID)
	}
	// A running task of this member's name that this process does not
	// know was left by the process before it (killed): nobody runs it
	// here, and listing it would make it look running twice. So was a run
	// that stopped there, to be resumed (Resumable): nobody will, here,
	// and its row outlived the task (another proxy's finished it).
	if _, err := conn.Exec(ctx, `DELETE FROM shardgate_cluster.tasks WHERE proxy = $1 AND id <> ALL($2)
		AND (info->>'State' = 'running' OR (info->>'Resumable')::bool)`, m.name, ids); err != nil {
		return fmt.Errorf("cluster: publish the tasks: %w", err)
	}
	for _, t := range tasks {
		info, err := json.Marshal(t)
		if err != nil {
			return err
		}
		// Another proxy's row gives way to a running task, and to any
		// row of a task it does not run, except its "done": a run that
		// stopped here does not hide that another proxy finished the task.
		if _, err := conn.Exec(ctx, `INSERT INTO shardgate_cluster.tasks (id, proxy, info) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET proxy = $2, info = $3, updated = now()
			WHERE tasks.proxy = $2 OR $3::jsonb->>'State' = 'running' OR tasks.info->>'State' NOT IN ('running', 'done')`, t.ID, m.name, info); err != nil {
			return fmt.Errorf("cluster: publish the tasks: %w", err)
		}
		if t.State != "running" && !t.Resumable {
			if _, err := conn.Exec(ctx, "UPDATE shardgate_cluster.task_ids SET active = false WHERE id = $1 AND active", t.ID); err != nil {
				return fmt.Errorf("cluster: publish the tasks: %w", err)
			}
		}
	}
	return nil
}

// Tasks returns the tasks other proxies published, except those of
// members that left (their tasks are taken over and published again).
func (m *Member) Tasks(ctx context.Context) ([]TaskRow, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT t.info FROM shardgate_cluster.tasks t
		WHERE t.proxy <> $1 AND (t.info->>'State' <> 'running' OR EXISTS (SELECT 1 FROM shardgate_cluster.members m
			JOIN pg_stat_activity a ON a.pid = m.pid AND a.application_name = $2 || m.name WHERE m.name = t.proxy))
		ORDER BY t.id`, m.name, appPrefix)
	if err != nil {
		return nil, fmt.Errorf("cluster: tasks: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskRow, error) {
		var b []byte
		var t TaskRow
		if err := r.Scan(&b); err != nil {
			return t, err
		}
		return t, json.Unmarshal(b, &t)
	})
}

// Forward asks the proxy that runs task id to run command ("cutover" or
// "stop") on it, and waits for its answer.
func (m *Member) Forward(ctx context.Context, command string, id int) error {
	conn, err := m.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var proxy string
	err = conn.QueryRow(ctx, `SELECT t.proxy FROM shardgate_cluster.tasks t JOIN shardgate_cluster.members m ON m.name = t.proxy
		JOIN pg_stat_activity a ON a.pid = m.pid AND a.application_name = $3 || m.name
		WHERE t.id = $1 AND t.info->>'State' = 'running' AND t.proxy <> $2`, id, m.name, appPrefix).Scan(&proxy)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("no proxy of the cluster runs task %d", id)
	}
	if err != nil {
		return fmt.Errorf("cluster: forward: %w", err)
	}
	var rid int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "INSERT INTO shardgate_cluster.requests (proxy, command, task) VALUES ($1, $2, $3) RETURNING id",
			proxy, command, id).Scan(&rid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", channel, fmt.Sprintf("request %d %s", rid, proxy))
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: forward: %w", err)
	}
	m.log.Info("cluster: forwarded a task command", "command", command, "task", id, "to", proxy)
	for {
		var state string
		var why *string
		if err := conn.QueryRow(ctx, "SELECT state, error FROM shardgate_cluster.requests WHERE id = $1", rid).Scan(&state, &why); err != nil {
			return fmt.Errorf("cluster: forward: %w", err)
		}
		switch {
		case state == "done" && why != nil:
			return fmt.Errorf("proxy %s: %s", proxy, *why)
		case state == "done":
			return nil
		}
		if !sleep(ctx, decisionPoll) {
			return fmt.Errorf("proxy %s did not answer %s of task %d: %w", proxy, command, id, ctx.Err())
		}
	}
}

// answer runs the forwarded request rid on this proxy and records the
// outcome.
func (m *Member) answer(ctx context.Context, rid int64) {
	conn, err := m.dial(ctx)
	if err != nil {
		m.log.Warn("cluster: cannot answer a forwarded command", "request", rid, "err", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var command string
	var id int
	tag, err := conn.Exec(ctx, "UPDATE shardgate_cluster.requests SET state = 'running' WHERE id = $1 AND proxy = $2 AND state = 'asked'", rid, m.name)
	if err != nil || tag.RowsAffected() != 1 {
		return // answered already, or not ours
	}
	if err := conn.QueryRow(ctx, "SELECT command, task FROM shardgate_cluster.requests WHERE id = $1", rid).Scan(&command, &id); err != nil {
		return
	}
	var why *string
	if h := m.taskHooks(); h.Run == nil {
		s := "this proxy runs no tasks"
		why = &s
	} else if err := h.Run(ctx, command, id); err != nil {
		s := err.Error()
		why = &s
	}
	if err := m.publishTasks(ctx, conn); err != nil {
		m.log.Warn("cluster: publish the tasks", "err", err)
	}
	if _, err := conn.Exec(ctx, "UPDATE shardgate_cluster.requests SET state = 'done', error = $2 WHERE id = $1", rid, why); err != nil {
		m.log.Warn("cluster: cannot answer a forwarded command", "request", rid, "err", err)
	}
	m.log.Info("cluster: ran a forwarded task command", "command", strings.ToUpper(command), "task", id, "err", why)
}
