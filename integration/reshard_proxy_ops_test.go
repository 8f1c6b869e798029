package integration

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// expectation is what a writer statement may answer.
type expectation uint8

const (
	mustApply  expectation = iota // any error is a problem
	mayRefuse                     // applied, or refused with 0A000 (it raced the cutover)
	mustRefuse                    // refused with 0A000: the source was sharded when it started
)

// writeOutcome is what became of a writer statement.
type writeOutcome uint8

const (
	outcomeApplied writeOutcome = iota // acknowledged
	outcomeRefused                     // a clean SQL error: the statement had no effect
	outcomeLost                        // the connection broke: the outcome is unknown
)

// classifyWrite tells a clean SQL error from a broken connection.
func classifyWrite(err error) writeOutcome {
	if err == nil {
		return outcomeApplied
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Severity == "FATAL" || pe.Severity == "PANIC" {
		return outcomeLost
	}
	switch pe.Code[:2] {
	case "08", "57", "58", "XX":
		return outcomeLost
	}
	return outcomeRefused
}

// proxyWriter writes through the proxy and records in its model what its
// acknowledged statements did. The model is the writer goroutine's until
// stop returns.
type proxyWriter struct {
	url        string
	nsrc, ndst int
	m          *proxyModel
	rng        *rand.Rand
	next       int64 // the last id handed out for new rows
	quit       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
	cutOver    atomic.Bool            // set by the test once SHOW TASKS says done
	phase      atomic.Pointer[string] // the task's phase as the test last saw it

	mu          sync.Mutex     // guards the following
	acked       map[string]int // acknowledged statements per phase at their start
	refused     int
	doubts      int
	reconnects  int
	keyMoves    int
	keyRefusals int
	afterIDs    []int64 // accounts inserted (acknowledged) after the cutover
	problems    []string
}

func startProxyWriter(t *testing.T, url string, nsrc, ndst int, m *proxyModel) *proxyWriter {
	w := &proxyWriter{url: url, nsrc: nsrc, ndst: ndst, m: m, rng: rand.New(rand.NewPCG(uint64(nsrc), uint64(ndst))),
		next: 1_000_000, quit: make(chan struct{}), acked: map[string]int{}}
	starting := "starting"
	w.phase.Store(&starting)
	w.wg.Add(1)
	go w.run(context.WithoutCancel(t.Context()))
	t.Cleanup(w.stop)
	return w
}

func (w *proxyWriter) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}

func (w *proxyWriter) ackedIn(phase string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked[phase]
}

func (w *proxyWriter) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) < 20 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

func (w *proxyWriter) run(ctx context.Context) {
	defer w.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(ctx)
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-w.quit:
			return
		default:
		}
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			conn, err = pgx.Connect(cctx, w.url)
			cancel()
			if err != nil {
				conn = nil
				time.Sleep(20 * time.Millisecond) // pacing the reconnects
				continue
			}
		}
		// Half the statements use the simple protocol, half the extended
		// one (an unnamed statement per execution).
		mode := pgx.QueryExecModeSimpleProtocol
		if i%2 == 1 {
			mode = pgx.QueryExecModeExec
		}
		if o := w.step(ctx, conn, mode, i); o == outcomeLost || conn.IsClosed() {
			conn.Close(ctx)
			conn = nil
			w.mu.Lock()
			w.reconnects++
			w.mu.Unlock()
		}
		time.Sleep(2 * time.Millisecond) // pacing
	}
}

// fresh returns a new id for which ok holds.
func (w *proxyWriter) fresh(ok func(int64) bool) int64 {
	for {
		w.next++
		if ok == nil || ok(w.next) {
			return w.next
		}
	}
}

// writeAttempt is one writer statement: where it runs and what was known when
// it started.
type writeAttempt struct {
	w       *proxyWriter
	ctx     context.Context
	conn    *pgx.Conn
	mode    pgx.QueryExecMode
	i       int
	after   bool   // the task was done
	sharded bool   // the source was sharded (several shards, or cut over)
	phase   string // the task's phase, "after" once done
}

func (a *writeAttempt) exec(sql string, args ...any) (int64, error) {
	tag, err := a.conn.Exec(a.ctx, sql, append([]any{a.mode}, args...)...)
	return tag.RowsAffected(), err
}

// settle records the outcome of statement what; doubt marks what it
// touched uncertain when the outcome is unknown.
func (a *writeAttempt) settle(what string, err error, want expectation, doubt func()) writeOutcome {
	w := a.w
	o := classifyWrite(err)
	w.mu.Lock()
	defer w.mu.Unlock()
	var problem string
	switch o {
	case outcomeApplied:
		w.acked[a.phase]++
		if want == mustRefuse {
			problem = fmt.Sprintf("%s (phase %s) was applied; the proxy should refuse it on a sharded database", what, a.phase)
		}
	case outcomeRefused:
		if want == mustApply || sqlstate(err) != wire.FeatureNotSupported {
			problem = fmt.Sprintf("%s (phase %s): %v", what, a.phase, err)
		} else {
			w.refused++
		}
	case outcomeLost:
		w.doubts++
		doubt()
	}
	if problem != "" && len(w.problems) < 20 {
		w.problems = append(w.problems, problem)
	}
	return o
}

// one reports a statement that should have affected one row.
func (a *writeAttempt) one(what string, n int64) {
	if n != 1 {
		a.w.problem("%s (phase %s, %v): %d rows affected, want 1", what, a.phase, a.mode, n)
	}
}

// step runs statement i and applies its outcome to the model.
func (w *proxyWriter) step(ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode, i int) writeOutcome {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // longer than a cutover's pause
	defer cancel()
	a := &writeAttempt{w: w, ctx: ctx, conn: conn, mode: mode, i: i, after: w.cutOver.Load(), phase: *w.phase.Load()}
	a.sharded = w.nsrc > 1 || a.after
	if a.after {
		a.phase = "after"
	}
	switch i % 16 {
	case 0, 1, 2:
		return w.insertAccount(a)
	case 3, 4, 15:
		return w.updateAccount(a)
	case 5:
		return w.moveKey(a, "accounts")
	case 6:
		return w.deleteAccount(a)
	case 7:
		return w.updateDoc(a)
	case 8: // the TOASTed body is unchanged
		return w.moveKey(a, "docs")
	case 9:
		return w.updateCountry(a)
	case 10, 11:
		return w.insertEvent(a)
	default:
		return w.writeScratch(a)
	}
}

func (w *proxyWriter) insertAccount(a *writeAttempt) writeOutcome {
	m := w.m
	id := w.fresh(nil)
	key := strconv.FormatInt(id, 10)
	bal, note := w.rng.IntN(1000), fmt.Sprint("w", a.i)
	_, err := a.exec("INSERT INTO accounts (id, balance, note) VALUES ($1, $2, $3)", id, bal, note)
	o := a.settle("insert account "+key, err, mustApply, func() { m.doubt("accounts", key) })
	if o == outcomeApplied {
		m.set("accounts", key, fmt.Sprintf("%d|%d|%s", id, bal, note))
		if a.after {
			w.mu.Lock()
			w.afterIDs = append(w.afterIDs, id)
			w.mu.Unlock()
		}
	}
	return o
}

// updateAccount changes the non-key columns, sometimes to NULL.
func (w *proxyWriter) updateAccount(a *writeAttempt) writeOutcome {
	m := w.m
	key, ok := m.pools["accounts"].pick(w.rng)
	if !ok {
		return outcomeApplied
	}
	bal := w.rng.IntN(1000)
	var note any = fmt.Sprint("u", a.i)
	text := note.(string)
	if a.i%5 == 0 {
		note, text = nil, "-"
	}
	n, err := a.exec("UPDATE accounts SET balance = $1, note = $2 WHERE id = $3", bal, note, key)
	o := a.settle("update account "+key, err, mustApply, func() { m.doubt("accounts", key) })
	if o == outcomeApplied {
		a.one("update account "+key, n)
		m.set("accounts", key, fmt.Sprintf("%s|%d|%s", key, bal, text))
	}
	return o
}

func (w *proxyWriter) deleteAccount(a *writeAttempt) writeOutcome {
	m := w.m
	key, ok := m.pools["accounts"].pick(w.rng)
	if !ok {
		return outcomeApplied
	}
	n, err := a.exec("DELETE FROM accounts WHERE id = $1", key)
	o := a.settle("delete account "+key, err, mustApply, func() { m.doubt("accounts", key) })
	if o == outcomeApplied {
		a.one("delete account "+key, n)
		m.del("accounts", key)
	}
	return o
}

// updateDoc gives a doc a new body, mostly a TOASTed one.
func (w *proxyWriter) updateDoc(a *writeAttempt) writeOutcome {
	m := w.m
	key, ok := m.pools["docs"].pick(w.rng)
	if !ok {
		return outcomeApplied
	}
	body := fmt.Sprint("short w", a.i)
	if a.i%3 != 0 {
		body = docBody(int64(a.i))
	}
	n, err := a.exec("UPDATE docs SET body = $1 WHERE id = $2", body, key)
	o := a.settle("update doc "+key, err, mustApply, func() { m.doubt("docs", key) })
	if o == outcomeApplied {
		a.one("update doc "+key, n)
		sum := md5.Sum([]byte(body))
		m.set("docs", key, key+"|"+hex.EncodeToString(sum[:]))
	}
	return o
}

// updateCountry writes to the omni table: every shard.
func (w *proxyWriter) updateCountry(a *writeAttempt) writeOutcome {
	m := w.m
	code := fmt.Sprint("c", w.rng.IntN(20)+1)
	if m.uncertain["countries"][code] {
		return outcomeApplied
	}
	name := fmt.Sprint("name ", a.i)
	_, err := a.exec("UPDATE countries SET name = $1 WHERE code = $2", name, code)
	o := a.settle("update country "+code, err, mustApply, func() { m.doubt("countries", code) })
	if o == outcomeApplied {
		m.set("countries", code, code+"|"+name)
	}
	return o
}

// insertEvent inserts an event with an id from the sequence, which only a
// one-shard source accepts (the proxy cannot route a row without its
// key), or with an explicit id.
func (w *proxyWriter) insertEvent(a *writeAttempt) writeOutcome {
	m := w.m
	payload := fmt.Sprint("w", a.i)
	if a.i%4 == 2 {
		want := mayRefuse
		if a.sharded {
			want = mustRefuse
		}
		var id int64
		err := a.conn.QueryRow(a.ctx, "INSERT INTO events (payload) VALUES ($1) RETURNING id", a.mode, payload).Scan(&id)
		o := a.settle("insert event with a sequence id", err, want, func() { m.lostEvents[payload] = true })
		if o == outcomeApplied {
			m.set("events", strconv.FormatInt(id, 10), fmt.Sprintf("%d|%s", id, payload))
		}
		return o
	}
	id := w.fresh(nil) + 50_000_000
	key := strconv.FormatInt(id, 10)
	_, err := a.exec("INSERT INTO events (id, payload) VALUES ($1, $2)", id, payload)
	o := a.settle("insert event "+key, err, mustApply, func() { m.doubt("events", key) })
	if o == outcomeApplied {
		m.set("events", key, key+"|"+payload)
	}
	return o
}

// writeScratch inserts into scratch, and now and then truncates it.
func (w *proxyWriter) writeScratch(a *writeAttempt) writeOutcome {
	m := w.m
	pool := m.pools["scratch"]
	if a.i%160 == 14 {
		_, err := a.exec("TRUNCATE scratch")
		o := a.settle("truncate scratch", err, mustApply, func() { m.doubt("scratch", slices.Clone(pool.list)...) })
		if o == outcomeApplied {
			for _, k := range slices.Clone(pool.list) {
				m.del("scratch", k)
			}
		}
		return o
	}
	id := w.fresh(nil)
	key := strconv.FormatInt(id, 10)
	_, err := a.exec("INSERT INTO scratch (id, v) VALUES ($1, $2)", id, a.i)
	o := a.settle("insert scratch "+key, err, mustApply, func() { m.doubt("scratch", key) })
	if o == outcomeApplied {
		m.set("scratch", key, fmt.Sprintf("%d|%d", id, a.i))
	}
	return o
}

// moveKey runs UPDATE table SET id = new WHERE id = old. On a source known
// to be sharded, every other key change goes to another shard and must be
// refused, the row unchanged; the others stay on their source shard (while
// moving to another destination shard) and may race the cutover. Before
// the cutover of a one-shard source any new key goes.
func (w *proxyWriter) moveKey(a *writeAttempt, table string) writeOutcome {
	m := w.m
	key, ok := m.pools[table].pick(w.rng)
	if !ok {
		return outcomeApplied
	}
	old, _ := strconv.ParseInt(key, 10, 64)
	cur := w.nsrc
	if a.after {
		cur = w.ndst
	}
	want := mayRefuse
	var id int64
	switch {
	case a.sharded && (a.i/16)%2 == 0:
		// Another shard under every shard count the database may have.
		want = mustRefuse
		id = w.fresh(func(id int64) bool {
			return (w.nsrc == 1 || hashShard(id, w.nsrc) != hashShard(old, w.nsrc)) && hashShard(id, w.ndst) != hashShard(old, w.ndst)
		})
	case a.sharded:
		id = w.fresh(func(id int64) bool {
			return hashShard(id, cur) == hashShard(old, cur) && (cur == w.ndst || hashShard(id, w.ndst) != hashShard(old, w.ndst))
		})
	default:
		id = w.fresh(func(id int64) bool { return hashShard(id, w.ndst) != hashShard(old, w.ndst) })
	}
	nkey := strconv.FormatInt(id, 10)
	what := fmt.Sprintf("change %s key %s to %s", table, key, nkey)
	n, err := a.exec("UPDATE "+table+" SET id = $1 WHERE id = $2", id, old)
	o := a.settle(what, err, want, func() { m.doubt(table, key, nkey) })
	w.mu.Lock()
	switch o {
	case outcomeApplied:
		w.keyMoves++
	case outcomeRefused:
		w.keyRefusals++
	}
	w.mu.Unlock()
	switch {
	case o == outcomeApplied:
		a.one(what, n)
		m.set(table, nkey, nkey+m.rows[table][key][len(key):])
		m.del(table, key)
	case o == outcomeRefused && want == mustRefuse:
		if !strings.Contains(err.Error(), "sharding key") {
			w.problem("%s: refused with %v, want the proxy's sharding key refusal", what, err)
		}
		w.checkUnchanged(a, table, key, nkey)
	}
	return o
}

// checkUnchanged reads through the proxy that the row of a refused key
// change kept its key and columns.
func (w *proxyWriter) checkUnchanged(a *writeAttempt, table, key, nkey string) {
	want := w.m.rows[table][key]
	var row string
	var moved int
	q := fmt.Sprintf("SELECT %s FROM %s WHERE id = $1", rowExpr(table), table)
	if err := a.conn.QueryRow(a.ctx, q, pgx.QueryExecModeSimpleProtocol, key).Scan(&row); err != nil || row != want {
		w.problem("change %s key %s to %s was refused (phase %s), but the proxy then read %q (%v), want %q", table, key, nkey, a.phase, row, err, want)
	}
	q = "SELECT count(*) FROM " + table + " WHERE id = $1"
	if err := a.conn.QueryRow(a.ctx, q, pgx.QueryExecModeSimpleProtocol, nkey).Scan(&moved); err != nil || moved != 0 {
		w.problem("change %s key %s to %s was refused (phase %s), but the proxy reads %d rows with the new key (%v)", table, key, nkey, a.phase, moved, err)
	}
}

// rowExpr is the row expression of table.
func rowExpr(table string) string {
	for _, tb := range proxyReshardTables {
		if tb.name == table {
			return tb.row
		}
	}
	panic("no table " + table)
}

// docBody is a 100 kB body that PostgreSQL stores out of line (TOAST):
// 3200 MD5s in hex, as the initial rows' bodies are made in SQL.
func docBody(seed int64) string {
	var b strings.Builder
	b.Grow(3200 * 32)
	for j := 1; j <= 3200; j++ {
		sum := md5.Sum(fmt.Appendf(nil, "%d-%d", seed, j))
		b.WriteString(hex.EncodeToString(sum[:]))
	}
	return b.String()
}
