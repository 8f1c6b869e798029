package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func loadTestFile(t *testing.T, file string) *Config {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parse(data, file, lookupTestEnv)
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", file, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	c := loadTestFile(t, "testdata/minimal.yaml")
	pool := Pool{
		Mode: PoolTransaction, Size: 20, MinSize: 0,
		CheckoutTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second,
		ServerLifetime: time.Hour, ConnectTimeout: 5 * time.Second,
	}
	lb := LoadBalancing{Strategy: LBRandom, BanTime: time.Minute, HealthCheckInterval: 10 * time.Second, HealthCheckTimeout: 2 * time.Second}
	want := &Config{
		Path:            "testdata/minimal.yaml",
		Listen:          "127.0.0.1:6432",
		ShutdownTimeout: 30 * time.Second,
		Admin:           Admin{Database: "admin", User: "admin"},
		Pool:            pool,
		LoadBalancing:   lb,
		Limits:          Limits{MaxClientConn: 10000, ClientLoginTimeout: 60 * time.Second, MaxMessageSize: 1 << 30, InDoubtTimeout: 10 * time.Second, ClientParkAfter: time.Second, EventLoop: true},
		AuthType:        AuthSCRAM,
		Users: []User{{
			Name: "app", Password: "secret", AuthType: AuthSCRAM,
			ServerUser: "app", ServerPassword: "secret",
		}},
		Databases: []Database{{
			Name:          "app",
			Pool:          pool,
			LoadBalancing: lb,
			Shards: []Shard{
				{Host: "10.0.0.1", Port: 5432, Database: "app"},
				{Host: "10.0.0.2", Port: 5432, Database: "app", Replicas: []Replica{{Host: "10.0.0.3", Port: 5432}}},
			},
			ShardedTables: []ShardedTable{{Column: "id", Type: "bigint", Function: "hash", Line: 11}},
		}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.TLS != nil || c.ServerSSLMode() != SSLPrefer {
		t.Errorf("TLS = %+v, ServerSSLMode() = %s; want nil, prefer", c.TLS, c.ServerSSLMode())
	}
}

func TestPoolOverride(t *testing.T) {
	c := loadTestFile(t, "testdata/override.yaml")
	global := Pool{
		Mode: PoolTransaction, Size: 50, CheckoutTimeout: 10 * time.Second,
		IdleTimeout: 60 * time.Second, ServerLifetime: 2 * time.Hour, ConnectTimeout: 5 * time.Second,
	}
	partial := global
	partial.Mode, partial.IdleTimeout = PoolSession, 0
	for _, tc := range []struct {
		db   string
		want Pool
	}{
		{"inherits", global},
		{"partial", partial},
		{"full", Pool{PoolTransaction, 3, 1, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.db, func(t *testing.T) {
			if got := c.Database(tc.db).Pool; got != tc.want {
				t.Errorf("Pool =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
	if c.Pool != global {
		t.Errorf("top-level pool = %+v, want %+v", c.Pool, global)
	}
}

func TestUserDefaults(t *testing.T) {
	const verifier = "SCRAM-SHA-256$4096:VVIRxKii0hrhuyHnDQlXBw==$3WqzEbJbko/4BT4pO7xbMRz5adKB8RnXif7azHPtwXg=:XRE29SPrObr6vGgKkQ+e3AjGWckP1wHraZTl4QDGDYU="
	for _, tc := range []struct {
		name, user string // user: the YAML of users[0]
		want       User
	}{
		{"inherit", "{name: a, password: pw}",
			User{Name: "a", Password: "pw", AuthType: AuthMD5, ServerUser: "a", ServerPassword: "pw"}},
		{"own auth type", "{name: a, password: pw, auth_type: plain}",
			User{Name: "a", Password: "pw", AuthType: AuthPlain, ServerUser: "a", ServerPassword: "pw"}},
		{"server credentials", "{name: a, password: pw, server_user: b, server_password: qw}",
			User{Name: "a", Password: "pw", AuthType: AuthMD5, ServerUser: "b", ServerPassword: "qw"}},
		{"explicitly no server password", "{name: a, password: pw, server_password: ''}",
			User{Name: "a", Password: "pw", AuthType: AuthMD5, ServerUser: "a"}},
		{"null server password", "{name: a, password: pw, server_password: ~}",
			User{Name: "a", Password: "pw", AuthType: AuthMD5, ServerUser: "a", ServerPassword: "pw"}},
		{"verifier", "{name: a, password: '" + verifier + "', auth_type: scram}",
			User{Name: "a", Password: verifier, AuthType: AuthSCRAM, ServerUser: "a"}},
		{"trust", "{name: a, auth_type: trust, databases: [app]}",
			User{Name: "a", AuthType: AuthTrust, ServerUser: "a", Databases: []string{"app"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "users: [" + tc.user + "]\nauth_type: md5\ndatabases: [{name: app, shards: [{host: h}]}]\n"
			c, err := parse([]byte(file), "", lookupTestEnv)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Users[0]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("user =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestAliasesAndMerge(t *testing.T) {
	c := loadTestFile(t, "testdata/aliases.yaml")
	want := []Shard{
		{Host: "10.0.0.1", Port: 5432, Database: "app_0", Replicas: []Replica{{Host: "10.0.1.1", Port: 5433}}},
		{Host: "10.0.0.1", Port: 5432, Database: "app_1", Replicas: []Replica{{Host: "10.0.1.1", Port: 5433}}},
	}
	if got := c.Databases[0].Shards; !reflect.DeepEqual(got, want) {
		t.Errorf("shards =\n %+v\nwant\n %+v", got, want)
	}
	if got := c.Databases[1].Shards; !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("aliased shards = %+v, want %+v", got, want[:1])
	}
	for _, db := range c.Databases {
		if db.Pool.Size != 5 || db.Pool.MinSize != 1 || db.Pool.CheckoutTimeout != 5*time.Second {
			t.Errorf("database %s pool = %+v", db.Name, db.Pool)
		}
	}
}

func TestExpandEnv(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "plain", want: "plain"},
		{in: "a$b$", want: "a$b$"},
		{in: "${SG_TEST_HOST}", want: "127.0.0.1"},
		{in: "${SG_TEST_HOST}:${SG_TEST_PORT}", want: "127.0.0.1:7000"},
		{in: "x${SG_TEST_EMPTY}y", want: "xy"},
		{in: "${SG_TEST_EMPTY:-d}", want: "d"},
		{in: "${SG_TEST_UNSET:-}", want: ""},
		{in: "${SG_TEST_UNSET:-a:-b}", want: "a:-b"},
		{in: "${SG_TEST_PORT:-1}", want: "7000"},
		{in: "$${SG_TEST_HOST}", want: "${SG_TEST_HOST}"},
		{in: "SCRAM-SHA-256$4096:c2FsdA==$a:b", want: "SCRAM-SHA-256$4096:c2FsdA==$a:b"},
		{in: "${SG_TEST_UNSET}", err: "environment variable SG_TEST_UNSET is not set"},
		{in: "${SG_TEST_HOST", err: `"${" without a closing "}"`},
		{in: "${}", err: `"${}" does not hold a variable name`},
		{in: "${A-B}", err: `"${A-B}" does not hold a variable name`},
	} {
		got, err := expandEnv(tc.in, lookupTestEnv)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("expandEnv(%q) error = %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestEnvFromProcess checks that Parse reads the process environment.
func TestEnvFromProcess(t *testing.T) {
	t.Setenv("SG_TEST_PROCESS_PORT", "6543")
	c, err := Parse([]byte("listen: 127.0.0.1:${SG_TEST_PROCESS_PORT}\ndatabases: [{name: a, shards: [{host: h}]}]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:6543" {
		t.Errorf("Listen = %q", c.Listen)
	}
}
