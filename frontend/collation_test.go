package frontend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/pool"
)

// TestCollationVerdict checks the verdict on real servers: a libc locale
// with the proxy's C library version passes, and so does an ICU database
// and ICU and libc named collations with the proxy's library versions;
// another C library or ICU version, a collation that differs from the
// one described, and the C locale are told apart.
func TestCollationVerdict(t *testing.T) {
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE DATABASE en TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'",
		"CREATE DATABASE icu TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
		"CREATE DATABASE c TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'",
	} {
		if err := cl.Exec(ctx, "postgres", sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Exec(ctx, "en", `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE COLLATION german (provider = icu, locale = 'de-DE')`); err != nil {
		t.Fatal(err)
	}
	type override struct {
		libc func() string
		icu  func(executor.Collation) string
	}
	check := func(t *testing.T, db, coll string, o override) *verdict {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
users: [{ name: app, password: x, server_user: %s }]
databases: [{ name: %s, shards: [{ host: %s, port: %d, database: %s }] }]
`, cl.User, db, cl.Host, cl.Port, db)), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		reg := pool.NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		t.Cleanup(reg.Close)
		co := newCollations(reg, &cfg.Databases[0], &cfg.Users[0])
		if o.libc != nil {
			co.libcVersion = o.libc
		}
		if o.icu != nil {
			co.icuVersion = o.icu
		}
		var named *collInfo
		if coll != "" {
			// "name@other" is the collation as database other has it.
			name, from, ok := strings.Cut(coll, "@")
			if !ok {
				from = db
			}
			info := readCollInfo(t, cl.DSN(from), name)
			named = &info
		}
		v, final := co.check(ctx, 0, net.JoinHostPort(cl.Host, strconv.Itoa(cl.Port)), named)
		if !final {
			t.Fatalf("check did not run: %v", v.err)
		}
		return v
	}
	wrongICU := func(executor.Collation) string { return "1.2" }
	tests := []struct {
		name, db, coll   string
		o                override
		provider, locale string // the verdict's, when it passes
		fails            string // a part of the error, when it does not
		deterministic    bool
	}{
		{name: "libc", db: "en", provider: "c", locale: "en_US.UTF-8", deterministic: true},
		{name: "another C library", db: "en", o: override{libc: func() string { return "1.0" }}, fails: "version"},
		{name: "not glibc", db: "en", o: override{libc: func() string { return "" }}, fails: "glibc"},
		{name: "ICU", db: "icu", provider: "i", locale: "en-US", deterministic: true},
		{name: "another ICU", db: "icu", o: override{icu: wrongICU}, fails: "is version"},
		{name: "C", db: "c", o: override{libc: func() string { return "" }}, provider: "c", locale: "C", deterministic: true},
		{name: "en-x-icu", db: "en", coll: "en-x-icu", provider: "i", locale: "en", deterministic: true},
		{name: "created ICU", db: "en", coll: "german", provider: "i", locale: "de-DE", deterministic: true},
		{name: "nondeterministic", db: "en", coll: "ci", provider: "i", locale: "und-u-ks-level2"},
		{name: "named, another ICU", db: "en", coll: "german", o: override{icu: wrongICU}, fails: "is version"},
		{name: "libc en_US", db: "en", coll: "en_US", provider: "c", locale: "en_US.utf8", deterministic: true},
		{name: "libc C.utf8", db: "en", coll: "C.utf8", provider: "c", locale: "C.utf8", deterministic: true},
		{name: "libc, another C library", db: "en", coll: "en_US", o: override{libc: func() string { return "1.0" }}, fails: "version"},
		{name: "collation not on the server", db: "c", coll: "german@en", fails: "no collation"},
	}
	for _, tc := range tests {
		if !executor.ICUAvailable() && (tc.provider == "i" || tc.o.icu != nil) {
			tc.fails = "without ICU" // -tags noicu
		}
		t.Run(tc.name, func(t *testing.T) {
			v := check(t, tc.db, tc.coll, tc.o)
			if tc.fails != "" {
				if v.err == nil || !strings.Contains(v.err.Error(), tc.fails) {
					t.Fatalf("verdict %+v, want an error naming %q", v, tc.fails)
				}
				return
			}
			if v.err != nil || v.provider != tc.provider || v.collate != tc.locale || v.coll.Deterministic() != tc.deterministic {
				t.Fatalf("verdict %+v", v)
			}
			if want := tc.locale; want != "C" && v.coll.String() != want {
				t.Fatalf("collation %s, want %s", v.coll, want)
			}
		})
	}
	t.Run("probe", func(t *testing.T) {
		if !executor.ICUAvailable() {
			return // -tags noicu: the probe's ICU collations cannot open
		}
		conn, err := pgconn.Connect(ctx, cl.DSN("en"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		ci, err := executor.ICUCollation("und-u-ks-level2", false)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := executor.ICUCollation("und-u-ks-level2", true)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			coll    executor.Collation
			collate string
			ok      bool
		}{
			{ci, ` COLLATE "ci"`, true},
			{executor.Collation{}, ` COLLATE "C"`, true},
			{executor.Collation{}, "", false},   // en_US.UTF-8 is no byte order
			{cs, ` COLLATE "ci"`, false},        // ties the server keeps, the proxy would break
			{ci, ` COLLATE "und-x-icu"`, false}, // and the converse
		} {
			if err := probe(ctx, conn, p.coll, p.collate); (err == nil) != p.ok {
				t.Errorf("probe of %s (deterministic %v) against%s: %v", p.coll, p.coll.Deterministic(), p.collate, err)
			}
		}
	})
}

// readCollInfo reads collation name as the shard that described a result
// would.
func readCollInfo(t *testing.T, dsn, name string) collInfo {
	t.Helper()
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	res := conn.ExecParams(ctx, `SELECT c.oid, `+collColumns+` FROM pg_catalog.pg_collation c
  JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace WHERE c.collname = $1 LIMIT 1`, [][]byte{[]byte(name)}, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		t.Fatalf("collation %s: %v", name, res.Err)
	}
	return collInfoOf(res.Rows[0])
}

func TestTextArrayLiteral(t *testing.T) {
	got := textArrayLiteral([]string{"a", `b"c`, `d\e`, "", "NULL"})
	if want := `{"a","b\"c","d\\e","","NULL"}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestOrderSettings(t *testing.T) {
	c := &client{startup: pool.NewStartup(map[string]string{"search_path": "s1, public"})}
	c.sess.sets = map[string]string{"search_path": "SET search_path TO s2", "role": "SET ROLE r", "work_mem": "SET work_mem = '1MB'"}
	got, err := c.orderSettings()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"SELECT pg_catalog.set_config('search_path', 's1, public', false)", "SET search_path TO s2", "SET ROLE r"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("got %q, want %q", got, want)
	}
	c.startup = pool.NewStartup(map[string]string{"options": "-c search_path=x"})
	if _, err := c.orderSettings(); err == nil {
		t.Fatal("options setting search_path accepted")
	}
}
