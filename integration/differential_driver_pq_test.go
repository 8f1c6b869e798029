package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
)

// The lib/pq runners of the differential harness, in process: one
// database/sql connection a script, and each statement through lib/pq's
// driver connection (sql.Conn.Raw), because database/sql hides the command
// tag, which lib/pq's rows keep (Tag). Three ways: a query without
// arguments (lib/pq sends it as a simple Query), a prepared statement (a
// named statement: Parse and Describe, then Bind and Execute), and a
// prepared statement on a connection with binary_parameters=yes.
//
// A result has the command tag of the last result set, the fields as
// database/sql's ColumnTypes shows them (name, type name, length and
// precision/scale, which lib/pq derives from the type OID and typmod; the
// OID, typmod and format themselves are not exposed), the rows as lib/pq
// decodes them (Go type and value) and the error's fields (*pq.Error).
// lib/pq does not expose the transaction status.

// diffPqRunners are the lib/pq runners.
func diffPqRunners() []diffRunner {
	mk := func(name string, prepared bool, params string) diffRunner {
		return diffRunner{name: name, run: func(t testing.TB, url string, stmts []string, between func()) []stmtResult {
			return runPqScript(t, url+params, prepared, stmts, between)
		}}
	}
	return []diffRunner{
		mk("lib/pq", false, ""),
		mk("lib/pq prepared", true, ""),
		mk("lib/pq prepared binary_parameters", true, "&binary_parameters=yes"),
	}
}

func runPqScript(t testing.TB, url string, prepared bool, stmts []string, between func()) []stmtResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pq.NewConnector(url)
	if err != nil {
		t.Fatalf("[lib/pq] %s: %v", url, err)
	}
	c.Dialer(pqDialer{})
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("[lib/pq] connect %s: %v", url, err)
	}
	defer conn.Close()
	var out []stmtResult
	for _, q := range stmts {
		var r stmtResult
		var bad bool
		err := conn.Raw(func(dc any) error {
			r, bad = pqStmt(dc, prepared, q)
			return nil
		})
		if err != nil {
			r.Err = "non-PostgreSQL error: " + err.Error()
			bad = true
		}
		out = append(out, r)
		if bad {
			break
		}
		if between != nil {
			between()
		}
	}
	return out
}

// pqStmt runs q on lib/pq's driver connection dc; bad reports that lib/pq
// gave the connection up.
func pqStmt(dc any, prepared bool, q string) (r stmtResult, bad bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rows driver.Rows
	var err error
	if prepared {
		var st driver.Stmt
		st, err = dc.(driver.ConnPrepareContext).PrepareContext(ctx, q)
		if err == nil {
			defer st.Close()
			rows, err = st.(driver.StmtQueryContext).QueryContext(ctx, nil)
		}
	} else {
		rows, err = dc.(driver.QueryerContext).QueryContext(ctx, q, nil)
	}
	if err == nil {
		err = pqRead(rows, &r)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		r.Tag = ""
		r.Err = pqErrKey(err)
	}
	return r, errors.Is(err, driver.ErrBadConn)
}

// pqRead reads every result set of rows into r.
func pqRead(rows driver.Rows, r *stmtResult) error {
	for {
		cols := rows.Columns()
		for i, name := range cols {
			r.Fields = append(r.Fields, pqField(rows, i, name))
		}
		dest := make([]driver.Value, len(cols))
		for {
			err := rows.Next(dest)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			cells := make([]string, len(dest))
			for i, v := range dest {
				cells[i] = pqCell(v)
			}
			r.Rows = append(r.Rows, strings.Join(cells, "|"))
		}
		if tr, ok := rows.(interface{ Tag() string }); ok {
			r.Tag = tr.Tag()
		}
		next, ok := rows.(driver.RowsNextResultSet)
		if !ok || !next.HasNextResultSet() {
			return nil
		}
		if err := next.NextResultSet(); err != nil {
			return err
		}
	}
}

// pqField is what ColumnTypes shows of column i.
func pqField(rows driver.Rows, i int, name string) string {
	s := name
	if tn, ok := rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		s += ":" + tn.ColumnTypeDatabaseTypeName(i)
	}
	if l, ok := rows.(driver.RowsColumnTypeLength); ok {
		if n, ok := l.ColumnTypeLength(i); ok {
			s += ":len " + strconv.FormatInt(n, 10)
		}
	}
	if ps, ok := rows.(driver.RowsColumnTypePrecisionScale); ok {
		if p, sc, ok := ps.ColumnTypePrecisionScale(i); ok {
			s += fmt.Sprintf(":numeric(%d,%d)", p, sc)
		}
	}
	return s
}

// pqCell is a value as lib/pq decoded it.
func pqCell(v driver.Value) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return strconv.Quote(string(v))
	case string:
		return strconv.Quote(v)
	case time.Time:
		return "time " + v.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// pqDialer gives every read and write of a connection a deadline: lib/pq
// waits for an answer without one (Stmt.Close takes no context).
type pqDialer struct{}

// pqTimeout bounds one read or write of lib/pq.
const pqTimeout = 20 * time.Second

func (pqDialer) Dial(network, address string) (net.Conn, error) {
	return pqDialer{}.DialTimeout(network, address, pqTimeout)
}

func (pqDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return pqConn{c}, nil
}

// pqConn is a connection whose reads and writes time out.
type pqConn struct{ net.Conn }

func (c pqConn) Read(p []byte) (int, error) {
	c.SetReadDeadline(time.Now().Add(pqTimeout))
	return c.Conn.Read(p)
}

func (c pqConn) Write(p []byte) (int, error) {
	c.SetWriteDeadline(time.Now().Add(pqTimeout))
	return c.Conn.Write(p)
}

func pqErrKey(err error) string {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return diffErr(pe.Severity, string(pe.Code), pe.Message, pe.Detail, pe.Hint)
	}
	return "non-PostgreSQL error: " + err.Error()
}
