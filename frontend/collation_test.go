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

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/pool"
)

// TestCollationVerdict checks the verdict on real servers: a libc locale
// with the proxy's C library version passes, and an ICU database, another
// C library version and the C locale are told apart.
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
	check := func(t *testing.T, db string, version func() string) *verdict {
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
		if version != nil {
			co.libcVersion = version
		}
		v, final := co.check(ctx, 0, net.JoinHostPort(cl.Host, strconv.Itoa(cl.Port)))
		if !final {
			t.Fatalf("check did not run: %v", v.err)
		}
		return v
	}
	t.Run("libc", func(t *testing.T) {
		v := check(t, "en", nil)
		if v.err != nil || v.collate != "en_US.UTF-8" || v.coll.String() != "en_US.UTF-8" {
			t.Fatalf("verdict %+v", v)
		}
	})
	t.Run("another C library", func(t *testing.T) {
		v := check(t, "en", func() string { return "1.0" })
		if v.err == nil || !strings.Contains(v.err.Error(), "version") {
			t.Fatalf("verdict %+v", v)
		}
	})
	t.Run("not glibc", func(t *testing.T) {
		v := check(t, "en", func() string { return "" })
		if v.err == nil || !strings.Contains(v.err.Error(), "glibc") {
			t.Fatalf("verdict %+v", v)
		}
	})
	t.Run("ICU", func(t *testing.T) {
		v := check(t, "icu", nil)
		if v.err == nil || !strings.Contains(v.err.Error(), "ICU") {
			t.Fatalf("verdict %+v", v)
		}
	})
	t.Run("C", func(t *testing.T) {
		v := check(t, "c", func() string { return "" })
		if v.err != nil || v.coll != (executor.Collation{}) {
			t.Fatalf("verdict %+v", v)
		}
	})
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
