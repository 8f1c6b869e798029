package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"time"
)

// Defaults. docs/config.md lists the same values; a test keeps them in step.
const (
	defaultListen          = "127.0.0.1:6432"
	defaultShutdownTimeout = 30 * time.Second
	defaultAdminDatabase   = "admin"
	defaultAdminUser       = "admin"
	defaultPort            = 5432
	defaultShardFunction   = "hash"
	defaultMaxClientConn   = 10000
	defaultLoginTimeout    = 60 * time.Second
	defaultMaxMessageSize  = 1 << 30 // PostgreSQL's own limit
	defaultInDoubtTimeout  = 10 * time.Second
	defaultClientParkAfter = time.Second
)

// defaultPool is the top-level pool when the file says nothing.
func defaultPool() Pool {
	return Pool{
		Mode:            PoolTransaction,
		Size:            20,
		MinSize:         0,
		CheckoutTimeout: 5 * time.Second,
		IdleTimeout:     60 * time.Second,
		ServerLifetime:  time.Hour,
		ConnectTimeout:  5 * time.Second,
	}
}

// defaultLoadBalancing is the top-level load_balancing when the file says
// nothing.
func defaultLoadBalancing() LoadBalancing {
	return LoadBalancing{
		Strategy:            LBRandom,
		BanTime:             60 * time.Second,
		HealthCheckInterval: 10 * time.Second,
		HealthCheckTimeout:  2 * time.Second,
	}
}

// defaultConfig is the Config the decoder starts from: keys in the file
// overwrite these values, absent keys keep them.
func defaultConfig() *Config {
	return &Config{
		Listen:          defaultListen,
		ShutdownTimeout: defaultShutdownTimeout,
		Admin:           Admin{Database: defaultAdminDatabase, User: defaultAdminUser},
		Pool:            defaultPool(),
		LoadBalancing:   defaultLoadBalancing(),
		Limits: Limits{
			MaxClientConn:      defaultMaxClientConn,
			ClientLoginTimeout: defaultLoginTimeout,
			MaxMessageSize:     defaultMaxMessageSize,
			InDoubtTimeout:     defaultInDoubtTimeout,
			ClientParkAfter:    defaultClientParkAfter,
			EventLoop:          true,
		},
		AuthType: AuthSCRAM,
	}
}

func (s *Shard) setDefaults()        { s.Port = defaultPort }
func (r *Replica) setDefaults()      { r.Port = defaultPort }
func (t *ShardedTable) setDefaults() { t.Function = defaultShardFunction }
func (t *TLS) setDefaults()          { t.ServerSSLMode = SSLPrefer }
func (c *Cluster) setDefaults()      { c.AckTimeout = 2 * time.Second }

// ServerSSLMode returns the sslmode towards PostgreSQL servers: the one in
// tls, or prefer when the file has no tls section.
func (c *Config) ServerSSLMode() SSLMode {
	if c.TLS == nil || c.TLS.ServerSSLMode == "" {
		return SSLPrefer
	}
	return c.TLS.ServerSSLMode
}

// resolve fills the defaults that depend on other values, once the whole
// file is decoded (the file may define users before auth_type, or databases
// before pool): each database's effective pool, users' auth types and server
// credentials, shards' database names, and where each sharded table sits.
func resolve(c *Config, pos positions) {
	for i := range c.Users {
		u := &c.Users[i]
		p := indexPath("users", i)
		if u.AuthType == "" {
			u.AuthType = c.AuthType
		}
		if u.ServerUser == "" {
			u.ServerUser = u.Name
		}
		// A verifier cannot log in to a server; an explicit
		// "server_password:" with an empty value means "no password".
		if !pos.isSet(keyPath(p, "server_password")) && !strings.HasPrefix(u.Password, scramPrefix) {
			u.ServerPassword = u.Password
		}
	}
	for i := range c.Databases {
		db := &c.Databases[i]
		p := indexPath("databases", i)
		resolvePool(&db.Pool, &c.Pool, pos, keyPath(p, "pool"))
		resolveInherited(&db.LoadBalancing, &c.LoadBalancing, pos, keyPath(p, "load_balancing"))
		for j := range db.Shards {
			if db.Shards[j].Database == "" {
				db.Shards[j].Database = db.Name
			}
		}
		for j := range db.ShardedTables {
			db.ShardedTables[j].Line = pos.line(indexPath(keyPath(p, "sharded_tables"), j))
		}
	}
}

// resolvePool makes dst the effective pool of a database: every option the
// database's `pool:` did not set comes from the top-level pool.
func resolvePool(dst, global *Pool, pos positions, path string) {
	resolveInherited(dst, global, pos, path)
}

// resolveInherited sets every option of *dst (a struct pointer) that the
// file did not set under path to its value in *global.
func resolveInherited(dst, global any, pos positions, path string) {
	d, g := reflect.ValueOf(dst).Elem(), reflect.ValueOf(global).Elem()
	for i := 0; i < d.NumField(); i++ {
		name, ok := yamlName(d.Type().Field(i))
		if ok && !pos.isSet(keyPath(path, name)) {
			d.Field(i).Set(g.Field(i))
		}
	}
}

// resolveFiles makes relative TLS file names relative to the directory of
// the config file rather than to the proxy's working directory, so that the
// same file works wherever the proxy is started.
func resolveFiles(c *Config, file string) {
	if c.TLS == nil || file == "" {
		return
	}
	dir := filepath.Dir(file)
	for _, f := range []*string{&c.TLS.Cert, &c.TLS.Key, &c.TLS.ServerCA} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(dir, *f)
		}
	}
}
