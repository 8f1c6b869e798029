package executor

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// SortKey is one ORDER BY item over a result column.
type SortKey struct {
	Col        int
	Desc       bool
	NullsFirst bool
}

// AggKind is how partial aggregates from shards combine.
type AggKind uint8

const (
	AggCount      AggKind = iota + 1 // sum of counts
	AggSum                           // sum of sums
	AggMin                           // least
	AggMax                           // greatest
	AggBoolAnd                       // AND
	AggBoolOr                        // OR
	AggAvg                           // sum(SumCol) / sum(CountCol), in the column's own type
	AggStringAgg                     // partial strings joined, each after its row's separator (SepCol)
	AggArrayAgg                      // partial arrays concatenated along the first dimension
	AggJSONAgg                       // partial json arrays concatenated (StructCol: x is an array or composite)
	AggJSONBAgg                      // partial jsonb arrays concatenated
	AggBitAnd                        // bitwise AND of integers or equal-length bit strings
	AggBitOr                         // bitwise OR
	AggBitXor                        // bitwise XOR
	AggStddevSamp                    // from the shards' moments of x (variance.go)
	AggStddevPop
	AggVarSamp
	AggVarPop
	AggCorr // from the shards' states of float8_regr_accum (regression.go)
	AggCovarPop
	AggCovarSamp
	AggRegrAvgX
	AggRegrAvgY
	AggRegrIntercept
	AggRegrR2
	AggRegrSlope
	AggRegrSXX
	AggRegrSXY
	AggRegrSYY
	AggJSONObjectAgg  // partial json objects' pairs one after another (jsonobject.go)
	AggJSONBObjectAgg // partial jsonb objects merged, the last value of a key winning
)

func (k AggKind) String() string {
	names := [...]string{"?", "count", "sum", "min", "max", "bool_and", "bool_or", "avg",
		"string_agg", "array_agg", "json_agg", "jsonb_agg", "bit_and", "bit_or", "bit_xor",
		"stddev_samp", "stddev_pop", "var_samp", "var_pop", "corr", "covar_pop", "covar_samp", "regr_avgx", "regr_avgy",
		"regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy", "json_object_agg", "jsonb_object_agg"}
	if int(k) >= len(names) {
		return "AggKind(" + strconv.Itoa(int(k)) + ")"
	}
	return names[k]
}

// Agg combines one output column across shards.
type Agg struct {
	Col      int
	Kind     AggKind
	SumCol   int // AggAvg: hidden column holding sum(x)
	CountCol int // AggAvg: hidden column holding count(x)
	// Distinct folds once per DISTINCT value of a group (Spec.SortedBy).
	Distinct bool
	// Tag, when Spec.Tagged is set, is the tag of the rows this
	// aggregate combines (tagged.go).
	Tag    int64
	SepCol int // AggStringAgg: hidden column of the row's separator
	// StructCol is, for AggJSONAgg, the hidden boolean column that says
	// whether x is an array or a composite (json_agg writes "\n " before
	// such elements after the first).
	StructCol int
	// Moments are, for the stddev and variance kinds, the hidden columns
	// of the shards' moments of x (variance.go).
	Moments Moments
	// Regression is, for AggCorr through AggRegrSYY, the hidden columns
	// of the shards' states of float8_regr_accum (regression.go).
	Regression Regression
}

// Spec says how rows from several shards become one result.
type Spec struct {
	OrderBy []SortKey
	Limit   int64 // < 0: no limit
	Offset  int64
	// GroupBy lists the columns whose values form a group when Aggs is
	// not empty; with Distinct and no Aggs, every visible column is the
	// key.
	GroupBy []int
	Aggs    []Agg
	// Having conditions are ANDed and evaluated on combined groups.
	Having   []Cond
	Distinct bool
	// DistinctOn keeps the first row (in OrderBy order) of each key.
	DistinctOn []int
	// Collation is the database's collation when it orders text other than
	// byte by byte (anything but C/POSIX), "" for C. It matters only when
	// the Sink is no OrderSource: text then compares in byte order when it
	// is "", and is refused otherwise rather than ordered wrongly.
	Collation string
	// Plan is the statement the shards ran, for the OrderSource to look
	// up how its columns order (nil when unknown).
	Plan *Plan
	// Visible is the number of leading columns the client sees; the rest
	// are hidden columns the proxy added (0: all columns are visible).
	Visible int
	// Outer computes the expressions over aggregates of a grouped query
	// (outer.go).
	Outer *Outer
	// SortedBy, for DISTINCT aggregates and for collecting aggregates
	// with ORDER BY, is the order of each shard's rows: the GroupBy
	// columns then the DISTINCT value (distinct.go) or the aggregates'
	// ORDER BY keys (collect.go).
	SortedBy []SortKey
	// Tagged, for DISTINCT aggregates of several values, tells the
	// grouping set of each of the shards' rows (tagged.go).
	Tagged *Tagging
	// Eval is the server that adds partial sums the proxy cannot add
	// itself (fold.go): the first shard's, once its answer is read.
	Eval OuterEval
	// Count, for SELECT count(*) FROM (subquery) s (router.Merge's
	// CountName), sends one row, the number of rows merged, instead of
	// the rows; Exists, for SELECT EXISTS (subquery), whether there is one.
	Count, Exists bool
	// Dedup, for a UNION across shards, drops each row equal to the one
	// before it by OrderBy, which then holds every visible column: each
	// shard sends its rows of the union deduplicated and sorted by them,
	// so equal rows of different shards meet in the merge. OFFSET and
	// LIMIT count the rows kept.
	Dedup bool
	// Windows are columns whose window function the merge computes
	// (window.go): row numbers and ranks in OrderBy order, whose first
	// WindowOrder keys are the window's, and totals over every row.
	Windows     []Window
	WindowOrder int
	// SetOp, for INTERSECT or EXCEPT across shards, counts each run of
	// rows equal by OrderBy (every visible column) per query, as the last
	// column says, and sends it as often as the operation keeps it
	// (setop.go).
	SetOp SetOpKind
	// SetSteps is the set operation's tree in postfix order (setop.go).
	SetSteps []SetStep
	// WithTies, for FETCH FIRST n ROWS WITH TIES, sends after the Limit
	// rows every further row equal to the last of them by the first
	// WithTies keys of OrderBy (0: no ties).
	WithTies int
}

// Cond is a HAVING condition: column Op value. Value is in Format (0
// text, 1 binary); nil is NULL (never true).
type Cond struct {
	Col    int
	Op     string // =, <>, <, <=, >, >=
	Value  []byte
	Format int16
	Param  bool // Value is a Bind parameter's; else an integer constant's text
}

// Rows is one shard's stream of DataRow bodies. Next returns nil, nil at
// the end of the result. A body stays valid until the next call.
type Rows interface {
	Next() ([]byte, error)
}

// Sink receives the merged result.
type Sink interface {
	Write([]byte) (int, error)
}

// RowsWanted is a Sink that takes rows a few at a time (a cursor's FETCH):
// the merger writes its rows once it holds as many as the sink still
// wants, rather than by the 32 KiB, so that it pulls no more rows from the
// shards than a FETCH needs.
type RowsWanted interface {
	Sink
	// RowsWanted is the number of rows the sink still wants before it
	// pauses the merge; 0 or less: as many as come.
	RowsWanted() int64
}

// Column describes one result column (from RowDescription).
type Column struct {
	Name string
	// TableOID and Attnum identify the table column the result column is
	// (0 when it is an expression), on the shard that described it.
	TableOID uint32
	Attnum   int16
	OID      uint32 // type; the base type of a domain
	Format   int16
}

// ParseRowDescription decodes the columns of a RowDescription body.
func ParseRowDescription(body []byte) ([]Column, error) {
	n, rest, ok := wire.Uint16(body)
	if !ok {
		return nil, fmt.Errorf("malformed RowDescription")
	}
	cols := make([]Column, int(n))
	for i := range cols {
		name, r, ok := wire.CString(rest)
		if !ok || len(r) < 18 {
			return nil, fmt.Errorf("malformed RowDescription")
		}
		cols[i] = Column{
			Name:     string(name),
			TableOID: binary.BigEndian.Uint32(r),
			Attnum:   int16(binary.BigEndian.Uint16(r[4:])),
			OID:      binary.BigEndian.Uint32(r[6:]),
			Format:   int16(binary.BigEndian.Uint16(r[16:])),
		}
		rest = r[18:]
	}
	return cols, nil
}

// TrimRowDescription returns a RowDescription message with only the first
// n columns of body.
func TrimRowDescription(body []byte, n int) []byte {
	_, rest, _ := wire.Uint16(body)
	out := []byte{'T', 0, 0, 0, 0}
	out = wire.AppendInt16(out, int16(n))
	for i := 0; i < n; i++ {
		_, r, _ := wire.CString(rest)
		end := len(rest) - len(r) + 18
		out = append(out, rest[:end]...)
		rest = rest[end:]
	}
	return wire.FinishMessage(out, 0)
}

// SplitRow parses a DataRow body into column values (nil for NULL),
// reusing cols.
func SplitRow(body []byte, cols [][]byte) ([][]byte, error) {
	n, rest, ok := wire.Uint16(body)
	if !ok {
		return nil, fmt.Errorf("malformed DataRow")
	}
	cols = cols[:0]
	for i := 0; i < int(n); i++ {
		l, r, ok := wire.Uint32(rest)
		if !ok {
			return nil, fmt.Errorf("malformed DataRow")
		}
		if int32(l) < 0 {
			cols = append(cols, nil)
			rest = r
			continue
		}
		if int(l) > len(r) {
			return nil, fmt.Errorf("malformed DataRow")
		}
		cols = append(cols, r[:l:l])
		rest = r[l:]
	}
	return cols, nil
}

// appendDataRow appends a DataRow message with the first n of cols.
func appendDataRow(buf []byte, cols [][]byte, n int) []byte {
	start := len(buf)
	buf = append(buf, 'D', 0, 0, 0, 0)
	buf = wire.AppendInt16(buf, int16(n))
	for _, v := range cols[:n] {
		if v == nil {
			buf = wire.AppendInt32(buf, -1)
			continue
		}
		buf = wire.AppendInt32(buf, int32(len(v)))
		buf = append(buf, v...)
	}
	return wire.FinishMessage(buf, start)
}

// Merger combines the results of one statement from several shards.
type Merger struct {
	spec    Spec
	cols    []Column
	cmp     []compareFunc     // per column, built on demand
	colls   map[int]Collation // the collations of the text columns in cmp
	sums    map[int]Column    // AggAvg columns as the shards typed them (retypeAvg)
	folds   []foldCol         // sum and avg columns a server adds (fold.go)
	visible int
	out     Sink
	wants   RowsWanted // out, when it takes rows a few at a time
	buf     []byte
	held    int64 // rows in buf
	sent    int64 // rows sent
	skipped int64 // rows skipped for OFFSET
	// prev is the last row kept (Dedup), tie the last row sent within
	// the Limit (WithTies): copies, since sources reuse their buffers.
	prev, tie [][]byte
	win       *windowState // Spec.Windows (window.go)
	setop     setOpState   // Spec.SetOp (setop.go)
}

// NewMerger prepares a merge of results with columns cols into out.
func NewMerger(spec Spec, cols []Column, out Sink) (*Merger, error) {
	m := &Merger{spec: spec, cols: slices.Clone(cols), cmp: make([]compareFunc, len(cols)), out: out, visible: spec.Visible}
	if m.visible <= 0 || m.visible > len(cols) {
		m.visible = len(cols)
	}
	m.wants, _ = out.(RowsWanted)
	for _, a := range spec.Aggs {
		if a.Kind == AggAvg {
			if err := m.retypeAvg(a.Col); err != nil {
				return nil, err
			}
		}
	}
	if err := m.planFolds(); err != nil {
		return nil, err
	}
	// The columns compared: sort keys, min/max, HAVING.
	var need []int
	for _, k := range spec.OrderBy {
		if spec.Outer.fills(k.Col) {
			continue // typed by the outer statement (evalOuter)
		}
		need = addNeed(need, k.Col)
	}
	for _, a := range spec.Aggs {
		if a.Kind == AggMin || a.Kind == AggMax {
			need = addNeed(need, a.Col)
		}
	}
	for _, h := range spec.Having {
		need = addNeed(need, h.Col)
	}
	for _, w := range spec.Windows {
		if (w.Kind == WinTotal || w.Kind == WinRunning) && (w.Agg == AggMin || w.Agg == AggMax) {
			need = addNeed(need, w.Col)
		}
	}
	for _, col := range need {
		if col < 0 || col >= len(cols) {
			return nil, fmt.Errorf("merge: column %d out of range", col)
		}
	}
	if err := m.buildComparators(need); err != nil {
		return nil, err
	}
	if err := m.checkEquality(); err != nil {
		return nil, err
	}
	for i, h := range spec.Having {
		if err := checkHaving(h, m.cols[h.Col]); err != nil {
			return nil, err
		}
		if h.Value != nil && h.Format != m.cols[h.Col].Format {
			v, err := convertConst(h.Value, m.cols[h.Col])
			if err != nil {
				return nil, err
			}
			m.spec.Having[i].Value = v
		}
	}
	return m, nil
}

// Run merges every source and returns the number of rows sent.
func (m *Merger) Run(sources []Rows) (int64, error) {
	var err error
	switch {
	case len(m.spec.Aggs) > 0 || len(m.spec.GroupBy) > 0 || m.spec.Distinct || len(m.spec.DistinctOn) > 0 || len(m.spec.Having) > 0 || m.spec.Outer != nil:
		err = m.aggregate(sources)
	case len(m.spec.OrderBy) > 0 || len(m.spec.Windows) > 0:
		// A window's totals need every shard's first row.
		err = m.ordered(sources)
	default:
		err = m.concat(sources)
	}
	if m.spec.Count && err == nil {
		v := countValue(m.sent, m.cols[0].Format)
		if m.spec.Exists {
			v = existsValue(m.sent > 0, m.cols[0].Format)
		}
		m.buf = appendDataRow(m.buf, [][]byte{v}, 1)
		m.sent = 1
	}
	if len(m.buf) > 0 {
		// Rows merged before an error reach the client before it, as a
		// server's rows do.
		if _, werr := m.out.Write(m.buf); err == nil {
			err = werr
		}
		m.buf, m.held = m.buf[:0], 0
	}
	return m.sent, err
}

// emit sends one row, applying OFFSET and LIMIT; it reports false once the
// limit is reached.
func (m *Merger) emit(cols [][]byte) (bool, error) {
	if m.spec.Limit >= 0 && m.sent >= m.spec.Limit {
		return false, nil
	}
	if m.skipped < m.spec.Offset {
		m.skipped++
		return true, nil
	}
	if err := m.send(cols); err != nil {
		return false, err
	}
	if m.spec.Count && m.spec.Exists {
		return false, nil
	}
	return m.spec.Limit < 0 || m.sent < m.spec.Limit, nil
}

// send sends one row (or, for Count, counts it).
func (m *Merger) send(cols [][]byte) error {
	m.sent++
	if m.spec.Count {
		return nil
	}
	m.buf = appendDataRow(m.buf, cols, m.visible)
	m.held++
	if len(m.buf) > 32<<10 || m.enough() {
		if _, err := m.out.Write(m.buf); err != nil {
			return err
		}
		m.buf = m.buf[:0]
		m.held = 0
	}
	return nil
}

// enough reports whether the rows held are all that a sink taking rows a
// few at a time (RowsWanted) still wants.
func (m *Merger) enough() bool {
	if m.wants == nil {
		return false
	}
	w := m.wants.RowsWanted()
	return w > 0 && m.held >= w
}

// next passes one row of the ordered merge on: it drops a row equal to
// the one before (Dedup) and, past the Limit, sends the rows tied with the
// last one sent (WithTies). It reports false once no further row can be
// sent.
func (m *Merger) next(cols [][]byte) (bool, error) {
	if m.spec.SetOp != 0 {
		return m.setOpRow(cols)
	}
	return m.nextRow(cols)
}

// nextRow is next for one row of the merge's result.
func (m *Merger) nextRow(cols [][]byte) (bool, error) {
	if err := m.windowRow(cols); err != nil {
		return false, err
	}
	if m.win != nil && m.win.delay {
		return m.delayRow(cols, false)
	}
	return m.afterWindows(cols)
}

// afterWindows is nextRow for a row whose window columns are filled in.
func (m *Merger) afterWindows(cols [][]byte) (bool, error) {
	if m.spec.Dedup {
		if m.prev != nil {
			c, err := m.compareRows(m.prev, cols)
			if err != nil || c == 0 {
				return err == nil, err
			}
		}
		m.prev = cloneRow(m.prev, cols)
	}
	if m.spec.WithTies <= 0 || m.spec.Limit < 0 {
		return m.emit(cols)
	}
	if m.sent < m.spec.Limit {
		sent := m.sent
		if _, err := m.emit(cols); err != nil {
			return false, err
		}
		if m.sent > sent {
			m.tie = cloneRow(m.tie, cols)
		}
		return !(m.spec.Count && m.spec.Exists && m.sent > 0), nil
	}
	if m.tie == nil {
		return false, nil // LIMIT 0
	}
	if c, err := m.compareBy(m.spec.OrderBy[:min(m.spec.WithTies, len(m.spec.OrderBy))], m.tie, cols); err != nil || c != 0 {
		return false, err
	}
	return true, m.send(cols)
}

// cloneRow copies a row's values into one new buffer, reusing dst's slice.
func cloneRow(dst, cols [][]byte) [][]byte {
	n := 0
	for _, v := range cols {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	dst = dst[:0]
	for _, v := range cols {
		if v == nil {
			dst = append(dst, nil)
			continue
		}
		buf = append(buf, v...)
		dst = append(dst, buf[len(buf)-len(v):len(buf):len(buf)])
	}
	return dst
}

// drain reads a source to its end (after LIMIT was reached) so that its
// server connection is back at a message boundary.
func drain(r Rows) error {
	for {
		b, err := r.Next()
		if err != nil || b == nil {
			return err
		}
	}
}

func (m *Merger) concat(sources []Rows) error {
	var cols [][]byte
	more := true
	for _, src := range sources {
		for {
			b, err := src.Next()
			if err != nil {
				return err
			}
			if b == nil {
				break
			}
			if !more {
				continue // keep reading to the end of the stream
			}
			if cols, err = SplitRow(b, cols); err != nil {
				return err
			}
			if more, err = m.emit(cols); err != nil {
				return err
			}
		}
	}
	return nil
}

// compareRows orders two rows by the spec's ORDER BY.
func (m *Merger) compareRows(a, b [][]byte) (int, error) {
	return m.compareBy(m.spec.OrderBy, a, b)
}

// compareBy orders two rows by keys.
func (m *Merger) compareBy(keys []SortKey, a, b [][]byte) (int, error) {
	for _, k := range keys {
		x, y := a[k.Col], b[k.Col]
		var c int
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			// NULL placement follows NULLS FIRST/LAST, whatever the
			// direction.
			if k.NullsFirst {
				return -1, nil
			}
			return 1, nil
		case y == nil:
			if k.NullsFirst {
				return 1, nil
			}
			return -1, nil
		default:
			var err error
			c, err = m.cmp[k.Col](x, y)
			if err != nil {
				return 0, err
			}
		}
		if k.Desc {
			c = -c
		}
		if c != 0 {
			return c, nil
		}
	}
	return 0, nil
}

type cursor struct {
	src  Rows
	cols [][]byte
	idx  int
}

type mergeHeap struct {
	m   *Merger
	cur []*cursor
	err error
}

func (h *mergeHeap) Len() int { return len(h.cur) }
func (h *mergeHeap) Less(i, j int) bool {
	c, err := h.m.compareRows(h.cur[i].cols, h.cur[j].cols)
	if err != nil && h.err == nil {
		h.err = err
	}
	if c == 0 {
		return h.cur[i].idx < h.cur[j].idx // stable: lower shard first
	}
	return c < 0
}
func (h *mergeHeap) Swap(i, j int) { h.cur[i], h.cur[j] = h.cur[j], h.cur[i] }
func (h *mergeHeap) Push(x any)    { h.cur = append(h.cur, x.(*cursor)) }
func (h *mergeHeap) Pop() any {
	c := h.cur[len(h.cur)-1]
	h.cur = h.cur[:len(h.cur)-1]
	return c
}

// ordered is a streaming k-way merge: memory holds one row per shard.
func (m *Merger) ordered(sources []Rows) error {
	h := &mergeHeap{m: m}
	for i, src := range sources {
		c := &cursor{src: src, idx: i}
		ok, err := c.advance()
		if err != nil {
			return err
		}
		if ok {
			h.cur = append(h.cur, c)
		}
	}
	heap.Init(h)
	if len(m.spec.Windows) > 0 {
		heads := make([][][]byte, len(h.cur))
		for i, c := range h.cur {
			heads[i] = c.cols
		}
		if err := m.startWindows(heads); err != nil {
			return err
		}
		m.win.last = make([][][]byte, len(sources))
		for i := range m.win.last {
			m.win.last[i] = make([][]byte, len(m.spec.Windows))
		}
		m.win.peers = make([]bool, len(sources))
	}
	for h.Len() > 0 {
		if h.err != nil {
			return h.err
		}
		c := h.cur[0]
		if m.win != nil {
			m.win.heads, m.win.src = h.cur, c.idx
		}
		more, err := m.next(c.cols)
		if err != nil {
			return err
		}
		if !more {
			for _, c := range h.cur {
				if err := drain(c.src); err != nil {
					return err
				}
			}
			return nil
		}
		ok, err := c.advance()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	if h.err == nil && m.spec.SetOp != 0 {
		_, err := m.flushSetOp()
		return err
	}
	if h.err == nil && m.win != nil && m.win.delay {
		_, err := m.delayRow(nil, true)
		return err
	}
	return h.err
}

func (c *cursor) advance() (bool, error) {
	b, err := c.src.Next()
	if err != nil || b == nil {
		return false, err
	}
	c.cols, err = SplitRow(b, c.cols)
	return err == nil, err
}

// SelectTag is the CommandComplete tag for n rows.
func SelectTag(n int64) string { return "SELECT " + strconv.FormatInt(n, 10) }
