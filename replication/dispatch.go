package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// route turns one decoded row change into changes on destination shards.
// An UPDATE that moves a row to another shard becomes a DELETE on the old
// shard and an INSERT on the new one; when the new tuple leaves TOASTed
// columns out, the old shard's applier deletes the row and returns them.
func (r *reader) route(ctx context.Context, rel *relation, newT, oldT []*pglogrepl.TupleDataColumn, kind changeKind) error {
	identity := oldT
	if identity == nil {
		identity = newT // the key did not change
	}
	switch rel.rule.place {
	case placeOmni:
		for d := range r.pending {
			r.add(ctx, d, change{kind: kind, rel: rel, new: newT, old: identity})
		}
		return r.flushFull(ctx)
	case placePinned:
		r.add(ctx, rel.rule.shard, change{kind: kind, rel: rel, new: newT, old: identity})
		return r.flushFull(ctx)
	}
	switch kind {
	case changeInsert:
		d, _, err := rel.shardOf(newT)
		if err != nil {
			return err
		}
		r.add(ctx, d, change{kind: kind, rel: rel, new: newT})
	case changeDelete:
		d, ok, err := rel.shardOf(oldT)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("table %s: DELETE without the sharding key in the old tuple", rel.name)
		}
		r.add(ctx, d, change{kind: kind, rel: rel, old: oldT})
	case changeUpdate:
		nd, nok, err := rel.shardOf(newT)
		if err != nil {
			return err
		}
		od, ook := nd, false
		if oldT != nil {
			if od, ook, err = rel.shardOf(oldT); err != nil {
				return err
			}
		}
		if !nok && !ook {
			return fmt.Errorf("table %s: UPDATE without the sharding key", rel.name)
		}
		if !nok {
			nd = od
		} else if !ook {
			od = nd
		}
		if od == nd {
			r.add(ctx, nd, change{kind: changeUpdate, rel: rel, new: newT, old: identity})
			break
		}
		if !hasToast(newT) {
			r.add(ctx, od, change{kind: changeDelete, rel: rel, old: identity})
			r.add(ctx, nd, change{kind: changeInsert, rel: rel, new: newT})
			break
		}
		full, err := r.moveOut(ctx, od, rel, newT, identity)
		if err != nil {
			return err
		}
		if full != nil {
			r.add(ctx, nd, change{kind: changeInsert, rel: rel, new: full})
		}
	}
	return r.flushFull(ctx)
}

// moveOut deletes a row from destination shard d through its applier and
// returns newT with its unchanged TOASTed columns filled in from the row.
func (r *reader) moveOut(ctx context.Context, d int, rel *relation, newT, old []*pglogrepl.TupleDataColumn) ([]*pglogrepl.TupleDataColumn, error) {
	reply := make(chan moveReply, 1)
	r.add(ctx, d, change{kind: changeMoveOut, rel: rel, new: newT, old: old, reply: reply})
	if err := r.flush(ctx, d); err != nil {
		return nil, err
	}
	var rep moveReply
	select {
	case rep = <-reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if rep.err != nil {
		return nil, rep.err
	}
	if rep.skipped || rep.missing {
		// Destination shard d committed this transaction before a restart
		// and the new shard did not, so the old row is gone; or such a
		// move left the row out and a later move finds nothing. Take the
		// values from the source's current row instead; the row's later
		// changes are still to come, so the destination converges to the
		// source.
		if rep.missing {
			r.t.log.Warn("row to move is not on its old shard; using the source's current row",
				"source", r.s, "shard", d, "table", rel.name, "lsn", r.begin.FinalLSN, "after_restart", r.begin.FinalLSN < r.replayUntil)
		}
		values, err := r.sourceValues(ctx, rel, newT)
		if err != nil || values == nil {
			return nil, err // nil: deleted on the source since; so will the stream delete it
		}
		rep.values = values
	}
	full := make([]*pglogrepl.TupleDataColumn, len(newT))
	for i, v := range newT {
		full[i] = v
		if data, ok := rep.values[i]; ok {
			if data == nil {
				full[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
			} else {
				full[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Length: uint32(len(data)), Data: data}
			}
		}
	}
	return full, nil
}

func hasToast(tuple []*pglogrepl.TupleDataColumn) bool {
	for _, v := range tuple {
		if v.DataType == pglogrepl.TupleDataTypeToast {
			return true
		}
	}
	return false
}

// changeBlock is how many changes the reader allocates at a time for one
// destination shard's buffer (add).
const changeBlock = 64

// add buffers a change for destination shard d. The buffer is carved out
// of blocks of changes: take hands over what was buffered and leaves the
// rest of the block to the next changes, so that small transactions do
// not each allocate their own.
func (r *reader) add(_ context.Context, d int, c change) {
	p := r.pending[d]
	if len(p) == cap(p) {
		grown := make([]change, len(p), max(2*len(p), changeBlock))
		copy(grown, p)
		p = grown
	}
	r.pending[d] = append(p, c)
	r.size[d] += tupleSize(c.new) + tupleSize(c.old)
}

// take returns the changes buffered for destination shard d and empties
// its buffer. The result's capacity ends at its length, so the changes
// buffered next, in the same block, are not part of it.
func (r *reader) take(d int) []change {
	p := r.pending[d]
	r.pending[d], r.size[d] = p[len(p):], 0
	return p[:len(p):len(p)]
}

// flushFull hands over the buffered changes of every destination shard
// whose buffer reached a chunk's size.
func (r *reader) flushFull(ctx context.Context) error {
	for d := range r.pending {
		if len(r.pending[d]) >= chunkChanges || r.size[d] >= chunkBytes {
			if err := r.flush(ctx, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush hands the buffered changes of the current transaction for
// destination shard d to its applier, which applies them into an open
// destination transaction that commits with the source transaction.
func (r *reader) flush(ctx context.Context, d int) error {
	if len(r.pending[d]) == 0 {
		return nil
	}
	changes := r.take(d)
	r.touched[d] = true
	return r.send(ctx, d, op{final: r.begin.FinalLSN, changes: changes})
}

// send applies o on destination shard d's applier, which queues its
// statements for the next round trip. An applier whose round trip is full
// sends it, and every other applier with work sends its own at the same
// time (flushAll).
func (r *reader) send(ctx context.Context, d int, o op) error {
	if r.deliverForTest != nil {
		r.deliverForTest(d, o)
		return nil
	}
	a := r.appliers[d]
	if err := a.apply(ctx, o); err != nil {
		return a.failed(o.final, err)
	}
	if r.dirtyAt.IsZero() {
		r.dirtyAt = time.Now()
	}
	if a.full() {
		return r.flushAll(ctx)
	}
	return nil
}

// flushAll sends the round trip of every applier that applied ops since its
// last one, ending its group where a source transaction ended, and then
// reads their answers: the destination shards work on their groups at the
// same time, while the reader waits.
func (r *reader) flushAll(ctx context.Context) error {
	r.dirtyAt = time.Time{}
	var first error
	started := r.started[:0]
	for _, a := range r.appliers {
		if !a.dirty {
			continue
		}
		if err := a.start(ctx); err != nil {
			first = a.failed(a.curFinal, err)
			break
		}
		started = append(started, a)
	}
	for _, a := range started {
		if err := a.finish(); err != nil && first == nil {
			first = a.failed(a.curFinal, err)
		}
	}
	r.started = started[:0]
	return first
}

// pause is idle's wait for more of the source's WAL, for at most d (a
// millisecond or less). When the source's socket has its low-water mark
// managed, the wait is a raw ppoll(2) of it (waitReadable): while idle
// runs the mark is coalesceLowat, so the wait ends early once that much
// WAL has come, and the stream's goroutine keeps its P and its thread
// meanwhile. In time.Sleep it parked on a timer: on a proxy with two or
// more Ps its thread then slept on a futex until another thread, blocked
// in Go's poller until the timer, woke it, and that was half of the
// stream's context switches inside a serving proxy (docs/benchmarks.md,
// issue 12 §5, tenth session).
func (r *reader) pause(d time.Duration) {
	if r.src == nil || r.src.fd < 0 {
		time.Sleep(d)
		return
	}
	waitReadable(r.src.fd, d)
}

// idle is called when the source has little or nothing more for the
// moment: when a read came back short (empty false), and when the socket
// is empty (empty true), after which the read waits for the source unless
// idle returns true (read again at once). It sends the appliers' round
// trips once their groups are large enough or old enough (lingerChanges,
// groupLinger), or at once while WaitCaughtUp waits. Otherwise it sleeps,
// until the groups are old enough at most, so that more of the source's
// WAL arrives, and asks for the read again; a short read with no group to
// send sleeps coalesceWait, as the coalescing read (stream_conn.go) would.
// A failed flushAll is left in idleErr and wake ends the reader's wait;
// wake also makes the reader confirm at once what a flushAll committed
// while WaitCaughtUp waits.
func (r *reader) idle(ctx context.Context, empty bool, wake func()) (again bool) {
	if r.idleErr != nil {
		return false
	}
	if r.dirtyAt.IsZero() {
		if !empty {
			r.pause(coalesceWait)
		}
		return false
	}
	waiting := r.t.flush.waiting()
	if !waiting {
		changes := 0
		for _, a := range r.appliers {
			changes += a.handled
		}
		if left := groupLinger - time.Since(r.dirtyAt); changes < lingerChanges && left > 0 {
			if !empty {
				left = min(left, coalesceWait)
			}
			r.pause(left)
			return true
		}
	}
	if err := r.flushAll(ctx); err != nil {
		r.idleErr = err
		wake()
		return false
	}
	if waiting {
		wake()
	}
	return false
}

func tupleSize(t []*pglogrepl.TupleDataColumn) int {
	n := 0
	for _, v := range t {
		n += len(v.Data) + 16
	}
	return n
}

// sourceValues reads the columns newT leaves unchanged (TOAST) from the
// source's current row with newT's identity; nil when there is none.
func (r *reader) sourceValues(ctx context.Context, rel *relation, newT []*pglogrepl.TupleDataColumn) (map[int][]byte, error) {
	src, err := r.source(ctx)
	if err != nil {
		return nil, err
	}
	var args [][]byte
	param := func(v []byte) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var cols []string
	var idx []int
	for i, v := range newT {
		if v.DataType == pglogrepl.TupleDataTypeToast {
			cols = append(cols, quoteIdent(rel.cols[i])+"::text")
			idx = append(idx, i)
		}
	}
	sql := "SELECT " + strings.Join(cols, ", ") + " FROM " + rel.ident + " WHERE " + rel.where(newT, param) + " LIMIT 1"
	res := src.PgConn().ExecParams(ctx, sql, args, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, fmt.Errorf("table %s: read unchanged TOASTed columns from the source: %w", rel.name, res.Err)
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	values := map[int][]byte{}
	for j, i := range idx {
		values[i] = res.Rows[0][j]
	}
	return values, nil
}

// source returns the reader's normal session on its source shard, opened
// on first use.
func (r *reader) source(ctx context.Context) (*pgx.Conn, error) {
	if r.srcConn == nil {
		conn, err := r.t.connectSource(ctx, r.s)
		if err != nil {
			return nil, err
		}
		r.srcConn = conn
	}
	return r.srcConn, nil
}
