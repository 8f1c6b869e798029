package integration

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

var isolationSeed = flag.Int64("seed", 0, "seed of TestIsolationRandomized; 0: $ISOLATION_SEED, else the time")

// randSettings are the settings the randomized clients change, with the
// values they choose from (as SET takes them).
var randSettings = []struct {
	name   string
	values []string
}{
	{"work_mem", []string{"1MB", "8MB", "16MB", "64kB"}},
	{"search_path", []string{"pg_catalog", "public", "pg_catalog, public", `"$user", public`}},
	{"application_name", []string{"r1", "r2", "r3"}},
	{"DateStyle", []string{"German", "SQL, DMY", "ISO, MDY", "Postgres, YMD"}},
	{"statement_timeout", []string{"0", "5s", "10min", "30s"}},
}

// setSQL is SET name = value with value quoted as SET needs it.
func setSQL(local bool, name, value string) string {
	v := value
	if name != "search_path" {
		v = "'" + value + "'"
	}
	if local {
		return "SET LOCAL " + name + " = " + v
	}
	return "SET " + name + " = " + v
}

// TestIsolationRandomized: clients over a small transaction-mode pool run
// random sequences of session-state changes in random protocol modes; each
// keeps a model of the session PostgreSQL would give it and checks, after
// every transaction, that its session is exactly that: its settings, its
// role, its prepared statements and nobody else's temp tables or locks.
//
// Replay a failure with -seed N or ISOLATION_SEED=N.
func TestIsolationRandomized(t *testing.T) {
	checkGoroutines(t)
	seed := *isolationSeed
	if seed == 0 {
		if s := os.Getenv("ISOLATION_SEED"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("ISOLATION_SEED=%q: %v", s, err)
			}
			seed = n
		}
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d or ISOLATION_SEED=%d)", seed, seed, seed)

	const clients, steps, size = 12, 40, 3
	cl := isoCluster(t)
	norm := normalizedValues(t, cl)
	p := startProxy(t, strings.Replace(poolConfig(cl, "transaction", size, "app"), "checkout_timeout: 2s", "checkout_timeout: 10s", 1))

	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &randClient{
				id:   i,
				url:  p.AppURL("app"),
				rng:  rand.New(rand.NewPCG(uint64(seed), uint64(i))),
				norm: norm,
				user: cl.User,
			}
			errs[i] = c.run(steps)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v\n(seed %d: replay with -seed %d or ISOLATION_SEED=%d)", i, err, seed, seed, seed)
		}
	}
}

// normalizedValues returns, for every setting and value a client may set,
// what current_setting reports afterwards, and under "" each setting's
// default, as a direct connection sees them.
func normalizedValues(t testing.TB, cl *pgtest.Cluster) map[string]map[string]string {
	t.Helper()
	conn := simpleConn(t, cl.DSN("app"))
	defer conn.Close(context.Background())
	out := map[string]map[string]string{}
	for _, s := range randSettings {
		out[s.name] = map[string]string{"": value(t, conn, simple, "SELECT current_setting($1)", s.name)}
		for _, v := range s.values {
			execIn(t, conn, simple, setSQL(false, s.name, v))
			out[s.name][v] = value(t, conn, simple, "SELECT current_setting($1)", s.name)
		}
		execIn(t, conn, simple, "RESET "+s.name)
	}
	return out
}

// randClient is one randomized client and its model of its session.
type randClient struct {
	id   int
	url  string
	rng  *rand.Rand
	norm map[string]map[string]string
	user string // the server user

	conn  *pgx.Conn
	reset map[string]string // reset values: startup parameters or defaults
	vals  map[string]string // session values, "role" included ("none" or a role)
	stmts map[string]string // prepared statement name → what EXECUTE returns
	// Inside a transaction: the values in effect and the session-level
	// assignments the transaction makes (kept at COMMIT, dropped at
	// ROLLBACK).
	txVals, txSess map[string]string
	history        []string
}

func (c *randClient) run(steps int) error {
	if err := c.connect(); err != nil {
		return err
	}
	defer func() { c.conn.Close(context.Background()) }()
	for step := range steps {
		if err := c.step(); err != nil {
			return fmt.Errorf("step %d: %w\nhistory:\n  %s", step, err, strings.Join(c.history, "\n  "))
		}
		if err := c.check(); err != nil {
			return fmt.Errorf("after step %d: %w\nhistory:\n  %s", step, err, strings.Join(c.history, "\n  "))
		}
	}
	return nil
}

// connect opens a new session with a startup application_name of its own.
func (c *randClient) connect() error {
	app := fmt.Sprintf("client%d", c.id)
	conn, err := tryConnect(c.url, simple, map[string]string{"application_name": app})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	c.conn = conn
	c.reset = map[string]string{"role": "none"}
	for _, s := range randSettings {
		c.reset[s.name] = c.norm[s.name][""]
	}
	c.reset["application_name"] = app
	c.vals = maps.Clone(c.reset)
	c.stmts = map[string]string{}
	c.history = append(c.history, "connect as "+app)
	return nil
}

func (c *randClient) mode() pgx.QueryExecMode { return execModes[c.rng.IntN(len(execModes))] }

// exec runs sql in a random mode and requires SQLSTATE code ("" for
// success).
func (c *randClient) exec(sql, code string) error {
	mode := c.mode()
	c.history = append(c.history, fmt.Sprintf("[%v] %s", mode, sql))
	err := tryExec(c.conn, mode, sql)
	if got := sqlstate(err); got != code || (code == "" && err != nil) {
		return fmt.Errorf("%s [%v]: %s, want SQLSTATE %q", sql, mode, errText(err), code)
	}
	return nil
}

// pick returns a random setting name and one of its values.
func (c *randClient) pick() (string, string) {
	s := randSettings[c.rng.IntN(len(randSettings))]
	return s.name, s.values[c.rng.IntN(len(s.values))]
}

func (c *randClient) step() error {
	switch n := c.rng.IntN(100); {
	case n < 14:
		name, v := c.pick()
		c.vals[name] = c.norm[name][v]
		return c.exec(setSQL(false, name, v), "")
	case n < 20:
		name, _ := c.pick()
		c.vals[name] = c.reset[name]
		return c.exec("RESET "+name, "")
	case n < 24:
		name, _ := c.pick()
		c.vals[name] = c.reset[name]
		return c.exec("SET "+name+" TO DEFAULT", "")
	case n < 30:
		name, v := c.pick()
		c.vals[name] = c.norm[name][v]
		return c.exec(fmt.Sprintf("SELECT set_config('%s', '%s', false)", name, strings.ReplaceAll(v, "'", "''")), "")
	case n < 33:
		for _, s := range randSettings {
			c.vals[s.name] = c.reset[s.name] // RESET ALL leaves the role alone
		}
		return c.exec("RESET ALL", "")
	case n < 40:
		if c.rng.IntN(2) == 0 {
			c.vals["role"] = otherRole
			return c.exec("SET ROLE "+otherRole, "")
		}
		c.vals["role"] = "none"
		return c.exec("RESET ROLE", "")
	case n < 50:
		return c.prepared()
	case n < 85:
		return c.transaction()
	case n < 90:
		return c.failedTransaction()
	default:
		return c.reconnect()
	}
}

// prepared runs PREPARE, EXECUTE or DEALLOCATE of one of a few names.
func (c *randClient) prepared() error {
	name := fmt.Sprintf("p%d", c.rng.IntN(3))
	want, exists := c.stmts[name]
	switch c.rng.IntN(3) {
	case 0:
		if exists {
			return c.exec("PREPARE "+name+" AS SELECT 0", wire.DuplicatePreparedStatement)
		}
		k := strconv.Itoa(c.rng.IntN(1000))
		c.stmts[name] = k
		return c.exec("PREPARE "+name+" AS SELECT "+k+"::text", "")
	case 1:
		if !exists {
			return c.exec("EXECUTE "+name, wire.InvalidSQLStatementName)
		}
		mode := c.mode()
		c.history = append(c.history, fmt.Sprintf("[%v] EXECUTE %s", mode, name))
		got, err := queryRow(c.conn, mode, "EXECUTE "+name)
		if err != nil || got[0] != want {
			return fmt.Errorf("EXECUTE %s [%v]: %q %s, want %q", name, mode, got, errText(err), want)
		}
		return nil
	default:
		if !exists {
			return c.exec("DEALLOCATE "+name, wire.InvalidSQLStatementName)
		}
		delete(c.stmts, name)
		return c.exec("DEALLOCATE "+name, "")
	}
}

// transaction runs BEGIN, a few changes, a check inside, and COMMIT or
// ROLLBACK.
func (c *randClient) transaction() error {
	if err := c.exec("BEGIN", ""); err != nil {
		return err
	}
	c.txVals, c.txSess = maps.Clone(c.vals), map[string]string{}
	defer func() { c.txVals, c.txSess = nil, nil }()
	for range 1 + c.rng.IntN(3) {
		if err := c.txChange(); err != nil {
			return err
		}
	}
	if err := c.checkSettings(c.txVals, "inside the transaction"); err != nil {
		return err
	}
	if c.rng.IntN(2) == 0 {
		maps.Copy(c.vals, c.txSess)
		return c.exec("COMMIT", "")
	}
	return c.exec("ROLLBACK", "")
}

// txChange makes one change inside a transaction.
func (c *randClient) txChange() error {
	name, v := c.pick()
	switch c.rng.IntN(7) {
	case 0:
		c.txVals[name], c.txSess[name] = c.norm[name][v], c.norm[name][v]
		return c.exec(setSQL(false, name, v), "")
	case 1:
		c.txVals[name] = c.norm[name][v]
		return c.exec(setSQL(true, name, v), "")
	case 2:
		c.txVals[name] = c.norm[name][v]
		return c.exec(fmt.Sprintf("SELECT set_config('%s', '%s', true)", name, strings.ReplaceAll(v, "'", "''")), "")
	case 3:
		c.txVals[name], c.txSess[name] = c.reset[name], c.reset[name]
		return c.exec("RESET "+name, "")
	case 4:
		c.txVals["role"], c.txSess["role"] = otherRole, otherRole
		return c.exec("SET ROLE "+otherRole, "")
	case 5:
		c.txVals["role"] = otherRole
		return c.exec("SET LOCAL ROLE "+otherRole, "")
	default:
		return c.exec(fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", 1000+c.id), "")
	}
}

// failedTransaction makes a change in a transaction that then fails; COMMIT
// of a failed transaction rolls it back.
func (c *randClient) failedTransaction() error {
	name, v := c.pick()
	end := []string{"ROLLBACK", "COMMIT"}[c.rng.IntN(2)]
	for _, st := range []struct{ sql, code string }{
		{"BEGIN", ""}, {setSQL(false, name, v), ""}, {"SELECT 1/0", wire.DivisionByZero}, {"SELECT 1", wire.InFailedSQLTransaction}, {end, ""},
	} {
		if err := c.exec(st.sql, st.code); err != nil {
			return err
		}
	}
	return nil
}

// reconnect leaves, sometimes in the middle of a transaction with changes,
// and starts a new session.
func (c *randClient) reconnect() error {
	if c.rng.IntN(2) == 0 {
		name, v := c.pick()
		for _, sql := range []string{"BEGIN", setSQL(false, name, v), "SELECT pg_advisory_xact_lock(7)"} {
			if err := c.exec(sql, ""); err != nil {
				return err
			}
		}
		c.history = append(c.history, "leave inside the transaction")
	} else {
		c.history = append(c.history, "leave")
	}
	c.conn.Close(context.Background())
	return c.connect()
}

// checkSettings compares the tracked settings and current_user with want.
func (c *randClient) checkSettings(want map[string]string, where string) error {
	var sel []string
	for _, s := range randSettings {
		sel = append(sel, fmt.Sprintf("current_setting('%s')", s.name))
	}
	sel = append(sel, "current_user::text")
	mode := c.mode()
	got, err := queryRow(c.conn, mode, "SELECT "+strings.Join(sel, ", "))
	if err != nil {
		return fmt.Errorf("check %s [%v]: %s", where, mode, errText(err))
	}
	var diffs []string
	for i, s := range randSettings {
		if got[i] != want[s.name] {
			diffs = append(diffs, fmt.Sprintf("%s = %q, want %q", s.name, got[i], want[s.name]))
		}
	}
	wantUser := c.user
	if want["role"] != "none" {
		wantUser = want["role"]
	}
	if got[len(got)-1] != wantUser {
		diffs = append(diffs, fmt.Sprintf("current_user = %q, want %q", got[len(got)-1], wantUser))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s [%v]: %s", where, mode, strings.Join(diffs, "; "))
	}
	return nil
}

// check compares the whole session with the model after a transaction.
func (c *randClient) check() error {
	if err := c.checkSettings(c.vals, "after the transaction"); err != nil {
		return err
	}
	mode := c.mode()
	got, err := queryRow(c.conn, mode, `SELECT
		(SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_prepared_statements WHERE name NOT LIKE 'stmtcache%' AND `+notProxyNamed+`),
		(SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())::text,
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())::text,
		(SELECT count(*) FROM pg_cursors WHERE is_holdable)::text`)
	if err != nil {
		return fmt.Errorf("check of session objects [%v]: %s", mode, errText(err))
	}
	// The client's SQL-level statements live under proxy-wide names in
	// transaction mode (see notProxyNamed): EXECUTE steps check that they
	// work; here no client-named statement, its own or another's, may show.
	want := []string{"", "0", "0", "0"}
	if !slices.Equal(got, want) {
		return fmt.Errorf("prepared statements, temp objects, advisory locks, cursors WITH HOLD [%v]: got %q, want %q", mode, got, want)
	}
	return nil
}
