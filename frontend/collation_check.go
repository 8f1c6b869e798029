package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// verdictSlot holds what the proxy learnt of one server's collation; its
// mutex is held while a check runs, so that one check runs per server and
// collation.
type verdictSlot struct {
	mu sync.Mutex // guards v
	v  *verdict
}

// verdict says whether the proxy orders text like one server does in one
// collation: the database's default, or a named collation.
type verdict struct {
	at       time.Time          // when the check started
	provider string             // c (libc) or i (ICU)
	collate  string             // the locale: pg_database.datcollate, or the ICU locale
	coll     executor.Collation // valid when err is nil
	err      error              // why the proxy cannot follow the server
}

// databaseCollation returns the database's default collation when every
// server that answered the statement passes the check, once per question.
func (q *orderQuestion) databaseCollation(ctx context.Context) (executor.Collation, error) {
	if q.dflt != nil || q.dfltErr != nil {
		if q.dfltErr != nil {
			return executor.Collation{}, q.dfltErr
		}
		return *q.dflt, nil
	}
	coll, err := q.serversCollation(ctx, nil)
	if err != nil {
		q.dfltErr = err
		return executor.Collation{}, err
	}
	q.dflt = &coll
	return coll, nil
}

// serversCollation returns the collation named (nil: the database's
// default) when every server that answered the statement passes the
// check and they agree on its locale.
func (q *orderQuestion) serversCollation(ctx context.Context, named *collInfo) (executor.Collation, error) {
	what := "the database's default collation"
	if named != nil {
		what = fmt.Sprintf("collation %q", named.name)
	}
	var first *verdict
	for _, i := range q.p.Shards {
		srv := q.c.xs.Server(i)
		if srv == nil {
			return executor.Collation{}, fmt.Errorf("shard %d holds no server", i)
		}
		v := q.co.verdict(ctx, i, srv, named)
		switch {
		case v.err != nil:
			return executor.Collation{}, fmt.Errorf("%s on server %s (shard %d): %w", what, srv.Addr, i, v.err)
		case first != nil && (v.collate != first.collate || v.provider != first.provider):
			return executor.Collation{}, fmt.Errorf("the shards' databases have different collations (%q and %q)", first.collate, v.collate)
		}
		if first == nil {
			first = v
		}
	}
	return first.coll, nil
}

// verdict returns the verdict on the server srv of shard for the
// collation named (nil: the database's default), checking it when there
// is none yet or when srv is a connection newer than the verdict: the
// server may have restarted with another C library or ICU since.
func (co *collations) verdict(ctx context.Context, shard int, srv *pool.Server, named *collInfo) *verdict {
	key := srv.Addr
	if named != nil {
		key += "\x00" + named.key()
	}
	co.mu.Lock()
	slot := co.verdicts[key]
	if slot == nil {
		slot = &verdictSlot{}
		co.verdicts[key] = slot
	}
	co.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.v != nil && !slot.v.at.Before(srv.Created()) {
		return slot.v
	}
	v, final := co.check(ctx, shard, srv.Addr, named)
	if final {
		slot.v = v
	}
	return v
}

// check inspects one server over a connection of its own. final is false
// when the check could not run (the verdict is not kept).
func (co *collations) check(ctx context.Context, shard int, addr string, named *collInfo) (v *verdict, final bool) {
	v = &verdict{at: time.Now()}
	p := co.serverPool(shard, addr)
	if p == nil {
		v.err = fmt.Errorf("the server is not in shard %d's configuration", shard)
		return v, false
	}
	conn, err := openCatalog(ctx, p.Target, p.Config.ConnectTimeout)
	if err != nil {
		v.err = fmt.Errorf("cannot read its catalog: %w", err)
		return v, false
	}
	defer conn.Close(ctx)
	var pgErr *pgconn.PgError
	libs := libraries{libc: co.libcVersion(), icu: co.icuVersion}
	if named != nil {
		err = v.inspectNamed(ctx, conn, named, libs)
	} else {
		err = v.inspect(ctx, conn, libs)
	}
	if err != nil {
		if errors.As(err, &pgErr) || conn.IsClosed() {
			v.err = fmt.Errorf("cannot read its catalog: %w", err)
			return v, false
		}
		v.err = err
	}
	return v, true
}

// libcVersionColumn is the C library version a libc collation other than
// C of pg_collation reports (PostgreSQL reports none for C.* locales).
const libcVersionColumn = `coalesce((SELECT pg_catalog.pg_collation_actual_version(c.oid) FROM pg_catalog.pg_collation c
                  WHERE c.collprovider = 'c' AND c.collcollate NOT IN ('C', 'POSIX') AND c.collcollate NOT LIKE 'C.%'
                  LIMIT 1), '')`

// libraries are the proxy's collation libraries' versions.
type libraries struct {
	libc string                          // the C library's version
	icu  func(executor.Collation) string // an ICU collator's version
}

// inspect reads the database's collation, encoding and collation library
// version and runs the probe.
func (v *verdict) inspect(ctx context.Context, conn *pgconn.PgConn, libs libraries) error {
	// PostgreSQL 15 has datlocprovider, daticulocale (datlocale from 17)
	// and pg_database_collation_actual_version; before, every database
	// collation is libc. Both report the glibc version for a libc locale
	// on glibc (get_collation_actual_version), except for C.* locales: a
	// libc collation other than C of pg_collation then says it.
	const q15 = `SELECT d.datcollate, d.datlocprovider::text, pg_catalog.pg_encoding_to_char(d.encoding),
       coalesce(pg_catalog.pg_database_collation_actual_version(d.oid), ''),
       coalesce(pg_catalog.to_jsonb(d) ->> 'daticulocale', pg_catalog.to_jsonb(d) ->> 'datlocale', ''), `
	const qOld = `SELECT d.datcollate, 'c', pg_catalog.pg_encoding_to_char(d.encoding), '', '', `
	const tail = libcVersionColumn + `
  FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`
	old, err := before15(ctx, conn)
	if err != nil {
		return err
	}
	q := q15
	if old {
		q = qOld
	}
	res := conn.ExecParams(ctx, q+tail, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) != 1 {
		return errors.New("the database is not in pg_database")
	}
	row := res.Rows[0]
	v.collate, v.provider = string(row[0]), string(row[1])
	encoding, dbVersion, iculocale, libcVersion := string(row[2]), string(row[3]), string(row[4]), string(row[5])
	switch v.provider {
	case "i":
		v.collate = iculocale
		return v.followICU(ctx, conn, encoding, dbVersion, libs, true, "")
	case "c":
		version := dbVersion
		if version == "" {
			version = libcVersion
		}
		return v.followLibc(ctx, conn, encoding, version, libs.libc, "")
	}
	return fmt.Errorf("its provider %q is neither libc nor ICU", v.provider)
}

// before15 reports whether the server is older than PostgreSQL 15.
func before15(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	if n, _ := strconv.Atoi(conn.ParameterStatus("server_version_num")); n > 0 {
		return n < 150000, nil
	}
	// server_version_num is no ParameterStatus before PostgreSQL 18.
	res := conn.ExecParams(ctx, "SELECT pg_catalog.current_setting('server_version_num')", nil, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		return false, fmt.Errorf("reading server_version_num: %w", res.Err)
	}
	n, _ := strconv.Atoi(string(res.Rows[0][0]))
	return n < 150000, nil
}

// followLibc checks that the proxy's C library sorts as the server's does
// in libc locale v.collate, and sets v.coll: version is the server's C
// library version, mine the proxy's; collate is the probe's COLLATE
// clause ("" for the database's default).
func (v *verdict) followLibc(ctx context.Context, conn *pgconn.PgConn, encoding, version, mine, collate string) error {
	switch {
	case v.collate == "C" || v.collate == "POSIX":
		return nil // byte order
	case encoding != "UTF8":
		return fmt.Errorf("the proxy compares libc collations in UTF8 databases only, and this one is %s", encoding)
	case version == "":
		return fmt.Errorf("the server reports no C library version for locale %q (PostgreSQL 13 or later does, on glibc)", v.collate)
	case mine == "":
		return errors.New("the proxy is not built against glibc")
	case version != mine:
		return fmt.Errorf("the server sorts with C library version %s and the proxy with %s", version, mine)
	}
	coll, err := executor.LibcCollation(v.collate)
	if err != nil {
		return fmt.Errorf("locale %q is not installed on the proxy's machine (%v)", v.collate, err)
	}
	if err := probe(ctx, conn, coll, collate); err != nil {
		return err
	}
	v.coll = coll
	return nil
}

// followICU checks that the proxy's ICU sorts as the server's does in ICU
// locale v.collate, and sets v.coll: version is the collator version the
// server reports (pg_collation_actual_version or
// pg_database_collation_actual_version), which must be the proxy's for
// the same locale; collate is the probe's COLLATE clause.
func (v *verdict) followICU(ctx context.Context, conn *pgconn.PgConn, encoding, version string, libs libraries, deterministic bool, collate string) error {
	switch {
	case !executor.ICUAvailable():
		return errors.New("it is an ICU collation, and the proxy was built without ICU (-tags noicu)")
	case encoding != "UTF8":
		return fmt.Errorf("the proxy compares ICU collations in UTF8 databases only, and this one is %s", encoding)
	case version == "":
		return fmt.Errorf("the server reports no ICU version for locale %q", v.collate)
	}
	coll, err := executor.ICUCollation(v.collate, deterministic)
	if err != nil {
		return fmt.Errorf("ICU locale %q: %w", v.collate, err)
	}
	if mine := libs.icu(coll); mine != version {
		return fmt.Errorf("the server's ICU collator for locale %q is version %s and the proxy's %s", v.collate, version, mine)
	}
	if err := probe(ctx, conn, coll, collate); err != nil {
		return err
	}
	v.coll = coll
	return nil
}

// probeStrings are sorted by the server and by the proxy: cases, accents,
// punctuation, spaces, digits and scripts on which collations differ. The
// versions agreeing is what PostgreSQL trusts; the probe catches locale
// data that differ under one version (a patched or rebuilt locale).
var probeStrings = []string{
	"a", "A", "b", "B", "ab", "Ab", "aB", "AB", "a b", "a-b", "a_b", "a.b", "a,b", "a'b", "ab-", "-ab",
	"ába", "abá", "äb", "Äb", "æ", "Æ", "ae", "AE", "ß", "ss", "SS", "ø", "oe", "œ", "ç", "c", "C",
	"é", "e", "E", "è", "ê", "ë", "ñ", "n", "N", "ij", "ĳ", "ü", "ue", "u",
	"1", "10", "2", "01", "1.5", "1,5", "½", "①", " ", "  ", "", "!", "?", "@", "#", "$", "%", "&", "*", "(", ")",
	"a\tb", "a\u00a0b", "a\u200bb", "a\u00adb", "e\u0301", "\u00e9\u0301",
	"日本", "本日", "中文", "한국", "Ωμέγα", "ωμέγα", "Привет", "привет", "ελλάδα", "עברית", "عربي", "😀", "😁", "🙂",
	"Zebra", "zebra", "zèbre", "Zürich", "Zurich", "Ångström", "Angstrom", "naïve", "naive", "coöperate", "cooperate",
}

// probe checks that the server sorts probeStrings like coll, in the
// collation of its COLLATE clause collate ("" for the database's
// default): the server ranks them (dense_rank, so that strings the
// collation says equal share a rank, as in a nondeterministic
// collation), and each string must compare with the next as their ranks
// do. Agreeing on neighbours, the orders agree on every pair.
func probe(ctx context.Context, conn *pgconn.PgConn, coll executor.Collation, collate string) error {
	res := conn.ExecParams(ctx, `SELECT s, pg_catalog.dense_rank() OVER (ORDER BY s`+collate+`)
  FROM pg_catalog.unnest($1::pg_catalog.text[]) AS s ORDER BY 2, s COLLATE "C"`,
		[][]byte{[]byte(textArrayLiteral(probeStrings))}, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) != len(probeStrings) {
		return fmt.Errorf("the probe came back with %d strings of %d", len(res.Rows), len(probeStrings))
	}
	for i := 1; i < len(res.Rows); i++ {
		prev, cur := res.Rows[i-1], res.Rows[i]
		want := -1
		if bytes.Equal(prev[1], cur[1]) {
			want = 0
		}
		got, err := coll.Compare(prev[0], cur[0])
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("the server sorts text differently from the proxy in locale %s: it has %q %s %q, the proxy %s",
				coll, prev[0], relation(want), cur[0], relation(got))
		}
	}
	return nil
}

func relation(d int) string {
	switch {
	case d < 0:
		return "before"
	case d == 0:
		return "equal to"
	}
	return "after"
}

// textArrayLiteral writes a text[] literal of values.
func textArrayLiteral(values []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range v {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// exprCollations asks PostgreSQL which collation each expression column of
// the statement has: pg_collation_for over the statement's result, planned
// with LIMIT 0 (no row is read, no function of the statement runs), its
// parameters NULL, on the shard that described the result, as the client's
// user with the client's search_path and role.
func (q *orderQuestion) exprCollations(ctx context.Context, need, ks []int, infos map[int]collInfo) error {
	stmts, err := pg_query.SplitWithScanner(q.p.SQL, true)
	if err != nil || len(stmts) != 1 {
		return errors.New("cannot isolate the statement to ask the shard its collation")
	}
	settings, err := q.c.orderSettings()
	if err != nil {
		return err
	}
	n := 0
	exprs := make([]string, len(ks))
	for i, k := range ks {
		n = max(n, need[k]+1)
		exprs[i] = fmt.Sprintf("pg_catalog.pg_collation_for(sg_r.sg_c%d)::pg_catalog.regcollation::pg_catalog.oid", need[k]+1)
	}
	// Only the first n columns are renamed: names the client's later
	// columns are unlikely to have.
	aliases := make([]string, n)
	for i := range aliases {
		aliases[i] = "sg_c" + strconv.Itoa(i+1)
	}
	sql := `SELECT u.o, ` + collColumns + `
  FROM (SELECT ARRAY[` + strings.Join(exprs, ", ") + `] AS a
          FROM (SELECT 1) AS sg_one LEFT JOIN (SELECT * FROM (
` + stmts[0] + `
) AS sg_q LIMIT 0) AS sg_r(` + strings.Join(aliases, ", ") + `) ON true) AS sg_w,
       pg_catalog.unnest(sg_w.a) WITH ORDINALITY AS u(o, i)
  ` + collJoin("u.o") + `
 ORDER BY u.i`
	cc, err := q.co.conn(q.c.user, q.p.Shards[0])
	if err != nil {
		return err
	}
	var rows [][][]byte
	err = cc.do(ctx, func(conn *pgconn.PgConn) error {
		if len(settings) > 0 {
			if _, err := conn.Exec(ctx, "BEGIN; "+strings.Join(settings, "; ")).ReadAll(); err != nil {
				conn.Exec(ctx, "ROLLBACK").ReadAll()
				return err
			}
			defer func() { conn.Exec(ctx, "ROLLBACK").ReadAll() }()
		}
		res := conn.ExecParams(ctx, sql, make([][]byte, len(q.p.Params)), nil, nil, nil).Read()
		rows = res.Rows
		return res.Err
	})
	if err != nil {
		return fmt.Errorf("shard %d could not say its collation: %w", q.p.Shards[0], err)
	}
	if len(rows) != len(ks) {
		return fmt.Errorf("shard %d said %d collations for %d columns", q.p.Shards[0], len(rows), len(ks))
	}
	for i, k := range ks {
		infos[k] = collInfoOf(rows[i])
	}
	return nil
}

// orderSettings returns the statements that give a catalog session of the
// client's user the client's name resolution: its search_path and role,
// from its startup parameters and SETs.
func (c *client) orderSettings() ([]string, error) {
	var out []string
	params := c.startup.Params()
	if o := params["options"]; strings.Contains(o, "search_path") || strings.Contains(o, "role") || strings.Contains(o, "session_authorization") {
		return nil, errors.New("the client's startup options set its search path or role")
	}
	if sp, ok := params["search_path"]; ok {
		out = append(out, "SELECT pg_catalog.set_config('search_path', "+wire.QuoteLiteral(sp)+", false)")
	}
	for _, name := range []string{"search_path", settingSessAuth, settingRole} {
		if stmt, ok := c.sess.sets[name]; ok {
			out = append(out, stmt)
		}
	}
	return out, nil
}

// enumLabels returns the labels of enum type typ, as the shard that
// described the result orders them, after checking that every shard of
// the statement orders them alike.
func (q *orderQuestion) enumLabels(ctx context.Context, typ uint32) ([]string, error) {
	var schema, name, kind string
	var labels []string
	err := q.onShard(ctx, q.p.Shards[0], func(conn *pgconn.PgConn) error {
		res := conn.ExecParams(ctx, `SELECT n.nspname, t.typname, t.typtype::text, e.enumlabel
  FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
  LEFT JOIN pg_catalog.pg_enum e ON e.enumtypid = t.oid
 WHERE t.oid = $1 ORDER BY e.enumsortorder`, [][]byte{[]byte(strconv.FormatUint(uint64(typ), 10))}, nil, nil, nil).Read()
		if res.Err != nil {
			return res.Err
		}
		for _, row := range res.Rows {
			schema, name, kind = string(row[0]), string(row[1]), string(row[2])
			if row[3] != nil {
				labels = append(labels, string(row[3]))
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case kind == "":
		return nil, fmt.Errorf("shard %d's catalog has no type OID %d", q.p.Shards[0], typ)
	case kind != "e":
		return nil, fmt.Errorf("its type %s.%s is no enum, and the proxy does not know how it orders", schema, name)
	}
	for _, i := range q.p.Shards[1:] {
		var other []string
		err := q.onShard(ctx, i, func(conn *pgconn.PgConn) error {
			res := conn.ExecParams(ctx, `SELECT e.enumlabel
  FROM pg_catalog.pg_enum e JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid
  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = $1 AND t.typname = $2 ORDER BY e.enumsortorder`, [][]byte{[]byte(schema), []byte(name)}, nil, nil, nil).Read()
			for _, row := range res.Rows {
				other = append(other, string(row[0]))
			}
			return res.Err
		})
		if err != nil {
			return nil, err
		}
		if !slices.Equal(other, labels) {
			return nil, fmt.Errorf("enum %s.%s has other labels or another order on shard %d than on shard %d", schema, name, i, q.p.Shards[0])
		}
	}
	return labels, nil
}

// onShard runs f on the catalog's connection to shard.
func (q *orderQuestion) onShard(ctx context.Context, shard int, f func(*pgconn.PgConn) error) error {
	cc, err := q.co.conn(q.co.user, shard)
	if err != nil {
		return err
	}
	if err := cc.do(ctx, f); err != nil {
		return fmt.Errorf("reading shard %d's catalog: %w", shard, err)
	}
	return nil
}
