package config

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts is
// valid and survives YAML and back unchanged. The committed corpus is in
// testdata/fuzz/FuzzParse; the fixtures of the other tests are added too.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"databases: [{name: a, shards: [{host: h}]}]\n",
		"pool: &p {<<: *p}\n",
		"a: &a [*a, *a]\n",
		"users: [{name: u, password: '${SG_TEST_PASSWORD}'}]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data, "fuzz.yaml", lookupTestEnv)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %v", err)
			}
			for _, e := range list {
				if e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("malformed error %+v", e)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		out, err := c.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		d, err := parse(out, "fuzz.yaml", lookupTestEnv)
		if err != nil {
			t.Fatalf("reloading YAML output: %v\n%s", err, out)
		}
		for i := range c.Databases {
			for j := range c.Databases[i].ShardedTables {
				d.Databases[i].ShardedTables[j].Line = c.Databases[i].ShardedTables[j].Line
			}
		}
		if !reflect.DeepEqual(c, d) {
			t.Fatalf("YAML round trip differs:\n%+v\n%+v\n%s", c, d, out)
		}
	})
}
