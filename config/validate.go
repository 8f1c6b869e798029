package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Valid values of the enumerated options.
var (
	poolModes = []string{string(PoolTransaction), string(PoolSession)}
	authTypes = []string{string(AuthSCRAM), string(AuthMD5), string(AuthPlain), string(AuthTrust)}
	sslModes  = []string{string(SSLDisable), string(SSLPrefer), string(SSLRequire), string(SSLVerifyFull)}
	lbModes   = []string{string(LBRandom), string(LBRoundRobin), string(LBLeastConnections)}
)

// minMessageSize is the smallest limits.max_message_size accepted: below it
// ordinary clients fail, which is never what the operator meant.
const minMessageSize = 1024

// maxFileSize bounds the TLS files read during validation, so that a path
// such as /dev/zero cannot hang the loader.
const maxFileSize = 1 << 20

// Validate checks c and returns an ErrorList with every problem, or nil.
// Load and Parse call it already; call it on a Config built or changed in
// code (a resharding cutover swapping shard sets, a test) before using it.
// Errors then carry option paths but no lines.
func (c *Config) Validate() error {
	r := newReporter(c.Path)
	validate(c, r, false)
	return r.err()
}

// validator checks one Config. fromFile says whether positions describe the
// file the Config came from, so that checks can tell an option the file set
// from one it inherited.
type validator struct {
	c        *Config
	r        *reporter
	fromFile bool
}

func validate(c *Config, r *reporter, fromFile bool) {
	v := &validator{c: c, r: r, fromFile: fromFile}
	v.address("listen", c.Listen)
	v.nonNegative("shutdown_timeout", c.ShutdownTimeout)
	v.admin()
	if c.Metrics.Listen != "" {
		v.address("metrics.listen", c.Metrics.Listen)
		if c.Metrics.Listen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			v.r.at("metrics.listen", "must differ from listen (%s)", c.Listen)
		}
	}
	v.pool("pool", &c.Pool, false)
	v.loadBalancing("load_balancing", &c.LoadBalancing, false)
	v.limits()
	v.tls()
	v.enum("auth_type", string(c.AuthType), authTypes)
	v.nodeID()
	v.cluster()
	v.users()
	v.databases()
}

// enum checks that the value of path is one of valid.
func (v *validator) enum(path, value string, valid []string) bool {
	if slices.Contains(valid, value) {
		return true
	}
	if value == "" {
		v.r.at(path, "required; one of %s", strings.Join(valid, ", "))
		return false
	}
	v.r.at(path, "must be one of %s; got %q%s", strings.Join(valid, ", "), value, suggestValue(value, valid))
	return false
}

func (v *validator) required(path, value, why string) bool {
	if value == "" {
		v.r.missing(path, "required: %s", why)
		return false
	}
	return true
}

func (v *validator) nonNegative(path string, d time.Duration) {
	if d < 0 {
		v.r.at(path, "must not be negative, got %s", d)
	}
}

// address checks a listen address: host:port with a numeric port; an empty
// host means every interface and port 0 a free port (tests use it).
func (v *validator) address(path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.r.at(path, "must be host:port such as 127.0.0.1:6432, got %q", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.r.at(path, "port must be a number from 0 to 65535, got %q", port)
	}
	if host == "*" {
		v.r.at(path, `host "*" is not an address; write ":%s" or "0.0.0.0:%s" to listen on every interface`, port, port)
	}
}

func (v *validator) port(path string, port int) {
	if port < 1 || port > 65535 {
		v.r.at(path, "must be from 1 to 65535, got %d", port)
	}
}

func (v *validator) admin() {
	a := &v.c.Admin
	v.required("admin.database", a.Database, "the name clients use to reach the admin console")
	v.required("admin.user", a.User, "the user name of the admin console")
	v.passwordForm("admin.password", a.Password)
}

// poolProblem is one pool rule broken, with the options involved.
type poolProblem struct {
	fields []string
	msg    string
}

func poolProblems(p *Pool) []poolProblem {
	var out []poolProblem
	if !slices.Contains(poolModes, string(p.Mode)) {
		msg := fmt.Sprintf("must be one of %s; got %q%s", strings.Join(poolModes, ", "), p.Mode, suggestValue(string(p.Mode), poolModes))
		out = append(out, poolProblem{[]string{"mode"}, msg})
	}
	switch {
	case p.Size < 1:
		out = append(out, poolProblem{[]string{"size"}, fmt.Sprintf("must be at least 1, got %d", p.Size)})
	case p.MinSize < 0:
		out = append(out, poolProblem{[]string{"min_size"}, fmt.Sprintf("must not be negative, got %d", p.MinSize)})
	case p.MinSize > p.Size:
		out = append(out, poolProblem{[]string{"min_size", "size"}, fmt.Sprintf("min_size %d exceeds size %d", p.MinSize, p.Size)})
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"checkout_timeout", p.CheckoutTimeout},
		{"idle_timeout", p.IdleTimeout},
		{"server_lifetime", p.ServerLifetime},
		{"connect_timeout", p.ConnectTimeout},
	} {
		if d.d < 0 {
			out = append(out, poolProblem{[]string{d.name}, fmt.Sprintf("must not be negative, got %s", d.d)})
		}
	}
	return out
}

// pool checks the pool at path. For a database's effective pool loaded from
// a file, a problem is reported only when the database's own `pool:` set
// one of the options involved, at that option; inherited values were
// checked, and reported, at the top level.
func (v *validator) pool(path string, p *Pool, override bool) {
	for _, pr := range poolProblems(p) {
		at := keyPath(path, pr.fields[0])
		if override && v.fromFile {
			set := slices.IndexFunc(pr.fields, func(f string) bool { return v.r.pos.isSet(keyPath(path, f)) })
			if set < 0 {
				continue
			}
			at = keyPath(path, pr.fields[set])
		}
		v.r.at(at, "%s", pr.msg)
	}
}

// lbProblems checks a load_balancing section.
func lbProblems(lb *LoadBalancing) []poolProblem {
	var out []poolProblem
	if !slices.Contains(lbModes, string(lb.Strategy)) {
		msg := fmt.Sprintf("must be one of %s; got %q%s", strings.Join(lbModes, ", "), lb.Strategy, suggestValue(string(lb.Strategy), lbModes))
		out = append(out, poolProblem{[]string{"strategy"}, msg})
	}
	if lb.BanTime < 0 {
		out = append(out, poolProblem{[]string{"ban_time"}, fmt.Sprintf("must not be negative, got %s", lb.BanTime)})
	}
	if lb.HealthCheckInterval <= 0 {
		out = append(out, poolProblem{[]string{"health_check_interval"}, fmt.Sprintf("must be positive, got %s", lb.HealthCheckInterval)})
	}
	if lb.HealthCheckTimeout <= 0 {
		out = append(out, poolProblem{[]string{"health_check_timeout"}, fmt.Sprintf("must be positive, got %s", lb.HealthCheckTimeout)})
	}
	return out
}

// loadBalancing checks the load_balancing section at path, reporting a
// database's problems only at the options it set itself (as pool does).
func (v *validator) loadBalancing(path string, lb *LoadBalancing, override bool) {
	for _, pr := range lbProblems(lb) {
		at := keyPath(path, pr.fields[0])
		if override && v.fromFile && !v.r.pos.isSet(at) {
			continue
		}
		v.r.at(at, "%s", pr.msg)
	}
}

func (v *validator) limits() {
	l := &v.c.Limits
	if l.MaxClientConn < 1 {
		v.r.at("limits.max_client_conn", "must be at least 1, got %d", l.MaxClientConn)
	}
	v.nonNegative("limits.client_login_timeout", l.ClientLoginTimeout)
	v.nonNegative("limits.in_doubt_timeout", l.InDoubtTimeout)
	if l.MaxMessageSize < minMessageSize || l.MaxMessageSize > math.MaxInt32 {
		v.r.at("limits.max_message_size", "must be from %d to %d bytes, got %d", minMessageSize, math.MaxInt32, l.MaxMessageSize)
	}
}

func (v *validator) tls() {
	t := v.c.TLS
	if t == nil {
		return
	}
	switch {
	case t.Cert != "" && t.Key == "":
		v.r.missing("tls.key", "required with tls.cert")
	case t.Cert == "" && t.Key != "":
		v.r.missing("tls.cert", "required with tls.key")
	case t.Cert != "":
		cert, certOK := v.readFile("tls.cert", t.Cert)
		key, keyOK := v.readFile("tls.key", t.Key)
		if certOK && keyOK {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				v.r.at("tls.cert", "%s and %s do not load as a key pair: %v", t.Cert, t.Key, err)
			}
		}
	}
	if v.enum("tls.server_sslmode", string(t.ServerSSLMode), sslModes) && t.ServerCA != "" {
		if t.ServerSSLMode != SSLVerifyFull {
			v.r.at("tls.server_ca", "is used only with server_sslmode verify-full (server_sslmode is %s, so servers would not be verified)", t.ServerSSLMode)
		} else if pem, ok := v.readFile("tls.server_ca", t.ServerCA); ok && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			v.r.at("tls.server_ca", "%s holds no PEM certificate", t.ServerCA)
		}
	}
}

// nodeID checks the unique-id node number.
func (v *validator) nodeID() {
	if v.c.NodeID < 0 || v.c.NodeID > 1023 {
		v.r.at("node_id", "must be between 0 and 1023, got %d", v.c.NodeID)
	}
}

// maxClusterName keeps "shardgate-cluster:" + the name within
// application_name's 63 bytes.
const maxClusterName = 45

// cluster checks the cluster section.
func (v *validator) cluster() {
	c := v.c.Cluster
	if c == nil {
		return
	}
	if len(c.Name) > maxClusterName {
		v.r.at("cluster.name", "must be at most %d bytes, got %d", maxClusterName, len(c.Name))
	}
	for _, r := range c.Name {
		if r < 0x21 || r > 0x7e {
			v.r.at("cluster.name", "must be printable ASCII without spaces, got %q", c.Name)
			break
		}
	}
	if c.AckTimeout <= 0 {
		v.r.at("cluster.ack_timeout", "must be positive, got %s", c.AckTimeout)
	}
}

// ClusterName is this proxy's name in its cluster: cluster.name, or the
// host name and the listen port.
func (c *Config) ClusterName() string {
	if c.Cluster != nil && c.Cluster.Name != "" {
		return c.Cluster.Name
	}
	host, _ := os.Hostname()
	port := c.Listen
	if i := strings.LastIndexByte(port, ':'); i >= 0 {
		port = port[i+1:]
	}
	name := host + ":" + port
	if len(name) > maxClusterName {
		name = name[len(name)-maxClusterName:]
	}
	return name
}

// readFile reads a small regular file named by option path.
func (v *validator) readFile(path, name string) ([]byte, bool) {
	fi, err := os.Stat(name)
	switch {
	case err != nil:
		v.r.at(path, "%v", err)
		return nil, false
	case !fi.Mode().IsRegular():
		v.r.at(path, "%s is not a regular file", name)
		return nil, false
	case fi.Size() > maxFileSize:
		v.r.at(path, "%s is larger than %d bytes", name, maxFileSize)
		return nil, false
	}
	data, err := os.ReadFile(name)
	if err != nil {
		v.r.at(path, "%v", err)
		return nil, false
	}
	return data, true
}

// passwordForm checks that a password is plaintext or a well-formed SCRAM
// verifier, catching values pasted from pg_authid that shardgate cannot use.
func (v *validator) passwordForm(path, pw string) {
	switch {
	case strings.HasPrefix(pw, scramPrefix) && !IsSCRAMVerifier(pw):
		v.r.at(path, "looks like a SCRAM-SHA-256 verifier but is malformed; expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> as in pg_authid.rolpassword")
	case isMD5Hash(pw):
		v.r.at(path, "looks like an MD5 hash from pg_authid; give the plaintext password or a SCRAM-SHA-256 verifier")
	}
}

// serverPassword checks a password the proxy sends to PostgreSQL, which
// must be plaintext.
func (v *validator) serverPassword(path, pw string) {
	switch {
	case strings.HasPrefix(pw, scramPrefix):
		v.r.at(path, "must be the plaintext password: a SCRAM-SHA-256 verifier cannot log in to PostgreSQL")
	case isMD5Hash(pw):
		v.r.at(path, "must be the plaintext password, not an MD5 hash")
	}
}

// isMD5Hash reports whether s has the form of an MD5 password hash in
// pg_authid: "md5" and 32 lowercase hex digits.
func isMD5Hash(s string) bool {
	if len(s) != 35 || !strings.HasPrefix(s, "md5") {
		return false
	}
	for _, c := range s[3:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (v *validator) users() {
	c := v.c
	databases := make(map[string]bool, len(c.Databases))
	for i := range c.Databases {
		databases[c.Databases[i].Name] = true
	}
	seen := map[string]int{}
	for i := range c.Users {
		u := &c.Users[i]
		p := indexPath("users", i)
		if v.required(keyPath(p, "name"), u.Name, "the user name clients log in with") {
			if j, dup := seen[u.Name]; dup {
				v.r.at(keyPath(p, "name"), "duplicate user %q (also users[%d]%s)", u.Name, j, v.r.seeLine(indexPath("users", j)))
			} else {
				seen[u.Name] = i
			}
		}
		v.user(p, u)
		for k, db := range u.Databases {
			dp := indexPath(keyPath(p, "databases"), k)
			switch {
			case db == c.Admin.Database:
				v.r.at(dp, "%q is the admin database, reached with admin.user and admin.password rather than listed per user", db)
			case !databases[db]:
				hint := ""
				if !v.r.full() {
					hint = suggestValue(db, c.databaseNames())
				}
				v.r.at(dp, "unknown database %q%s", db, hint)
			}
		}
	}
}

// user checks one user's authentication settings.
func (v *validator) user(p string, u *User) {
	if !slices.Contains(authTypes, string(u.AuthType)) {
		// An inherited invalid auth_type is reported once, at the top level.
		if u.AuthType != v.c.AuthType {
			v.enum(keyPath(p, "auth_type"), string(u.AuthType), authTypes)
		}
		return
	}
	pw := keyPath(p, "password")
	v.passwordForm(pw, u.Password)
	switch {
	case u.AuthType != AuthTrust && u.Password == "":
		v.r.missing(pw, "required with auth_type %s (or set auth_type: trust)", u.AuthType)
	case u.AuthType == AuthMD5 && IsSCRAMVerifier(u.Password):
		v.r.at(pw, "auth_type md5 needs the plaintext password: a SCRAM-SHA-256 verifier cannot answer an MD5 challenge (use auth_type scram)")
	}
	if u.ServerPassword != u.Password { // else the checks of password cover it
		v.serverPassword(keyPath(p, "server_password"), u.ServerPassword)
	}
}

func (c *Config) databaseNames() []string {
	names := make([]string, len(c.Databases))
	for i := range c.Databases {
		names[i] = c.Databases[i].Name
	}
	return names
}

func (v *validator) databases() {
	c := v.c
	if len(c.Databases) == 0 {
		v.r.missing("databases", "at least one database is required")
		return
	}
	seen := map[string]int{}
	for i := range c.Databases {
		db := &c.Databases[i]
		p := indexPath("databases", i)
		np := keyPath(p, "name")
		if v.required(np, db.Name, "the database name clients put in their connection string") {
			if j, dup := seen[db.Name]; dup {
				v.r.at(np, "duplicate database %q (also databases[%d]%s)", db.Name, j, v.r.seeLine(indexPath("databases", j)))
			} else {
				seen[db.Name] = i
			}
			if db.Name == c.Admin.Database {
				v.r.at(np, "%q is the admin database name (admin.database); pick another name for one of them", db.Name)
			}
		}
		v.pool(keyPath(p, "pool"), &db.Pool, true)
		v.loadBalancing(keyPath(p, "load_balancing"), &db.LoadBalancing, true)
		v.shards(p, db)
		v.sharding(p, db)
	}
}

func (v *validator) shards(p string, db *Database) {
	sp := keyPath(p, "shards")
	if len(db.Shards) == 0 {
		v.r.missing(sp, "at least one shard is required")
		return
	}
	seen := map[string]int{}
	for j := range db.Shards {
		s := &db.Shards[j]
		p := indexPath(sp, j)
		v.required(keyPath(p, "host"), s.Host, "every shard needs the address of its primary")
		v.port(keyPath(p, "port"), s.Port)
		if db.Name != "" { // else the loader had no name to default to, and that is reported
			v.required(keyPath(p, "database"), s.Database, "the database on the server")
		}
		v.serverPassword(keyPath(p, "password"), s.Password)
		if s.Host != "" && !v.r.failedUnder(p) {
			key := fmt.Sprintf("%s:%d/%s", s.Host, s.Port, s.Database)
			if k, dup := seen[key]; dup {
				v.r.at(p, "same server and database as shards[%d]%s (%s): two shards must not hold the same data", k, v.r.seeLine(indexPath(sp, k)), key)
			} else {
				seen[key] = j
			}
		}
		replicas := map[string]int{}
		for k := range s.Replicas {
			r := &s.Replicas[k]
			rp := indexPath(keyPath(p, "replicas"), k)
			v.required(keyPath(rp, "host"), r.Host, "every replica needs an address")
			v.port(keyPath(rp, "port"), r.Port)
			if r.Host == "" || v.r.failedUnder(rp) {
				continue
			}
			addr := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
			if r.Host == s.Host && r.Port == s.Port {
				v.r.at(rp, "%s is the shard's primary, not a replica", addr)
			} else if m, dup := replicas[addr]; dup {
				v.r.at(rp, "duplicate replica %s (also replicas[%d])", addr, m)
			} else {
				replicas[addr] = k
			}
		}
	}
}
