package replication

import (
	"context"
	"errors"
	"fmt"
)

// Check verifies what Copy and Stream rely on, and returns every problem
// found, each naming its shard and table: superusers, free slots, WAL
// senders and origins, the same columns on every shard (checkServers);
// wal_level=logical on each source; a
// primary key or replica identity on each table (or REPLICA IDENTITY FULL)
// that includes a sharded table's key column; and empty destination tables,
// unless this task has already copied to that shard (a resumed task).
func (t *Task) Check(ctx context.Context) error {
	errs := t.checkServers(ctx)
	var tables []*table
	for s := range t.src.Shards {
		conn, err := t.connectSource(ctx, s)
		if err != nil {
			return fmt.Errorf("replication: check: %w", err)
		}
		var walLevel string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err))
		} else if walLevel != "logical" {
			errs = append(errs, fmt.Errorf("%s: wal_level is %q; resharding needs wal_level = logical (and a restart)",
				shardDesc("source", t.src, s), walLevel))
		}
		tbs, err := t.loadTables(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err))
			continue
		}
		for _, tb := range tbs {
			if err := checkIdentity(tb); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err))
			}
		}
		if s == 0 {
			tables = tbs
		}
	}
	for d := range t.dst.Shards {
		if err := t.checkDestEmpty(ctx, d, tables); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("replication: check: %w", errors.Join(errs...))
	}
	return nil
}

// checkDestEmpty fails when destination shard d holds rows in one of tables
// and this task has not started copying to it.
func (t *Task) checkDestEmpty(ctx context.Context, d int, tables []*table) error {
	conn, err := t.connectDest(ctx, d)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var resuming bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM shardgate_reshard.table_copies WHERE task = $1)`,
		t.Name).Scan(&resuming); err != nil || resuming {
		return err
	}
	var errs []error
	for _, tb := range tables {
		var exists, nonEmpty bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tb.ident()).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			continue // SchemaSync creates it
		}
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+tb.ident()+")").Scan(&nonEmpty); err != nil {
			return fmt.Errorf("%s: table %s: %w", shardDesc("destination", t.dst, d), tb, err)
		}
		if nonEmpty {
			errs = append(errs, fmt.Errorf("%s: table %s is not empty; resharding copies into empty tables only",
				shardDesc("destination", t.dst, d), tb))
		}
	}
	return errors.Join(errs...)
}
