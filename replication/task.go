package replication

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// Task is one resharding task: it moves the data of the source database
// (N shards) to the destination database (M shards). Its steps run in order:
// SchemaSync, Copy, SchemaSyncPost, Stream (until cutover: WaitCaughtUp,
// SyncSequences), Drop. Every step records its progress on the destination,
// so a new Task with the same source and destination resumes where the last
// one stopped.
type Task struct {
	// Name identifies the task in slot, publication and origin names and in
	// the bookkeeping tables. New derives it from the two database names.
	Name string

	src, dst       *config.Database
	user, password string
	log            *slog.Logger

	// CopyParallelism is how many tables each source shard copies at once
	// (default 4).
	CopyParallelism int

	// names are the publication and slot the user chose (UseNames); empty
	// fields mean the task's own (names.go).
	names Names

	prog  progress // in-memory copy and apply progress (progress.go)
	flush flushes  // the flush LSNs of the readers running here (catchup.go)

	knobs Knobs // test seams, from Manager.KnobsForTest
	claim claim // this run's claim on the destinations (claim.go)
}

// Step is a persisted step of a task, recorded per destination shard in
// shardgate_reshard.steps.
type Step uint8

const (
	// StepNone: nothing was done yet.
	StepNone Step = iota
	// StepSchema: the pre-data schema (tables, types, sequences) is on the
	// destination shard.
	StepSchema
	// StepCopied: every published table of every source shard is copied to
	// the destination shard (recorded in shardgate_reshard.table_copies).
	StepCopied
	// StepPostSchema: indexes, constraints and triggers are on the
	// destination shard; streaming may start.
	StepPostSchema
)

func (s Step) String() string {
	switch s {
	case StepNone:
		return "none"
	case StepSchema:
		return "schema"
	case StepCopied:
		return "copied"
	case StepPostSchema:
		return "post_schema"
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// bookkeeping is created on every destination shard. tasks (used on shard
// 0 only) is the Manager's record of a running task, so that a restarted
// proxy resumes it; its source_shards are the source's shards as they were
// before the cutover, set from just before the cutover rewrites the config
// file until the task is dropped (persist.go); publication and slot are the
// names given to UseNames (NULL: the task's own); the code that reads or
// writes tasks first adds those columns to a table an older version created
// (recordColumns), so that not every destination session takes the
// table's lock for it. table_copies holds one
// row per (task, source shard, table) copied to this shard, written in the
// same transaction as the rows; lsn is the snapshot's consistent point, below
// which the stream skips that table's changes. runners holds the claim of
// the run that writes the task (claim.go).
const bookkeeping = `CREATE SCHEMA IF NOT EXISTS shardgate_reshard;
CREATE TABLE IF NOT EXISTS shardgate_reshard.steps (
	task text NOT NULL,
	step text NOT NULL,
	done_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, step));
CREATE TABLE IF NOT EXISTS shardgate_reshard.table_copies (
	task text NOT NULL,
	source_shard int NOT NULL,
	table_name text NOT NULL,
	lsn pg_lsn NOT NULL,
	rows bigint NOT NULL,
	done_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, source_shard, table_name));
CREATE TABLE IF NOT EXISTS shardgate_reshard.runners (
	task text PRIMARY KEY,
	token text NOT NULL,
	claimed_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS shardgate_reshard.tasks (
	task text PRIMARY KEY,
	kind text NOT NULL,
	source text NOT NULL,
	destination text NOT NULL,
	state text NOT NULL,
	started timestamptz NOT NULL DEFAULT now(),
	updated timestamptz NOT NULL DEFAULT now(),
	error text,
	source_shards jsonb,
	publication text,
	slot text);
`

// bookkeepingSchema is excluded from schema sync and from copies.
const bookkeepingSchema = "shardgate_reshard"

// clusterSchema is the cluster's control schema (package cluster), which
// the default control database keeps on shard 0 of the first database: it
// belongs to that server, never to a resharded database, so it is neither
// copied nor streamed (a cutover's rows streamed half-way would look open
// for ever on the destination).
const clusterSchema = "shardgate_cluster"

// ownSchemas are the schemas of shardgate's own that resharding leaves
// where they are.
var ownSchemas = []string{bookkeepingSchema, clusterSchema}

// New returns a task moving src to dst. user and password are the server
// credentials used on every shard that does not set its own; the user must be
// a superuser (or have REPLICATION and own the tables) on the sources and a
// superuser on the destinations (replication origins need it).
func New(src, dst *config.Database, user, password string, log *slog.Logger) (*Task, error) {
	if src == nil || dst == nil || len(src.Shards) == 0 || len(dst.Shards) == 0 {
		return nil, errors.New("replication: source and destination need at least one shard each")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Task{
		Name: taskName(src.Name, dst.Name),
		src:  src, dst: dst,
		user: user, password: password,
		log:             log.With("task", taskName(src.Name, dst.Name)),
		CopyParallelism: 4,
	}
	// Check that every destination rule builds, so that errors show up now.
	for i := range dst.ShardedTables {
		if _, _, err := shardFunction(&dst.ShardedTables[i], len(dst.Shards)); err != nil {
			return nil, fmt.Errorf("replication: destination %q: sharded_tables[%d]: %w", dst.Name, i, err)
		}
	}
	return t, nil
}

// taskName makes a name that is a valid, short slot name: lower-case
// letters, digits and underscores, with a hash suffix when it had to be
// shortened.
func taskName(src, dst string) string {
	clean := func(s string) string {
		var b strings.Builder
		for _, r := range strings.ToLower(s) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return b.String()
	}
	name := "sg_" + clean(src) + "_to_" + clean(dst)
	if len(name) > 40 {
		sum := sha256.Sum256([]byte(src + "\x00" + dst))
		name = name[:31] + "_" + hex.EncodeToString(sum[:4])
	}
	return name
}

// slotName is the permanent slot on source shard s: the task's name and
// the shard, or the name given to UseNames (names.go).
func (t *Task) slotName(s int) string {
	if t.names.Slot != "" {
		return namedSlot(t.names.Slot, s, len(t.src.Shards))
	}
	return t.ownPublication(s)
}

// ownPublication is the publication FOR ALL TABLES the task creates on
// source shard s when UseNames gave none, and drops.
func (t *Task) ownPublication(s int) string { return t.Name + "_" + strconv.Itoa(s) }

// publication is the publication the stream of source shard s uses.
func (t *Task) publication(s int) string {
	if t.names.Publication != "" {
		return t.names.Publication
	}
	return t.ownPublication(s)
}

// originName is the replication origin of the stream from source shard s to
// destination shard d. It lives on destination shard d.
func (t *Task) originName(s, d int) string {
	return t.Name + "_" + strconv.Itoa(s) + "_" + strconv.Itoa(d)
}

// dsn returns a connection string for shard i of db. replication adds
// replication=database for the walsender protocol.
func (t *Task) dsn(db *config.Database, i int, replication bool) string {
	sh := &db.Shards[i]
	user, password := t.user, t.password
	if sh.User != "" {
		user = sh.User
	}
	if sh.Password != "" {
		password = sh.Password
	}
	port := sh.Port
	if port == 0 {
		port = 5432
	}
	name := sh.Database
	if name == "" {
		name = db.Name
	}
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(user, password),
		Host:   net.JoinHostPort(sh.Host, strconv.Itoa(port)),
		Path:   "/" + name,
	}
	// The task writes on a fenced source (fence.go) too: dropping its
	// publication and slot.
	q := url.Values{"sslmode": {"prefer"}, "application_name": {taskAppName},
		"options": {"--default_transaction_read_only=off"}}
	if replication {
		q.Set("replication", "database")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// shardDesc names a shard in errors, without credentials.
func shardDesc(role string, db *config.Database, i int) string {
	sh := &db.Shards[i]
	name := sh.Database
	if name == "" {
		name = db.Name
	}
	return fmt.Sprintf("%s shard %d (%s:%d/%s)", role, i, sh.Host, sh.Port, name)
}

func (t *Task) connect(ctx context.Context, db *config.Database, i int) (*pgx.Conn, error) {
	role := "source"
	if db == t.dst {
		role = "destination"
	}
	conn, err := pgx.Connect(ctx, t.dsn(db, i, false))
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", shardDesc(role, db, i), err)
	}
	return conn, nil
}

// connectApplier connects to destination shard d for an applier, whose
// session reads and writes with raw system calls (rawConn).
func (t *Task) connectApplier(ctx context.Context, d int) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(t.dsn(t.dst, d, false))
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", shardDesc("destination", t.dst, d), err)
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newRawConn(conn), nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", shardDesc("destination", t.dst, d), err)
	}
	return conn, nil
}

func (t *Task) connectSource(ctx context.Context, s int) (*pgx.Conn, error) {
	return t.connect(ctx, t.src, s)
}

// connectDest connects to destination shard d and makes sure the bookkeeping
// tables exist.
func (t *Task) connectDest(ctx context.Context, d int) (*pgx.Conn, error) {
	conn, err := t.connect(ctx, t.dst, d)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, bookkeeping); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: create bookkeeping: %w", shardDesc("destination", t.dst, d), err)
	}
	return conn, nil
}

// stepDone reports whether step is recorded on the destination shard.
func (t *Task) stepDone(ctx context.Context, conn *pgx.Conn, step Step) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM shardgate_reshard.steps WHERE task = $1 AND step = $2)`,
		t.Name, step.String()).Scan(&ok)
	return ok, err
}

// Step returns the last step every destination shard has recorded.
func (t *Task) Step(ctx context.Context) (Step, error) {
	last := StepPostSchema
	for d := range t.dst.Shards {
		// Not connectDest: a runner that lost its lease must not create
		// the bookkeeping another proxy's drop removed.
		conn, err := t.connect(ctx, t.dst, d)
		if err != nil {
			return StepNone, err
		}
		var kept bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass('shardgate_reshard.steps') IS NOT NULL").Scan(&kept); err != nil || !kept {
			conn.Close(ctx)
			if err != nil {
				return StepNone, fmt.Errorf("%s: %w", shardDesc("destination", t.dst, d), err)
			}
			return StepNone, nil
		}
		s := StepNone
		for _, step := range []Step{StepSchema, StepCopied, StepPostSchema} {
			ok, err := t.stepDone(ctx, conn, step)
			if err != nil {
				conn.Close(ctx)
				return StepNone, fmt.Errorf("%s: %w", shardDesc("destination", t.dst, d), err)
			}
			if ok {
				s = step
			}
		}
		conn.Close(ctx)
		last = min(last, s)
	}
	return last, nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func qualified(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }
