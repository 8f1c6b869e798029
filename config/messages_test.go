package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMessages pins whole error messages, as an operator sees them.
func TestMessages(t *testing.T) {
	const db = "databases: [{name: app, shards: [{host: h}]}]\n"
	for _, tc := range []struct {
		name, file, want string
	}{
		{"wrong type", "pool:\n  size: ten\n" + db,
			`app.yaml:2:9: pool.size: expected an integer, got "ten"`},
		{"unknown key", "pool:\n  mdoe: session\n" + db,
			`app.yaml:2:3: pool.mdoe: unknown key "mdoe"; did you mean "mode"?`},
		{"bare duration", "shutdown_timeout: 10\n" + db,
			`app.yaml:1:19: shutdown_timeout: expected a duration with a unit such as "10s" or "10ms", got the bare number 10`},
		{"unset variable", "admin:\n  password: ${SG_TEST_UNSET}\n" + db,
			`app.yaml:2:13: admin.password: environment variable SG_TEST_UNSET is not set (write ${SG_TEST_UNSET:-value} to give a default)`},
		{"missing database", "listen: 127.0.0.1:6432\n",
			`app.yaml:1:1: databases: at least one database is required`},
		{"empty file", "",
			`app.yaml: databases: at least one database is required`},
		{"comments only", "# nothing yet\n",
			`app.yaml: databases: at least one database is required`},
		{"syntax", "a: [\n",
			`app.yaml:1: invalid YAML: did not find expected node content`},
		{"tab", "pool:\n\tsize: 1\n",
			`app.yaml:2: invalid YAML: found character that cannot start any token`},
		{"scalar document", "hello\n",
			`app.yaml:1:1: expected a mapping, got "hello"`},
		{"several", "listen: x\npool: {size: 0}\n",
			"app.yaml:1:1: databases: at least one database is required\n" +
				"app.yaml:1:9: listen: must be host:port such as 127.0.0.1:6432, got \"x\"\n" +
				"app.yaml:2:14: pool.size: must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse([]byte(tc.file), "app.yaml", lookupTestEnv)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error =\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

// TestNoPasswordInErrors checks that errors about password values never
// quote them.
func TestNoPasswordInErrors(t *testing.T) {
	const secret = "hunter2"
	for _, file := range []string{
		"users: [{name: a, password: [" + secret + "]}]",
		"users: [{name: a, password: '" + secret + "${'}]",
		"users: [{name: a, password: '${" + secret + " x}'}]",
		"users: [{name: a, password: 'SCRAM-SHA-256$" + secret + "'}]",
		"users: [{name: a, password: x, server_password: {p: " + secret + "}}]",
		"admin: {password: '${" + secret + "-}'}",
		"databases: [{name: d, shards: [{host: h, password: '${ " + secret + "}'}]}]",
	} {
		_, err := parse([]byte(file), "app.yaml", lookupTestEnv)
		if err == nil {
			t.Fatalf("%s: no error", file)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error shows the password:\n%v", file, err)
		}
	}
}

func TestLoad(t *testing.T) {
	c, err := Load("testdata/minimal.yaml")
	if err != nil || c.Path != "testdata/minimal.yaml" {
		t.Fatalf("Load = %v, %v", c, err)
	}
	_, err = Load("testdata/does-not-exist.yaml")
	if err == nil || !strings.Contains(err.Error(), "does-not-exist.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestValidate checks a Config built in code, which has no positions.
func TestValidate(t *testing.T) {
	c := loadTestFile(t, "testdata/minimal.yaml")
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate of a loaded config: %v", err)
	}
	c = c.Clone()
	c.Databases[0].Pool.MinSize = 30
	c.Databases[0].Shards[1] = c.Databases[0].Shards[0]
	c.Users[0].AuthType = "kerberos"
	err := c.Validate()
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 3 {
		t.Fatalf("Validate = %v, want 3 errors", err)
	}
	want := "testdata/minimal.yaml: users[0].auth_type: must be one of scram, md5, plain, trust; got \"kerberos\"\n" +
		"testdata/minimal.yaml: databases[0].pool.min_size: min_size 30 exceeds size 20\n" +
		"testdata/minimal.yaml: databases[0].shards[1]: same server and database as shards[0] (10.0.0.1:5432/app): two shards must not hold the same data"
	if err.Error() != want {
		t.Errorf("Validate =\n%v\nwant\n%s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Path != "users[0].auth_type" || e.Line != 0 {
		t.Errorf("errors.As(*Error) = %+v", e)
	}
}

func TestSuggest(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want string
	}{
		{"databses", "databases"},
		{"lsiten", "listen"},
		{"auth", ""}, // too far from auth_type to be a typo
		{"x", ""},
		{"SHARDS", "shards"},
	} {
		if got := closest(tc.s, []string{"databases", "listen", "auth_type", "shards"}); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestAliasBlowUp checks that a small file whose aliases expand to a huge
// configuration is refused quickly instead of being expanded.
func TestAliasBlowUp(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-r: &r {host: h}\nx-rs: &rs [")
	for i := 0; i < 1000; i++ {
		b.WriteString("*r, ")
	}
	b.WriteString("*r]\nx-s: &s {host: h, replicas: *rs}\nx-ss: &ss [")
	for i := 0; i < 1000; i++ {
		b.WriteString("*s, ")
	}
	b.WriteString("*s]\ndatabases: [")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "{name: d%d, shards: *ss}, ", i)
	}
	b.WriteString("]\n")
	start := time.Now()
	_, err := parse([]byte(b.String()), "app.yaml", lookupTestEnv)
	if err == nil || !strings.Contains(err.Error(), "the file expands to more than 262144 values; check its aliases") {
		t.Fatalf("error = %.500v", err)
	}
	if d := time.Since(start); d > time.Minute { // expanding would take hours
		t.Errorf("took %v", d)
	}
}

// TestAliasPosition checks that an error inside an aliased value points at
// the anchored definition, where the bad value is written, and an error
// about the aliased value as a whole at the alias, where it is used.
func TestAliasPosition(t *testing.T) {
	file := "x-pool: &p {size: 0}\n" +
		"x-none: &none []\n" +
		"databases:\n" +
		"  - name: a\n" +
		"    shards: *none\n" +
		"    pool: *p\n"
	_, err := parse([]byte(file), "app.yaml", lookupTestEnv)
	want := "app.yaml:1:19: databases[0].pool.size: must be at least 1, got 0\n" +
		"app.yaml:5:13: databases[0].shards: at least one shard is required"
	if err == nil || err.Error() != want {
		t.Errorf("error =\n%v\nwant\n%s", err, want)
	}
}
