package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
)

// Generation is one switch of a database's topology: at generation N,
// database Database took the shards and sharding rules of database
// TakenFrom (a resharding cutover). Fingerprint describes the topology it
// switched to, Previous the one it replaced (Fingerprint of each).
type Generation struct {
	Database    string
	Generation  int64
	TakenFrom   string
	Fingerprint string
	Previous    string
	Switched    time.Time
	SwitchedBy  string
}

// fingerprinted is what Fingerprint hashes: a database's shards (without
// passwords) and sharding rules (without file positions).
type fingerprinted struct {
	Shards         []fpShard
	ShardedTables  []config.ShardedTable
	ShardedSchemas []config.ShardedSchema
	OmniTables     []string
}

type fpShard struct {
	Host, Database, User string
	Port                 int
	Replicas             []config.Replica
}

// Fingerprint names db's topology: equal fingerprints, equal shards and
// sharding rules. Passwords and file positions do not count.
func Fingerprint(db *config.Database) string {
	f := fingerprinted{ShardedSchemas: db.ShardedSchemas, OmniTables: db.OmniTables}
	for _, sh := range db.Shards {
		f.Shards = append(f.Shards, fpShard{Host: sh.Host, Database: sh.Database, User: sh.User, Port: sh.Port, Replicas: sh.Replicas})
	}
	for _, t := range db.ShardedTables {
		t.Line = 0
		f.ShardedTables = append(f.ShardedTables, t)
	}
	b, err := json.Marshal(f)
	if err != nil { // plain data: cannot happen
		panic(fmt.Sprintf("cluster: fingerprint: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// generations reads every recorded generation, oldest first per database.
func generations(ctx context.Context, conn *pgx.Conn) (map[string][]Generation, error) {
	rows, err := conn.Query(ctx, `SELECT database, generation, taken_from, fingerprint, previous, switched, switched_by
		FROM shardgate_cluster.topology ORDER BY database, generation`)
	if err != nil {
		return nil, fmt.Errorf("cluster: read the topology: %w", err)
	}
	out := map[string][]Generation{}
	for rows.Next() {
		var g Generation
		if err := rows.Scan(&g.Database, &g.Generation, &g.TakenFrom, &g.Fingerprint, &g.Previous, &g.Switched, &g.SwitchedBy); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cluster: read the topology: %w", err)
		}
		out[g.Database] = append(out[g.Database], g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: read the topology: %w", err)
	}
	return out, nil
}

// overlay returns cfg with the cluster's topology applied (cfg itself when
// nothing changes): a database whose entry still describes a topology
// that a recorded cutover replaced — an older file — takes the shards and
// rules of the database the latest generation took them from, as that
// cutover did. Any other difference from the latest generation is taken
// for the operator's edit, and the file's entry stays (logged). It fails
// when an older entry cannot be brought forward: the database the cutover
// took the shards from is missing or describes other shards.
func overlay(cfg *config.Config, gens map[string][]Generation, note noteFunc) (*config.Config, []Generation, error) {
	out := cfg
	var applied []Generation
	for name, hist := range gens {
		db := cfg.Database(name)
		if db == nil || len(hist) == 0 {
			continue
		}
		last := hist[len(hist)-1]
		fp := Fingerprint(db)
		if fp == last.Fingerprint {
			continue
		}
		if !replaced(hist, fp) {
			note(name, last.Generation, "cluster: the file's shards of this database differ from the cluster's topology; the file's are used",
				"switched_by", last.SwitchedBy)
			continue
		}
		from := out.Database(last.TakenFrom)
		if from == nil || Fingerprint(from) != last.Fingerprint {
			return nil, nil, &StaleFileError{fmt.Errorf("cluster: database %q was cut over to the shards of %q (generation %d, by %s at %s); "+
				"this file still describes the old shards, and its %q does not describe the new ones",
				name, last.TakenFrom, last.Generation, last.SwitchedBy, last.Switched.UTC().Format(time.RFC3339), last.TakenFrom)}
		}
		next, err := replication.CutoverConfig(out, name, last.TakenFrom)
		if err != nil {
			return nil, nil, err
		}
		note(name, last.Generation, "cluster: the file describes this database's shards before a cutover; the cluster's topology is used",
			"shards_of", last.TakenFrom, "switched_by", last.SwitchedBy)
		out = next
		applied = append(applied, last)
	}
	return out, applied, nil
}

// noteFunc logs a message about database db at generation gen.
type noteFunc func(db string, gen int64, msg string, args ...any)

// StaleFileError is a configuration that describes a database as it was
// before a cutover the cluster recorded, and cannot be brought forward.
type StaleFileError struct{ err error }

func (e *StaleFileError) Error() string { return e.err.Error() }
func (e *StaleFileError) Unwrap() error { return e.err }

// replaced reports whether fp is a topology that one of hist's switches
// replaced.
func replaced(hist []Generation, fp string) bool {
	for _, g := range hist {
		if g.Previous == fp {
			return true
		}
	}
	return false
}

// copyTopology copies every generation and g to the control database that
// next names, when the control database is the default one and next moves
// it (the cutover of the first database): proxies that start from files
// rewritten for next look there. tx is the switch's transaction on the
// current control database.
func (m *Member) copyTopology(ctx context.Context, tx pgx.Tx, next *config.Config, g Generation) error {
	if next.Cluster != nil && next.Cluster.Control != "" {
		return nil
	}
	to, err := ControlString(next)
	if err != nil || to == m.controlString() {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT database, generation, taken_from, fingerprint, previous, switched, switched_by
		FROM shardgate_cluster.topology ORDER BY database, generation`)
	if err != nil {
		return err
	}
	hist, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Generation, error) {
		var h Generation
		return h, r.Scan(&h.Database, &h.Generation, &h.TakenFrom, &h.Fingerprint, &h.Previous, &h.Switched, &h.SwitchedBy)
	})
	if err != nil {
		return err
	}
	g.Switched = time.Now()
	hist = append(hist, g)
	conn, err := connect(ctx, to, "shardgate-cluster")
	if err != nil {
		return fmt.Errorf("the control database moves with the first database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureSchema(ctx, conn); err != nil {
		return err
	}
	for _, h := range hist {
		if _, err := conn.Exec(ctx, `INSERT INTO shardgate_cluster.topology (database, generation, taken_from, fingerprint, previous, switched, switched_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
			h.Database, h.Generation, h.TakenFrom, h.Fingerprint, h.Previous, h.Switched, h.SwitchedBy); err != nil {
			return fmt.Errorf("copy the topology to the new control database: %w", err)
		}
	}
	m.log.Info("cluster: the control database moves with the first database's shard 0; topology copied", "generations", len(hist))
	return nil
}
