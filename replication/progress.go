package replication

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// CopyState is the state of one table copy.
type CopyState uint8

const (
	// CopyRunning: rows are moving.
	CopyRunning CopyState = iota
	// CopyDone: every destination shard committed the table.
	CopyDone
	// CopyFailed: the copy failed; a re-run Copy copies it again.
	CopyFailed
)

func (s CopyState) String() string {
	switch s {
	case CopyRunning:
		return "copying"
	case CopyDone:
		return "done"
	case CopyFailed:
		return "failed"
	}
	return "copy_state(" + strconv.Itoa(int(s)) + ")"
}

// TableCopy is the progress of one table of one source shard, as Copy
// reports it while it runs (SHOW TABLE_COPIES). A resumed task also lists
// the tables copied before it started, as done, with the rows recorded in
// table_copies and Started equal to Finished (the commit time).
type TableCopy struct {
	Table    string
	Source   int
	Rows     int64 // rows read from the source
	Bytes    int64 // bytes of binary COPY data read from the source
	Started  time.Time
	Finished time.Time // zero while copying
	State    CopyState
	Err      error
}

// AppliedTxn is the last source transaction a destination shard committed.
type AppliedTxn struct {
	Source, Dest int
	End          pglogrepl.LSN // end of the source's commit record
	CommitTime   time.Time     // the source transaction's commit time
	AppliedAt    time.Time
}

// progress tracks the copies and applied transactions of a Task in memory.
type progress struct {
	// statements and roundTrips count the statements the appliers sent (a
	// multi-row statement counts once) and the round trips that sent them,
	// which BenchmarkStreamApply reports per change.
	statements, roundTrips atomic.Int64
	// collapsed counts the changes the appliers collapsed into a change
	// of the same row (apply_batch.go).
	collapsed atomic.Int64

	mu      sync.Mutex
	copies  []*copyTracker
	applied map[[2]int]AppliedTxn
}

type copyTracker struct {
	table    string
	source   int
	rows     atomic.Int64
	bytes    atomic.Int64
	started  time.Time
	mu       sync.Mutex
	finished time.Time
	state    CopyState
	err      error
}

func (t *Task) trackCopy(s int, table string) *copyTracker {
	c := &copyTracker{table: table, source: s, started: time.Now()}
	t.prog.mu.Lock()
	t.prog.copies = append(t.prog.copies, c)
	t.prog.mu.Unlock()
	return c
}

// noteCopied records, as done, table tb of source shard s, which every
// destination shard committed before this Task ran (a resumed task), from
// its rows in table_copies (done, per destination shard). Rows is what the
// source had: an omni table's rows once, a sharded table's summed over the
// shards. Bytes and the copy's duration are not recorded, so they are 0.
func (t *Task) noteCopied(s int, tb *table, done []map[string]copyRecord) {
	c := &copyTracker{table: tb.String(), source: s, state: CopyDone}
	var rows int64
	for _, m := range done {
		r := m[tb.String()]
		if tb.rule.place == placeOmni {
			rows = max(rows, r.rows)
		} else {
			rows += r.rows
		}
		if c.finished.IsZero() || r.at.After(c.finished) {
			c.finished = r.at
		}
	}
	c.rows.Store(rows)
	c.started = c.finished
	t.prog.mu.Lock()
	defer t.prog.mu.Unlock()
	for _, o := range t.prog.copies {
		if o.source == s && o.table == c.table {
			return // already listed
		}
	}
	t.prog.copies = append(t.prog.copies, c)
}

func (c *copyTracker) finish(err error) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished = time.Now()
	c.state, c.err = CopyDone, err
	if err != nil {
		c.state = CopyFailed
	}
}

func (c *copyTracker) row(n int) {
	if c != nil {
		c.rows.Add(1)
		c.bytes.Add(int64(n))
	}
}

// TableCopies returns the table copies this Task ran, in start order.
func (t *Task) TableCopies() []TableCopy {
	t.prog.mu.Lock()
	cs := slices.Clone(t.prog.copies)
	t.prog.mu.Unlock()
	out := make([]TableCopy, 0, len(cs))
	for _, c := range cs {
		c.mu.Lock()
		out = append(out, TableCopy{Table: c.table, Source: c.source, Rows: c.rows.Load(), Bytes: c.bytes.Load(),
			Started: c.started, Finished: c.finished, State: c.state, Err: c.err})
		c.mu.Unlock()
	}
	return out
}

func (t *Task) noteApplied(s, d int, end pglogrepl.LSN, commit time.Time) {
	t.prog.mu.Lock()
	defer t.prog.mu.Unlock()
	if t.prog.applied == nil {
		t.prog.applied = map[[2]int]AppliedTxn{}
	}
	t.prog.applied[[2]int{s, d}] = AppliedTxn{Source: s, Dest: d, End: end, CommitTime: commit, AppliedAt: time.Now()}
}

// LastApplied returns, per (source shard, destination shard), the last
// source transaction the running Stream committed there.
func (t *Task) LastApplied() []AppliedTxn {
	t.prog.mu.Lock()
	defer t.prog.mu.Unlock()
	out := make([]AppliedTxn, 0, len(t.prog.applied))
	for _, a := range t.prog.applied {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b AppliedTxn) int {
		if a.Source != b.Source {
			return a.Source - b.Source
		}
		return a.Dest - b.Dest
	})
	return out
}
