package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// schema is the control database's bookkeeping. A member's row names the
// backend of its listening session (pid, with application_name
// appPrefix+name), which is how the others tell whether it is alive. The
// DO block brings a control database created by an older proxy up to
// date; it runs ALTER TABLE only then, as ALTER TABLE locks the table
// against the members' reads of cutovers even when there is nothing to do.
const schema = `
CREATE SCHEMA IF NOT EXISTS shardgate_cluster;
CREATE TABLE IF NOT EXISTS shardgate_cluster.members (
	name text PRIMARY KEY,
	pid integer NOT NULL,
	instance text NOT NULL,
	joined timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.topology (
	database text NOT NULL,
	generation bigint NOT NULL,
	taken_from text NOT NULL,
	fingerprint text NOT NULL,
	previous text NOT NULL,
	switched timestamptz NOT NULL DEFAULT now(),
	switched_by text NOT NULL,
	PRIMARY KEY (database, generation)
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.cutovers (
	id bigserial PRIMARY KEY,
	database text NOT NULL,
	coordinator text NOT NULL,
	state text NOT NULL,
	timeout_ms bigint NOT NULL,
	generation bigint,
	started timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.task_ids (
	id bigserial PRIMARY KEY,
	name text NOT NULL,
	active boolean NOT NULL DEFAULT true
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.tasks (
	id bigint PRIMARY KEY,
	proxy text NOT NULL,
	info jsonb NOT NULL,
	updated timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.requests (
	id bigserial PRIMARY KEY,
	proxy text NOT NULL,
	command text NOT NULL,
	task bigint NOT NULL,
	state text NOT NULL DEFAULT 'asked',
	error text,
	asked timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shardgate_cluster.acks (
	cutover bigint NOT NULL,
	member text NOT NULL,
	state text NOT NULL,
	pids jsonb,
	error text,
	at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (cutover, member)
);
DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'shardgate_cluster.cutovers'::regclass AND attname = 'task' AND NOT attisdropped) THEN
		ALTER TABLE shardgate_cluster.cutovers ADD COLUMN task bigint;
	END IF;
END $$;
CREATE TABLE IF NOT EXISTS shardgate_cluster.pauses (
	database text NOT NULL,
	proxy text NOT NULL,
	task bigint,
	role text NOT NULL,
	outcome text NOT NULL,
	pause_us bigint NOT NULL,
	at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (database, proxy)
);`

// channel is the LISTEN/NOTIFY channel of the cluster.
const channel = "shardgate_cluster"

// appPrefix starts the application_name of a member's listening session.
const appPrefix = "shardgate-cluster:"

// schemaLock serialises the schema's creation between proxies starting at
// once (CREATE … IF NOT EXISTS races on the catalog otherwise).
const schemaLock = "SELECT pg_advisory_xact_lock(hashtext('shardgate_cluster schema')::bigint)"

// ControlString returns the connection string of cfg's control database:
// cluster.control, or shard 0 of the first database with that database's
// first user's server credentials.
func ControlString(cfg *config.Config) (string, error) {
	if cfg.Cluster != nil && cfg.Cluster.Control != "" {
		return cfg.Cluster.Control, nil
	}
	if len(cfg.Databases) == 0 || len(cfg.Databases[0].Shards) == 0 {
		return "", fmt.Errorf("cluster: no control database (cluster.control is empty and there is no first database)")
	}
	db := &cfg.Databases[0]
	sh := &db.Shards[0]
	u := cfg.FirstUserFor(db.Name)
	if u == nil {
		return "", fmt.Errorf("cluster: no control database (cluster.control is empty and no user may use database %q)", db.Name)
	}
	user, password := config.ServerCredentials(u, sh)
	c := url.URL{Scheme: "postgres", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(sh.Host, strconv.Itoa(sh.Port)), Path: "/" + sh.Database,
		RawQuery: url.Values{"sslmode": {"prefer"}}.Encode()}
	return c.String(), nil
}

// connect opens a session on the control database. Its writes pass a
// cutover's fence (default_transaction_read_only on the old shards), since
// the default control database may be one of them.
func connect(ctx context.Context, control, app string) (*pgx.Conn, error) {
	if control == "" {
		return nil, fmt.Errorf("cluster: no control database (cluster.control is empty and the first database has no shard and user)")
	}
	pc, err := pgx.ParseConfig(control)
	if err != nil {
		return nil, fmt.Errorf("cluster: control database: %w", err)
	}
	pc.RuntimeParams["application_name"] = app
	pc.RuntimeParams["default_transaction_read_only"] = "off"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cluster: control database: %w", err)
	}
	return conn, nil
}

// ensureSchema creates the bookkeeping tables when they are missing.
func ensureSchema(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("cluster: schema: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, schemaLock); err != nil {
		return fmt.Errorf("cluster: schema: %w", err)
	}
	if _, err := tx.Exec(ctx, schema); err != nil {
		return fmt.Errorf("cluster: schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("cluster: schema: %w", err)
	}
	return nil
}
