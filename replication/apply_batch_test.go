package replication

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// batchSchema has a table that may be reordered (kv: only its primary
// key), one that may not (mail: a second unique constraint), one with a
// composite key, and an omni table. kv.big is stored out of line
// uncompressed, so that an UPDATE that leaves it alone streams it as an
// unchanged TOASTed value. compareBatchTables compares big by md5.
const batchSchema = `
CREATE TABLE kv (id bigint PRIMARY KEY, v int, big text);
ALTER TABLE kv ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE mail (id bigint PRIMARY KEY, email text NOT NULL UNIQUE, n int);
CREATE TABLE comp (a int, b text, v int, PRIMARY KEY (a, b));
CREATE TABLE conf (code text PRIMARY KEY, v int);`

func batchRules(db *config.Database) {
	db.ShardedTables = []config.ShardedTable{
		{Table: "kv", Column: "id", Type: "bigint"},
		{Table: "mail", Column: "id", Type: "bigint"},
		{Table: "comp", Column: "a", Type: "integer"},
	}
	db.OmniTables = []string{"conf"}
}

func compareBatchTables(t *testing.T, f *streamFixture) {
	t.Helper()
	f.compare(t, "kv", "id", "v::text || ':' || md5(coalesce(big, '<null>'))")
	f.compare(t, "mail", "id", "email || ':' || n::text")
	f.compare(t, "comp", "a", "b || ':' || v::text")
	f.compare(t, "conf", "code", "v::text")
}

// hotSchema is kv with a second TOASTed column, for a key space so small
// that changes to the same row collapse all the time.
const hotSchema = `
CREATE TABLE hot (id int PRIMARY KEY, v int, big text, big2 text);
ALTER TABLE hot ALTER COLUMN big SET STORAGE EXTERNAL, ALTER COLUMN big2 SET STORAGE EXTERNAL;`

func hotRules(db *config.Database) {
	batchRules(db)
	db.ShardedTables = append(db.ShardedTables, config.ShardedTable{Table: "hot", Column: "id", Type: "integer"})
}

// TestApplyBatchOrdering applies source transactions whose changes a
// batching applier could get wrong: one key inserted, updated, deleted
// and inserted again in one transaction; a key that moves to another key;
// unique values swapped between rows of a table with a second unique
// constraint; rows of several tables and of both destination shards in
// one transaction; UPDATEs that leave a TOASTed column unchanged. The
// whole backlog is written before the stream starts, so that each
// destination shard applies it in large groups. Every destination shard
// must then hold exactly the source's rows that its rule places there.
func TestApplyBatchOrdering(t *testing.T) {
	f := newStreamFixture(t, 2, batchSchema, `
INSERT INTO kv SELECT g, g, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 200) END FROM generate_series(1, 200) g;
INSERT INTO mail SELECT g, 'm' || g, 0 FROM generate_series(1, 50) g;
INSERT INTO comp SELECT g % 20, 'b' || g, g FROM generate_series(1, 100) g;
INSERT INTO conf SELECT 'c' || g, g FROM generate_series(1, 10) g;`, batchRules)
	f.exec(t, f.srcConn, `
BEGIN;
INSERT INTO kv VALUES (1001, 1, 'a');
UPDATE kv SET v = 2 WHERE id = 1001;
UPDATE kv SET v = v + 1 WHERE id BETWEEN 1 AND 100;
DELETE FROM kv WHERE id = 1001;
INSERT INTO kv VALUES (1001, 3, 'b');
UPDATE kv SET v = 4 WHERE id = 1001;
INSERT INTO comp VALUES (1, 'x', 1), (2, 'x', 2);
DELETE FROM comp WHERE a = 1 AND b = 'x';
INSERT INTO comp VALUES (1, 'x', 5);
UPDATE conf SET v = v * 10;
COMMIT;
BEGIN;
UPDATE kv SET id = 5000 WHERE id = 7;
INSERT INTO kv VALUES (7, 70, 'new seven');
UPDATE kv SET id = 5001 WHERE id = 5000;
DELETE FROM kv WHERE id = 7;
UPDATE kv SET id = 7 WHERE id = 5001;
UPDATE kv SET id = 8000 + id WHERE id BETWEEN 60 AND 69;
COMMIT;
BEGIN;
UPDATE kv SET v = -1 WHERE id IN (10, 20, 30, 40);
UPDATE kv SET v = -2 WHERE id IN (10, 20);
DELETE FROM kv WHERE id = 30;
UPDATE kv SET big = repeat('z', 5000) WHERE id = 50;
COMMIT;
BEGIN;
UPDATE mail SET email = 'tmp' WHERE id = 1;
UPDATE mail SET email = 'm1' WHERE id = 2;
UPDATE mail SET email = 'm2' WHERE id = 1;
DELETE FROM mail WHERE id = 3;
INSERT INTO mail VALUES (3, 'm4x', 1);
UPDATE mail SET email = 'm3' WHERE id = 4;
UPDATE mail SET email = 'm4' WHERE id = 3;
COMMIT;
DO $$BEGIN
	FOR i IN 0..19 LOOP
		INSERT INTO mail VALUES (300 + i, 'n' || i, 0);
		DELETE FROM mail WHERE id = 21 + i;
		INSERT INTO mail VALUES (400 + i, 'm' || (21 + i), 0);
	END LOOP;
END$$;
BEGIN;
DELETE FROM mail WHERE id BETWEEN 10 AND 20;
INSERT INTO mail SELECT g, 'm' || (g + 100), 1 FROM generate_series(10, 20) g;
UPDATE mail SET n = n + 1;
INSERT INTO kv SELECT g, g, 'bulk' FROM generate_series(2000, 2300) g;
DELETE FROM kv WHERE id BETWEEN 2100 AND 2150;
UPDATE kv SET v = 0 WHERE id BETWEEN 2140 AND 2200;
COMMIT;`)
	f.stream(t)
	compareBatchTables(t, f)
}

// TestApplyBatchRandom writes random transactions over small key spaces
// (so that keys repeat within and across transactions, and mail's unique
// emails collide), streams them in one backlog, and compares. hot's eight
// keys are changed in most transactions, so that its changes collapse all
// the time (apply_batch.go), with unchanged TOASTed values, NULLs, deletes,
// reinserts and key changes. The seed is logged and taken from
// SHARDGATE_SEED when set.
func TestApplyBatchRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDGATE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay with SHARDGATE_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	f := newStreamFixture(t, 2, batchSchema+hotSchema, `
INSERT INTO kv SELECT g, g, CASE WHEN g % 3 = 0 THEN repeat(md5(g::text), 100) END FROM generate_series(1, 60) g;
INSERT INTO mail SELECT g, 'm' || g, 0 FROM generate_series(1, 30) g;
INSERT INTO hot SELECT g, g, repeat(md5(g::text), 100), CASE WHEN g % 2 = 0 THEN repeat(md5((-g)::text), 100) END FROM generate_series(1, 6) g;`, hotRules)
	for round := range 3 {
		for range 150 {
			var sql strings.Builder
			sql.WriteString("BEGIN;\n")
			for range 1 + rng.IntN(12) {
				if rng.IntN(2) == 0 {
					sql.WriteString(randomHotChange(rng) + ";\n")
				} else {
					sql.WriteString(randomChange(rng) + ";\n")
				}
			}
			sql.WriteString("COMMIT;")
			// A transaction the source refuses (a duplicate key or email)
			// is rolled back and never streamed.
			if _, err := f.srcConn.Exec(t.Context(), sql.String()); err != nil {
				if _, err := f.srcConn.Exec(t.Context(), "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			}
		}
		collapsed := f.task.prog.collapsed.Load()
		f.stream(t)
		collapsed = f.task.prog.collapsed.Load() - collapsed
		t.Logf("round %d: %d changes collapsed into others", round, collapsed)
		if collapsed < 100 {
			t.Errorf("round %d: only %d changes collapsed into others", round, collapsed)
		}
		compareBatchTables(t, f)
		f.compare(t, "hot", "id", "concat_ws(':', v, md5(coalesce(big, '<null>')), md5(coalesce(big2, '<null>')))")
		if t.Failed() {
			t.Fatalf("round %d: destination differs from the source (seed %d)", round, seed)
		}
	}
}

func randomChange(rng *rand.Rand) string {
	id := 1 + rng.IntN(80)
	switch rng.IntN(10) {
	case 0, 1:
		big := "NULL"
		if rng.IntN(3) == 0 {
			big = fmt.Sprintf("repeat(md5('%d'), 120)", rng.IntN(1000))
		}
		return fmt.Sprintf("INSERT INTO kv VALUES (%d, %d, %s) ON CONFLICT (id) DO UPDATE SET v = excluded.v", id, rng.IntN(100), big)
	case 2, 3, 4:
		return fmt.Sprintf("UPDATE kv SET v = v + 1 WHERE id = %d", id)
	case 5:
		return fmt.Sprintf("DELETE FROM kv WHERE id = %d", id)
	case 6:
		to := 1 + rng.IntN(80)
		return fmt.Sprintf("UPDATE kv SET id = %d WHERE id = %d AND NOT EXISTS (SELECT FROM kv WHERE id = %d)", to, id, to)
	case 7:
		return fmt.Sprintf("UPDATE mail SET email = 'm%d' WHERE id = %d", rng.IntN(40), 1+rng.IntN(40))
	case 8:
		return fmt.Sprintf("DELETE FROM mail WHERE id = %d", 1+rng.IntN(40))
	default:
		return fmt.Sprintf("INSERT INTO mail VALUES (%d, 'm%d', %d) ON CONFLICT DO NOTHING", 1+rng.IntN(40), rng.IntN(40), rng.IntN(9))
	}
}

// randomHotChange changes a row of hot's eight keys.
func randomHotChange(rng *rand.Rand) string {
	id := 1 + rng.IntN(8)
	big := func() string {
		switch rng.IntN(4) {
		case 0:
			return "NULL"
		case 1:
			return "''"
		}
		return fmt.Sprintf("repeat(md5('%d'), %d)", rng.IntN(1000), 50+rng.IntN(100))
	}
	switch rng.IntN(12) {
	case 0, 1, 2, 3:
		// big and big2 stay: both stream as unchanged TOASTed values.
		return fmt.Sprintf("UPDATE hot SET v = v + 1 WHERE id = %d", id)
	case 4:
		return fmt.Sprintf("UPDATE hot SET v = NULL WHERE id = %d", id)
	case 5:
		return fmt.Sprintf("UPDATE hot SET big = %s WHERE id = %d", big(), id)
	case 6:
		return fmt.Sprintf("UPDATE hot SET big2 = %s, v = coalesce(v, 0) - 1 WHERE id = %d", big(), id)
	case 7:
		return fmt.Sprintf("DELETE FROM hot WHERE id = %d", id)
	case 8:
		to := 1 + rng.IntN(8)
		return fmt.Sprintf("UPDATE hot SET id = %d WHERE id = %d AND NOT EXISTS (SELECT FROM hot WHERE id = %d)", to, id, to)
	default:
		return fmt.Sprintf("INSERT INTO hot VALUES (%d, %d, %s, %s) ON CONFLICT (id) DO UPDATE SET v = excluded.v", id, rng.IntN(100), big(), big())
	}
}

// TestApplyBatchTableInfo: the applier reorders the changes of a table
// whose only unique constraint is its replica identity, keeps the order of
// one with another unique constraint, and does not batch one with a
// trigger that fires for replicated rows.
func TestApplyBatchTableInfo(t *testing.T) {
	f := newStreamFixture(t, 1, batchSchema+`
CREATE TABLE trig (id bigint PRIMARY KEY, v int);
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;`, "", batchRules)
	f.exec(t, f.dstConns[0], `CREATE TRIGGER t BEFORE INSERT ON trig FOR EACH ROW EXECUTE FUNCTION noop();
ALTER TABLE trig ENABLE ALWAYS TRIGGER t`)
	a, err := f.task.newApplier(t.Context(), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.conn.Close(t.Context())
	for _, tc := range []struct {
		table          string
		cols           []string
		key            []int
		full           bool
		batch, reorder bool
	}{
		{"kv", []string{"id", "v", "big"}, []int{0}, false, true, true},
		{"mail", []string{"id", "email", "n"}, []int{0}, false, true, false},
		{"comp", []string{"a", "b", "v"}, []int{1, 0}, false, true, true},
		{"trig", []string{"id", "v"}, []int{0}, false, false, false},
		{"conf", []string{"code", "v"}, []int{0, 1}, true, false, false},
	} {
		t.Run(tc.table, func(t *testing.T) {
			rel := &relation{name: "public." + tc.table, ident: qualified("public", tc.table), cols: tc.cols, key: tc.key, full: tc.full}
			info, err := a.tableInfo(t.Context(), rel)
			if err != nil {
				t.Fatal(err)
			}
			if info.batch != tc.batch || info.reorder != tc.reorder {
				t.Errorf("batch %v reorder %v, want %v %v", info.batch, info.reorder, tc.batch, tc.reorder)
			}
		})
	}
}

// TestMultiSQL: the multi-row statements number their parameters as
// appendChangeArgs collects them, row after row.
func TestMultiSQL(t *testing.T) {
	text := func(s string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(s)}
	}
	toast := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
	rel := &relation{name: "public.t", ident: `"public"."t"`, cols: []string{"id", "a", "b"}, key: []int{0}}
	types := []uint32{20, 23, 25}
	for _, tc := range []struct {
		c    change
		want string
		oids []uint32
	}{
		{change{kind: changeInsert, rel: rel, new: []*pglogrepl.TupleDataColumn{text("1"), text("2"), toast}},
			`INSERT INTO "public"."t" ("id", "a") VALUES ($1, $2), ($3, $4)`, nil},
		{change{kind: changeUpdate, rel: rel, new: []*pglogrepl.TupleDataColumn{text("1"), toast, text("x")}, old: []*pglogrepl.TupleDataColumn{text("1")}},
			`UPDATE "public"."t" AS sg_t SET "id" = sg_v.n0, "b" = sg_v.n2 FROM (VALUES ($1, $2, $3), ($4, $5, $6)) AS sg_v (n0, n2, o0) WHERE sg_t."id" = sg_v.o0`,
			[]uint32{20, 25, 20, 20, 25, 20}},
		{change{kind: changeDelete, rel: rel, old: []*pglogrepl.TupleDataColumn{text("1"), text("2"), text("3")}},
			`DELETE FROM "public"."t" AS sg_t USING (VALUES ($1), ($2)) AS sg_v (o0) WHERE sg_t."id" = sg_v.o0`, []uint32{20, 20}},
	} {
		sh, ok := shapeOf(&tc.c)
		if !ok {
			t.Fatalf("%s: no shape", tc.want)
		}
		sql, oids := multiSQL(sh, 2, &tc.c, types)
		if sql != tc.want || !slices.Equal(oids, tc.oids) {
			t.Errorf("multiSQL = %s %v\nwant       %s %v", sql, oids, tc.want, tc.oids)
		}
		args := appendChangeArgs(nil, &tc.c)
		if want := changeArgs(&tc.c); !slices.EqualFunc(args, want, func(x, y []byte) bool { return string(x) == string(y) }) {
			t.Errorf("appendChangeArgs = %q, changeArgs %q", args, want)
		}
		if n := strings.Count(sql, "$"); n != 2*len(args) {
			t.Errorf("%s: %d parameters, two rows of %d", sql, n, len(args))
		}
	}
	// A DELETE whose old tuple lacks its identity has nothing to join on.
	del := change{kind: changeDelete, rel: rel, old: []*pglogrepl.TupleDataColumn{toast}}
	if sh, ok := shapeOf(&del); !ok || wholeIdentity(sh) {
		t.Errorf("DELETE without its identity: shape %v, wholeIdentity true", ok)
	}
}

// TestApplyCollapse applies changes through an applier's runs, one rule of
// apply_batch.go's collapsing at a time, and checks how many rows the
// open runs hold and how many statements were queued before the commit
// (BEGIN, and whatever a flush queued), then the table's rows after the
// commit.
func TestApplyCollapse(t *testing.T) {
	f := newStreamFixture(t, 1, batchSchema, "", batchRules)
	a, err := f.task.newApplier(t.Context(), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.conn.Close(t.Context())
	kv := &relation{name: "public.kv", ident: qualified("public", "kv"), cols: []string{"id", "v", "big"}, key: []int{0}}
	mail := &relation{name: "public.mail", ident: qualified("public", "mail"), cols: []string{"id", "email", "n"}, key: []int{0}}
	// col is a column's value in a tuple: "u" is an unchanged TOASTed
	// value, "null" NULL.
	col := func(v string) *pglogrepl.TupleDataColumn {
		switch v {
		case "u":
			return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
		case "null":
			return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
		}
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	tuple := func(vs ...string) []*pglogrepl.TupleDataColumn {
		t := make([]*pglogrepl.TupleDataColumn, len(vs))
		for i, v := range vs {
			t[i] = col(v)
		}
		return t
	}
	// As route makes them: an UPDATE that keeps its key has its new tuple
	// as identity; a DELETE's and a key change's old tuple has the key.
	ins := func(rel *relation, vs ...string) change {
		return change{kind: changeInsert, rel: rel, new: tuple(vs...)}
	}
	upd := func(rel *relation, vs ...string) change {
		n := tuple(vs...)
		return change{kind: changeUpdate, rel: rel, new: n, old: n}
	}
	del := func(rel *relation, id string) change {
		return change{kind: changeDelete, rel: rel, old: tuple(id, "null", "null")}
	}
	move := func(from string, vs ...string) change {
		return change{kind: changeUpdate, rel: kv, new: tuple(vs...), old: tuple(from, "null", "null")}
	}
	big := strings.Repeat("B", 3000)
	for _, tc := range []struct {
		name    string
		setup   string // on the destination, before the changes
		changes []change
		rows    int // in the open runs before the commit
		queued  int // statements queued before the commit
		want    []string
	}{
		{"update after update", "INSERT INTO kv VALUES (1, 0, 'a'), (2, 0, 'x')",
			[]change{upd(kv, "1", "1", "a"), upd(kv, "2", "5", "y"), upd(kv, "1", "2", "b")},
			2, 1, []string{"1:2:b", "2:5:y"}},
		{"update after update: an unchanged TOASTed value is the first update's", "INSERT INTO kv VALUES (1, 0, 'a')",
			[]change{upd(kv, "1", "1", "b"), upd(kv, "1", "2", "u")},
			1, 1, []string{"1:2:b"}},
		{"update after update: the second sets what the first left unchanged", "INSERT INTO kv VALUES (1, 0, '" + big + "')",
			[]change{upd(kv, "1", "1", "u"), upd(kv, "1", "2", "c")},
			1, 1, []string{"1:2:c"}},
		{"update after update: both leave a TOASTed value unchanged", "INSERT INTO kv VALUES (1, 0, '" + big + "')",
			[]change{upd(kv, "1", "1", "u"), upd(kv, "1", "2", "u"), upd(kv, "1", "3", "u")},
			1, 1, []string{"1:3:" + big}},
		{"update after update: NULLs", "INSERT INTO kv VALUES (1, 0, 'a')",
			[]change{upd(kv, "1", "null", "b"), upd(kv, "1", "2", "null")},
			1, 1, []string{"1:2:<null>"}},
		{"update after insert", "",
			[]change{ins(kv, "1", "1", "a"), upd(kv, "1", "2", "u"), upd(kv, "1", "null", "c")},
			1, 1, []string{"1:<null>:c"}},
		{"delete after insert", "INSERT INTO kv VALUES (2, 0, 'x')",
			[]change{ins(kv, "1", "1", "a"), upd(kv, "1", "2", "u"), del(kv, "1"), upd(kv, "2", "3", "u")},
			1, 1, []string{"2:3:x"}},
		{"delete after update", "INSERT INTO kv VALUES (1, 0, 'a')",
			[]change{upd(kv, "1", "1", "b"), del(kv, "1")},
			1, 1, nil},
		{"insert after delete after insert", "",
			[]change{ins(kv, "1", "1", "a"), del(kv, "1"), ins(kv, "1", "2", "b")},
			1, 1, []string{"1:2:b"}},
		{"insert after delete flushes", "INSERT INTO kv VALUES (1, 0, 'a')",
			[]change{del(kv, "1"), ins(kv, "1", "2", "b")},
			1, 2, []string{"1:2:b"}},
		{"key change after update flushes", "INSERT INTO kv VALUES (1, 0, '" + big + "')",
			[]change{upd(kv, "1", "1", "u"), move("1", "2", "2", "u")},
			1, 2, []string{"2:2:" + big}},
		{"update after key change flushes", "INSERT INTO kv VALUES (1, 0, 'a')",
			[]change{move("1", "2", "2", "u"), upd(kv, "2", "3", "u"), upd(kv, "2", "4", "u")},
			1, 2, []string{"2:4:a"}},
		{"a table that may not reorder keeps every change", "INSERT INTO mail VALUES (1, 'a', 0)",
			[]change{upd(mail, "1", "b", "1"), upd(mail, "1", "c", "2"), ins(mail, "2", "d", "0"), del(mail, "2")},
			1, 4, []string{"1:c:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.exec(t, f.dstConns[0], "TRUNCATE kv, mail; "+tc.setup)
			a.applied.Store(0)
			end := pglogrepl.LSN(a.progress + 100)
			if err := a.apply(t.Context(), op{final: end - 1, commit: true, end: end, changes: tc.changes}); err != nil {
				t.Fatal(err)
			}
			if a.runs.rows != tc.rows || a.pipe.statements != tc.queued {
				t.Errorf("%d rows in runs, %d statements queued; want %d, %d", a.runs.rows, a.pipe.statements, tc.rows, tc.queued)
			}
			if err := a.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			q := "SELECT concat_ws(':', id, coalesce(v::text, '<null>'), coalesce(big, '<null>')) FROM kv ORDER BY id"
			if tc.changes[0].rel == mail {
				q = "SELECT concat_ws(':', id, email, n) FROM mail ORDER BY id"
			}
			rows, err := f.dstConns[0].Query(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rows %.200q, want %.200q", got, tc.want)
			}
		})
	}
}

// TestApplierDurableCommit: an applier's commits are flushed before they
// return even where the destination's synchronous_commit is off (the
// stream confirms the slot past them), and a stronger setting is kept.
func TestApplierDurableCommit(t *testing.T) {
	f := newStreamFixture(t, 2, batchSchema, "", batchRules)
	for d, tc := range []struct{ db, want string }{{"off", "local"}, {"remote_write", "remote_write"}} {
		f.exec(t, f.dstConns[d], fmt.Sprintf("ALTER DATABASE %s SET synchronous_commit = %s", f.dst.Shards[d].Database, tc.db))
		a, err := f.task.newApplier(t.Context(), 0, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = a.conn.QueryRow(t.Context(), "SHOW synchronous_commit").Scan(&got)
		a.conn.Close(t.Context())
		if err != nil || got != tc.want {
			t.Errorf("destination with synchronous_commit = %s: the applier's is %q (%v), want %s", tc.db, got, err, tc.want)
		}
	}
}
