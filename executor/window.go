package executor

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
	WinTotal // Window.Agg over every row
)

// Window is a select list item whose window function the proxy computes.
type Window struct {
	Col  int
	Kind WindowKind
	Agg  AggKind // WinTotal: count, sum, min or max
}

// windowState numbers the merged rows and holds the totals.
type windowState struct {
	n, rank, dense int64
	prev           [][]byte // the last row numbered, for a rank's peers
	totals         [][]byte // per Spec.Windows, WinTotal's value
}

// startWindows combines the shards' totals from their first rows (heads:
// the current row of every shard that has one).
func (m *Merger) startWindows(heads [][][]byte) error {
	if len(m.spec.Windows) == 0 {
		return nil
	}
	m.win = &windowState{totals: make([][]byte, len(m.spec.Windows))}
	for i, w := range m.spec.Windows {
		if w.Kind != WinTotal {
			continue
		}
		var total []byte
		for _, h := range heads {
			v := h[w.Col]
			switch {
			case v == nil:
				continue
			case total == nil:
				total = append([]byte{}, v...)
				continue
			}
			out, err := m.foldPartial(w.Agg, w.Col, total, v)
			if err != nil {
				return err
			}
			total = out
		}
		if total == nil && w.Agg == AggCount {
			total = countValue(0, m.cols[w.Col].Format)
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
	ranked := false
	for i, w := range m.spec.Windows {
		switch w.Kind {
		case WinTotal:
			cols[w.Col] = st.totals[i]
			continue
		case WinRowNumber:
			cols[w.Col] = countValue(st.n, m.cols[w.Col].Format)
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
		if w.Kind == WinDenseRank {
			v = st.dense
		}
		cols[w.Col] = countValue(v, m.cols[w.Col].Format)
	}
	if ranked {
		st.prev = cloneRow(st.prev, cols)
	}
	return nil
}
