package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/replication"
)

// Each proxy's own pause in a cutover. The coordinator's pause (SHOW
// TASKS) runs from the cutover's start to its resume; a member's from the
// notification that it pause to its resume after the switch or the abort.
// Every proxy records its pause in shardgate_cluster.pauses, one row per
// database and proxy that the next cutover of the database replaces, and
// observes it in its metrics (replication.PauseObserver). The row is
// written once traffic resumed, over a session on the control database of
// the running configuration: after a cutover that moved the default
// control database, that is the new one, where SHOW CUTOVERS reads.

// The roles of a proxy in a cutover.
const (
	roleCoordinator = "coordinator" // runs the task that cuts over
	roleMember      = "member"      // paused for another proxy's cutover
)

// recordTimeout bounds the write of one pause: it happens after traffic
// resumed, and a control database out of reach only loses the row.
const recordTimeout = 5 * time.Second

// pausedHere is one pause of this proxy.
type pausedHere struct {
	db      string
	task    int // 0: unknown (the coordinator recorded none)
	role    string
	outcome string // replication.PauseDone or PauseAborted
	pause   time.Duration
}

// SetPauseObserver makes the member observe its pauses for other proxies'
// cutovers (metrics.Metrics); the task manager observes this proxy's own.
func (m *Member) SetPauseObserver(o replication.PauseObserver) {
	m.mu.Lock()
	m.pauses = o
	m.mu.Unlock()
}

func (m *Member) observePause(p pausedHere) {
	m.mu.Lock()
	o := m.pauses
	m.mu.Unlock()
	if o != nil {
		o.ObserveCutoverPause(p.db, p.outcome, p.pause)
	}
}

// recordPause writes p to shardgate_cluster.pauses; a failure is logged.
func (m *Member) recordPause(ctx context.Context, p pausedHere) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := func() error {
		conn, err := m.dial(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var task *int64
		if p.task != 0 {
			t := int64(p.task)
			task = &t
		}
		_, err = conn.Exec(ctx, `INSERT INTO shardgate_cluster.pauses (database, proxy, task, role, outcome, pause_us)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (database, proxy) DO UPDATE SET task = $3, role = $4, outcome = $5, pause_us = $6, at = now()`,
			p.db, m.name, task, p.role, p.outcome, p.pause.Microseconds())
		return err
	}()
	if err != nil {
		m.log.Warn("cluster: cannot record this proxy's cutover pause", "database", p.db, "pause", p.pause, "err", err)
	}
}

// Pause is one proxy's pause in the last cutover of a database, as SHOW
// CUTOVERS lists it.
type Pause struct {
	Database string
	Proxy    string
	Task     int    // the task that cut over; 0: unknown
	Role     string // coordinator | member
	Outcome  string // done | aborted
	Pause    time.Duration
	At       time.Time // when the proxy resumed
}

// Pauses lists every proxy's pause in the last cutover of each database
// it paused, by database, then newest first.
func (m *Member) Pauses(ctx context.Context) ([]Pause, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT database, proxy, coalesce(task, 0), role, outcome, pause_us, at
		FROM shardgate_cluster.pauses ORDER BY database, at DESC, proxy`)
	if err != nil {
		return nil, fmt.Errorf("cluster: pauses: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pause, error) {
		var p Pause
		var us int64
		err := r.Scan(&p.Database, &p.Proxy, &p.Task, &p.Role, &p.Outcome, &us, &p.At)
		p.Pause = time.Duration(us) * time.Microsecond
		return p, err
	})
}
