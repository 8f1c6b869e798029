package executor

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"strconv"
)

// Window functions the proxy computes over the merged rows
// (router/proxywindow.go): row numbers and ranks in the merge's order,
// and totals over every row, combined from each shard's first row (each
// shard puts its rows' total in every row). They are computed before
// OFFSET and LIMIT, as PostgreSQL computes windows.

// WindowKind is how a Window column is computed.
type WindowKind uint8

const (
	WinRowNumber WindowKind = iota + 1
	WinRank
	WinDenseRank
	WinTotal   // Window.Agg over every row
	WinRunning // Window.Agg over the rows up to the row's last peer
	WinLag     // the Arg column's value Offset rows before
	// WinNtile: the row's bucket of Offset, dealt in the merge's order;
	// WinPercentRank: (rank - 1) / (rows - 1). Both know the rows from
	// the Arg column, each shard's count(*) OVER ().
	WinNtile
	WinPercentRank
	// WinLead: the Arg column's value Offset rows after; WinCumeDist:
	// the rows up to the row's last peer over every row (Arg: each
	// shard's count). The merge holds a row back until they are known
	// (delayRow).
	WinLead
	WinCumeDist
	// WinFirstValue, WinLastValue and WinNthValue over an ordered window
	// with the default frame (the rows up to the row's last peer): the Arg
	// column's value in the first row, in the row's last peer (held back
	// as for WinCumeDist), and in row Offset if the frame reaches it.
	WinFirstValue
	WinLastValue
	WinNthValue
)

// Window is a select list item whose window function the proxy computes.
type Window struct {
	Col  int
	Kind WindowKind
	Agg  AggKind // WinTotal: count, sum, min or max
	// WinLag: the column of lag's argument (hidden, in Col's format)
	// and the offset.
	Arg, Offset int
	// Unordered: the window has no ORDER BY, so every row is a peer of
	// every other, whatever order the merge's other windows give.
	Unordered bool
}

// windowState numbers the merged rows and holds the totals.
type windowState struct {
	n, rank, dense int64
	prev           [][]byte // the last row numbered, for a rank's peers
	totals         [][]byte // per Spec.Windows, WinTotal's value
	// last holds, per source and per Spec.Windows, the shard's running
	// value (WinRunning) in the last row of it sent, nil before one.
	last [][][]byte
	// heads are the rows the ordered merge holds of its other sources
	// while it sends one (ordered sets them); peers marks, per source,
	// whether its head is a peer of the row sent.
	heads []*cursor
	src   int // the source of the row sent
	peers []bool
	// lags holds, per Spec.Windows, a WinLag's last Offset+1 values.
	lags [][][]byte
	// rows is the number of rows over all shards (WinNtile,
	// WinPercentRank), from the shards' first rows.
	rows int64
	// ntiles holds, per Spec.Windows, a WinNtile's state.
	ntiles []ntileState
	// held are the rows held back for a WinLead or WinCumeDist (copies,
	// oldest first); held[0] is row heldFrom (1-based), and the first
	// heldPeers of them have their cume_dist. delay: the Spec has such
	// windows; lead: the largest WinLead offset.
	held      [][][]byte
	heldFrom  int64
	heldPeers int
	delay     bool
	lead      int
	// cume: a WinCumeDist over an ordered window, a WinLastValue or a
	// WinNthValue holds rows until their last peer (over OVER () every
	// row is a peer: cume_dist is 1).
	cume bool
	// values holds, per Spec.Windows, WinFirstValue's and WinNthValue's
	// value once its row came (nthSeen).
	values  [][]byte
	nthSeen []bool
}

// ntileState is window_ntile's state: the bucket, the rows in it so far,
// its size and how many buckets still get a row more.
type ntileState struct {
	ntile, inBucket, boundary, remainder int64
}

// lagValue is lag's value in row cols: its argument Offset rows before
// (NULL before the first rows), after it keeps the row's own.
func (m *Merger) lagValue(i int, w Window, cols [][]byte) []byte {
	st := m.win
	if st.lags == nil {
		st.lags = make([][][]byte, len(m.spec.Windows))
	}
	q := st.lags[i]
	var v []byte
	if a := cols[w.Arg]; a != nil {
		v = append(make([]byte, 0, len(a)), a...)
	}
	if len(q) == w.Offset+1 {
		copy(q, q[1:])
		q[len(q)-1] = v
	} else {
		q = append(q, v)
	}
	st.lags[i] = q
	if len(q) < w.Offset+1 {
		return nil
	}
	return q[0]
}

// runningValue is the value of running window i (w) in row cols, the
// current row of source st.src: every shard's running value at the row's
// key, combined.
func (m *Merger) runningValue(i int, w Window, cols [][]byte, peersDone *bool) ([]byte, error) {
	st := m.win
	if st.last == nil {
		return nil, fmt.Errorf("merge: a running window outside an ordered merge")
	}
	// A copy (the source reuses its row), NULL kept apart from the empty string.
	st.last[st.src][i] = nil
	if v := cols[w.Col]; v != nil {
		st.last[st.src][i] = append(make([]byte, 0, len(v)), v...)
	}
	if !*peersDone {
		*peersDone = true
		clear(st.peers)
		for _, c := range st.heads {
			if c.idx == st.src {
				continue
			}
			cmp, err := m.compareBy(m.spec.OrderBy[:m.spec.WindowOrder], c.cols, cols)
			if err != nil {
				return nil, err
			}
			st.peers[c.idx] = cmp == 0
		}
	}
	return m.combineWindow(w, func(yield func([]byte) bool) {
		for src, vals := range st.last {
			v := vals[i]
			if st.peers[src] {
				for _, c := range st.heads {
					if c.idx == src {
						v = c.cols[w.Col]
					}
				}
			}
			if !yield(v) {
				return
			}
		}
	})
}

// combineWindow folds the shards' values of aggregate window w (NULLs
// add nothing) into one: NULL over none, or 0 for a count.
func (m *Merger) combineWindow(w Window, values iter.Seq[[]byte]) ([]byte, error) {
	var total []byte
	for v := range values {
		switch {
		case v == nil:
			continue
		case total == nil:
			total = append([]byte{}, v...)
			continue
		}
		out, err := m.foldPartial(w.Agg, w.Col, total, v)
		if err != nil {
			return nil, err
		}
		total = out
	}
	if total == nil && w.Agg == AggCount {
		total = countValue(0, m.cols[w.Col].Format)
	}
	return total, nil
}

// startWindows combines the shards' totals from their first rows (heads:
// the current row of every shard that has one).
func (m *Merger) startWindows(heads [][][]byte) error {
	if len(m.spec.Windows) == 0 {
		return nil
	}
	m.win = &windowState{totals: make([][]byte, len(m.spec.Windows))}
	for _, w := range m.spec.Windows {
		switch w.Kind {
		case WinLead:
			m.win.delay, m.win.lead = true, max(m.win.lead, w.Offset)
		case WinCumeDist:
			m.win.delay, m.win.cume = true, m.win.cume || !w.Unordered && m.spec.WindowOrder > 0
		case WinLastValue, WinNthValue:
			m.win.delay, m.win.cume = true, true
		}
	}
	m.win.values = make([][]byte, len(m.spec.Windows))
	m.win.nthSeen = make([]bool, len(m.spec.Windows))
	for _, w := range m.spec.Windows {
		if w.Kind != WinNtile && w.Kind != WinPercentRank && w.Kind != WinCumeDist {
			continue
		}
		for _, h := range heads {
			if h[w.Arg] == nil {
				continue
			}
			n, err := m.intValue(w.Arg, h[w.Arg])
			if err != nil {
				return err
			}
			m.win.rows += n
		}
		break
	}
	for i, w := range m.spec.Windows {
		if w.Kind != WinTotal {
			continue
		}
		total, err := m.combineWindow(w, func(yield func([]byte) bool) {
			for _, h := range heads {
				if !yield(h[w.Col]) {
					return
				}
			}
		})
		if err != nil {
			return err
		}
		m.win.totals[i] = total
	}
	return nil
}

// windowRow fills the row's window columns.
func (m *Merger) windowRow(cols [][]byte) error {
	st := m.win
	if st == nil {
		return nil
	}
	st.n++
	ranked, peersDone := false, false
	for i, w := range m.spec.Windows {
		switch w.Kind {
		case WinTotal:
			cols[w.Col] = st.totals[i]
			continue
		case WinLag:
			cols[w.Col] = m.lagValue(i, w, cols)
			continue
		case WinLead:
			if w.Offset > 0 {
				cols[w.Col] = nil // delayRow fills it in
			} else {
				cols[w.Col] = cols[w.Arg]
			}
			continue
		case WinCumeDist:
			cols[w.Col] = nil // delayRow fills it in
			if w.Unordered || m.spec.WindowOrder == 0 {
				cols[w.Col] = float8Value(1, m.cols[w.Col].Format)
			}
			continue
		case WinFirstValue, WinNthValue:
			n := int64(1)
			if w.Kind == WinNthValue {
				n = int64(w.Offset)
			}
			if st.n == n {
				st.values[i], st.nthSeen[i] = copyValue(cols[w.Arg]), true
			}
			cols[w.Col] = st.values[i] // WinNthValue: delayRow decides
			continue
		case WinLastValue:
			cols[w.Col] = nil // delayRow fills it in
			continue
		case WinRunning:
			v, err := m.runningValue(i, w, cols, &peersDone)
			if err != nil {
				return err
			}
			cols[w.Col] = v
			continue
		case WinRowNumber:
			cols[w.Col] = countValue(st.n, m.cols[w.Col].Format)
			continue
		case WinNtile:
			if st.ntiles == nil {
				st.ntiles = make([]ntileState, len(m.spec.Windows))
			}
			cols[w.Col] = int4Value(st.ntiles[i].next(st.rows, int64(w.Offset)), m.cols[w.Col].Format)
			continue
		}
		if !ranked {
			ranked = true
			peer := st.prev != nil
			if peer {
				c, err := m.compareBy(m.spec.OrderBy[:m.spec.WindowOrder], st.prev, cols)
				if err != nil {
					return err
				}
				peer = c == 0
			}
			if !peer {
				st.rank, st.dense = st.n, st.dense+1
			}
		}
		v := st.rank
		switch {
		case w.Unordered && w.Kind == WinPercentRank:
			cols[w.Col] = float8Value(0, m.cols[w.Col].Format)
			continue
		case w.Unordered:
			v = 1
		case w.Kind == WinDenseRank:
			v = st.dense
		case w.Kind == WinPercentRank:
			cols[w.Col] = float8Value(percentRank(st.rank, st.rows), m.cols[w.Col].Format)
			continue
		}
		cols[w.Col] = countValue(v, m.cols[w.Col].Format)
	}
	if ranked {
		st.prev = cloneRow(st.prev, cols)
	}
	return nil
}

// next is the bucket of the next of rows for ntile(buckets), as
// PostgreSQL's window_ntile deals them: rows/buckets rows each, the first
// rows%buckets buckets one more.
func (st *ntileState) next(rows, buckets int64) int64 {
	if buckets <= 0 {
		return 0 // the shards failed with 22014 before any row
	}
	if st.ntile == 0 {
		st.ntile = 1
		st.boundary = rows / buckets
		if st.boundary <= 0 {
			st.boundary = 1
		} else {
			st.remainder = rows % buckets
			if st.remainder != 0 {
				st.boundary++
			}
		}
	}
	st.inBucket++
	if st.boundary < st.inBucket {
		if st.remainder != 0 && st.ntile == st.remainder {
			st.remainder = 0
			st.boundary--
		}
		st.ntile++
		st.inBucket = 1
	}
	return st.ntile
}

// percentRank is window_percent_rank's (rank - 1) / (rows - 1), 0 for a
// single row.
func percentRank(rank, rows int64) float64 {
	if rows <= 1 {
		return 0
	}
	return float64(rank-1) / float64(rows-1)
}

// int4Value is n as an int4 value in format.
func int4Value(n int64, format int16) []byte {
	if format == 1 {
		return binary.BigEndian.AppendUint32(nil, uint32(int32(n)))
	}
	return strconv.AppendInt(nil, n, 10)
}

// float8Value is f as a float8 value in format (text as float8out writes
// it with extra_float_digits above 0).
func float8Value(f float64, format int16) []byte {
	if format == 1 {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
	}
	return []byte(formatFloat8(f))
}

// delayRow holds row cols back while a lead or cume_dist of it waits for
// a row after it, and passes on (afterWindows) the rows held before it
// that it completes: the row Offset before it gets its lead value from
// cols, and when cols is not a peer of the rows before it (by the
// window's order), those rows' peers are all in, so their cume_dist is
// the rows before cols over every row. done ends the rows: leads past
// the last row are NULL, and the last peers' cume_dist is all rows'.
func (m *Merger) delayRow(cols [][]byte, done bool) (bool, error) {
	st := m.win
	if !done {
		if len(st.held) == 0 {
			st.heldFrom = st.n
		}
		peer := st.cume && len(st.held) > st.heldPeers
		if peer {
			c, err := m.compareBy(m.spec.OrderBy[:m.spec.WindowOrder], st.held[len(st.held)-1], cols)
			if err != nil {
				return false, err
			}
			peer = c == 0
		}
		if !peer {
			m.cumeDist(len(st.held), st.n-1)
		}
		for _, w := range m.spec.Windows {
			if w.Kind != WinLead || w.Offset == 0 {
				continue
			}
			if j := len(st.held) - w.Offset; j >= 0 {
				var v []byte
				if a := cols[w.Arg]; a != nil {
					v = append(make([]byte, 0, len(a)), a...)
				}
				st.held[j][w.Col] = v
			}
		}
		st.held = append(st.held, cloneRow(nil, cols))
	} else {
		m.cumeDist(len(st.held), st.heldFrom+int64(len(st.held))-1)
	}
	// Pass on the rows whose windows are all known.
	ready := st.heldPeers
	if !done {
		ready = min(ready, len(st.held)-st.lead)
	}
	for k := 0; k < ready; k++ {
		row := st.held[0]
		st.held[0] = nil
		st.held = st.held[1:]
		st.heldFrom++
		st.heldPeers--
		if more, err := m.afterWindows(row); err != nil || !more {
			return more, err
		}
	}
	if len(st.held) == 0 {
		st.held = nil // its backing array, once emptied
	}
	return true, nil
}

// cumeDist completes the peers among the first n held rows: their
// cume_dist is upTo, the rows up to the last of them, over every row.
func (m *Merger) cumeDist(n int, upTo int64) {
	st := m.win
	if !st.cume {
		st.heldPeers = n // no cume_dist waits for peers
		return
	}
	if n <= st.heldPeers {
		return
	}
	last := st.held[n-1]
	for ; st.heldPeers < n; st.heldPeers++ {
		row := st.held[st.heldPeers]
		for i, w := range m.spec.Windows {
			switch w.Kind {
			case WinCumeDist:
				if w.Unordered || m.spec.WindowOrder == 0 {
					continue // 1, set as the row came
				}
				f := 1.0
				if st.rows > 0 {
					f = float64(upTo) / float64(st.rows)
				}
				row[w.Col] = float8Value(f, m.cols[w.Col].Format)
			case WinLastValue:
				row[w.Col] = copyValue(last[w.Arg])
			case WinNthValue:
				// NULL while the frame, up to the last peer, is short of
				// row n.
				row[w.Col] = nil
				if st.nthSeen[i] && int64(w.Offset) <= upTo {
					row[w.Col] = st.values[i]
				}
			}
		}
	}
}
