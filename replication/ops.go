package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// SlotLag is the state of one source shard's replication slot.
type SlotLag struct {
	Source    int
	Slot      string
	Confirmed pglogrepl.LSN // the slot's confirmed_flush_lsn
	Current   pglogrepl.LSN // the source's pg_current_wal_lsn()
	Bytes     int64         // Current - Confirmed
	// Seconds is the walsender's flush_lag (pg_stat_replication): how long
	// ago the source wrote what the destinations last confirmed; 0 when
	// caught up or when no stream is connected.
	Seconds float64
}

// Lag returns, per source shard, how far the destinations are behind.
func (t *Task) Lag(ctx context.Context) ([]SlotLag, error) {
	var out []SlotLag
	for s := range t.src.Shards {
		conn, err := t.connectSource(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("replication: lag: %w", err)
		}
		l := SlotLag{Source: s, Slot: t.slotName(s)}
		var confirmed, current string
		err = conn.QueryRow(ctx, `SELECT coalesce(s.confirmed_flush_lsn, '0/0')::text, pg_current_wal_lsn()::text,
			pg_wal_lsn_diff(pg_current_wal_lsn(), coalesce(s.confirmed_flush_lsn, '0/0'))::bigint,
			coalesce(extract(epoch FROM r.flush_lag), 0)::float8
			FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = $1`, l.Slot).Scan(&confirmed, &current, &l.Bytes, &l.Seconds)
		conn.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("replication: lag: %s: slot %s: %w", shardDesc("source", t.src, s), l.Slot, err)
		}
		l.Confirmed, _ = pglogrepl.ParseLSN(confirmed)
		l.Current, _ = pglogrepl.ParseLSN(current)
		out = append(out, l)
	}
	return out, nil
}

// CurrentLSN returns pg_current_wal_lsn() of every source shard, the
// WAL's write position: WaitCaughtUp's target when it is given none. It
// covers every committed transaction only once their commits are written,
// which an asynchronous commit (synchronous_commit = off) leaves to the
// WAL writer; the cutover waits for the flush position its fence returns
// instead (fence.go).
func (t *Task) CurrentLSN(ctx context.Context) ([]pglogrepl.LSN, error) {
	lags, err := t.Lag(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pglogrepl.LSN, len(lags))
	for i, l := range lags {
		out[i] = l.Current
	}
	return out, nil
}

// WaitCaughtUp waits until, for every source shard s, every destination
// shard has applied the source's WAL up to target[s] (nil: CurrentLSN now).
// Stream must be running. It polls the slots' confirmed flush LSN, which the
// stream advances only past what every destination shard committed.
func (t *Task) WaitCaughtUp(ctx context.Context, target []pglogrepl.LSN) error {
	if target == nil {
		var err error
		if target, err = t.CurrentLSN(ctx); err != nil {
			return err
		}
	}
	// The stream runs in this process (as at cutover): its readers say
	// when they got there.
	if in, err := t.flush.wait(ctx, target); in {
		return err
	}
	for {
		lags, err := t.Lag(ctx)
		if err != nil {
			return err
		}
		behind := false
		for i, l := range lags {
			if l.Confirmed < target[i] {
				behind = true
			}
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication: wait caught up: %w (lag %v)", ctx.Err(), lags)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SyncSequences sets every sequence on every destination shard past the
// largest value any source shard has handed out, and makes the identity
// columns GENERATED ALWAYS on the source ALWAYS again on the destination
// (identity.go). Run it at cutover, after writes to the source stopped
// and the stream ended. The shards are read and written in parallel: the
// step is part of the cutover's pause.
func (t *Task) SyncSequences(ctx context.Context) error {
	last := make([]map[string]int64, len(t.src.Shards))
	var always []identityColumn
	g, gctx := errgroup.WithContext(ctx)
	for s := range t.src.Shards {
		g.Go(func() error {
			var err error
			last[s], err = t.sourceSequences(gctx, s, &always)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("replication: sync sequences: %w", err)
	}
	highest := map[string]int64{}
	for _, l := range last {
		for name, v := range l {
			if cur, ok := highest[name]; !ok || v > cur {
				highest[name] = v
			}
		}
	}
	g, gctx = errgroup.WithContext(ctx)
	for d := range t.dst.Shards {
		g.Go(func() error { return t.destSequences(gctx, d, highest, always) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("replication: sync sequences: %w", err)
	}
	return nil
}

// sourceSequences reads the last value of every sequence of source shard
// s; shard 0 also lists its identity columns GENERATED ALWAYS in always.
func (t *Task) sourceSequences(ctx context.Context, s int, always *[]identityColumn) (map[string]int64, error) {
	conn, err := t.connectSource(ctx, s)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if s == 0 {
		if *always, err = identityColumns(ctx, conn, "a"); err != nil {
			return nil, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err)
		}
	}
	rows, _ := conn.Query(ctx, `SELECT format('%I.%I', schemaname, sequencename), last_value
		FROM pg_sequences WHERE last_value IS NOT NULL AND increment_by > 0 AND schemaname <> ALL ($1::text[])`, ownSchemas)
	last := map[string]int64{}
	var name string
	var v int64
	if _, err = pgx.ForEachRow(rows, []any{&name, &v}, func() error {
		last[name] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", shardDesc("source", t.src, s), err)
	}
	return last, nil
}

// destSequences sets destination shard d's sequences to last and its
// identity columns of always to GENERATED ALWAYS.
func (t *Task) destSequences(ctx context.Context, d int, last map[string]int64, always []identityColumn) error {
	conn, err := t.connect(ctx, t.dst, d)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dst := shardDesc("destination", t.dst, d)
	if err := setShardIdentity(ctx, conn, always, "d", "ALWAYS"); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	for name, v := range last {
		if _, err = conn.Exec(ctx, `SELECT setval($1::regclass, $2, true)`, name, v); err != nil {
			return fmt.Errorf("%s: sequence %s: %w", dst, name, err)
		}
	}
	return nil
}

// Drop removes what the task created: each source shard's slot (stopping a
// walsender that still uses it; a slot named by UseNames too) and the
// publication the task created (not one named by UseNames), each destination shard's
// replication origins and bookkeeping rows. Stop Stream first. Drop keeps
// going after an error so that no slot is left behind, and returns every
// error; the destinations' bookkeeping (the task's record) is dropped only
// once every source shard is clean.
func (t *Task) Drop(ctx context.Context) error {
	var errs []error
	if err := t.restoreIdentity(ctx); err != nil {
		errs = append(errs, err)
	}
	for s := range t.src.Shards {
		if err := t.dropSource(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The record (with the source shards of a cutover) stays, so that
		// a Drop again — the task's retry, or the proxy that resumes it —
		// finds the slots to drop.
		return fmt.Errorf("replication: drop: %w", errors.Join(errs...))
	}
	// Destination shard 0 last: it holds the task's record (persist.go),
	// which must outlive what the other shards hold, so that a drop cut
	// short (a shard down, the proxy killed) is finished by whichever
	// proxy resumes the task rather than left behind.
	for d := len(t.dst.Shards) - 1; d >= 0; d-- {
		if err := t.dropDest(ctx, d); err != nil {
			return fmt.Errorf("replication: drop: %w", err)
		}
	}
	return nil
}

func (t *Task) dropSource(ctx context.Context, s int) error {
	conn, err := t.connectSource(ctx, s)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	slot := t.slotName(s)
	// A slot in use cannot be dropped: end the walsender first, then retry
	// while it exits.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		}
		if err == nil || attempt >= 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: drop slot %s: %w", shardDesc("source", t.src, s), slot, err)
	}
	// Only the publication the task creates is dropped, never one the
	// user named (UseNames).
	if pub := t.ownPublication(s); pub != t.names.Publication {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+quoteIdent(pub)); err != nil {
			return fmt.Errorf("%s: drop publication %s: %w", shardDesc("source", t.src, s), pub, err)
		}
	}
	return nil
}

// dropDest drops the task's origins and bookkeeping rows on destination
// shard d, and the bookkeeping schema once no task uses it. It connects
// plainly (not connectDest, which would create the schema first), so that
// it can also tidy what a stale runner re-created after the drop.
func (t *Task) dropDest(ctx context.Context, d int) error {
	conn, err := t.connect(ctx, t.dst, d)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	dst := shardDesc("destination", t.dst, d)
	// The task's rows go first, in one transaction: an applier creates its
	// origin only while it holds a share lock on one of them (newApplier),
	// so that once they are gone no runner creates an origin again, and
	// the origins dropped next are all there will be.
	// runners is missing from the bookkeeping of an older version.
	var kept, claims bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('shardgate_reshard.tasks') IS NOT NULL,
		to_regclass('shardgate_reshard.runners') IS NOT NULL`).Scan(&kept, &claims); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	tables := []string{"table_copies", "steps", "tasks"}
	if claims {
		tables = append(tables, "runners")
	}
	if kept {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, table := range tables {
				if _, err := tx.Exec(ctx, "DELETE FROM shardgate_reshard."+table+" WHERE task = $1", t.Name); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
	}
	for s := range t.src.Shards {
		name := t.originName(s, d)
		var err error
		for attempt := 0; attempt < 50; attempt++ {
			_, err = conn.Exec(ctx, `SELECT pg_replication_origin_drop($1) WHERE pg_replication_origin_oid($1) IS NOT NULL`, name)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // a stopping applier may still hold it
		}
		if err != nil {
			return fmt.Errorf("%s: drop origin %s: %w", dst, name, err)
		}
	}
	if !kept {
		return nil
	}
	var left bool
	leftQuery := `SELECT EXISTS (SELECT 1 FROM shardgate_reshard.steps) OR EXISTS (SELECT 1 FROM shardgate_reshard.table_copies)
		OR EXISTS (SELECT 1 FROM shardgate_reshard.tasks)`
	if claims {
		leftQuery += ` OR EXISTS (SELECT 1 FROM shardgate_reshard.runners)`
	}
	if err := conn.QueryRow(ctx, leftQuery).Scan(&left); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if !left {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS shardgate_reshard CASCADE"); err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
	}
	return nil
}
