package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// collationSchema has a column of each ordered type a merge compares, text
// in the database's collation (en_US.UTF-8), in C, and in collations the
// proxy refuses.
const collationSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok';
CREATE TABLE people (
	id bigint PRIMARY KEY,
	name text NOT NULL,
	city varchar(40),
	code character(6),
	c_name text COLLATE "C",
	en_name text COLLATE "en_US",
	icu_name text COLLATE "und-x-icu",
	tags text[],
	iv interval,
	ip inet,
	net cidr,
	b bytea,
	mac macaddr,
	m mood,
	ts timestamptz,
	d date,
	u uuid
);
`

// collationNames are ordered differently by byte order and by en_US:
// case, accents, punctuation, spaces, digits, scripts, and strings that
// strcoll says equal though their bytes differ (unassigned code points),
// ordered by PostgreSQL's strcmp tie-break.
var collationNames = []string{
	"a", "A", "b", "B", "ab", "Ab", "aB", "AB", "a b", "a-b", "a_b", "a.b", "ab-", "-ab", "ab ", " ab",
	"ába", "abá", "äb", "Äb", "æ", "ae", "ß", "ss", "ç", "c", "é", "e", "E", "è", "ê", "e\u0301", "ñ", "n",
	"1", "10", "2", "01", "1.5", "½", "", " ", "!", "?", "@", "a\u00adb", "a\u200bb",
	"\u0378", "\u0379", "a\u0378", "a\u0379", "x\u0557y", "x\u0378y",
	"日本", "本日", "Ωμέγα", "ωμέγα", "Привет", "привет", "😀", "Zürich", "Zurich", "zebra", "Zebra",
	"co-op", "coop", "co op", "O'Brien", "OBrien", "o'brien", "ab", "Ab",
}

// newCollationEnv is a reference database and a 2-shard proxy database,
// all created with LOCALE 'en_US.UTF-8', holding the same rows.
func newCollationEnv(t *testing.T) *shardedEnv {
	t.Helper()
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "20"}})
	ctx := context.Background()
	const n = 2
	dbs := []string{"ref"}
	for i := 0; i < n; i++ {
		dbs = append(dbs, fmt.Sprintf("shard%d", i))
	}
	for _, db := range dbs {
		if err := cl.Exec(ctx, "postgres", "CREATE DATABASE "+db+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'"); err != nil {
			t.Fatal(err)
		}
		if err := cl.Exec(ctx, db, collationSchema); err != nil {
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
    shards:
      - { host: %s, port: %d, database: shard0 }
      - { host: %s, port: %d, database: shard1 }
    sharded_tables:
      - { table: people, column: id, type: bigint }
`, t.TempDir(), appPassword, cl.User, cl.Password, cl.Host, cl.Port, cl.Host, cl.Port)
	e := &shardedEnv{cl: cl, p: startProxy(t, cfg), n: n}
	e.ref = connect(t, cl.DSN("ref"))
	for i := 0; i < n; i++ {
		e.direct = append(e.direct, connect(t, cl.DSN(fmt.Sprintf("shard%d", i))))
	}
	return e
}

func TestShardedCollation(t *testing.T) {
	e := newCollationEnv(t)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))
	moods := []string{"sad", "meh", "ok", "happy"}
	ivs := []string{"1 mon", "30 days", "720:00:00", "1 day", "24:00:00", "-1 day", "1 year", "29 days 23:59:59", "0", "-00:00:01"}
	ips := []string{"10.0.0.1", "10.0.0.0/8", "192.168.1.5/24", "192.168.1.0/24", "::1", "::ffff:1.2.3.4", "fe80::1/64", "0.0.0.0/0"}
	for i, name := range collationNames {
		id := int64(i + 1)
		var tags any
		if i%4 != 3 {
			tags = []string{name, collationNames[(i+7)%len(collationNames)]}
		}
		args := []any{id, name, collationNames[(i*5)%len(collationNames)], fmt.Sprintf("%c%d", 'A'+i%3, i%7),
			name, name, name, tags, ivs[i%len(ivs)], ips[i%len(ips)], fmt.Sprintf("10.%d.0.0/16", i%9),
			[]byte(name), fmt.Sprintf("08:00:2b:%02x:%02x:%02x", i%3, i%5, i), moods[i%len(moods)],
			fmt.Sprintf("2024-01-%02d 10:00:00+%02d", 1+i%28, i%12), fmt.Sprintf("%04d-06-01", 1990+i%40),
			fmt.Sprintf("%08x-0000-0000-0000-000000000000", (i*2654435761)%(1<<32))}
		for _, c := range []*pgx.Conn{e.ref, pc} {
			if _, err := c.Exec(ctx, `INSERT INTO people VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`, args...); err != nil {
				t.Fatalf("row %d: %v", id, err)
			}
		}
	}
	for i, d := range e.direct {
		var n int
		if err := d.QueryRow(ctx, "SELECT count(*) FROM people").Scan(&n); err != nil || n == 0 {
			t.Fatalf("shard %d holds %d rows (%v): the test needs rows on both", i, n, err)
		}
	}
	for _, q := range []string{
		// Text in the database's collation, a table column.
		"SELECT id, name FROM people ORDER BY name, id",
		"SELECT name, id FROM people ORDER BY name DESC, id DESC",
		"SELECT name FROM people ORDER BY name LIMIT 10 OFFSET 5",
		"SELECT city, id FROM people ORDER BY city NULLS FIRST, id",
		"SELECT code, id FROM people ORDER BY code, id",
		"SELECT c_name, id FROM people ORDER BY c_name, id",
		"SELECT tags, id FROM people ORDER BY tags NULLS FIRST, id",
		// Expressions: PostgreSQL says their collation.
		"SELECT id FROM people ORDER BY lower(name), id",
		"SELECT name FROM people ORDER BY name COLLATE \"C\", id",
		"SELECT name || '!' AS x, id FROM people ORDER BY 1, 2",
		"SELECT min(name), max(name), min(city), max(code), min(c_name), max(c_name) FROM people",
		"SELECT min(lower(name)), max(upper(name)), max(name COLLATE \"C\") FROM people",
		"SELECT m, min(name), max(name) FROM people GROUP BY m ORDER BY m",
		"SELECT city, count(*) FROM people GROUP BY city ORDER BY city NULLS LAST",
		"SELECT DISTINCT city FROM people ORDER BY city",
		"SELECT city FROM people GROUP BY city HAVING max(name) > 'm' ORDER BY city",
		// Other ordered types.
		"SELECT iv, id FROM people ORDER BY iv, id",
		"SELECT ip, net, id FROM people ORDER BY ip DESC, net, id",
		"SELECT b, id FROM people ORDER BY b, id",
		"SELECT mac, m, id FROM people ORDER BY mac, m, id",
		"SELECT m, id FROM people ORDER BY m DESC, id",
		"SELECT ts, d, u FROM people ORDER BY ts, d, u",
		"SELECT min(iv), max(iv), min(ip), max(net), min(m), max(m), min(d), max(tags), min(ts) FROM people",
	} {
		sameUserTypes(t, e, pc, q)
	}
	// A parameter and a search_path: the expression's collation is asked
	// with the client's name resolution.
	e.same(t, pc, "SELECT max(name) FROM people WHERE id > $1", true, int64(3))
	for _, c := range []*pgx.Conn{e.ref, pc} {
		if _, err := c.Exec(ctx, "SET search_path TO public"); err != nil {
			t.Fatal(err)
		}
	}
	e.same(t, pc, "SELECT min(name || '') FROM people", true)
}

func TestShardedCollationRefused(t *testing.T) {
	e := newCollationEnv(t)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))
	for _, c := range []*pgx.Conn{e.ref, pc} {
		if _, err := c.Exec(ctx, "INSERT INTO people (id, name, en_name, icu_name) VALUES (1, 'a', 'a', 'a'), (2, 'B', 'B', 'B'), (3, 'c', 'c', 'c')"); err != nil {
			t.Fatal(err)
		}
	}
	// Named libc and ICU collations are followed since x-icu
	// (sharding_icu_test.go covers them in depth).
	for _, q := range []string{
		"SELECT en_name FROM people ORDER BY en_name",
		"SELECT icu_name FROM people ORDER BY icu_name",
		"SELECT max(name COLLATE \"en_US\") FROM people",
		"SELECT name FROM people ORDER BY name COLLATE \"und-x-icu\"",
	} {
		e.same(t, pc, q, true)
	}
	// The session goes on after a refusal.
	e.same(t, pc, "SELECT name FROM people ORDER BY name", true)
	// A column whose collation the client's own transaction changed: the
	// shards sort by the new one, which the proxy's catalog session
	// cannot see yet.
	tx, err := pc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE people ALTER COLUMN name TYPE text COLLATE "C"`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT name FROM people ORDER BY name"); sqlstate(err) != "0A000" || !strings.Contains(errorDetail(err), "ACCESS EXCLUSIVE") {
		t.Errorf("ORDER BY a column altered in the transaction: %v, want 0A000 naming the lock", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A client_encoding other than the database's converts the text the
	// merge would compare.
	if _, err := pc.Exec(ctx, "SET client_encoding TO 'LATIN1'"); err != nil {
		t.Fatal(err)
	}
	// (pgx's simple protocol needs UTF8 itself.)
	if _, err := runQuery(t, pc, "SELECT name FROM people ORDER BY name", pgx.QueryExecModeCacheStatement); sqlstate(err) != "0A000" || !strings.Contains(errorDetail(err), "client_encoding") {
		t.Errorf("LATIN1 client: %v, want 0A000 naming client_encoding", err)
	}
	// Committed, the change is followed at once: nothing is cached.
	if _, err := pc.Exec(ctx, "RESET client_encoding"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*pgx.Conn{e.ref, pc} {
		if _, err := c.Exec(ctx, `ALTER TABLE people ALTER COLUMN name TYPE text COLLATE "C"`); err != nil {
			t.Fatal(err)
		}
	}
	// (The simple protocol: the reference connection's own cached
	// statements would fail once with "cached plan must not change result
	// type" after the ALTER, as pgx's do on any PostgreSQL.)
	want, werr := runQuery(t, e.ref, "SELECT name FROM people ORDER BY name", pgx.QueryExecModeSimpleProtocol)
	got, gerr := runQuery(t, pc, "SELECT name FROM people ORDER BY name", pgx.QueryExecModeSimpleProtocol)
	if werr != nil || gerr != nil || !reflect.DeepEqual(want, got) {
		t.Fatalf("after ALTER … COLLATE \"C\": reference %v %v, proxy %v %v", want, werr, got, gerr)
	}
}

// errorDetail is a server error's message and detail.
func errorDetail(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message + ": " + pgErr.Detail
	}
	return fmt.Sprint(err)
}

// sameUserTypes is shardedEnv.same for results with columns of user types,
// whose OIDs differ between the reference database and the shards: it
// compares them by name.
func sameUserTypes(t *testing.T, e *shardedEnv, pc *pgx.Conn, sql string) {
	t.Helper()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		want, werr := runQuery(t, e.ref, sql, mode)
		got, gerr := runQuery(t, pc, sql, mode)
		if werr != nil || gerr != nil {
			t.Fatalf("%s [%v]: reference error %v, proxy error %v", sql, mode, werr, gerr)
		}
		for _, r := range []*result{&want, &got} {
			for i, c := range r.Cols {
				name, oid, _ := strings.Cut(c, ":")
				if n, err := strconv.Atoi(oid); err == nil && n >= 16384 {
					r.Cols[i] = name + ":user type"
				}
			}
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s [%v]:\nreference %+v\nproxy     %+v", sql, mode, want, got)
		}
	}
}
