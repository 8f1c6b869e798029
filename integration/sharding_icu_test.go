package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// icuSchema has text in the database's default collation and in named
// ICU and libc collations, one of them nondeterministic (case-insensitive).
const icuSchema = `
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE COLLATION german (provider = icu, locale = 'de-DE');
CREATE TABLE words (
	id bigint PRIMARY KEY,
	w text NOT NULL,
	alt text,
	c_w text COLLATE "C",
	en_icu text COLLATE "en-x-icu",
	und text COLLATE "und-x-icu",
	de text COLLATE german,
	sv text COLLATE "sv-x-icu",
	en_libc text COLLATE "en_US",
	c_utf8 text COLLATE "C.utf8",
	ci text COLLATE ci
);
`

// icuWords are collationNames and strings on which ICU locales differ
// from each other and from libc: case, accents (ä in German and
// Swedish), canonically equivalent spellings, case variants that the
// case-insensitive collation says equal.
var icuWords = slices.Concat(collationNames, []string{
	"ABC", "abc", "Abc", "a\u0301", "á", "Äpfel", "Apfel", "apfel", "Öl", "ol", "zz", "Zz", "å", "aa", "ø", "o",
})

// newICUEnv is a cluster with two sets of a reference database and two
// shards holding the same words: "app", created ICU (en-US) by default
// as PostgreSQL 15 allows, and "lapp", created with the libc locale
// en_US.UTF-8; the proxy serves both, sharded by id.
func newICUEnv(t *testing.T) (icu, libc *shardedEnv) {
	t.Helper()
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "20"}})
	ctx := context.Background()
	creates := map[string]string{
		"":  "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'",
		"l": "TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'",
	}
	for prefix, how := range creates {
		for _, db := range []string{"ref", "s0", "s1"} {
			if err := cl.Exec(ctx, "postgres", "CREATE DATABASE "+prefix+db+" "+how); err != nil {
				t.Fatal(err)
			}
			if err := cl.Exec(ctx, prefix+db, icuSchema); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
`, t.TempDir(), appPassword, cl.User, cl.Password)
	for _, prefix := range []string{"", "l"} {
		cfg += fmt.Sprintf(`  - name: %sapp
    shards:
      - { host: %s, port: %d, database: %ss0 }
      - { host: %s, port: %d, database: %ss1 }
    sharded_tables:
      - { table: words, column: id, type: bigint }
`, prefix, cl.Host, cl.Port, prefix, cl.Host, cl.Port, prefix)
	}
	p := startProxy(t, cfg)
	envs := make([]*shardedEnv, 2)
	for i, prefix := range []string{"", "l"} {
		e := &shardedEnv{cl: cl, p: p, n: 2, ref: connect(t, cl.DSN(prefix+"ref"))}
		for s := 0; s < 2; s++ {
			e.direct = append(e.direct, connect(t, cl.DSN(fmt.Sprintf("%ss%d", prefix, s))))
		}
		fillWords(t, e, connect(t, p.AppURL(prefix+"app")))
		envs[i] = e
	}
	return envs[0], envs[1]
}

// fillWords inserts icuWords through the proxy and into the reference.
func fillWords(t *testing.T, e *shardedEnv, pc *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	for i, w := range icuWords {
		var alt any
		if i%5 != 4 {
			alt = icuWords[(i*7)%len(icuWords)]
		}
		for _, c := range []*pgx.Conn{e.ref, pc} {
			if _, err := c.Exec(ctx, "INSERT INTO words VALUES ($1, $2, $3, $2, $2, $2, $2, $2, $2, $2, $2)", int64(i+1), w, alt); err != nil {
				t.Fatalf("word %d: %v", i+1, err)
			}
		}
	}
	for i, d := range e.direct {
		var n int
		if err := d.QueryRow(ctx, "SELECT count(*) FROM words").Scan(&n); err != nil || n == 0 {
			t.Fatalf("shard %d holds %d words (%v): the test needs words on both", i, n, err)
		}
	}
}

// icuQueries order, compare and group text in every collation of
// icuSchema, each compared through the proxy with the reference in
// simple and extended protocol.
var icuQueries = []string{
	"SELECT id, w FROM words ORDER BY w, id",
	"SELECT w, id FROM words ORDER BY w DESC, id DESC",
	"SELECT w FROM words ORDER BY w LIMIT 7 OFFSET 3",
	"SELECT alt, id FROM words ORDER BY alt NULLS FIRST, id",
	"SELECT alt, id FROM words ORDER BY alt DESC NULLS LAST, id",
	"SELECT w, id FROM words ORDER BY w COLLATE \"und-x-icu\", id",
	"SELECT w, id FROM words ORDER BY w COLLATE \"C\", id",
	"SELECT en_icu, id FROM words ORDER BY en_icu, id",
	"SELECT und, id FROM words ORDER BY und DESC, id",
	"SELECT de, id FROM words ORDER BY de, id",
	"SELECT sv, id FROM words ORDER BY sv, id",
	"SELECT en_libc, id FROM words ORDER BY en_libc, id",
	"SELECT c_utf8, id FROM words ORDER BY c_utf8, id",
	"SELECT ci, id FROM words ORDER BY ci, id",
	"SELECT id FROM words ORDER BY lower(de), id",
	"SELECT min(w), max(w), min(alt), max(alt), min(en_icu), max(und), min(de), max(sv), min(en_libc), max(c_utf8) FROM words",
	"SELECT min(w COLLATE \"sv-x-icu\"), max(w COLLATE \"de-x-icu\") FROM words",
	"SELECT alt, count(*), min(w), max(de) FROM words GROUP BY alt ORDER BY alt NULLS FIRST",
	"SELECT lower(w) AS l, count(*) FROM words GROUP BY 1 ORDER BY 1",
	"SELECT DISTINCT alt FROM words ORDER BY alt",
	"SELECT DISTINCT sv FROM words ORDER BY sv",
	"SELECT alt FROM words GROUP BY alt HAVING max(w) > 'm' ORDER BY alt",
	"SELECT alt, count(DISTINCT w) FROM words GROUP BY alt ORDER BY alt",
	// DISTINCT aggregates compare with the collation: the case-insensitive
	// one counts "abc" and "ABC" once, as PostgreSQL does.
	"SELECT count(DISTINCT ci) FROM words",
	"SELECT alt, count(DISTINCT de) FROM words GROUP BY alt ORDER BY alt",
	"SELECT string_agg(de, ',' ORDER BY de) FROM words",
	"SELECT ci COLLATE \"C\" AS x, count(*) FROM words GROUP BY 1 ORDER BY 1",
}

func TestShardingICU(t *testing.T) {
	icu, libc := newICUEnv(t)
	for _, env := range []struct {
		name string
		e    *shardedEnv
		db   string
	}{{"ICU default", icu, "app"}, {"libc default", libc, "lapp"}} {
		t.Run(env.name, func(t *testing.T) {
			pc := connect(t, env.e.p.AppURL(env.db))
			for _, q := range icuQueries {
				env.e.same(t, pc, q, true)
			}
			env.e.same(t, pc, "SELECT max(de) FROM words WHERE id > $1", true, int64(3))
		})
	}
}

// TestShardingICURefused checks that text in a nondeterministic
// collation is not grouped or deduplicated by its bytes across shards:
// the proxy answers 0A000 naming the collation, and the session goes on.
func TestShardingICURefused(t *testing.T) {
	icu, _ := newICUEnv(t)
	pc := connect(t, icu.p.AppURL("app"))
	for _, q := range []string{
		"SELECT ci, count(*) FROM words GROUP BY ci",
		"SELECT ci, count(*) FROM words GROUP BY ci ORDER BY ci",
		"SELECT DISTINCT ci FROM words",
		"SELECT DISTINCT ON (ci) ci, id FROM words ORDER BY ci, id",
		"SELECT lower(ci) AS l, count(*) FROM words GROUP BY 1",
		"SELECT DISTINCT w COLLATE ci FROM words",
	} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			_, err := runQuery(t, pc, q, mode)
			if sqlstate(err) != "0A000" || !strings.Contains(errorDetail(err), "nondeterministic") {
				t.Errorf("%s [%v]: %v, want 0A000 naming the nondeterministic collation", q, mode, err)
			}
		}
	}
	icu.same(t, pc, "SELECT ci, id FROM words ORDER BY ci, id", true)
}
