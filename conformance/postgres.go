package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// Names and passwords pgx's test setup uses (testsetup/postgresql_setup.sql,
// scripts/lib/test_targets.rb).
const (
	testDatabase = "pgx_test"
	testPassword = "secret"
	// sslKeyPassword is the passphrase of the checked-in client key.
	sslKeyPassword = "certpw"
	// superuserPassword is the password of the cluster's superuser, whom
	// only this program uses.
	superuserPassword = "conformance-secret"
)

// hbaConf is testsetup/pg_hba.conf, plus a line for the superuser over TCP,
// which pgtest and this program connect with.
const hbaConf = `# Written by shardgate's conformance runner: pgx's testsetup/pg_hba.conf.
local     all         postgres                          trust
local     all         all                               trust
host      all         pgx_md5     127.0.0.1/32          md5
host      all         pgx_scram   127.0.0.1/32          scram-sha-256
host      all         pgx_pw      127.0.0.1/32          password
hostssl   all         pgx_ssl     127.0.0.1/32          scram-sha-256
hostssl   all         pgx_sslcert 127.0.0.1/32          cert
host      all         postgres    127.0.0.1/32          scram-sha-256
`

// sslConf is testsetup/postgresql_ssl.conf; the files are copied into the
// data directory.
const sslConf = `
# Added by shardgate's conformance runner: pgx's testsetup/postgresql_ssl.conf.
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
ssl_ca_file = 'root.crt'
`

// certs are the files decoded from pgx's testsetup/certs.
type certs struct {
	dir        string // holds the files below
	caPEM      string // ca.pem: the root both servers are verified with
	serverCert string // localhost.crt: PostgreSQL's and the proxy's certificate
	serverKey  string // localhost.key
	clientCert string // pgx_sslcert.crt, for PostgreSQL's cert auth
	clientKey  string // pgx_sslcert.key, encrypted with sslKeyPassword
}

// decodeCerts writes pgx's checked-in certificates (base64 in
// testsetup/certs, as scripts/devenv.rb decodes them) to dir.
func decodeCerts(pgxDir, dir string) (*certs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{"ca.pem", "localhost.crt", "localhost.key", "pgx_sslcert.crt", "pgx_sslcert.key"} {
		b64, err := os.ReadFile(filepath.Join(pgxDir, "testsetup", "certs", name+".b64"))
		if err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
		pem, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(b64)), ""))
		if err != nil {
			return nil, fmt.Errorf("certificates: %s: %w", name, err)
		}
		// Key files must not be readable by others, or libpq-style
		// clients and the proxy may refuse them.
		if err := os.WriteFile(filepath.Join(dir, name), pem, 0o600); err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
	}
	return &certs{
		dir:        dir,
		caPEM:      filepath.Join(dir, "ca.pem"),
		serverCert: filepath.Join(dir, "localhost.crt"),
		serverKey:  filepath.Join(dir, "localhost.key"),
		clientCert: filepath.Join(dir, "pgx_sslcert.crt"),
		clientKey:  filepath.Join(dir, "pgx_sslcert.key"),
	}, nil
}

// server is the PostgreSQL cluster every run uses.
type server struct {
	cl      *pgtest.Cluster
	certs   *certs
	sockDir string // the Unix socket's directory, "" if not found
}

// startServer starts a cluster and configures it as pgx's CI configures its
// server: roles, pg_hba.conf and TLS. The database itself is made by
// resetDatabase before each run.
func startServer(ctx context.Context, c *certs, logf func(string, ...any)) (*server, error) {
	cl, err := pgtest.Start(ctx, pgtest.Options{
		Auth:     "scram-sha-256",
		Password: superuserPassword,
		Logf:     logf,
	})
	if err != nil {
		return nil, err
	}
	s := &server{cl: cl, certs: c}
	if err := s.configure(ctx); err != nil {
		return nil, errors.Join(err, cl.Stop())
	}
	// pgtest puts the socket beside the data directory unless that path
	// would be too long for a socket; then the Unix-socket tests skip.
	dir := filepath.Dir(cl.DataDir)
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", cl.Port))); err == nil {
		s.sockDir = dir
	}
	return s, nil
}

func (s *server) stop() error { return s.cl.Stop() }

// configure creates pgx's roles, writes its pg_hba.conf, turns TLS on with
// its certificates and reloads the configuration.
func (s *server) configure(ctx context.Context) error {
	osUser, err := user.Current()
	if err != nil {
		return err
	}
	// testsetup/postgresql_setup.sql without its psql meta-commands. The
	// tricky user must exist for pgtype's aclitem test.
	roles := []string{
		"create user pgx_ssl with superuser password 'secret'",
		"create user pgx_sslcert with superuser password 'secret'",
		"set password_encryption = md5",
		"create user pgx_md5 with superuser password 'secret'",
		"set password_encryption = 'scram-sha-256'",
		"create user pgx_pw with superuser password 'secret'",
		"create user pgx_scram with superuser password 'secret'",
		`create user " tricky, ' } "" \ test user " superuser password 'secret'`,
	}
	// The Unix-socket connection string names no user: pgx connects as the
	// OS user, for whom the setup creates a superuser.
	if osUser.Username != "postgres" {
		roles = append(roles, "create user "+pgx.Identifier{osUser.Username}.Sanitize()+" with superuser")
	}
	if err := s.cl.Exec(ctx, "postgres", strings.Join(roles, ";\n")); err != nil {
		return err
	}
	if err := s.installTLS(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.cl.DataDir, "pg_hba.conf"), []byte(hbaConf), 0o600); err != nil {
		return err
	}
	if err := s.cl.Exec(ctx, "postgres", "select pg_reload_conf()"); err != nil {
		return err
	}
	return s.waitReloaded(ctx)
}

// installTLS copies the server certificate, its key and the CA into the data
// directory, owned by the server's user as PostgreSQL requires of the key,
// and appends sslConf to postgresql.auto.conf.
func (s *server) installTLS() error {
	var owner *syscall.Stat_t
	if fi, err := os.Stat(s.cl.DataDir); err == nil {
		owner, _ = fi.Sys().(*syscall.Stat_t)
	}
	for dst, src := range map[string]string{
		"server.crt": s.certs.serverCert,
		"server.key": s.certs.serverKey,
		"root.crt":   s.certs.caPEM,
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		path := filepath.Join(s.cl.DataDir, dst)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if owner != nil && os.Geteuid() == 0 {
			if err := os.Chown(path, int(owner.Uid), int(owner.Gid)); err != nil {
				return err
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(s.cl.DataDir, "postgresql.auto.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(sslConf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitReloaded waits until new backends see the reloaded configuration: TLS
// on and pg_hba.conf without errors.
func (s *server) waitReloaded(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last string
	for {
		conn, err := pgx.Connect(ctx, s.cl.DSN("postgres"))
		if err == nil {
			var ssl string
			var hbaErrors int
			err = conn.QueryRow(ctx, `select current_setting('ssl'),
				(select count(*) from pg_hba_file_rules where error is not null)`).Scan(&ssl, &hbaErrors)
			conn.Close(ctx)
			if err == nil && ssl == "on" && hbaErrors == 0 {
				return nil
			}
			last = fmt.Sprintf("ssl=%s, %d pg_hba.conf errors, %v", ssl, hbaErrors, err)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: configuration not reloaded: %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resetDatabase drops and creates pgx_test with what pgx's tests need in it.
func (s *server) resetDatabase(ctx context.Context) error {
	if err := s.cl.Exec(ctx, "postgres", "drop database if exists "+testDatabase+" with (force)"); err != nil {
		return err
	}
	if err := s.cl.CreateDatabase(ctx, testDatabase); err != nil {
		return err
	}
	return s.cl.Exec(ctx, testDatabase, `create extension hstore;
create extension ltree;
create domain uint64 as numeric(20,0);`)
}

// directEnv is the PGX_TEST_* environment of pgx's CI
// (scripts/lib/test_targets.rb) for this server.
func (s *server) directEnv() map[string]string {
	return connEnv(endpoints{
		tcp:     fmt.Sprintf("host=127.0.0.1 port=%d", s.cl.Port),
		tls:     fmt.Sprintf("host=localhost port=%d", s.cl.Port),
		sockDir: s.sockDir,
		port:    s.cl.Port,
	}, s.certs)
}

// endpoints are where a run's connection strings point.
type endpoints struct {
	tcp       string // host and port for plain TCP connections
	tls       string // host and port for verify-full TLS: the certificate is for localhost
	sockDir   string // Unix socket directory; "" leaves the Unix-socket tests out
	port      int    // the socket's port
	pgbouncer bool   // set PGX_TEST_PGBOUNCER_CONN_STRING to tcp
}

// connEnv builds pgx's PGX_TEST_* variables for e.
func connEnv(e endpoints, c *certs) map[string]string {
	md5 := e.tcp + " user=pgx_md5 password=secret dbname=pgx_test"
	tlsBase := e.tls + " sslmode=verify-full sslrootcert=" + connValue(c.caPEM) + " dbname=pgx_test"
	env := map[string]string{
		"PGX_TEST_DATABASE":                   md5,
		"PGX_TEST_TCP_CONN_STRING":            md5,
		"PGX_TEST_MD5_PASSWORD_CONN_STRING":   md5,
		"PGX_TEST_PLAIN_PASSWORD_CONN_STRING": e.tcp + " user=pgx_pw password=secret dbname=pgx_test",
		"PGX_TEST_SCRAM_PASSWORD_CONN_STRING": e.tcp + " user=pgx_scram password=secret dbname=pgx_test channel_binding=disable",
		"PGX_TEST_SCRAM_PLUS_CONN_STRING":     tlsBase + " user=pgx_ssl password=secret channel_binding=require",
		"PGX_TEST_TLS_CONN_STRING":            tlsBase + " user=pgx_ssl password=secret channel_binding=disable",
		"PGX_TEST_TLS_CLIENT_CONN_STRING": tlsBase + " user=pgx_sslcert sslcert=" + connValue(c.clientCert) +
			" sslkey=" + connValue(c.clientKey),
		"PGX_SSL_PASSWORD": sslKeyPassword,
	}
	if e.sockDir != "" {
		env["PGX_TEST_UNIX_SOCKET_CONN_STRING"] = fmt.Sprintf("host=%s port=%d dbname=pgx_test", connValue(e.sockDir), e.port)
	}
	if e.pgbouncer {
		env["PGX_TEST_PGBOUNCER_CONN_STRING"] = md5
	}
	return env
}

// connValue quotes v for a keyword/value connection string.
func connValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
