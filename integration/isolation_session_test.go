package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/wire"
)

const simple = pgx.QueryExecModeSimpleProtocol

// TestIsoSessionModeCleanup: in session mode, a client that changed its
// session authorization and settings, made a temp table, a prepared
// statement and an advisory lock, and left inside a transaction, leaves
// the next client on the same server a fresh session.
func TestIsoSessionModeCleanup(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	ctx := context.Background()
	def := directDefaults(t, cl, "app", "work_mem")
	direct := simpleConn(t, cl.DSN("app"))
	for _, leave := range []struct {
		name string
		do   func(*pgx.Conn)
	}{
		{"Terminate", func(c *pgx.Conn) { c.Close(ctx) }},
		{"connection dropped", func(c *pgx.Conn) { c.PgConn().Conn().Close() }},
	} {
		t.Run(leave.name, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, "session", 1, "app"))
			a := simpleConn(t, p.AppURL("app"))
			for _, sql := range []string{
				"SET SESSION AUTHORIZATION " + otherRole,
				"SET work_mem = '7MB'",
				"CREATE TEMP TABLE t_a (x int)",
				"PREPARE pa AS SELECT 1",
				"SELECT pg_advisory_lock(42)",
				"BEGIN",
			} {
				execIn(t, a, simple, sql)
			}
			checkRow(t, "a's own session", row(t, a, simple, "SELECT current_user::text, session_user::text"), otherRole, otherRole)
			leave.do(a)

			b := simpleConn(t, p.AppURL("app"))
			checkRow(t, "b's current_user, session_user", row(t, b, simple, "SELECT current_user::text, session_user::text"), cl.User, cl.User)
			checkRow(t, "b's work_mem", row(t, b, simple, "SHOW work_mem"), def["work_mem"])
			checkRow(t, "b's to_regclass('pg_temp.t_a')", row(t, b, simple, "SELECT to_regclass('pg_temp.t_a') IS NULL"), "true")
			checkRow(t, "b's pg_prepared_statements", row(t, b, simple, "SELECT count(*) FROM pg_prepared_statements"), "0")
			checkRow(t, "b's advisory locks", row(t, b, simple, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"), "0")
			checkRow(t, "b outside a's transaction (now() = statement_timestamp())", row(t, b, simple, "SELECT now() = statement_timestamp()"), "true")
			eventually(t, 5*time.Second, "no advisory lock in pg_locks", func() bool {
				return value(t, b, simple, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == "0"
			})
			eventually(t, 5*time.Second, "a direct connection to get advisory lock 42", func() bool {
				if value(t, direct, simple, "SELECT pg_try_advisory_lock(42)") != "true" {
					return false
				}
				execIn(t, direct, simple, "SELECT pg_advisory_unlock(42)")
				return true
			})
		})
	}
}

// TestIsoTransactionModeRole: in transaction mode, a client that switched
// role keeps its role in its own later transactions, while every other
// client on the same server runs as the server user with default settings,
// whatever the protocol; undoing a superuser-only setting made before SET
// ROLE must not fail for want of rights.
func TestIsoTransactionModeRole(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	def := directDefaults(t, cl, "app", "work_mem", "log_statement")
	cases := []struct {
		name          string
		set           []string
		simpleOnly    bool // several statements in one Query
		reset         string
		user, session string // a's current_user and session_user after set
		logStatement  string // a's log_statement after set
	}{
		{name: "SET ROLE", set: []string{"SET work_mem = '7MB'", "SET ROLE " + otherRole},
			reset: "RESET ROLE", user: otherRole, session: cl.User, logStatement: def["log_statement"]},
		{name: "SET SESSION AUTHORIZATION", set: []string{"SET work_mem = '7MB'", "SET SESSION AUTHORIZATION " + otherRole},
			reset: "RESET SESSION AUTHORIZATION", user: otherRole, session: otherRole, logStatement: def["log_statement"]},
		{name: "superuser setting then SET ROLE", set: []string{"SET work_mem = '7MB'", "SET log_statement = 'all'", "SET ROLE " + otherRole},
			reset: "RESET ROLE", user: otherRole, session: cl.User, logStatement: "all"},
		{name: "superuser setting then SET ROLE in one Query", set: []string{"SET work_mem = '7MB'; SET log_statement = 'all'; SET ROLE " + otherRole},
			simpleOnly: true, reset: "RESET ROLE", user: otherRole, session: cl.User, logStatement: "all"},
	}
	const check = "SELECT current_user::text, session_user::text, current_setting('log_statement'), current_setting('work_mem')"
	for _, tc := range cases {
		for _, amode := range execModes {
			if tc.simpleOnly && amode != simple {
				continue
			}
			t.Run(tc.name+"/"+amode.String(), func(t *testing.T) {
				p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
				a := connectConfig(t, p.AppURL("app"), amode, nil)
				for _, sql := range tc.set {
					execIn(t, a, amode, sql)
				}
				b := connect(t, p.AppURL("app"))
				for _, bmode := range execModes {
					checkRow(t, "a, its own role and settings", row(t, a, amode, check), tc.user, tc.session, tc.logStatement, "7MB")
					checkRow(t, fmt.Sprintf("b [%v] after a", bmode), row(t, b, bmode, check), cl.User, cl.User, def["log_statement"], def["work_mem"])
				}
				execIn(t, a, amode, tc.reset)
				checkRow(t, "a after "+tc.reset, row(t, a, amode, check), cl.User, cl.User, tc.logStatement, "7MB")
				checkRow(t, "b after a's "+tc.reset, row(t, b, simple, check), cl.User, cl.User, def["log_statement"], def["work_mem"])

				// A client leaving as other_role leaves no role behind.
				for _, sql := range tc.set {
					execIn(t, a, amode, sql)
				}
				a.Close(context.Background())
				c := connect(t, p.AppURL("app"))
				for _, cmode := range execModes {
					checkRow(t, fmt.Sprintf("c [%v] after a left", cmode), row(t, c, cmode, check), cl.User, cl.User, def["log_statement"], def["work_mem"])
				}
			})
		}
	}
}

// TestIsoFailedLogin: a login PostgreSQL refuses for a bad startup setting
// fails with PostgreSQL's own error, and failed logins do not use up the
// pool.
func TestIsoFailedLogin(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	const size = 2
	cases := []struct {
		name   string
		params map[string]string
	}{
		{"options -c", map[string]string{"options": "-c work_mem=bogus"}},
		{"runtime parameter", map[string]string{"work_mem": "bogus"}},
	}
	for _, mode := range []string{"session", "transaction"} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				_, derr := tryConnect(cl.DSN("app"), simple, tc.params)
				want := pgErr(derr)
				if want == nil || want.Code != wire.InvalidParameterValue || want.Message != `invalid value for parameter "work_mem": "bogus"` {
					t.Fatalf("direct login: %v, want 22023 invalid value for parameter", derr)
				}
				p := startProxy(t, poolConfig(cl, mode, size, "app"))
				for i := range 3 * size {
					conn, err := tryConnect(p.AppURL("app"), simple, tc.params)
					if err == nil {
						conn.Close(context.Background())
						t.Fatalf("login %d with %v succeeded, want %s", i, tc.params, errText(derr))
					}
					got := pgErr(err)
					if got == nil || got.Code != want.Code || got.Message != want.Message {
						t.Fatalf("login %d: got %s, want %s (as direct)", i, errText(err), errText(derr))
					}
					if got.Severity != want.Severity || got.File != want.File || got.Line != want.Line || got.Routine != want.Routine {
						t.Fatalf("login %d: %s F=%s L=%d R=%s, want %s F=%s L=%d R=%s (as direct)", i,
							got.Severity, got.File, got.Line, got.Routine, want.Severity, want.File, want.Line, want.Routine)
					}
				}
				c, err := tryConnect(p.AppURL("app"), simple, nil)
				if err != nil {
					t.Fatalf("normal login after %d failed ones: %s", 3*size, errText(err))
				}
				defer c.Close(context.Background())
				if _, err := queryRow(c, simple, "SELECT 1"); err != nil {
					t.Fatalf("SELECT 1 after %d failed logins: %s", 3*size, errText(err))
				}
			})
		}
	}
}

// TestIsoStartupParamsAreResetValues: a setting given at startup is what
// RESET, SET … TO DEFAULT and RESET ALL return to, in every protocol, as
// with a direct connection, and pg_settings reports it as PostgreSQL does
// (source client, reset_val the startup value).
func TestIsoStartupParamsAreResetValues(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	params := []struct {
		param, value string // startup parameter
		setting      string // what it sets
		want         string // its value after a reset
		set          string // another value
	}{
		{"DateStyle", "SQL, DMY", "DateStyle", "SQL, DMY", "SET datestyle = 'German'"},
		{"application_name", "startapp", "application_name", "startapp", "SET application_name = 'x'"},
		{"options", "-c work_mem=5MB", "work_mem", "5MB", "SET work_mem = '9MB'"},
	}
	resets := []string{"RESET %s", "SET %s TO DEFAULT", "RESET ALL"}
	for _, pm := range []struct {
		mode string
		size int
	}{{"session", 2}, {"transaction", 1}} {
		t.Run(pm.mode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, pm.mode, pm.size, "app"))
			// In transaction mode the noise client uses the only server
			// between the SET and the RESET.
			noise := simpleConn(t, p.AppURL("app"))
			for _, sp := range params {
				t.Run(sp.param, func(t *testing.T) {
					startup := map[string]string{sp.param: sp.value}
					direct := connectConfig(t, cl.DSN("app"), simple, startup)
					prox := connectConfig(t, p.AppURL("app"), simple, startup)
					const settings = "SELECT source, reset_val FROM pg_settings WHERE name = $1"
					t.Run("pg_settings", func(t *testing.T) {
						checkRow(t, "pg_settings", row(t, prox, pgx.QueryExecModeExec, settings, sp.setting), row(t, direct, pgx.QueryExecModeExec, settings, sp.setting)...)
					})
					for _, reset := range resets {
						reset := strings.Replace(reset, "%s", sp.setting, 1)
						t.Run(reset, func(t *testing.T) {
							for _, mode := range execModes {
								var got [2][]string
								for i, c := range []*pgx.Conn{direct, prox} {
									execIn(t, c, mode, sp.set)
									value(t, noise, simple, "SELECT 1")
									execIn(t, c, mode, reset)
									value(t, noise, simple, "SELECT 1")
									got[i] = row(t, c, mode, "SELECT current_setting($1)", sp.setting)
								}
								checkRow(t, fmt.Sprintf("%s; %s [%v]: direct", sp.set, reset, mode), got[0], sp.want)
								checkRow(t, fmt.Sprintf("%s; %s [%v]: through the proxy", sp.set, reset, mode), got[1], sp.want)
							}
							if sp.setting != "work_mem" {
								if g, w := prox.PgConn().ParameterStatus(sp.setting), direct.PgConn().ParameterStatus(sp.setting); g != w {
									t.Fatalf("ParameterStatus %s after %s: got %q, want %q (as direct)", sp.setting, reset, g, w)
								}
							}
						})
					}
					t.Run("one Query", func(t *testing.T) {
						q := fmt.Sprintf("%s; RESET %s; SHOW %s", sp.set, sp.setting, sp.setting)
						checkRow(t, q, lastRow(t, prox, q), sp.want)
					})
				})
			}
		})
	}
}
