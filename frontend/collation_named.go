package frontend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Named collations: a column declared COLLATE "de-x-icu" or "en_US", an
// expression with a COLLATE clause, or a collation created with CREATE
// COLLATION. The shard that described the result says which collation a
// column has (its schema, name, provider, locale and determinism); each
// server that answered is then checked for that collation as for the
// database's default (verdict): the server has a collation of that name
// with the same provider, locale and determinism, its collation library
// version for it is the proxy's (ICU's collator version, or the C
// library's), and it sorts a probe in it as the proxy does.

// key identifies what a verdict on a named collation proved.
func (i *collInfo) key() string {
	return strings.Join([]string{i.schema, i.name, i.provider, i.locale, fmt.Sprint(i.deterministic)}, "\x00")
}

// namedCollation returns the merge's collation for a collation other than
// the database's default, C and POSIX, once per question and collation.
func (q *orderQuestion) namedCollation(ctx context.Context, info collInfo) (executor.Collation, error) {
	if r, ok := q.named[info.oid]; ok {
		return r.coll, r.err
	}
	var coll executor.Collation
	var err error
	switch info.provider {
	case "c", "i":
		coll, err = q.serversCollation(ctx, &info)
	default:
		err = fmt.Errorf("its collation %q has provider %q, which the proxy does not know", info.name, info.provider)
	}
	if q.named == nil {
		q.named = map[uint32]namedResult{}
	}
	q.named[info.oid] = namedResult{coll, err}
	return coll, err
}

// namedResult is a named collation's answer within one question.
type namedResult struct {
	coll executor.Collation
	err  error
}

// inspectNamed checks the server's collation of info's schema and name.
func (v *verdict) inspectNamed(ctx context.Context, conn *pgconn.PgConn, info *collInfo, libs libraries) error {
	res := conn.ExecParams(ctx, `SELECT c.oid, `+collColumns+`,
       coalesce(pg_catalog.pg_collation_actual_version(c.oid), ''), pg_catalog.pg_encoding_to_char(d.encoding), `+libcVersionColumn+`
  FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace,
       pg_catalog.pg_database d
 WHERE cn.nspname = $1 AND c.collname = $2 AND c.collencoding IN (-1, d.encoding)
   AND d.datname = pg_catalog.current_database()`,
		[][]byte{[]byte(info.schema), []byte(info.name)}, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) != 1 {
		return fmt.Errorf("the server has no collation %s.%s", info.schema, info.name)
	}
	row := res.Rows[0]
	got := collInfoOf(row[:6])
	if got.provider != info.provider || got.locale != info.locale || got.deterministic != info.deterministic {
		return fmt.Errorf("its collation %s.%s is provider %q, locale %q, deterministic %v, where the shard that described the result has %q, %q, %v",
			info.schema, info.name, got.provider, got.locale, got.deterministic, info.provider, info.locale, info.deterministic)
	}
	v.provider, v.collate = info.provider, info.locale
	version, encoding, libcVersion := string(row[6]), string(row[7]), string(row[8])
	collate := " COLLATE " + wire.QuoteIdent(info.schema) + "." + wire.QuoteIdent(info.name)
	if info.provider == "i" {
		return v.followICU(ctx, conn, encoding, version, libs, info.deterministic, collate)
	}
	if version == "" && strings.HasPrefix(info.locale, "C.") {
		// PostgreSQL reports no version for C.* locales; the C library's
		// is that of the server's other libc collations.
		version = libcVersion
	}
	return v.followLibc(ctx, conn, encoding, version, libs.libc, collate)
}

// CheckEquality implements executor.EqualitySource for the merges of the
// client's statements.
func (s clientSink) CheckEquality(p *executor.Plan, cols []executor.Column, need []int) error {
	return s.c.checkEquality(p, cols, need)
}

// checkEquality refuses grouping text columns need by their bytes when
// one is in a nondeterministic collation. The shard that described the
// result is asked first whether its database has any nondeterministic
// collation; only then are the columns' collations read. Without the
// shards' catalog the merge groups by bytes, as in any deterministic
// collation.
func (c *client) checkEquality(p *executor.Plan, cols []executor.Column, need []int) error {
	rp, ok := c.rt.(*routerPlanner)
	if !ok || rp.cat == nil || p == nil || len(p.Shards) == 0 {
		return nil
	}
	c.offLoop() // the catalog's connections are not the event loop's
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	q := &orderQuestion{c: c, co: rp.cat.orders, p: p, cols: cols}
	var some bool
	err := q.onShard(ctx, p.Shards[0], func(conn *pgconn.PgConn) error {
		// Nondeterministic collations (and collisdeterministic) came
		// with PostgreSQL 12.
		major, _, _ := strings.Cut(conn.ParameterStatus("server_version"), ".")
		if n, err := strconv.Atoi(major); err == nil && n < 12 {
			return nil
		}
		res := conn.ExecParams(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_collation WHERE NOT collisdeterministic)`,
			nil, nil, nil, nil).Read()
		if res.Err == nil && len(res.Rows) == 1 {
			some = string(res.Rows[0][0]) == "t"
		}
		return res.Err
	})
	if err != nil {
		return groupRefusal(cols[need[0]], err)
	}
	if !some {
		return nil
	}
	var plain, exprs []int
	for k, col := range need {
		if cols[col].TableOID != 0 && cols[col].Attnum > 0 {
			plain = append(plain, k)
		} else {
			exprs = append(exprs, k)
		}
	}
	infos, err := q.collInfos(ctx, need, plain, exprs, groupRefusal)
	if err != nil {
		return err
	}
	for k, col := range need {
		switch info := infos[k]; {
		case info.oid == 0:
			return groupRefusal(cols[col], errors.New("the shards could not say which collation compares it"))
		case !info.deterministic:
			return groupRefusal(cols[col], fmt.Errorf("its collation %q is nondeterministic, and the proxy groups text by its bytes", info.name))
		}
	}
	return nil
}

// groupRefusal is the client's 0A000 for a text column the proxy cannot
// group by its bytes.
func groupRefusal(col executor.Column, reason error) error {
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
		Message: fmt.Sprintf("cannot group column %q across shards exactly", col.Name),
		Detail:  reason.Error(),
		Hint:    "route the query to one shard, or group by the column in a deterministic collation (such as the column COLLATE \"C\"); see docs/routing.md, Ordering"}
}
