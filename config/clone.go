package config

import (
	"regexp"
	"slices"
)

// redacted replaces passwords in Redacted.
const redacted = "<redacted>"

// Clone returns a deep copy of c that shares no memory with it, so that a
// reload can derive a new snapshot without touching the one in use.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	n := *c
	n.TLS = clonePtr(c.TLS)
	n.Cluster = clonePtr(c.Cluster)
	n.Users = cloneEach(c.Users, func(u *User) {
		u.Databases = slices.Clone(u.Databases)
	})
	n.Databases = cloneEach(c.Databases, func(db *Database) {
		db.Shards = cloneEach(db.Shards, func(s *Shard) {
			s.Replicas = slices.Clone(s.Replicas)
		})
		db.ShardedTables = cloneEach(db.ShardedTables, func(t *ShardedTable) {
			t.DefaultShard = clonePtr(t.DefaultShard)
			t.Mapping = cloneEach(t.Mapping, func(m *ShardMapping) {
				m.Values = slices.Clone(m.Values)
				m.From = clonePtr(m.From)
				m.To = clonePtr(m.To)
			})
		})
		db.ShardedSchemas = slices.Clone(db.ShardedSchemas)
		db.OmniTables = slices.Clone(db.OmniTables)
	})
	return &n
}

// cloneEach copies s and then deepens each element's copy with deepen.
func cloneEach[T any](s []T, deepen func(*T)) []T {
	s = slices.Clone(s)
	for i := range s {
		deepen(&s[i])
	}
	return s
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Redacted returns a deep copy of c with every password that is set
// replaced by "<redacted>", for printing and logging.
func (c *Config) Redacted() *Config {
	r := c.Clone()
	if r == nil {
		return nil
	}
	redact(&r.Admin.Password)
	if r.Cluster != nil {
		r.Cluster.Control = redactConnString(r.Cluster.Control)
	}
	for i := range r.Users {
		redact(&r.Users[i].Password)
		redact(&r.Users[i].ServerPassword)
	}
	for i := range r.Databases {
		for j := range r.Databases[i].Shards {
			redact(&r.Databases[i].Shards[j].Password)
		}
	}
	return r
}

// connPassword finds the password of a connection string: in a URL's
// user info, or a password=… keyword.
var connPassword = regexp.MustCompile(`(://[^:/@]*:)[^@]*@|(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactConnString replaces the password of a connection string.
func redactConnString(s string) string {
	return connPassword.ReplaceAllStringFunc(s, func(m string) string {
		sub := connPassword.FindStringSubmatch(m)
		if sub[1] != "" {
			return sub[1] + redacted + "@"
		}
		return sub[2] + redacted
	})
}

func redact(s *string) {
	if *s != "" {
		*s = redacted
	}
}
