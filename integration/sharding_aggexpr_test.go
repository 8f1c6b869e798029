package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Expressions over aggregates on a two-shard database, compared with one
// PostgreSQL holding the same rows: RowDescription (name, type OID, size,
// type modifier, format, whether a column comes from a table), the rows'
// bytes in the format each pgx mode asks for (binary for most types in
// the extended modes), command tags and errors.

const aggexprSchema = `
CREATE TABLE sales (id bigint PRIMARY KEY, region text, kind varchar(10), qty int, price numeric(10,2),
	f float8, d date, ts timestamp(3), flag bool, note varchar(20), other varchar(20));
CREATE TABLE nosales (LIKE sales);
CREATE TABLE many (id bigint PRIMARY KEY, k int, v numeric);
`

// aggexprRows spread over both shards: NULL regions, a region whose prices
// are all NULL, equal and distinct kinds.
const aggexprRows = `INSERT INTO sales VALUES
	(1, 'north', 'a', 3, 10.50, 1.5, '2024-01-01', '2024-01-01 10:00:00.123', true, 'n1', 'o1'),
	(2, 'north', 'b', 5, 2.25, 0.1, '2024-02-01', '2024-01-02 11:00:00', false, 'n2', 'o2'),
	(3, 'south', 'a', 7, NULL, NULL, '2024-03-01', NULL, true, NULL, 'o3'),
	(4, 'south', 'a', 1, NULL, 2.75, '2023-12-31', '2023-12-31 23:59:59.999', NULL, 'n4', 'o4'),
	(5, 'east', 'c', 10, 99.99, -1, '2024-01-15', '2024-01-15 00:00:00', true, 'n5', 'o5'),
	(6, NULL, 'b', NULL, 5.00, 3, NULL, '2024-06-01 12:00:00', false, 'n6', 'o6'),
	(7, NULL, 'c', 2, 1.10, 1e-3, '2024-06-02', '2024-06-02 12:00:00', true, 'n7', 'o7'),
	(8, 'west', 'a', 4, 8.00, 4, '2024-07-01', '2024-07-01 00:00:00', true, 'n8', 'o8'),
	(9, 'west', 'a', 6, 12.00, 5, '2024-07-02', '2024-07-02 00:00:00', false, 'n9', 'o9'),
	(10, 'east', 'b', 0, 0.01, 0, '2024-08-01', '2024-08-01 00:00:00', true, 'n10', 'o10')`

type aggexprEnv struct {
	ref, proxy string // URLs
}

func newAggexprEnv(t *testing.T) *aggexprEnv {
	t.Helper()
	cl := cluster(t, "ref", "s0", "s1")
	ctx := context.Background()
	for _, db := range []string{"ref", "s0", "s1"} {
		if err := cl.Exec(ctx, db, aggexprSchema); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s, %s]
    sharded_tables:
      - { table: sales, column: id, type: bigint }
      - { table: nosales, column: id, type: bigint }
      - { table: many, column: id, type: bigint }
`, t.TempDir(), appPassword, cl.User, cl.Password, shardYAML(cl, "s0"), shardYAML(cl, "s1"))
	p := startProxy(t, cfg)
	e := &aggexprEnv{ref: cl.DSN("ref"), proxy: p.AppURL("app")}
	for _, url := range []string{e.ref, e.proxy} {
		c := connect(t, url)
		if _, err := c.Exec(ctx, aggexprRows); err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
	}
	// Thousands of groups, so that the outer statement runs in several
	// batches; which shard holds a row does not matter to an aggregate.
	many := "INSERT INTO many SELECT g, g %% 4000, g / 7.0 FROM generate_series(1, 12000) g WHERE %s"
	for db, where := range map[string]string{"ref": "true", "s0": "g % 2 = 0", "s1": "g % 2 = 1"} {
		if err := cl.Exec(ctx, db, fmt.Sprintf(many, where)); err != nil {
			t.Fatal(err)
		}
	}
	// Both shards hold rows, or the test proves little.
	for _, db := range []string{"s0", "s1"} {
		c := connect(t, cl.DSN(db))
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM sales").Scan(&n); err != nil || n == 0 {
			t.Fatalf("%s holds %d rows (%v)", db, n, err)
		}
		c.Close(ctx)
	}
	return e
}

// answer is what a client sees of one statement.
type answer struct {
	Fields []string
	Rows   []string
	Tag    string
	Err    string
	Tx     byte
}

func (a answer) String() string {
	return fmt.Sprintf("fields %v\n\trows %q\n\ttag %q tx %c err %s", a.Fields, a.Rows, a.Tag, a.Tx, a.Err)
}

// fieldKey is all of a RowDescription field but the table OID, which
// differs between databases: only whether there is one.
func fieldKey(f pgconn.FieldDescription) string {
	return fmt.Sprintf("%s oid=%d size=%d typmod=%d format=%d table=%v attnum=%d",
		f.Name, f.DataTypeOID, f.DataTypeSize, f.TypeModifier, f.Format, f.TableOID != 0, f.TableAttributeNumber)
}

func rawRow(vals [][]byte) string {
	cells := make([]string, len(vals))
	for i, v := range vals {
		if v == nil {
			cells[i] = "NULL"
		} else {
			cells[i] = fmt.Sprintf("%q", v)
		}
	}
	return strings.Join(cells, "|")
}

func pgErrKey(err error) string {
	if pe := pgErr(err); pe != nil {
		return fmt.Sprintf("%s %s %q detail %q hint %q", pe.Severity, pe.Code, pe.Message, pe.Detail, pe.Hint)
	}
	return "non-PostgreSQL error: " + err.Error()
}

// ask runs sql on conn in mode, with args if any (which pgx's simple
// protocol mode writes into the SQL), and reads the raw answer.
func ask(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var a answer
	if mode == pgx.QueryExecModeSimpleProtocol && len(args) == 0 {
		results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil {
			a.Err = pgErrKey(err)
		} else if len(results) > 0 {
			res := results[len(results)-1]
			for _, f := range res.FieldDescriptions {
				a.Fields = append(a.Fields, fieldKey(f))
			}
			for _, r := range res.Rows {
				a.Rows = append(a.Rows, rawRow(r))
			}
			a.Tag = res.CommandTag.String()
		}
	} else {
		rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
		if err == nil {
			for _, f := range rows.FieldDescriptions() {
				a.Fields = append(a.Fields, fieldKey(f))
			}
			for rows.Next() {
				a.Rows = append(a.Rows, rawRow(rows.RawValues()))
			}
			rows.Close()
			err = rows.Err()
			a.Tag = rows.CommandTag().String()
		}
		if err != nil {
			a.Err, a.Tag, a.Fields, a.Rows = pgErrKey(err), "", nil, nil
		}
	}
	a.Tx = conn.PgConn().TxStatus()
	return a
}

type aggexprCase struct {
	sql     string
	ordered bool // compare rows in order
	refused bool // the proxy answers 0A000
}

var aggexprCases = []aggexprCase{
	// Without GROUP BY: one row, from every shard's partial aggregates.
	{sql: "SELECT max(qty) - min(qty), count(*)::int, sum(qty) / count(price) FROM sales"},
	{sql: "SELECT round(avg(qty), 2), round(avg(price), 1) AS p, avg(f) * 2, avg(qty) FROM sales"},
	{sql: "SELECT coalesce(sum(qty), 0), coalesce(sum(qty) FILTER (WHERE qty > 100), -1) AS none FROM sales"},
	{sql: "SELECT CASE WHEN count(*) > 0 THEN 'some' ELSE 'none' END, CASE WHEN count(*) > 100 THEN 1 END FROM sales"},
	{sql: "SELECT max(d) - min(d) AS days, max(ts) - min(ts) AS span, min(d) + 1, max(ts)::date FROM sales"},
	{sql: "SELECT bool_and(flag) OR bool_or(flag), NOT bool_and(flag), count(*) FILTER (WHERE flag) * 1.5 FROM sales"},
	// (Not sum(f): floats added in another order differ in the last bit.)
	{sql: "SELECT sum(price)::numeric(12,1), sum(qty)::text || ' units', -max(f), (count(*) + count(qty))::int2 FROM sales"},
	{sql: "SELECT greatest(max(qty), 8), least(min(price), 1), nullif(count(*), 10), count(*) + 1 AS n FROM sales"},
	// Empty tables: aggregates of no rows, and no groups at all.
	{sql: "SELECT coalesce(sum(qty), 0), count(*)::int, max(qty) - min(qty), round(avg(price), 2) FROM nosales"},
	{sql: "SELECT region, count(*)::int, sum(qty) / count(*) FROM nosales GROUP BY region"},
	{sql: "SELECT kind, CASE WHEN count(*) > 1 THEN kind ELSE kind END FROM nosales GROUP BY kind"},
	// GROUP BY, with NULL groups.
	{sql: "SELECT region, max(qty) - min(qty) AS spread, count(*)::int FROM sales GROUP BY region ORDER BY region"},
	{sql: "SELECT region, sum(qty), round(avg(price), 2) FROM sales GROUP BY region ORDER BY sum(qty) / count(*) DESC, region"},
	{sql: "SELECT region, sum(qty) / count(price) FROM sales GROUP BY region HAVING count(price) > 0 ORDER BY 1"},
	{sql: "SELECT region FROM sales GROUP BY region HAVING sum(qty) > 2 * count(*) ORDER BY 1"},
	{sql: "SELECT count(*) FROM sales GROUP BY region HAVING count(*) > 1 OR sum(qty) > 9"},
	{sql: "SELECT region FROM sales GROUP BY region HAVING sum(price) > 12.5::int ORDER BY 1"},
	{sql: "SELECT region FROM sales GROUP BY region HAVING sum(qty) > 7.5 AND count(*) >= 2 ORDER BY 1"},
	{sql: "SELECT region, count(*) FROM sales GROUP BY region HAVING count(*) > 1 AND max(qty) > min(qty) + 3 ORDER BY 2, 1"},
	{sql: "SELECT kind, CASE WHEN count(*) > 1 THEN kind ELSE kind END, kind || count(*) FROM sales GROUP BY kind ORDER BY 1"},
	{sql: "SELECT kind, CASE WHEN count(*) > 2 THEN note ELSE other END FROM sales GROUP BY kind, note, other ORDER BY 1, 2"},
	{sql: "SELECT lower(region), count(*) * 2 FROM sales GROUP BY lower(region) ORDER BY lower(region) || 'x' NULLS FIRST"},
	{sql: "SELECT region AS r, sum(price)::numeric(12,2) AS total FROM sales GROUP BY 1 ORDER BY total DESC NULLS LAST, r LIMIT 3"},
	{sql: "SELECT region, sum(qty) * 100 / sum(sum(qty)) OVER () FROM sales GROUP BY region", refused: true},
	{sql: "SELECT s.id, s.region || ':' || count(*) FROM sales s GROUP BY s.id ORDER BY 1 LIMIT 4 OFFSET 2", ordered: true},
	{sql: "SELECT DISTINCT count(*) FROM sales GROUP BY region"},
	{sql: "SELECT DISTINCT count(*) > 1 AS many FROM sales GROUP BY kind ORDER BY 1"},
	// avg's combined values order and compare as numeric (a plain avg
	// column's RowDescription is Answer.combine's, not checked here).
	{sql: "SELECT region, round(avg(qty), 3) FROM sales GROUP BY region ORDER BY avg(qty), 1"},
	{sql: "SELECT region, count(*) + 0 FROM sales GROUP BY region HAVING avg(qty) > 3.5 AND avg(f) < 3 ORDER BY 1"},
	{sql: "SELECT region, avg(qty), avg(DISTINCT qty % 3) FROM sales GROUP BY region HAVING avg(qty) > 3 ORDER BY 2, 1"},
	{sql: "SELECT kind, max(note) || '!' AS m FROM sales GROUP BY kind ORDER BY max(note) || '!' DESC, min(note COLLATE \"C\") || kind"},
	// Many groups.
	{sql: "SELECT k, count(*)::int2, round(max(v) - min(v), 3), sum(v) / count(*) FROM many GROUP BY k"},
	{sql: "SELECT k % 10, sum(v) / count(*) AS a FROM many GROUP BY k % 10 HAVING sum(v) > 100 * count(*) ORDER BY a DESC LIMIT 4"},
	{sql: "SELECT k FROM many GROUP BY k HAVING count(*) > 2 OR max(v) = 1 ORDER BY 1"},
	{sql: "SELECT k, 1 / (k - 3999 + count(*) - 3) FROM many GROUP BY k"},
	// DISTINCT aggregates: values on both shards count once.
	{sql: "SELECT count(DISTINCT qty % 3), sum(DISTINCT qty % 3), round(avg(DISTINCT qty % 3), 5), count(*), max(qty) FROM sales"},
	{sql: "SELECT region, count(DISTINCT kind), count(*), sum(qty) FROM sales GROUP BY region ORDER BY 1"},
	{sql: "SELECT count(DISTINCT kind) FILTER (WHERE qty > 2), sum(qty), count(DISTINCT kind) FILTER (WHERE qty > 2) * 10 FROM sales"},
	{sql: "SELECT 'all' AS scope, count(DISTINCT region) + 1, count(DISTINCT region) FROM sales"},
	{sql: "SELECT count(DISTINCT qty), sum(DISTINCT qty), avg(DISTINCT qty), 'x' AS x FROM nosales"},
	{sql: "SELECT kind, count(DISTINCT price) FROM nosales GROUP BY kind"},
	{sql: "SELECT region FROM sales GROUP BY region HAVING count(DISTINCT kind) > 1 ORDER BY 1"},
	{sql: "SELECT k % 5, count(DISTINCT id / 2), sum(DISTINCT id / 2), avg(DISTINCT id / 2), count(*) FROM many GROUP BY 1 ORDER BY 1"},
	{sql: "SELECT count(DISTINCT v) FROM many"},
	{sql: "SELECT min(DISTINCT qty), max(DISTINCT kind), bool_and(DISTINCT flag) FROM sales"},
	{sql: "SELECT count(DISTINCT kind), count(DISTINCT region) FROM sales"},
	{sql: "SELECT region, count(DISTINCT kind) - count(DISTINCT qty) AS d, sum(qty) FROM sales GROUP BY region HAVING count(DISTINCT kind) > 0 ORDER BY d, region"},
	// count(*) over a subquery with expressions over aggregates: the
	// Outer statement filters (HAVING) and computes what PostgreSQL
	// computes; select list items nothing reads are not computed, as
	// PostgreSQL's planner drops them (no division by zero).
	{sql: "SELECT count(*) FROM (SELECT region, max(qty) - min(qty) FROM sales GROUP BY region) s"},
	{sql: "SELECT count(*) AS n FROM (SELECT region FROM sales GROUP BY region HAVING sum(qty) > 2 * count(*)) s"},
	{sql: "SELECT count(*) FROM (SELECT region, sum(qty) / 0 FROM sales GROUP BY region) s"},
	{sql: "SELECT count(*) FROM (SELECT max(qty) / 0 FROM sales) s"},
	{sql: "SELECT count(*) FROM (SELECT qty / 0 FROM sales) s"},
	{sql: "SELECT count(*) FROM (SELECT region, sum(qty) / 0 AS q FROM sales GROUP BY region ORDER BY q) s"},
	{sql: "SELECT count(*) FROM (SELECT DISTINCT sum(qty) / count(*) FROM sales GROUP BY region) s"},
	{sql: "SELECT count(*) FROM (SELECT DISTINCT sum(qty) / 0 FROM sales GROUP BY region) s"},
	{sql: "SELECT count(*) FROM (SELECT kind, round(avg(price), 2) AS p FROM sales GROUP BY kind ORDER BY p DESC NULLS LAST LIMIT 2) s"},
	{sql: "SELECT count(*) FROM (SELECT region, count(*) FROM nosales GROUP BY region HAVING max(qty) - min(qty) > 0) s"},
	{sql: "SELECT EXISTS (SELECT region FROM sales GROUP BY region HAVING sum(qty) > 100 * count(*))"},
	{sql: "SELECT EXISTS (SELECT max(qty) / 0 FROM sales)"},
	{sql: "SELECT EXISTS (SELECT qty / 0 FROM sales)"},
	// Errors, as PostgreSQL raises them.
	{sql: "SELECT sum(qty) / (count(*) - count(*)) FROM sales"},
	{sql: "SELECT region, sum(qty) / sum(0) FROM sales GROUP BY region"},
	{sql: "SELECT region FROM sales GROUP BY region HAVING sum(qty) / (count(*) - 2) > 0 ORDER BY 1"},
	{sql: "SELECT sum(qty) + qty FROM sales"},
	{sql: "SELECT region, count(*) FROM sales GROUP BY region ORDER BY sum(qty) + qty"},
	{sql: "SELECT count(*) + 1 FROM sales GROUP BY 1"},
	{sql: "SELECT no_such_function(sum(qty)) FROM sales"},
	{sql: "SELECT DISTINCT count(*) FROM sales GROUP BY region ORDER BY sum(qty)"},
}

func TestShardedAggregateExpressions(t *testing.T) {
	e := newAggexprEnv(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ref, px := connect(t, e.ref), connect(t, e.proxy)
			for _, c := range aggexprCases {
				want, got := ask(ref, mode, c.sql), ask(px, mode, c.sql)
				if c.refused {
					if !strings.Contains(got.Err, "ERROR 0A000") {
						t.Errorf("%s: want 0A000, got %v", c.sql, got)
					}
					continue
				}
				if !c.ordered && !strings.Contains(c.sql, "ORDER BY") {
					sort.Strings(want.Rows)
					sort.Strings(got.Rows)
				}
				if want.String() != got.String() {
					t.Errorf("%s\n reference %v\n proxy     %v", c.sql, want, got)
				}
			}
		})
	}
}

// TestShardedAggregateExpressionsParams: parameters in expressions over
// aggregates (ORMs write coalesce(sum(x), $1), round(avg(x), $1)) are
// passed to the Outer statement as hidden columns the shards return, typed
// as PostgreSQL types them in the client's statement. A parameter that a
// WHERE uses before such a HAVING term is refused in the extended modes
// (pgx's simple protocol mode writes it into the SQL, which runs).
func TestShardedAggregateExpressionsParams(t *testing.T) {
	e := newAggexprEnv(t)
	cases := []struct {
		sql     string
		args    []any
		refused bool
	}{
		{sql: "SELECT coalesce(sum(qty), $1) AS total, coalesce(max(price), $2) FROM nosales", args: []any{0, 1.5}},
		{sql: "SELECT coalesce(sum(qty), $1) AS total FROM sales", args: []any{0}},
		{sql: "SELECT region, sum(qty) * $1 AS double FROM sales GROUP BY region ORDER BY 1", args: []any{2}},
		{sql: "SELECT round(avg(price), $1), round(avg(qty), $1) FROM sales", args: []any{2}},
		{sql: "SELECT region FROM sales GROUP BY region HAVING sum(qty) > $1 * count(*) ORDER BY 1", args: []any{2}},
		{sql: "SELECT region, sum(price) FROM sales GROUP BY region ORDER BY sum(price) * $1 DESC NULLS LAST, region LIMIT $2", args: []any{-1, 3}},
		{sql: "SELECT kind, string_agg(note, ',' ORDER BY note) || $1 FROM sales GROUP BY kind ORDER BY 1", args: []any{"!"}},
		{sql: "SELECT count(*) FILTER (WHERE qty > $1) * 2, sum(qty) + $1 FROM sales WHERE qty > $1", args: []any{2}},
		{sql: "SELECT kind, CASE WHEN count(*) > $1 THEN 'many' ELSE $2 END FROM sales GROUP BY kind ORDER BY 1", args: []any{2, "few"}},
		{sql: "SELECT sum(qty) / $1 FROM sales", args: []any{0}},
		{sql: "SELECT region FROM sales WHERE qty > $1 GROUP BY region HAVING sum(qty) > $1 * 2 ORDER BY 1", args: []any{1}, refused: true},
	}
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ref, px := connect(t, e.ref), connect(t, e.proxy)
			for _, c := range cases {
				want, got := ask(ref, mode, c.sql, c.args...), ask(px, mode, c.sql, c.args...)
				if c.refused && mode != pgx.QueryExecModeSimpleProtocol {
					if !strings.Contains(got.Err, "ERROR 0A000") {
						t.Errorf("%s: want 0A000, got %v", c.sql, got)
					}
					continue
				}
				if !strings.Contains(c.sql, "ORDER BY") {
					sort.Strings(want.Rows)
					sort.Strings(got.Rows)
				}
				if want.String() != got.String() {
					t.Errorf("%s %v\n reference %v\n proxy     %v", c.sql, c.args, want, got)
				}
			}
		})
	}
}

// TestShardedAggregateExpressionsInTransaction: division by zero in the
// proxy's outer statement aborts the client's transaction as PostgreSQL's
// would, and the transaction ends cleanly.
func TestShardedAggregateExpressionsInTransaction(t *testing.T) {
	e := newAggexprEnv(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ref, px := connect(t, e.ref), connect(t, e.proxy)
			for _, sql := range []string{
				"BEGIN",
				"SELECT region, sum(qty) - 1 FROM sales GROUP BY region ORDER BY 1",
				"SELECT count(*) / 0 FROM sales",
				"SELECT 1",
				"ROLLBACK",
				"SELECT count(*)::int4 FROM sales",
			} {
				want, got := ask(ref, mode, sql), ask(px, mode, sql)
				if want.String() != got.String() {
					t.Errorf("%s\n reference %v\n proxy     %v", sql, want, got)
				}
			}
		})
	}
}
