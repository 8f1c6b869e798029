package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// changeKind is what one decoded change does on a destination shard.
type changeKind uint8

const (
	changeInsert   changeKind = iota + 1 // INSERT the new tuple
	changeUpdate                         // UPDATE the changed columns of the row with the old identity
	changeDelete                         // DELETE the row with the old identity
	changeTruncate                       // TRUNCATE the table
	// changeMoveOut deletes the row with the old identity and returns the
	// values of the columns the new tuple left unchanged (TOAST), so that
	// the reader can insert the row on its new shard.
	changeMoveOut
)

// change is one row change routed to one destination shard.
type change struct {
	kind  changeKind
	rel   *relation
	new   []*pglogrepl.TupleDataColumn // insert, update: the new tuple
	old   []*pglogrepl.TupleDataColumn // update, delete, moveOut: holds the identity
	reply chan moveReply               // moveOut only
}

// moveReply answers a changeMoveOut: the text values of the rel's columns
// named in want, or skipped when this destination had already applied the
// transaction.
type moveReply struct {
	values  map[int][]byte
	skipped bool // the destination had committed the transaction already
	missing bool // the old row was not there
	err     error
}

// op is a batch of changes of one source transaction for one destination
// shard. The last op of a transaction has commit set; a transaction too big
// to buffer arrives in several ops, all applied in one destination
// transaction.
type op struct {
	final      pglogrepl.LSN // the source commit record's LSN (Begin.FinalLSN)
	commit     bool
	end        pglogrepl.LSN // commit only: the end of the commit record
	commitTime time.Time     // commit only
	changes    []change
}

// applier applies the stream of one source shard to one destination shard,
// in its own session whose replication origin records what was committed.
type applier struct {
	t          *Task
	s, d       int
	conn       *pgx.Conn
	ops        chan op
	progress   pglogrepl.LSN            // origin progress: end LSN of the last applied transaction
	watermarks map[string]pglogrepl.LSN // per table: the LSN its copy was taken at
	applied    atomic.Uint64            // end LSN of the last transaction fully handled

	curFinal pglogrepl.LSN
	skipTxn  bool
	inTx     bool
}

// newApplier connects to destination shard d, creates and binds the
// replication origin of (s, d), and reads its progress.
func (t *Task) newApplier(ctx context.Context, s, d int, copies map[string]pglogrepl.LSN) (*applier, error) {
	conn, err := t.connectDest(ctx, d)
	if err != nil {
		return nil, err
	}
	a := &applier{t: t, s: s, d: d, conn: conn, ops: make(chan op, 16), watermarks: copies}
	if err := a.setup(ctx); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: origin %s: %w", shardDesc("destination", t.dst, d), t.originName(s, d), err)
	}
	return a, nil
}

func (a *applier) setup(ctx context.Context) error {
	name := a.t.originName(a.s, a.d)
	if _, err := a.conn.Exec(ctx, `SELECT pg_replication_origin_create($1) WHERE pg_replication_origin_oid($1) IS NULL`, name); err != nil {
		return err
	}
	// The session of a cancelled Stream may still hold the origin for a
	// moment while its backend exits.
	for attempt := 0; ; attempt++ {
		_, err := a.conn.Exec(ctx, `SELECT pg_replication_origin_session_setup($1)`, name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt >= 100 {
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := a.conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return err
	}
	var progress *string
	if err := a.conn.QueryRow(ctx, `SELECT pg_replication_origin_progress($1, true)::text`, name).Scan(&progress); err != nil {
		return err
	}
	if progress != nil {
		lsn, err := pglogrepl.ParseLSN(*progress)
		if err != nil {
			return err
		}
		a.progress = lsn
	}
	a.applied.Store(uint64(a.progress))
	return nil
}

// run applies ops until ctx is done or an error occurs. An open destination
// transaction is rolled back when the connection closes.
func (a *applier) run(ctx context.Context) error {
	defer a.conn.Close(context.WithoutCancel(ctx))
	for {
		select {
		case <-ctx.Done():
			return nil
		case o := <-a.ops:
			if err := a.apply(ctx, o); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%s: apply source %d transaction %s: %w",
					shardDesc("destination", a.t.dst, a.d), a.s, o.final, err)
			}
		}
	}
}

func (a *applier) apply(ctx context.Context, o op) error {
	if o.final != a.curFinal {
		a.curFinal = o.final
		a.skipTxn = o.final < a.progress // committed here before a restart
		a.inTx = false
	}
	// Every statement of the chunk — BEGIN, the changes, the origin
	// advance and COMMIT — goes to the destination in one pipelined round
	// trip; only a row move, whose RETURNING the source stream waits for,
	// runs on its own.
	b := &pgconn.Batch{}
	queued := 0
	flush := func() error {
		if queued == 0 {
			return nil
		}
		results, err := a.conn.PgConn().ExecBatch(ctx, b).ReadAll()
		b, queued = &pgconn.Batch{}, 0
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	for i := range o.changes {
		c := &o.changes[i]
		if a.skipTxn || o.final < a.watermarks[c.rel.name] {
			if c.reply != nil {
				c.reply <- moveReply{skipped: true}
			}
			continue
		}
		if !a.inTx {
			b.ExecParams("BEGIN", nil, nil, nil, nil)
			queued++
			a.inTx = true
		}
		if c.kind == changeMoveOut {
			if err := flush(); err != nil {
				c.reply <- moveReply{err: err}
				return fmt.Errorf("table %s: %w", c.rel.name, err)
			}
			if err := a.exec(ctx, c); err != nil {
				c.reply <- moveReply{err: err}
				return fmt.Errorf("table %s: %w", c.rel.name, err)
			}
			continue
		}
		sql, args, ok := a.statement(c)
		if ok {
			b.ExecParams(sql, args, nil, nil, nil)
			queued++
		}
	}
	if o.commit && a.inTx {
		b.ExecParams(`SELECT pg_replication_origin_xact_setup($1::text::pg_lsn, $2::text::timestamptz)`,
			[][]byte{[]byte(o.end.String()), []byte(o.commitTime.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))}, nil, nil, nil)
		b.ExecParams("COMMIT", nil, nil, nil, nil)
		queued += 2
	}
	if err := flush(); err != nil {
		return err
	}
	if !o.commit {
		return nil
	}
	if a.inTx {
		a.inTx = false
		a.progress = o.end
		a.t.noteApplied(a.s, a.d, o.end, o.commitTime)
	}
	a.applied.Store(uint64(o.end))
	return nil
}

// exec runs one change in the open transaction on its own round trip:
// a row move out of this shard, whose RETURNING supplies the unchanged
// TOASTed values the source stream waits for, or any other change.
// Values travel in text format with unspecified types, so the server
// infers each from its column.
func (a *applier) exec(ctx context.Context, c *change) error {
	if c.kind != changeMoveOut {
		sql, args, ok := a.statement(c)
		if !ok {
			return nil
		}
		return a.conn.PgConn().ExecParams(ctx, sql, args, nil, nil, nil).Read().Err
	}
	rel := c.rel
	var sql strings.Builder
	var args [][]byte
	param := func(v []byte) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var ret []string
	var idx []int
	for i, v := range c.new {
		if v.DataType == pglogrepl.TupleDataTypeToast {
			ret = append(ret, quoteIdent(rel.cols[i])+"::text")
			idx = append(idx, i)
		}
	}
	fmt.Fprintf(&sql, "DELETE FROM %s WHERE %s RETURNING %s", rel.ident, rel.where(c.old, param), strings.Join(ret, ", "))
	res := a.conn.PgConn().ExecParams(ctx, sql.String(), args, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) == 0 {
		c.reply <- moveReply{missing: true}
		return nil
	}
	values := map[int][]byte{}
	for j, i := range idx {
		values[i] = res.Rows[0][j]
	}
	c.reply <- moveReply{values: values}
	return nil
}

// statement returns the SQL and parameters of a change other than a row
// move; ok is false when the change needs no statement.
func (a *applier) statement(c *change) (string, [][]byte, bool) {
	rel := c.rel
	var sql strings.Builder
	var args [][]byte
	param := func(v []byte) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	switch c.kind {
	case changeTruncate:
		sql.WriteString("TRUNCATE " + rel.ident)
	case changeInsert:
		var cols, vals []string
		for i, v := range c.new {
			if v.DataType == pglogrepl.TupleDataTypeToast {
				continue
			}
			cols = append(cols, quoteIdent(rel.cols[i]))
			vals = append(vals, param(value(v)))
		}
		fmt.Fprintf(&sql, "INSERT INTO %s (%s) VALUES (%s)", rel.ident, strings.Join(cols, ", "), strings.Join(vals, ", "))
	case changeUpdate:
		var set []string
		for i, v := range c.new {
			// Unchanged TOASTed values are not in the message: leave them.
			if v.DataType != pglogrepl.TupleDataTypeToast {
				set = append(set, quoteIdent(rel.cols[i])+" = "+param(value(v)))
			}
		}
		if len(set) == 0 {
			return "", nil, false
		}
		fmt.Fprintf(&sql, "UPDATE %s SET %s WHERE %s", rel.ident, strings.Join(set, ", "), rel.where(c.old, param))
	case changeDelete:
		fmt.Fprintf(&sql, "DELETE FROM %s WHERE %s", rel.ident, rel.where(c.old, param))
	default:
		return "", nil, false
	}
	return sql.String(), args, true
}

// value returns a column's text value, nil for NULL.
func value(v *pglogrepl.TupleDataColumn) []byte {
	if v.DataType == pglogrepl.TupleDataTypeNull {
		return nil
	}
	if v.Data == nil {
		return []byte{}
	}
	return v.Data
}

// where returns the condition that finds the row whose identity old holds.
// With REPLICA IDENTITY FULL, old holds the whole row and there may be
// duplicates, so one matching row is chosen by ctid, as PostgreSQL's own
// apply worker does.
func (r *relation) where(old []*pglogrepl.TupleDataColumn, param func([]byte) string) string {
	var conds []string
	for _, i := range r.key {
		if i >= len(old) || old[i].DataType == pglogrepl.TupleDataTypeToast {
			continue
		}
		if r.full {
			conds = append(conds, quoteIdent(r.cols[i])+" IS NOT DISTINCT FROM "+param(value(old[i])))
		} else {
			conds = append(conds, quoteIdent(r.cols[i])+" = "+param(value(old[i])))
		}
	}
	if len(conds) == 0 {
		return "false"
	}
	if r.full {
		return "ctid = (SELECT ctid FROM " + r.ident + " WHERE " + strings.Join(conds, " AND ") + " LIMIT 1)"
	}
	return strings.Join(conds, " AND ")
}
