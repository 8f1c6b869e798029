package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
)

// Local is what a member needs of its own proxy; admin.Gate implements it
// (it is replication.Gate).
type Local = replication.Gate

// pollInterval is how often a member reads the topology and the open
// cutovers without being notified (a notification is lost when the
// listening session breaks), and how long it waits before reconnecting.
const pollInterval = 2 * time.Second

// Member is this proxy in its cluster. New makes one; Run keeps it joined.
type Member struct {
	name     string
	instance string // this process, so that a reconnect can tell its own stale session
	control  string // cluster.control; "": the default, which follows the running configuration
	ack      time.Duration
	initial  *config.Config // until SetLocal
	local    Local
	log      *slog.Logger

	mu       sync.Mutex
	pid      uint32                  // backend of the listening session; 0 while not joined
	handling map[int64]bool          // cutovers of other proxies this member pauses for
	wakes    map[int64]chan struct{} // of cutovers waited for here (wakeup)
	busy     map[string]int          // databases a cutover holds here (this proxy's or another's)
	followMu sync.Mutex              // one follow at a time
	hooks    TaskHooks
	pauses   replication.PauseObserver // nil: pauses are not observed
	noted    map[string]bool           // overlay notes logged already
	ready    chan struct{}             // closed once joined the first time
	once     sync.Once
}

// New returns the member for cfg (cfg.Cluster is set). It can Overlay at
// once; SetLocal must be called before Run or a cutover.
func New(cfg *config.Config, log *slog.Logger) (*Member, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("cluster: the configuration has no cluster section")
	}
	dsn, err := ControlString(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return nil, fmt.Errorf("cluster.control: %w", err)
	}
	control := cfg.Cluster.Control
	var b [8]byte
	rand.Read(b[:])
	name := cfg.ClusterName()
	return &Member{name: name, instance: hex.EncodeToString(b[:]), control: control, ack: cfg.Cluster.AckTimeout,
		initial: cfg, log: log.With("cluster_member", name), handling: map[int64]bool{}, wakes: map[int64]chan struct{}{}, busy: map[string]int{}, noted: map[string]bool{},
		ready: make(chan struct{})}, nil
}

// controlString is the control database's connection string: the
// configured one, or the default of the running configuration (shard 0
// of the first database, which a cutover of that database moves).
func (m *Member) controlString() string {
	if m.control != "" {
		return m.control
	}
	m.mu.Lock()
	cfg := m.initial
	if m.local != nil {
		cfg = m.local.Config()
	}
	m.mu.Unlock()
	s, err := ControlString(cfg)
	if err != nil {
		return "" // connect fails with a clear message
	}
	return s
}

// SetLocal gives the member its proxy.
func (m *Member) SetLocal(local Local) {
	m.mu.Lock()
	m.local = local
	m.mu.Unlock()
}

// Name is this proxy's name in the cluster.
func (m *Member) Name() string { return m.name }

// Ready is closed once the member joined the cluster the first time.
func (m *Member) Ready() <-chan struct{} { return m.ready }

// Overlay returns cfg with the cluster's topology applied (see overlay):
// what a start or a reload installs instead of the file as it is.
func (m *Member) Overlay(ctx context.Context, cfg *config.Config) (*config.Config, error) {
	next, _, err := m.overlay(ctx, cfg)
	return next, err
}

func (m *Member) overlay(ctx context.Context, cfg *config.Config) (*config.Config, []Generation, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureSchema(ctx, conn); err != nil {
		return nil, nil, err
	}
	return m.overlayOn(ctx, conn, cfg)
}

// overlayOn is overlay over conn, a session on the control database whose
// schema exists.
func (m *Member) overlayOn(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (*config.Config, []Generation, error) {
	gens, err := generations(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	return overlay(cfg, gens, m.note)
}

// dial opens a session on the control database for one piece of work.
func (m *Member) dial(ctx context.Context) (*pgx.Conn, error) {
	return connect(ctx, m.controlString(), "shardgate-cluster")
}

// note logs an overlay's message once per database and generation.
func (m *Member) note(db string, gen int64, msg string, args ...any) {
	key := fmt.Sprintf("%s/%d/%s", db, gen, msg)
	m.mu.Lock()
	seen := m.noted[key]
	m.noted[key] = true
	m.mu.Unlock()
	if !seen {
		m.log.Warn(msg, append([]any{"database", db, "generation", gen}, args...)...)
	}
}

// Run keeps the member joined until ctx ends: it listens for the cluster's
// notifications, follows new generations and pauses for other proxies'
// cutovers, and reconnects when the control database goes away.
func (m *Member) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := m.session(ctx)
		m.mu.Lock()
		m.pid = 0
		m.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("cluster: lost the control database; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollInterval):
		}
	}
}

// session is one listening session: join, then serve notifications and
// poll until the session fails.
func (m *Member) session(ctx context.Context) error {
	control := m.controlString()
	conn, err := connect(ctx, control, appPrefix+m.name)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureSchema(ctx, conn); err != nil {
		return err
	}
	if err := m.register(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return fmt.Errorf("cluster: listen: %w", err)
	}
	m.mu.Lock()
	m.pid = conn.PgConn().PID()
	m.mu.Unlock()
	m.log.Info("cluster: joined", "pid", conn.PgConn().PID())
	m.once.Do(func() { close(m.ready) })
	for {
		m.poll(ctx)
		if m.controlString() != control {
			return errors.New("cluster: the control database moved with the first database's shards")
		}
		wctx, cancel := context.WithTimeout(ctx, pollInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !pgconn.Timeout(err):
			return fmt.Errorf("cluster: listen: %w", err)
		case n != nil:
			m.notified(ctx, n.Payload)
		}
	}
}

// register records this member with its listening session's pid. A row
// of the same name whose session is alive belongs to another proxy
// (refused) unless it is this process's own stale session (ended).
func (m *Member) register(ctx context.Context, conn *pgx.Conn) error {
	var oldPID int32
	var oldInstance string
	var alive bool
	err := conn.QueryRow(ctx, `SELECT m.pid, m.instance, EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = m.pid AND a.application_name = $2)
		FROM shardgate_cluster.members m WHERE m.name = $1`, m.name, appPrefix+m.name).Scan(&oldPID, &oldInstance, &alive)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("cluster: register: %w", err)
	case alive && oldInstance != m.instance:
		return fmt.Errorf("cluster: another proxy is named %q (its control session is pid %d): give each proxy its own cluster.name", m.name, oldPID)
	case alive:
		conn.Exec(ctx, "SELECT pg_terminate_backend($1)", oldPID)
	}
	_, err = conn.Exec(ctx, `INSERT INTO shardgate_cluster.members (name, pid, instance) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET pid = $2, instance = $3, joined = now()`, m.name, int32(conn.PgConn().PID()), m.instance)
	if err != nil {
		return fmt.Errorf("cluster: register: %w", err)
	}
	return nil
}

// notified handles one notification: "pause <id> <db> <coordinator>"
// starts pausing for another proxy's cutover; "request <id> <proxy>" is a
// task command forwarded to proxy; "switch <id>", "abort <id>" and "ack
// <id> <member>" wake whoever waits for cutover id here (wakeup), which
// reads the cutover's rows itself.
func (m *Member) notified(ctx context.Context, payload string) {
	f := strings.Fields(payload)
	var id int64
	switch {
	case len(f) < 2:
	case f[0] == "pause" && len(f) == 4:
		if _, err := fmt.Sscan(f[1], &id); err == nil {
			m.pauseFor(ctx, id, f[2], f[3])
		}
	case f[0] == "switch" || f[0] == "abort" || f[0] == "ack":
		if _, err := fmt.Sscan(f[1], &id); err == nil {
			m.kick(id)
		}
	case f[0] == "request" && len(f) == 3 && f[2] == m.name:
		if _, err := fmt.Sscan(f[1], &id); err == nil {
			go m.answer(ctx, id)
		}
	}
}

// poll follows the recorded topology and picks up the open cutovers a lost
// notification did not announce.
func (m *Member) poll(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, pollInterval)
	defer cancel()
	conn, err := m.dial(pctx) // one session for the whole poll
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("cluster: following the topology", "err", err)
		}
		return
	}
	defer conn.Close(context.WithoutCancel(pctx))
	if err := m.follow(pctx, conn, nil); err != nil && ctx.Err() == nil {
		m.log.Warn("cluster: following the topology", "err", err)
	}
	open, err := m.openCutovers(pctx, conn)
	if err != nil {
		return
	}
	m.publish(pctx, conn)
	for _, c := range open {
		m.pauseFor(ctx, c.id, c.database, c.coordinator)
	}
}

// publish records this proxy's tasks, and answers forwarded requests
// whose notification was lost.
func (m *Member) publish(ctx context.Context, conn *pgx.Conn) {
	if err := m.publishTasks(ctx, conn); err != nil {
		m.log.Warn("cluster: publish the tasks", "err", err)
	}
	rows, err := conn.Query(ctx, "SELECT id FROM shardgate_cluster.requests WHERE proxy = $1 AND state = 'asked'", m.name)
	if err != nil {
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return
	}
	for _, id := range ids {
		go m.answer(context.WithoutCancel(ctx), id)
	}
}

// follow installs the cluster's topology when it differs from the running
// one: each database that changes is paused (unless it is in paused
// already), the new configuration installed, the file rewritten when it
// still names the old shards, and the database resumed. It reads the
// topology over conn, or over a session of its own when conn is nil.
func (m *Member) follow(ctx context.Context, conn *pgx.Conn, paused map[string]bool) error {
	m.followMu.Lock()
	defer m.followMu.Unlock()
	cur := m.local.Config()
	var next *config.Config
	var applied []Generation
	var err error
	if conn != nil {
		next, applied, err = m.overlayOn(ctx, conn, cur)
	} else {
		next, applied, err = m.overlay(ctx, cur)
	}
	if err != nil || next == cur {
		return err
	}
	var changed []string
	for _, g := range applied {
		changed = append(changed, g.Database)
	}
	for _, db := range changed {
		if !paused[db] && m.held(db) {
			return nil // the cutover that holds it switches it
		}
	}
	for _, db := range changed {
		if paused[db] {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, m.ack)
		if err := m.local.Pause(pctx, db); err != nil {
			m.log.Warn("cluster: could not drain before following the new topology; switching anyway", "database", db, "err", err)
		}
		cancel()
		defer m.local.Resume(db)
	}
	m.rewriteFile(cur.Path, applied, next)
	if err := m.local.Install(next); err != nil {
		return fmt.Errorf("cluster: install the cluster's topology: %w", err)
	}
	m.log.Info("cluster: following the cluster's topology", "databases", changed)
	return nil
}

// hold marks db as held by a cutover until the returned func runs.
func (m *Member) hold(db string) (release func()) {
	m.mu.Lock()
	m.busy[db]++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.busy[db]--; m.busy[db] == 0 {
			delete(m.busy, db)
		}
		m.mu.Unlock()
	}
}

func (m *Member) held(db string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.busy[db] > 0
}

// rewriteFile points the config file at path to the new shards of the
// databases of applied, as the coordinating proxy's cutover did to its
// own file, when the file on disk still describes the old ones (several
// proxies may share one file). A failure is logged: the running
// configuration and Overlay at the next load do not depend on the file.
func (m *Member) rewriteFile(path string, applied []Generation, next *config.Config) {
	if path == "" {
		return
	}
	for _, g := range applied {
		onDisk, err := config.Load(path)
		if err != nil {
			m.log.Warn("cluster: could not read the config file to rewrite it", "file", path, "err", err)
			return
		}
		db := onDisk.Database(g.Database)
		if db == nil || Fingerprint(db) == g.Fingerprint {
			continue
		}
		if _, backup, err := replication.WriteCutoverFile(path, g.Database, g.TakenFrom, next, time.Now()); err != nil {
			m.log.Warn("cluster: could not rewrite the config file for the new topology", "file", path, "database", g.Database, "err", err)
		} else {
			m.log.Info("cluster: rewrote the config file for the new topology", "file", path, "database", g.Database, "backup", backup)
		}
	}
}

// MemberStatus is one member as SHOW CLUSTER lists it.
type MemberStatus struct {
	Name   string
	PID    int32 // of its listening session on the control database
	Live   bool  // that session is open
	Self   bool
	Joined time.Time
}

// Members lists the cluster's members.
func (m *Member) Members(ctx context.Context) ([]MemberStatus, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT m.name, m.pid, m.joined,
			EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = m.pid AND a.application_name = $1 || m.name)
		FROM shardgate_cluster.members m ORDER BY m.name`, appPrefix)
	if err != nil {
		return nil, fmt.Errorf("cluster: members: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MemberStatus, error) {
		var s MemberStatus
		err := r.Scan(&s.Name, &s.PID, &s.Joined, &s.Live)
		s.Self = s.Name == m.name
		return s, err
	})
}

// Generations lists every recorded generation, oldest first per database.
func (m *Member) Generations(ctx context.Context) ([]Generation, error) {
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	gens, err := generations(ctx, conn)
	if err != nil {
		return nil, err
	}
	var out []Generation
	for _, h := range gens {
		out = append(out, h...)
	}
	slices.SortFunc(out, func(a, b Generation) int {
		return cmp.Or(cmp.Compare(a.Database, b.Database), cmp.Compare(a.Generation, b.Generation))
	})
	return out, nil
}
