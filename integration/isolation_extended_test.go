package integration

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestIsoExtendedSetTracking: SET, RESET, set_config() and SET LOCAL sent
// in any protocol mode are tracked like simple-protocol SETs: the clients
// after the one that ran them see the defaults, and that client keeps its
// own settings on whichever server it runs next.
func TestIsoExtendedSetTracking(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	tracked := []string{"search_path", "TimeZone", "application_name", "DateStyle"}
	def := directDefaults(t, cl, "app", tracked...)
	cases := []struct {
		name    string
		stmts   []string
		setting string
		want    string // a's value afterwards; "" is the default
	}{
		{"SET search_path", []string{"SET search_path = pg_catalog"}, "search_path", "pg_catalog"},
		{"SET TimeZone", []string{"SET TimeZone = 'Asia/Tokyo'"}, "TimeZone", "Asia/Tokyo"},
		{"SET application_name", []string{"SET application_name = 'a_app'"}, "application_name", "a_app"},
		{"SET DateStyle", []string{"SET DateStyle = 'German'"}, "DateStyle", "German, DMY"},
		{"set_config", []string{"SELECT set_config('search_path', 'pg_catalog', false)"}, "search_path", "pg_catalog"},
		{"SET LOCAL", []string{"BEGIN", "SET LOCAL search_path = pg_catalog", "COMMIT"}, "search_path", ""},
		{"set_config local", []string{"BEGIN", "SELECT set_config('search_path', 'pg_catalog', true)", "COMMIT"}, "search_path", ""},
		{"SET then RESET", []string{"SET search_path = pg_catalog", "RESET search_path"}, "search_path", ""},
	}
	for _, tc := range cases {
		want := tc.want
		if want == "" {
			want = def[tc.setting]
		}
		for _, mode := range execModes {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				t.Run("later clients", func(t *testing.T) {
					p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
					a := connectConfig(t, p.AppURL("app"), mode, nil)
					for _, sql := range tc.stmts {
						execIn(t, a, mode, sql)
					}
					for i := range 8 {
						checkRow(t, fmt.Sprintf("a's %s before client %d", tc.setting, i), row(t, a, mode, "SELECT current_setting($1)", tc.setting), want)
						bmode := execModes[i%len(execModes)]
						b := connectConfig(t, p.AppURL("app"), bmode, nil)
						for _, s := range tracked {
							checkRow(t, fmt.Sprintf("client %d [%v]: %s", i, bmode, s), row(t, b, bmode, "SELECT current_setting($1)", s), def[s])
						}
						checkRow(t, fmt.Sprintf("client %d [%v]: unqualified table t", i, bmode), row(t, b, bmode, "SELECT count(*) FROM t"), "0")
						b.Close(t.Context())
					}
				})
				t.Run("own settings on another server", func(t *testing.T) {
					p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
					a := connectConfig(t, p.AppURL("app"), mode, nil)
					for _, sql := range tc.stmts {
						execIn(t, a, mode, sql)
					}
					c := simpleConn(t, p.AppURL("app"))
					d := simpleConn(t, p.AppURL("app"))
					const check = "SELECT current_setting($1), pg_backend_pid()::text"
					last := row(t, a, mode, check, tc.setting)
					checkRow(t, "a's "+tc.setting, last[:1], want)
					for round := range 3 {
						// c and d take both servers; the one holding the
						// server a used last keeps it, so that a runs on
						// the other one.
						holder := holdLast(t, last[1], c, d)
						got := row(t, a, mode, check, tc.setting)
						if got[1] == last[1] {
							t.Fatalf("round %d: a ran on backend %s, which another client holds in a transaction", round, got[1])
						}
						checkRow(t, fmt.Sprintf("round %d: a's %s on backend %s (it ran on %s before)", round, tc.setting, got[1], last[1]), got[:1], want)
						execIn(t, holder, simple, "COMMIT")
						last = got
					}
					checkRow(t, "c's "+tc.setting, row(t, c, simple, "SELECT current_setting($1)", tc.setting), def[tc.setting])
				})
			})
		}
	}
}

// holdLast makes c and d take the two servers of a pool of two in
// transactions, and commits the one that did not get backend pid: the other
// keeps holding it, and is returned.
func holdLast(t testing.TB, pid string, c, d *pgx.Conn) *pgx.Conn {
	t.Helper()
	var pids []string
	for _, x := range []*pgx.Conn{c, d} {
		execIn(t, x, simple, "BEGIN")
		pids = append(pids, value(t, x, simple, "SELECT pg_backend_pid()::text"))
	}
	switch pid {
	case pids[0]:
		execIn(t, d, simple, "COMMIT")
		return c
	case pids[1]:
		execIn(t, c, simple, "COMMIT")
		return d
	}
	t.Fatalf("two clients in transactions got backends %v, neither is %s", pids, pid)
	return nil
}
