package frontend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// The catalog's collation part: how the shards of a sharded database order
// the text and enum columns of a merged result, so that the merge orders
// them alike (executor.OrderSource) or refuses.
//
// A text column's collation comes from the shard that described the
// result (the first of the plan's shards): for a table column
// (RowDescription names its table and attribute), pg_attribute.attcollation;
// for an expression, PostgreSQL's own answer — pg_collation_for over the
// statement, planned with LIMIT 0 as the client's user with the client's
// search_path and role. The C and POSIX collations compare bytes. The
// database's default collation, libc or ICU, and named libc and ICU
// collations (collation_named.go) are followed when every server that
// answered passes the checks of verdict: the provider, the UTF8 encoding,
// the same collation library version as the proxy's (the C library's
// against gnu_get_libc_version, or the ICU collator's for the locale),
// the locale present on the proxy's machine, and a probe ranked alike by
// the server and the proxy. Any other collation is refused. Text in a
// nondeterministic collation is ordered, but not grouped by bytes
// (checkEquality).
//
// Nothing per statement is cached: a column's collation may change with
// ALTER TABLE on any path to the shards, and a merge must follow what the
// shards do now. A verdict, which depends only on the server's software,
// holds until a connection to that server newer than the verdict answers
// (a server cannot change its C library or ICU without restarting).

// catalogTimeout bounds one question to a catalog; a merge waits for it.
const catalogTimeout = 5 * time.Second

// collations answers the questions of one sharded database's merges.
// It is safe for concurrent use.
type collations struct {
	reg  *pool.Registry
	db   *config.Database
	user *config.User // the catalog's user: the first one allowed on db
	// libcVersion is executor.LibcVersion and icuVersion
	// Collation.ICUVersion, replaced by tests.
	libcVersion func() string
	icuVersion  func(executor.Collation) string

	mu       sync.Mutex // guards the following
	conns    map[catKey]*catConn
	verdicts map[string]*verdictSlot // by server address (host:port)
	retired  bool                    // conns close after each use
}

type catKey struct {
	user  string
	shard int
}

func newCollations(reg *pool.Registry, db *config.Database, u *config.User) *collations {
	return &collations{reg: reg, db: db, user: u, libcVersion: executor.LibcVersion, icuVersion: executor.Collation.ICUVersion,
		conns: map[catKey]*catConn{}, verdicts: map[string]*verdictSlot{}}
}

// retire closes the connections and makes every later use close its own.
func (co *collations) retire() {
	co.mu.Lock()
	co.retired = true
	conns := make([]*catConn, 0, len(co.conns))
	for _, cc := range co.conns {
		conns = append(conns, cc)
	}
	co.mu.Unlock()
	for _, cc := range conns {
		cc.retire()
	}
}

// conn returns the catalog connection of user u to shard's primary.
func (co *collations) conn(u *config.User, shard int) (*catConn, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	k := catKey{u.Name, shard}
	if cc := co.conns[k]; cc != nil {
		return cc, nil
	}
	p := co.reg.Get(co.db, u, shard)
	if p == nil {
		return nil, fmt.Errorf("no pool for shard %d", shard)
	}
	cc := &catConn{target: p.Target, timeout: p.Config.ConnectTimeout, retired: co.retired}
	co.conns[k] = cc
	return cc, nil
}

// catConn is a connection of its own to a shard (a client may hold every
// pooled server), opened on first use and reopened after a failure. Its
// sessions read only: default_transaction_read_only is on.
type catConn struct {
	target  pool.Target
	timeout time.Duration

	mu      sync.Mutex // guards the following; held for a whole question
	conn    *pgconn.PgConn
	retired bool
}

func (cc *catConn) retire() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.retired = true
	cc.close()
}

func (cc *catConn) close() {
	if cc.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cc.conn.Close(ctx)
	cc.conn = nil
}

// do runs f on the connection. A connection left in a transaction or
// broken by f is closed; the next question opens another.
func (cc *catConn) do(ctx context.Context, f func(*pgconn.PgConn) error) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.conn == nil || cc.conn.IsClosed() {
		conn, err := openCatalog(ctx, cc.target, cc.timeout)
		if err != nil {
			return err
		}
		cc.conn = conn
	}
	err := f(cc.conn)
	var pgErr *pgconn.PgError
	if cc.retired || cc.conn.IsClosed() || cc.conn.TxStatus() != 'I' || (err != nil && !errors.As(err, &pgErr)) {
		cc.close()
	}
	return err
}

// openCatalog connects to t for reading the catalog only.
func openCatalog(ctx context.Context, t pool.Target, timeout time.Duration) (*pgconn.PgConn, error) {
	conn, err := pool.Connect(ctx, t, timeout)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "SET default_transaction_read_only = on; SET lock_timeout = '1s'; SET statement_timeout = '5s'").ReadAll()
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("server %s: %w", t, err)
	}
	return conn, nil
}

// ColumnOrders implements executor.OrderSource for the merges of the
// client's statements.
func (s clientSink) ColumnOrders(p *executor.Plan, cols []executor.Column, need []int) ([]executor.ColumnOrder, error) {
	return s.c.columnOrders(p, cols, need)
}

func (c *client) columnOrders(p *executor.Plan, cols []executor.Column, need []int) ([]executor.ColumnOrder, error) {
	var co *collations
	if rp, ok := c.rt.(*routerPlanner); ok && rp.cat != nil {
		co = rp.cat.orders
	}
	switch {
	case co == nil:
		return nil, orderRefusal(cols[need[0]], errors.New("no configured user can read the shards' catalog"))
	case p == nil || len(p.Shards) == 0:
		return nil, orderRefusal(cols[need[0]], errors.New("the statement's shards are unknown"))
	}
	c.offLoop() // the catalog's connections are not the event loop's
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	q := &orderQuestion{c: c, co: co, p: p, cols: cols}
	return q.answer(ctx, need)
}

// orderQuestion is one merge's question: how do these columns order?
type orderQuestion struct {
	c    *client
	co   *collations
	p    *executor.Plan
	cols []executor.Column

	dflt    *executor.Collation // the database's default collation, once checked
	dfltErr error
	named   map[uint32]namedResult // named collations, once checked, by OID
}

// collInfo is a collation as pg_collation describes it.
type collInfo struct {
	oid           uint32 // 0: the column has none (an indeterminate collation)
	schema, name  string
	provider      string // c (libc), i (ICU), d (the database default)
	locale        string // collcollate for libc; the ICU locale for ICU
	deterministic bool   // collisdeterministic
}

// collColumns reads a collInfo (after its OID) from pg_collation c joined
// with its namespace cn, on PostgreSQL 12 and later: the ICU locale is
// colliculocale on PostgreSQL 15 and 16, colllocale from 17, collcollate
// before 15; to_jsonb reads whichever the server has.
const collColumns = `coalesce(cn.nspname, ''), coalesce(c.collname, ''), coalesce(c.collprovider::text, ''),
       coalesce(CASE WHEN c.collprovider = 'i'
                     THEN coalesce(pg_catalog.to_jsonb(c) ->> 'colliculocale', pg_catalog.to_jsonb(c) ->> 'colllocale', c.collcollate)
                     ELSE c.collcollate END, ''),
       coalesce((pg_catalog.to_jsonb(c) ->> 'collisdeterministic')::bool, true)`

// collJoin joins a collation OID o with collColumns' c and cn.
func collJoin(o string) string {
	return `LEFT JOIN pg_catalog.pg_collation c ON c.oid = ` + o + `
  LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace`
}

// pgCollationDefault, C and POSIX are the collations every database has
// (pg_collation.dat).
const (
	pgCollationDefault = 100
	pgCollationC       = 950
	pgCollationPOSIX   = 951
)

func (q *orderQuestion) answer(ctx context.Context, need []int) ([]executor.ColumnOrder, error) {
	out := make([]executor.ColumnOrder, len(need))
	var plain, exprs []int // indexes into need
	for k, col := range need {
		c := q.cols[col]
		switch executor.NeedOf(c.OID) {
		case executor.OrderCatalog:
			labels, err := q.enumLabels(ctx, c.OID)
			if err != nil {
				return nil, orderRefusal(c, err)
			}
			out[k].Enum = labels
		case executor.OrderCollation:
			if c.TableOID != 0 && c.Attnum > 0 {
				plain = append(plain, k)
			} else {
				exprs = append(exprs, k)
			}
		}
	}
	if len(plain)+len(exprs) == 0 {
		return out, nil
	}
	if err := q.encodings(); err != nil {
		first := plain
		if len(first) == 0 {
			first = exprs
		}
		return nil, orderRefusal(q.cols[need[first[0]]], err)
	}
	infos, err := q.collInfos(ctx, need, plain, exprs, orderRefusal)
	if err != nil {
		return nil, err
	}
	for k := range need {
		info, ok := infos[k]
		if !ok {
			continue
		}
		coll, err := q.collation(ctx, info)
		if err != nil {
			return nil, orderRefusal(q.cols[need[k]], err)
		}
		out[k].Collation = coll
	}
	return out, nil
}

// collInfos reads the collations of the columns need[plain] (table
// columns) and need[exprs] (expressions), by index into need; refuse
// makes the client's error of a failure.
func (q *orderQuestion) collInfos(ctx context.Context, need, plain, exprs []int, refuse func(executor.Column, error) error) (map[int]collInfo, error) {
	infos := make(map[int]collInfo, len(plain)+len(exprs))
	if len(plain) > 0 {
		if err := q.attCollations(ctx, need, plain, infos); err != nil {
			return nil, refuse(q.cols[need[plain[0]]], err)
		}
	}
	if len(exprs) > 0 {
		if err := q.exprCollations(ctx, need, exprs, infos); err != nil {
			return nil, refuse(q.cols[need[exprs[0]]], err)
		}
	}
	return infos, nil
}

// collation maps a column's collation to the merge's.
func (q *orderQuestion) collation(ctx context.Context, info collInfo) (executor.Collation, error) {
	switch {
	case info.oid == 0:
		return executor.Collation{}, errors.New("the shards could not say which collation orders it")
	case info.oid == pgCollationDefault:
		return q.databaseCollation(ctx)
	case info.oid == pgCollationC || info.oid == pgCollationPOSIX ||
		info.provider == "c" && (info.locale == "C" || info.locale == "POSIX"):
		return executor.Collation{}, nil // memcmp (varstr_cmp's lc_collate_is_c)
	}
	return q.namedCollation(ctx, info)
}

// encodings checks that the text the merge compares is the servers' own
// bytes: a client_encoding other than the server's converts it, and
// converted text does not order like the original.
func (q *orderQuestion) encodings() error {
	for _, i := range q.p.Shards {
		srv := q.c.xs.Server(i)
		if srv == nil {
			return fmt.Errorf("shard %d holds no server", i)
		}
		ce, se := srv.Params["client_encoding"], srv.Params["server_encoding"]
		if ce != se {
			return fmt.Errorf("client_encoding %s differs from the database encoding %s (SET client_encoding TO '%s')", ce, se, se)
		}
	}
	return nil
}

// attCollations reads pg_attribute.attcollation of the table columns need
// names, on the shard that described the result.
func (q *orderQuestion) attCollations(ctx context.Context, need, ks []int, infos map[int]collInfo) error {
	rels, atts := "{", "{"
	for n, k := range ks {
		if n > 0 {
			rels, atts = rels+",", atts+","
		}
		c := q.cols[need[k]]
		rels += strconv.FormatUint(uint64(c.TableOID), 10)
		atts += strconv.Itoa(int(c.Attnum))
	}
	cc, err := q.co.conn(q.co.user, q.p.Shards[0])
	if err != nil {
		return err
	}
	found := map[[2]uint64]collInfo{}
	err = cc.do(ctx, func(conn *pgconn.PgConn) error {
		// A table under an ACCESS EXCLUSIVE lock may be being altered by
		// an open transaction — the client's own, whose shards already
		// sort by the new definition while this session sees the old.
		res := conn.ExecParams(ctx, `SELECT a.attrelid, a.attnum,
       EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                WHERE l.locktype = 'relation' AND l.relation = a.attrelid AND l.mode = 'AccessExclusiveLock'
                  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())),
       a.attcollation, `+collColumns+`
  FROM pg_catalog.pg_attribute a `+collJoin("a.attcollation")+`
 WHERE (a.attrelid, a.attnum) IN (SELECT * FROM unnest($1::pg_catalog.oid[], $2::pg_catalog.int2[]))`,
			[][]byte{[]byte(rels + "}"), []byte(atts + "}")}, nil, nil, nil).Read()
		if res.Err != nil {
			return res.Err
		}
		for _, row := range res.Rows {
			rel, _ := strconv.ParseUint(string(row[0]), 10, 32)
			att, _ := strconv.ParseUint(string(row[1]), 10, 16)
			if string(row[2]) == "t" {
				return fmt.Errorf("table OID %d is locked ACCESS EXCLUSIVE (being altered?), so its collation cannot be read", rel)
			}
			found[[2]uint64{rel, att}] = collInfoOf(row[3:])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading its collation from shard %d: %w", q.p.Shards[0], err)
	}
	for _, k := range ks {
		c := q.cols[need[k]]
		info, ok := found[[2]uint64{uint64(c.TableOID), uint64(c.Attnum)}]
		if !ok {
			return fmt.Errorf("shard %d's catalog has no column %d of table OID %d", q.p.Shards[0], c.Attnum, c.TableOID)
		}
		infos[k] = info
	}
	return nil
}

// collInfoOf reads a collation's OID and collColumns.
func collInfoOf(row [][]byte) collInfo {
	oid, _ := strconv.ParseUint(string(row[0]), 10, 32)
	return collInfo{oid: uint32(oid), schema: string(row[1]), name: string(row[2]), provider: string(row[3]),
		locale: string(row[4]), deterministic: string(row[5]) != "f"}
}

// orderRefusal is the client's 0A000 for a column whose order the proxy
// cannot prove.
func orderRefusal(col executor.Column, reason error) error {
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
		Message: fmt.Sprintf("cannot order column %q across shards exactly", col.Name),
		Detail:  reason.Error(),
		Hint:    "route the query to one shard, or order by an expression the proxy can follow (such as the column COLLATE \"C\"); see docs/routing.md, Ordering"}
}

// serverPool returns the catalog user's pool of the server at addr, the
// primary or a replica of shard.
func (co *collations) serverPool(shard int, addr string) *pool.Pool {
	match := func(p *pool.Pool) bool {
		return p != nil && net.JoinHostPort(p.Target.Host, strconv.Itoa(p.Target.Port)) == addr
	}
	if p := co.reg.Get(co.db, co.user, shard); match(p) {
		return p
	}
	if shard < len(co.db.Shards) {
		for r := range co.db.Shards[shard].Replicas {
			if p := co.reg.Replica(co.db, co.user, shard, r); match(p) {
				return p
			}
		}
	}
	return nil
}
