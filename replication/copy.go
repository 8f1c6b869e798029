package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

// Copy runs Check, then copies every published table of every source shard
// to the destination shards at a snapshot exported by the source's logical
// replication slot, so that Stream continues exactly where the copy ends.
//
// Each destination shard loads a table's rows from one source shard in one
// transaction with its row in shardgate_reshard.table_copies: a half-copied
// table never stays behind, and a re-run copies only what is missing. A
// re-run cannot reuse the first snapshot, so it takes a new one from a
// temporary slot and records that snapshot's LSN; Stream skips each table's
// changes below the LSN its copy was taken at.
func (t *Task) Copy(ctx context.Context) error {
	if err := t.Check(ctx); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for s := range t.src.Shards {
		g.Go(func() error { return t.copySource(gctx, s) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for d := range t.dst.Shards {
		conn, err := t.connectDest(ctx, d)
		if err != nil {
			return fmt.Errorf("replication: copy: %w", err)
		}
		_, err = conn.Exec(ctx, `INSERT INTO shardgate_reshard.steps (task, step) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			t.Name, StepCopied.String())
		conn.Close(ctx)
		if err != nil {
			return fmt.Errorf("replication: copy: %s: %w", shardDesc("destination", t.dst, d), err)
		}
	}
	return nil
}

// ownedTables returns the tables source shard s copies or streams: all but
// the omni tables it does not own.
func (t *Task) ownedTables(ctx context.Context, conn *pgx.Conn, s int) ([]*table, error) {
	all, err := t.loadTables(ctx, conn)
	if err != nil {
		return nil, err
	}
	var tables []*table
	for _, tb := range all {
		if tb.rule.place == placeOmni && s != omniOwner {
			continue
		}
		tables = append(tables, tb)
	}
	return tables, nil
}

// omniOwner is the source shard that copies and streams every omni table.
const omniOwner = 0

// copyRecord is a table copy committed on one destination shard: its row
// in shardgate_reshard.table_copies.
type copyRecord struct {
	lsn  pglogrepl.LSN // the snapshot's consistent point
	rows int64         // rows loaded into this shard
	at   time.Time     // commit time
}

// copied returns, per destination shard, the tables source shard s has
// copied there and the LSN of each copy's snapshot.
func (t *Task) copied(ctx context.Context, s int) ([]map[string]pglogrepl.LSN, error) {
	recs, err := t.copyRecords(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]pglogrepl.LSN, len(recs))
	for d, m := range recs {
		out[d] = make(map[string]pglogrepl.LSN, len(m))
		for name, r := range m {
			out[d][name] = r.lsn
		}
	}
	return out, nil
}

// copyRecords returns, per destination shard, the table copies of source
// shard s recorded there, by table name.
func (t *Task) copyRecords(ctx context.Context, s int) ([]map[string]copyRecord, error) {
	out := make([]map[string]copyRecord, len(t.dst.Shards))
	for d := range t.dst.Shards {
		conn, err := t.connectDest(ctx, d)
		if err != nil {
			return nil, err
		}
		rows, _ := conn.Query(ctx, `SELECT table_name, lsn::text, rows, done_at FROM shardgate_reshard.table_copies
			WHERE task = $1 AND source_shard = $2`, t.Name, s)
		out[d] = map[string]copyRecord{}
		var name, lsn string
		var r copyRecord
		_, err = pgx.ForEachRow(rows, []any{&name, &lsn, &r.rows, &r.at}, func() error {
			var err error
			r.lsn, err = pglogrepl.ParseLSN(lsn)
			out[d][name] = r
			return err
		})
		conn.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: read table copies: %w", shardDesc("destination", t.dst, d), err)
		}
	}
	return out, nil
}

// copySource copies the tables of source shard s that a destination shard
// still lacks, at the snapshot of the shard's slot (see Copy): it reads
// what was copied, creates the publication, exports a snapshot and copies
// the pending tables.
func (t *Task) copySource(ctx context.Context, s int) error {
	conn, err := t.connectSource(ctx, s)
	if err != nil {
		return fmt.Errorf("replication: copy: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	src := shardDesc("source", t.src, s)
	tables, err := t.ownedTables(ctx, conn, s)
	if err != nil {
		return fmt.Errorf("replication: copy: %s: %w", src, err)
	}
	done, err := t.copyRecords(ctx, s)
	if err != nil {
		return fmt.Errorf("replication: copy: %w", err)
	}
	pending, anyDone, anyPending := t.pendingCopies(s, tables, done)
	if err := t.createPublication(ctx, conn, s); err != nil {
		return fmt.Errorf("replication: copy: %s: create publication: %w", src, err)
	}
	var slotExists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`,
		t.slotName(s)).Scan(&slotExists); err != nil {
		return fmt.Errorf("replication: copy: %s: %w", src, err)
	}
	if !slotExists && anyDone {
		if t.cutOverElsewhere(ctx) {
			return fmt.Errorf("replication: copy: %s: slot %s was dropped after a cutover: %w", src, t.slotName(s), errFinishedElsewhere)
		}
		return fmt.Errorf("replication: copy: %s: slot %s is gone but tables were copied; changes since are lost: Drop the task, empty the destination and start again",
			src, t.slotName(s))
	}
	if slotExists && !anyPending {
		return nil
	}
	rconn, snapshot, lsn, err := t.exportSnapshot(ctx, conn, s, slotExists, anyDone)
	if err != nil {
		return fmt.Errorf("replication: copy: %s: %w", src, err)
	}
	// The replication connection stays open, idle, while the tables copy:
	// the exported snapshot lives until its next command.
	defer rconn.Close(context.WithoutCancel(ctx))
	return t.copyTables(ctx, s, tables, pending, snapshot, lsn)
}

// pendingCopies returns, for each of tables, the destination shards that
// still need it from source shard s (pending[i][d]), given the copies done
// there, and whether any copy is done or pending at all. It notes the
// tables no shard needs as copied.
func (t *Task) pendingCopies(s int, tables []*table, done []map[string]copyRecord) (pending [][]bool, anyDone, anyPending bool) {
	pending = make([][]bool, len(tables))
	for i, tb := range tables {
		pending[i] = make([]bool, len(t.dst.Shards))
		for d := range t.dst.Shards {
			_, ok := done[d][tb.String()]
			pending[i][d] = !ok
			anyDone = anyDone || ok
			anyPending = anyPending || !ok
		}
		if !containsBool(pending[i], true) {
			t.noteCopied(s, tb, done)
		}
	}
	return pending, anyDone, anyPending
}

// createPublication creates the task's own publication on source shard s
// unless it exists or the user named one.
func (t *Task) createPublication(ctx context.Context, conn *pgx.Conn, s int) error {
	if t.names.Publication != "" {
		return nil
	}
	// ownPublication is made of letters, digits and underscores.
	_, err := conn.Exec(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '`+t.ownPublication(s)+`') THEN
			CREATE PUBLICATION `+quoteIdent(t.ownPublication(s))+` FOR ALL TABLES;
		END IF; END $$`)
	return err
}

// exportSnapshot opens a replication connection to source shard s and
// creates a slot there that exports a snapshot: the task's slot, or, when
// it exists already (slotExists), a temporary one. When the task's slot
// existed before any table was copied (anyDone false), it advances that
// slot to the snapshot (advanceSlot). The caller closes rconn once the
// copies that use snapshot are done.
func (t *Task) exportSnapshot(ctx context.Context, conn *pgx.Conn, s int, slotExists, anyDone bool) (rconn *pgconn.PgConn, snapshot string, lsn pglogrepl.LSN, err error) {
	rconn, err = pgconn.Connect(ctx, t.dsn(t.src, s, true))
	if err != nil {
		return nil, "", 0, fmt.Errorf("replication connection: %w", err)
	}
	fail := func(err error) (*pgconn.PgConn, string, pglogrepl.LSN, error) {
		rconn.Close(context.WithoutCancel(ctx))
		return nil, "", 0, err
	}
	slot := t.slotName(s)
	if slotExists {
		// A re-run, or a slot the user made beforehand: a temporary slot
		// only for its snapshot, named anew each time, since the session
		// of a killed proxy may still hold the previous one for a moment.
		// It is named after the task, whose name is short.
		slot = t.ownPublication(s) + fmt.Sprintf("_copy_%08x", rand.Uint32())
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, rconn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary:      slotExists,
		SnapshotAction: "EXPORT_SNAPSHOT",
		Mode:           pglogrepl.LogicalReplication,
	})
	if err != nil {
		return fail(fmt.Errorf("create slot %s: %w", slot, err))
	}
	lsn, err = pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fail(fmt.Errorf("slot %s: %w", slot, err))
	}
	t.log.Info("copy snapshot", "source", s, "slot", slot, "lsn", lsn, "snapshot", res.SnapshotName)
	if slotExists && !anyDone {
		if err := t.advanceSlotClaimed(ctx, conn, s, lsn); err != nil {
			return fail(err)
		}
	}
	return rconn, res.SnapshotName, lsn, nil
}

// copyTables copies the tables of source shard s that a destination shard
// still needs (pending), CopyParallelism at a time, at snapshot.
func (t *Task) copyTables(ctx context.Context, s int, tables []*table, pending [][]bool, snapshot string, lsn pglogrepl.LSN) error {
	src := shardDesc("source", t.src, s)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, t.CopyParallelism))
	for i, tb := range tables {
		if !containsBool(pending[i], true) {
			continue
		}
		g.Go(func() error {
			tc := t.trackCopy(s, tb.String())
			err := t.copyTable(gctx, s, tb, snapshot, lsn, pending[i], tc)
			tc.finish(err)
			if err != nil {
				return fmt.Errorf("replication: copy: %s: table %s: %w", src, tb, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// copyTable copies one table of source shard s, at snapshot, to the
// destination shards marked in dests.
func (t *Task) copyTable(ctx context.Context, s int, tb *table, snapshot string, lsn pglogrepl.LSN, dests []bool, tc *copyTracker) error {
	src, err := t.connectSource(ctx, s)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	if _, err := src.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return err
	}
	if _, err := src.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return fmt.Errorf("set snapshot: %w", err)
	}
	cols := make([]string, len(tb.columns))
	for i, c := range tb.columns {
		cols[i] = quoteIdent(c)
	}
	colList := strings.Join(cols, ", ")
	stall := t.knobs.stallCopy(tb.String())

	g, gctx := errgroup.WithContext(ctx)
	pipes := make([]*io.PipeWriter, len(dests))
	bufs := make([]*bufio.Writer, len(dests))
	rows := make([]int64, len(dests))
	for d, want := range dests {
		if !want {
			continue
		}
		pr, pw := io.Pipe()
		pipes[d], bufs[d] = pw, bufio.NewWriterSize(pw, 64<<10)
		g.Go(func() error {
			err := t.loadDest(gctx, d, s, tb, colList, pr, lsn, &rows[d])
			pr.CloseWithError(errors.Join(err, errors.New("destination load ended")))
			return err
		})
	}
	closeAll := func(err error) {
		for _, pw := range pipes {
			if pw != nil {
				pw.CloseWithError(err)
			}
		}
	}
	g.Go(func() error {
		pr, pw := io.Pipe()
		copyErr := make(chan error, 1)
		go func() {
			_, err := src.PgConn().CopyTo(gctx, pw, "COPY "+tb.ident()+" ("+colList+") TO STDOUT (FORMAT binary)")
			pw.CloseWithError(err)
			copyErr <- err
		}()
		err := t.splitRows(tb, dests, newCopyReader(pr), bufs, rows, tc)
		if err == nil && stall {
			t.log.Warn("copy stalled for a test until the task stops", "source", s, "table", tb.String())
			<-gctx.Done()
			err = gctx.Err()
		}
		pr.CloseWithError(errors.New("copy split ended"))
		if cerr := <-copyErr; err == nil {
			err = cerr
		}
		if err != nil {
			closeAll(err)
			return err
		}
		closeAll(nil)
		return nil
	})
	return g.Wait()
}

// splitRows reads a binary COPY stream and writes each row to the stream of
// its destination shard; rows counts them.
func (t *Task) splitRows(tb *table, dests []bool, in *copyReader, out []*bufio.Writer, rows []int64, tc *copyTracker) error {
	for d, w := range out {
		if w != nil && dests[d] {
			w.Write(copyHeader)
		}
	}
	if err := in.header(); err != nil {
		return err
	}
	for {
		err := in.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		tc.row(len(in.tuple))
		switch tb.rule.place {
		case placeOmni:
			for d, w := range out {
				if w != nil {
					if _, err := w.Write(in.tuple); err != nil {
						return err
					}
					rows[d]++
				}
			}
			continue
		case placePinned:
			if w := out[tb.rule.shard]; w != nil {
				if _, err := w.Write(in.tuple); err != nil {
					return err
				}
				rows[tb.rule.shard]++
			}
			continue
		}
		d, err := tb.rule.shardOfBinary(in.field[tb.keyIndex])
		if err != nil {
			return fmt.Errorf("route row: column %s: %w", tb.rule.column, err)
		}
		if d < 0 || d >= len(out) {
			return fmt.Errorf("route row: shard %d does not exist", d)
		}
		if w := out[d]; w != nil {
			if _, err := w.Write(in.tuple); err != nil {
				return err
			}
			rows[d]++
		}
	}
	for _, w := range out {
		if w != nil {
			w.Write(copyTrailer)
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadDest loads r, a binary COPY stream, into the table on destination
// shard d and records the copy, in one transaction.
func (t *Task) loadDest(ctx context.Context, d, s int, tb *table, colList string, r io.Reader, lsn pglogrepl.LSN, rows *int64) error {
	conn, err := t.connectDest(ctx, d)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dst := shardDesc("destination", t.dst, d)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if err := t.checkClaim(ctx, tx, copyClaimLock); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if _, err := conn.PgConn().CopyFrom(ctx, r, "COPY "+tb.ident()+" ("+colList+") FROM STDIN (FORMAT binary)"); err != nil {
		return fmt.Errorf("%s: copy in: %w", dst, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO shardgate_reshard.table_copies (task, source_shard, table_name, lsn, rows)
		VALUES ($1, $2, $3, $4::text::pg_lsn, $5)`, t.Name, s, tb.String(), lsn.String(), *rows); err != nil {
		return fmt.Errorf("%s: record copy: %w", dst, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: commit: %w", dst, err)
	}
	t.log.Info("table copied", "source", s, "shard", d, "table", tb.String(), "rows", *rows)
	return nil
}

// advanceSlotClaimed runs advanceSlot while it holds the advance claim lock
// shared on destination shard 0, having checked that the task's claim is
// still this run's (claim.go): a stale runner must not move the slot past
// the snapshot of the new runner's copies.
func (t *Task) advanceSlotClaimed(ctx context.Context, conn *pgx.Conn, s int, lsn pglogrepl.LSN) error {
	if t.claim.token == "" {
		return t.advanceSlot(ctx, conn, s, lsn)
	}
	dconn, err := t.connectDest(ctx, 0)
	if err != nil {
		return err
	}
	defer dconn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, dconn, func(tx pgx.Tx) error {
		if err := t.checkClaim(ctx, tx, advanceClaimLock); err != nil {
			return fmt.Errorf("%s: %w", shardDesc("destination", t.dst, 0), err)
		}
		return t.advanceSlot(ctx, conn, s, lsn)
	})
}

// advanceSlot moves the permanent slot of source shard s, which existed
// before any table of s was copied, to lsn, the snapshot every table of s is
// about to be copied at: its changes before lsn are in the copy. Without
// it the stream would decode them only to skip them, and pgoutput would
// fail on the first one older than the publication ("publication does not
// exist"), as it reads the publication as of each change. A slot already
// past lsn is left alone. pg_replication_slot_advance moves a logical slot
// by decoding without calling the output plugin.
func (t *Task) advanceSlot(ctx context.Context, conn *pgx.Conn, s int, lsn pglogrepl.LSN) error {
	slot := t.slotName(s)
	var to *string
	err := conn.QueryRow(ctx, `SELECT (SELECT end_lsn::text FROM pg_replication_slot_advance(slot_name, $2::text::pg_lsn))
		FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn < $2::text::pg_lsn`, slot, lsn.String()).Scan(&to)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("advance slot %s to the copy's snapshot %s: %w", slot, lsn, err)
	}
	t.log.Info("existing slot advanced to the copy's snapshot", "source", s, "slot", slot, "lsn", lsn, "to", to)
	return nil
}

func containsBool(list []bool, v bool) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
