package integration

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// selfSignedCert writes a self-signed ECDSA certificate for 127.0.0.1 and
// localhost and its key to dir, and returns their paths.
func selfSignedCert(t testing.TB, dir string) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := pgtest.WriteSelfSignedCert(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// clientCert writes a self-signed certificate for the proxy and returns
// the tls fields that offer it to clients (withTLS) and its path.
func clientCert(t testing.TB) (fields, certPath string) {
	t.Helper()
	certPath, keyPath := selfSignedCert(t, t.TempDir())
	return "cert: " + certPath + ", key: " + keyPath, certPath
}

// withTLS adds a tls section of fields to the config cfg, before its
// users.
func withTLS(t testing.TB, cfg, fields string) string {
	t.Helper()
	if !strings.Contains(cfg, "users:\n") {
		t.Fatal("withTLS: the config has no users section")
	}
	return strings.Replace(cfg, "users:\n", "tls: { "+fields+" }\nusers:\n", 1)
}

// tlsURL is p's URL for the app user with another sslmode.
func tlsURL(p *proxy, extra string) string {
	return strings.Replace(p.AppURL("app"), "sslmode=disable", extra, 1)
}

func TestTLS(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	ctx := context.Background()

	t.Run("configured", func(t *testing.T) {
		fields, certPath := clientCert(t)
		p := startProxy(t, withTLS(t, poolConfig(cl, "transaction", 2, "app"), fields))

		// sslmode=require encrypts without verifying; verify-full with
		// the certificate as root verifies too.
		for _, mode := range []string{"sslmode=require", "sslmode=verify-full&sslrootcert=" + certPath} {
			conn, err := pgx.Connect(ctx, tlsURL(p, mode))
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			tc, ok := conn.PgConn().Conn().(*tls.Conn)
			if !ok {
				t.Fatalf("%s: connection is a %T, not TLS", mode, conn.PgConn().Conn())
			}
			if v := tc.ConnectionState().Version; v < tls.VersionTLS12 {
				t.Fatalf("%s: TLS version %x", mode, v)
			}
			var s string
			if err := conn.QueryRow(ctx, "SELECT $1::text", "over tls").Scan(&s); err != nil || s != "over tls" {
				t.Fatalf("%s: query: %q %v", mode, s, err)
			}
			// Large results and COPY go through TLS too.
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM (SELECT repeat('x', 1000) FROM generate_series(1, 5000)) s").Scan(&n); err != nil || n != 5000 {
				t.Fatalf("%s: %d %v", mode, n, err)
			}
			if ci := clientInfo(p, "app"); ci == nil || !ci.TLS {
				t.Fatalf("%s: the proxy does not report the client as TLS: %+v", mode, ci)
			}
			conn.Close(ctx)
		}
		// Clients that do not ask for TLS are still served.
		c := connect(t, p.AppURL("app"))
		if _, ok := c.PgConn().Conn().(*tls.Conn); ok {
			t.Fatal("sslmode=disable gave a TLS connection")
		}
		mustExec(t, c, "SELECT 1")
	})

	t.Run("not configured", func(t *testing.T) {
		p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
		_, err := pgx.Connect(ctx, tlsURL(p, "sslmode=require"))
		if err == nil || !strings.Contains(err.Error(), "server refused TLS connection") {
			t.Fatalf("sslmode=require without TLS: %v, want a refusal", err)
		}
		conn, err := pgx.Connect(ctx, tlsURL(p, "sslmode=prefer"))
		if err != nil {
			t.Fatalf("sslmode=prefer: %v", err)
		}
		defer conn.Close(ctx)
		if _, ok := conn.PgConn().Conn().(*tls.Conn); ok {
			t.Fatal("sslmode=prefer got TLS from a proxy without TLS")
		}
		mustExec(t, conn, "SELECT 1")
	})
}

// clientInfo returns the first client of user on p, or nil.
func clientInfo(p *proxy, user string) *frontend.ClientInfo {
	for _, ci := range p.Listener.Clients() {
		if ci.User == user {
			return &ci
		}
	}
	return nil
}
