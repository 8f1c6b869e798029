package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestReshardCutoverProtocolPaths cuts a one-shard database over to two
// shards while a client that prepared statements and changed a setting
// sits idle, in transaction and in session pooling, and then drives every
// protocol path a driver takes on the new shards, message by message:
// the first message after the cutover is a Bind of the unnamed statement
// prepared before it, run row-limited (portal suspension) in a
// transaction; describe-only of a new statement and of the named one
// prepared before; a pipeline of writes on both shards under one Sync
// whose last statement fails (nothing of it stays) and one that succeeds;
// a simple Query; the named statement with a parameter.
func TestReshardCutoverProtocolPaths(t *testing.T) {
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			c, o, _ := startCutoverEnvMode(t, ctx, mode)
			adm := connect(t, o.AdminURL())
			fe := dialFrontend(t, o.AppURL("app"))
			fe.want("SET", "CommandComplete ReadyForQuery ", nil, queryMsg("SET statement_timeout = '23456ms'"))
			fe.want("Parse byid", "ParseComplete ReadyForQuery ", nil,
				parseMsg("byid", "SELECT balance FROM accounts WHERE id = $1::int8"), syncMsg)
			fe.want("Parse unnamed", "ParseComplete ReadyForQuery ", nil,
				parseMsg("", "SELECT id FROM accounts WHERE id <= $1::int8 ORDER BY id"), syncMsg)
			// BEGIN as a statement of its own: a simple Query would drop
			// the unnamed statement (PostgreSQL's exec_simple_query).
			fe.want("Parse begin", "ParseComplete ReadyForQuery ", nil, parseMsg("begin", "BEGIN"), syncMsg)

			if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
				t.Fatal(err)
			}
			waitOnlyTaskDone(t, adm, 60*time.Second, "the task to cut over")

			// Row-limited Execute of the unnamed statement, the first
			// message after the cutover being its Bind.
			fe.want("BEGIN", "BindComplete CommandComplete ReadyForQuery ", nil,
				&pgproto3.Bind{PreparedStatement: "begin"}, execMsg(0), syncMsg)
			fe.want("first chunk", "BindComplete RowDescription DataRow DataRow PortalSuspended ReadyForQuery ", []string{"1", "2"},
				&pgproto3.Bind{DestinationPortal: "p", Parameters: [][]byte{[]byte("5")}},
				&pgproto3.Describe{ObjectType: 'P', Name: "p"}, &pgproto3.Execute{Portal: "p", MaxRows: 2}, syncMsg)
			fe.want("second chunk", "DataRow DataRow PortalSuspended ReadyForQuery ", []string{"3", "4"},
				&pgproto3.Execute{Portal: "p", MaxRows: 2}, syncMsg)
			fe.want("last chunk", "DataRow CommandComplete ReadyForQuery ", []string{"5"},
				&pgproto3.Execute{Portal: "p"}, syncMsg)
			fe.want("COMMIT", "CommandComplete ReadyForQuery ", nil, queryMsg("COMMIT"))

			// Describe-only: a new statement, and the one prepared before.
			fe.want("describe new", "ParseComplete ParameterDescription RowDescription ReadyForQuery ", nil,
				parseMsg("byid2", "SELECT id, balance FROM accounts WHERE id = $1::int8"),
				&pgproto3.Describe{ObjectType: 'S', Name: "byid2"}, syncMsg)
			fe.want("describe byid", "ParameterDescription RowDescription ReadyForQuery ", nil,
				&pgproto3.Describe{ObjectType: 'S', Name: "byid"}, syncMsg)

			// A pipeline under one Sync is one implicit transaction: its
			// failing last statement takes the earlier writes with it.
			insert := func(id int) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{
					parseMsg("", "INSERT INTO accounts (id, balance, note) VALUES ($1::int8, 7, 'pipe')"),
					&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(id))}}, execMsg(0)}
			}
			var failing []pgproto3.FrontendMessage
			for _, id := range []int{9001, 9002, 9003, 9004, 1} {
				failing = append(failing, insert(id)...)
			}
			fe.want("failing pipeline", strings.Repeat("ParseComplete BindComplete CommandComplete ", 4)+
				"ParseComplete BindComplete E23505 ReadyForQuery ", nil, append(failing, syncMsg)...)
			var passing []pgproto3.FrontendMessage
			for _, id := range []int{9011, 9012, 9013, 9014} {
				passing = append(passing, insert(id)...)
			}
			fe.want("passing pipeline", strings.Repeat("ParseComplete BindComplete CommandComplete ", 4)+"ReadyForQuery ", nil,
				append(passing, syncMsg)...)
			var ids []string
			for _, db := range []string{"app_new_0", "app_new_1"} {
				rows, err := reshardConnect(t, ctx, c.DSN(db)).Query(ctx, "SELECT id::text FROM accounts WHERE note = 'pipe' ORDER BY id")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, db+":"+id)
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if len(ids) != 4 || !strings.Contains(strings.Join(ids, " "), "app_new_0:") || !strings.Contains(strings.Join(ids, " "), "app_new_1:") ||
				strings.Contains(strings.Join(ids, " "), ":900") {
				t.Errorf("rows of the pipelines on the new shards: %v, want 9011–9014 on both shards and none of the failed one", ids)
			}

			fe.want("SHOW", "RowDescription DataRow CommandComplete ReadyForQuery ", []string{"23456ms"}, queryMsg("SHOW statement_timeout"))
			fe.want("Bind byid", "BindComplete DataRow CommandComplete ReadyForQuery ", []string{"7"},
				&pgproto3.Bind{PreparedStatement: "byid", Parameters: [][]byte{[]byte("9013")}}, execMsg(0), syncMsg)
		})
	}
}

// rawFrontend is a client connection driven message by message.
type rawFrontend struct {
	t  *testing.T
	fe *pgproto3.Frontend
}

// dialFrontend connects to url and hands the connection over for raw
// messages (hijack); it is closed with the test.
func dialFrontend(t *testing.T, url string) *rawFrontend {
	t.Helper()
	hc := hijack(t, url)
	hc.Conn.SetDeadline(time.Now().Add(90 * time.Second))
	return &rawFrontend{t: t, fe: hc.Frontend}
}

// answer sends msgs and returns the types of the messages up to
// ReadyForQuery (an ErrorResponse as E<SQLSTATE>), each followed by a
// space, and the data rows' first column.
func (f *rawFrontend) answer(msgs ...pgproto3.FrontendMessage) (types string, rows []string) {
	f.t.Helper()
	for _, m := range msgs {
		f.fe.Send(m)
	}
	if err := f.fe.Flush(); err != nil {
		f.t.Fatal(err)
	}
	for {
		m, err := f.fe.Receive()
		if err != nil {
			f.t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			rows = append(rows, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			types += "E" + m.Code + " "
			continue
		}
		types += fmt.Sprintf("%T ", m)[len("*pgproto3."):]
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			return types, rows
		}
	}
}

// want fails the test unless msgs are answered with the message types
// types and, when rows is not nil, those first columns.
func (f *rawFrontend) want(what, types string, rows []string, msgs ...pgproto3.FrontendMessage) {
	f.t.Helper()
	gotTypes, gotRows := f.answer(msgs...)
	if gotTypes != types || rows != nil && fmt.Sprint(gotRows) != fmt.Sprint(rows) {
		f.t.Fatalf("%s: %s%v, want %s%v", what, gotTypes, gotRows, types, rows)
	}
}
