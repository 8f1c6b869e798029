package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
)

// A cutover across the cluster, as the control database records it:
//
//  1. the coordinator (the proxy whose task cuts over) inserts a cutovers
//     row in state "pausing" and notifies "pause <id> <db> <coordinator>";
//  2. every other member acknowledges "pausing" at once, pauses the
//     database (new transactions wait, open ones finish), and acknowledges
//     "paused" with the pids of its server connections to the old shards
//     (which the fence spares) or "failed" with the error;
//  3. the coordinator waits until every live member acknowledged "paused";
//     a member that has not answered at all after cluster.ack_timeout is
//     left out (its listening session is ended, so it rejoins and follows
//     the topology when it runs again; the fence keeps it off the old
//     shards meanwhile); a "failed" aborts the cutover;
//  4. the switch is one transaction: the new generation's topology row,
//     the cutover's state "switched", and a notification. Its commit is
//     the cutover's commit point: from then on every member that reads the
//     control database follows the new generation;
//  5. each member, seeing "switched", installs the new topology and
//     resumes; seeing "aborted", or the coordinator gone while "pausing",
//     it resumes on the old shards.

// decisionPoll is how often a pausing member reads its cutover's state.
const decisionPoll = 50 * time.Millisecond

// maxMemberPause bounds how long a member holds a database for another
// proxy's cutover that never decides (the coordinator hangs): it resumes
// then; the fence keeps it from writing to the old shards.
const maxMemberPause = 2 * time.Minute

type openCutover struct {
	id                    int64
	database, coordinator string
}

// openCutovers lists the undecided cutovers of other proxies.
func (m *Member) openCutovers(ctx context.Context, conn *pgx.Conn) ([]openCutover, error) {
	rows, err := conn.Query(ctx, `SELECT id, database, coordinator FROM shardgate_cluster.cutovers
		WHERE state = 'pausing' AND coordinator <> $1 AND started > now() - interval '10 minutes'`, m.name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (openCutover, error) {
		var c openCutover
		return c, r.Scan(&c.id, &c.database, &c.coordinator)
	})
}

// pauseFor starts pausing db for cutover id of another proxy, once per
// cutover.
func (m *Member) pauseFor(ctx context.Context, id int64, db, coordinator string) {
	if coordinator == m.name {
		return
	}
	m.mu.Lock()
	seen := m.handling[id]
	m.handling[id] = true
	m.mu.Unlock()
	if !seen {
		go m.pauseForCutover(ctx, id, db)
	}
}

// pauseForCutover is a member's side of cutover id (steps 2 and 5).
func (m *Member) pauseForCutover(ctx context.Context, id int64, db string) {
	defer m.hold(db)()
	wake, unwake := m.wakeup(id)
	defer unwake()
	log := m.log.With("cutover", id, "database", db)
	conn, err := m.dial(ctx)
	if err != nil {
		log.Warn("cluster: cannot answer a cutover", "err", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ack := func(state string, pids map[int][]uint32, why error) {
		var msg *string
		if why != nil {
			s := why.Error()
			msg = &s
		}
		var pj []byte
		if pids != nil {
			pj, _ = json.Marshal(pids)
		}
		// One statement, so one round trip: the notification wakes the
		// coordinator's WaitPaused.
		if _, err := conn.Exec(ctx, `WITH a AS (INSERT INTO shardgate_cluster.acks (cutover, member, state, pids, error) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (cutover, member) DO UPDATE SET state = $3, pids = coalesce($4, acks.pids), error = $5, at = now() RETURNING 1)
			SELECT pg_notify($6, $7) FROM a`,
			id, m.name, state, pj, msg, channel, fmt.Sprintf("ack %d %s", id, m.name)); err != nil {
			log.Warn("cluster: cannot answer a cutover", "state", state, "err", err)
		}
	}
	ack("pausing", nil, nil)
	serves := m.local.Config().Database(db)
	timeout, task, err := m.cutoverOf(ctx, conn, id)
	if err != nil {
		ack("failed", nil, err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// resumed ends this member's own pause: the metric at once, the
	// control database's row (SHOW CUTOVERS) after the acknowledgement.
	start := time.Now()
	resumed := func(outcome string) (record func()) {
		p := pausedHere{db: db, task: task, role: roleMember, outcome: outcome, pause: time.Since(start)}
		m.observePause(p)
		return func() { m.recordPause(ctx, p) }
	}
	if serves != nil {
		if err := m.local.Pause(pctx, db); err != nil {
			m.local.Resume(db)
			record := resumed(replication.PauseAborted)
			ack("failed", nil, fmt.Errorf("proxy %s could not pause %q: %w", m.name, db, err))
			record()
			return
		}
	}
	pids := map[int][]uint32{}
	if serves != nil {
		for s := range serves.Shards {
			pids[s] = m.local.ServerPIDs(db, s)
		}
	}
	ack("paused", pids, nil)
	log.Info("cluster: paused for another proxy's cutover")
	dctx, dcancel := context.WithTimeout(ctx, maxMemberPause)
	defer dcancel()
	state := m.awaitDecision(dctx, conn, id, wake)
	if state == "switched" {
		if err := m.follow(context.WithoutCancel(ctx), nil, map[string]bool{db: true}); err != nil {
			log.Error("cluster: the cutover switched, but following the new topology failed", "err", err)
		}
	}
	record := func() {}
	if serves != nil {
		m.local.Resume(db)
		outcome := replication.PauseAborted
		if state == "switched" {
			outcome = replication.PauseDone
		}
		record = resumed(outcome)
	}
	ack("resumed", nil, nil)
	record()
	log.Info("cluster: resumed after another proxy's cutover", "outcome", state)
}

// cutoverOf reads how long cutover id waits for the members to pause, and
// the task it cuts over (0 when a proxy that records none began it).
func (m *Member) cutoverOf(ctx context.Context, conn *pgx.Conn, id int64) (time.Duration, int, error) {
	var ms int64
	var task *int64
	if err := conn.QueryRow(ctx, "SELECT timeout_ms, task FROM shardgate_cluster.cutovers WHERE id = $1", id).Scan(&ms, &task); err != nil {
		return 0, 0, fmt.Errorf("cluster: read cutover %d: %w", id, err)
	}
	t := 0
	if task != nil {
		t = int(*task)
	}
	return time.Duration(ms) * time.Millisecond, t, nil
}

// awaitDecision waits until cutover id is switched or aborted, or its
// coordinator left the cluster without deciding ("gone"), or ctx ends
// ("timeout").
func (m *Member) awaitDecision(ctx context.Context, conn *pgx.Conn, id int64, wake <-chan struct{}) string {
	for {
		var state string
		var live bool
		err := conn.QueryRow(ctx, `SELECT c.state, EXISTS (SELECT 1 FROM shardgate_cluster.members m JOIN pg_stat_activity a
				ON a.pid = m.pid AND a.application_name = $2 || m.name WHERE m.name = c.coordinator)
			FROM shardgate_cluster.cutovers c WHERE c.id = $1`, id, appPrefix).Scan(&state, &live)
		switch {
		case err == nil && state != "pausing":
			return state
		case err == nil && !live:
			return "gone"
		case err != nil && ctx.Err() == nil:
			m.log.Warn("cluster: reading a cutover's state", "cutover", id, "err", err)
			if conn.IsClosed() {
				if again, cerr := m.dial(ctx); cerr == nil {
					defer again.Close(context.WithoutCancel(ctx))
					conn = again
				}
			}
		}
		if !sleepOrWake(ctx, wake, decisionPoll) {
			return "timeout"
		}
	}
}

// wakeup returns the channel that notifications about cutover id signal
// (Member.notified), and the function that stops signalling it. A waiter
// reads the cutover's rows again when it is signalled, or after
// decisionPoll when a notification was lost.
func (m *Member) wakeup(id int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.wakes[id] = ch
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		if m.wakes[id] == ch {
			delete(m.wakes, id)
		}
		m.mu.Unlock()
	}
}

// kick signals the waiter of cutover id, if any.
func (m *Member) kick(id int64) {
	m.mu.Lock()
	ch := m.wakes[id]
	m.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// sleepOrWake waits d, until wake is signalled or until ctx ends; it
// reports whether ctx is still live.
func sleepOrWake(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return true
	case <-t.C:
		return true
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// BeginCutover starts a cutover of db for task across the cluster (step
// 1): the other members start pausing it. timeout bounds their pause as it
// bounds this proxy's.
func (m *Member) BeginCutover(ctx context.Context, db string, task int, timeout time.Duration) (replication.ClusterCutover, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &cutover{m: m, conn: conn, db: db, task: task, started: time.Now(), release: m.hold(db)}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO shardgate_cluster.cutovers (database, coordinator, state, timeout_ms, task)
			VALUES ($1, $2, 'pausing', $3, $4) RETURNING id`, db, m.name, timeout.Milliseconds(), task).Scan(&c.id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", channel, fmt.Sprintf("pause %d %s %s", c.id, db, m.name))
		return err
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: begin the cutover: %w", err)
	}
	m.log.Info("cluster: cutover begun; the other proxies pause", "cutover", c.id, "database", db)
	return c, nil
}

// cutover is the coordinator's side of one cutover.
type cutover struct {
	m       *Member
	conn    *pgx.Conn
	db      string
	task    int
	id      int64
	started time.Time
	pids    map[int][]uint32 // the members' server connections, by source shard
	release func()           // of the hold on db
}

type memberAck struct {
	name  string
	pid   int32
	state *string
	pids  []byte
	why   *string
}

// acks reads the live members other than the coordinator with their
// answers to c.
func (c *cutover) acks(ctx context.Context) ([]memberAck, error) {
	rows, err := c.conn.Query(ctx, `SELECT m.name, m.pid, k.state, k.pids, k.error
		FROM shardgate_cluster.members m
		JOIN pg_stat_activity a ON a.pid = m.pid AND a.application_name = $3 || m.name
		LEFT JOIN shardgate_cluster.acks k ON k.cutover = $1 AND k.member = m.name
		WHERE m.name <> $2 ORDER BY m.name`, c.id, c.m.name, appPrefix)
	if err != nil {
		return nil, fmt.Errorf("cluster: read the answers to the cutover: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (memberAck, error) {
		var a memberAck
		return a, r.Scan(&a.name, &a.pid, &a.state, &a.pids, &a.why)
	})
}

// WaitPaused waits until every other live member paused the database
// (step 3). Members that gave no answer at all within the ack timeout are
// left out: their listening sessions are ended.
func (c *cutover) WaitPaused(ctx context.Context) error {
	wake, unwake := c.m.wakeup(c.id)
	defer unwake()
	for {
		acks, err := c.acks(ctx)
		if err != nil {
			return err
		}
		var silent, draining []string
		var silentPIDs []int32
		c.pids = map[int][]uint32{}
		for _, a := range acks {
			switch {
			case a.state == nil:
				silent = append(silent, a.name)
				silentPIDs = append(silentPIDs, a.pid)
			case *a.state == "failed":
				why := ""
				if a.why != nil {
					why = *a.why
				}
				return fmt.Errorf("cluster: proxy %s could not pause: %s", a.name, why)
			case *a.state == "pausing":
				draining = append(draining, a.name)
			default:
				var p map[int][]uint32
				if len(a.pids) > 0 && json.Unmarshal(a.pids, &p) == nil {
					for s, ps := range p {
						c.pids[s] = append(c.pids[s], ps...)
					}
				}
			}
		}
		if len(silent) == 0 && len(draining) == 0 {
			c.m.log.Info("cluster: every proxy paused", "cutover", c.id, "proxies", len(acks)+1, "took", time.Since(c.started))
			return nil
		}
		if len(silent) > 0 && time.Since(c.started) > c.m.ack {
			c.leaveOut(ctx, silent, silentPIDs)
			continue
		}
		if !sleepOrWake(ctx, wake, decisionPoll) {
			return fmt.Errorf("cluster: proxies still draining %q: %s (and not answering: %s): %w",
				c.db, strings.Join(draining, ", "), strings.Join(silent, ", "), ctx.Err())
		}
	}
}

// leaveOut ends the listening sessions of members that do not answer, so
// that they count as gone; each rejoins and follows the topology when it
// runs again.
func (c *cutover) leaveOut(ctx context.Context, names []string, pids []int32) {
	c.m.log.Warn("cluster: proxies did not answer the cutover within cluster.ack_timeout; leaving them out (the fence keeps them off the old shards)",
		"cutover", c.id, "proxies", names, "ack_timeout", c.m.ack)
	for _, pid := range pids {
		if _, err := c.conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			c.m.log.Warn("cluster: could not end a silent proxy's control session", "pid", pid, "err", err)
		}
	}
	// pg_terminate_backend only signals: wait until the sessions are gone.
	for range 50 {
		var n int
		if err := c.conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pids).Scan(&n); err != nil || n == 0 {
			return
		}
		if !sleep(ctx, decisionPoll) {
			return
		}
	}
}

// ServerPIDs lists the other members' server connections to shard of the
// source database, as they reported them when they paused.
func (c *cutover) ServerPIDs(shard int) []uint32 { return slices.Clone(c.pids[shard]) }

// Switch records the new generation of c's database (step 4): it now has
// the shards and rules of database from (before: its entry until now;
// next: the configuration the cutover installs). The commit is the
// cutover's commit point. When the control database is the default one
// and moves with this cutover (shard 0 of the first database), the
// topology is copied to the new shard 0 first, so that a proxy that starts
// from the rewritten file finds it there.
func (c *cutover) Switch(ctx context.Context, before *config.Database, from string, next *config.Config) error {
	after := next.Database(c.db)
	if after == nil {
		return fmt.Errorf("cluster: switch: database %q is not in the new configuration", c.db)
	}
	g := Generation{Database: c.db, TakenFrom: from, Fingerprint: Fingerprint(after), Previous: Fingerprint(before), SwitchedBy: c.m.name}
	err := pgx.BeginFunc(ctx, c.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('shardgate_cluster topology ' || $1)::bigint)", c.db); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(generation), 0) + 1 FROM shardgate_cluster.topology WHERE database = $1", c.db).Scan(&g.Generation); err != nil {
			return err
		}
		if err := c.m.copyTopology(ctx, tx, next, g); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shardgate_cluster.topology (database, generation, taken_from, fingerprint, previous, switched_by)
			VALUES ($1, $2, $3, $4, $5, $6)`, g.Database, g.Generation, g.TakenFrom, g.Fingerprint, g.Previous, g.SwitchedBy); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "UPDATE shardgate_cluster.cutovers SET state = 'switched', generation = $2 WHERE id = $1 AND state = 'pausing'", c.id, g.Generation)
		if err == nil && tag.RowsAffected() != 1 {
			err = errors.New("the cutover is no longer pausing")
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", channel, fmt.Sprintf("switch %d", c.id))
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: switch %q to generation %d: %w", c.db, g.Generation, err)
	}
	c.m.log.Info("cluster: switched", "cutover", c.id, "database", c.db, "generation", g.Generation, "shards_of", from)
	return nil
}

// Abort tells the other members to resume on the old shards.
func (c *cutover) Abort(ctx context.Context, reason error) {
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, c.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE shardgate_cluster.cutovers SET state = 'aborted' WHERE id = $1 AND state = 'pausing'", c.id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", channel, fmt.Sprintf("abort %d", c.id))
		return err
	})
	if err != nil {
		c.m.log.Warn("cluster: could not record the aborted cutover; the other proxies resume when they see this proxy gone or time out",
			"cutover", c.id, "err", err)
	}
	c.m.log.Info("cluster: cutover aborted", "cutover", c.id, "reason", reason)
}

// Resumed records the coordinator's own pause (see Member.recordPause).
func (c *cutover) Resumed(ctx context.Context, pause time.Duration, outcome string) {
	c.m.recordPause(ctx, pausedHere{db: c.db, task: c.task, role: roleCoordinator, outcome: outcome, pause: pause})
}

// Close ends the coordinator's control session.
func (c *cutover) Close() {
	c.conn.Close(context.Background())
	c.release()
}
