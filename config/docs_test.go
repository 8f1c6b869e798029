package config

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// option is one key of the file format, with its default as the loader
// fills it ("" when there is none to check).
type option struct {
	path string
	def  reflect.Value
	leaf bool
}

// options lists every key reachable from v, starting from the values the
// decoder starts from, so that defaults come out as the loader sets them.
func options(v reflect.Value, path string, out *[]option) {
	for i := 0; i < v.NumField(); i++ {
		name, ok := yamlName(v.Type().Field(i))
		if !ok {
			continue
		}
		p := keyPath(path, name)
		f := v.Field(i)
		switch {
		case p == "databases[].pool", p == "databases[].load_balancing": // same keys as the top level, documented there
			*out = append(*out, option{path: p, leaf: true})
		case f.Kind() == reflect.Struct && f.Type() != durationType:
			*out = append(*out, option{path: p})
			options(f, p, out)
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
			e := reflect.New(f.Type().Elem())
			setDefaults(e)
			*out = append(*out, option{path: p})
			options(e.Elem(), p, out)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			e := reflect.New(f.Type().Elem())
			setDefaults(e)
			*out = append(*out, option{path: p})
			options(e.Elem(), p+"[]", out)
		default:
			*out = append(*out, option{path: p, def: f, leaf: true})
		}
	}
}

var docRow = regexp.MustCompile("^\\| `([^`]+)` \\|")
var backticked = regexp.MustCompile("`([^`]*)`")

// TestDocsCoverEveryOption keeps docs/config.md in step with the types and
// defaults: every option has a row showing its default, and every row
// names an option.
func TestDocsCoverEveryOption(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(data), "\n## Option reference\n")
	if !ok {
		t.Fatal(`docs/config.md has no "## Option reference" section`)
	}
	ref, _, _ = strings.Cut(ref, "\n## ")
	rows := map[string]string{}
	for _, line := range strings.Split(ref, "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("docs/config.md documents %s twice", m[1])
			}
			rows[m[1]] = line
		}
	}
	var opts []option
	options(reflect.ValueOf(defaultConfig()).Elem(), "", &opts)
	known := map[string]bool{}
	for _, o := range opts {
		known[o.path] = true
		row, ok := rows[o.path]
		if !ok {
			if o.leaf {
				t.Errorf("docs/config.md has no row for %s", o.path)
			}
			continue
		}
		if o.def.IsValid() && !o.def.IsZero() && !rowShows(row, o.def) {
			t.Errorf("docs/config.md: the row of %s does not show its default %v", o.path, o.def)
		}
	}
	for path := range rows {
		if !known[path] {
			t.Errorf("docs/config.md documents %s, which is not an option", path)
		}
	}
}

// rowShows reports whether a table row gives def in backquotes.
func rowShows(row string, def reflect.Value) bool {
	for _, m := range backticked.FindAllStringSubmatch(row, -1) {
		switch {
		case def.Type() == durationType:
			if d, err := time.ParseDuration(m[1]); err == nil && d == time.Duration(def.Int()) {
				return true
			}
		case def.Kind() == reflect.Int:
			if m[1] == strconv.FormatInt(def.Int(), 10) {
				return true
			}
		case def.Kind() == reflect.String:
			if m[1] == def.String() {
				return true
			}
		case def.Kind() == reflect.Bool:
			if m[1] == strconv.FormatBool(def.Bool()) {
				return true
			}
		}
	}
	return false
}

// TestExample loads examples/shardgate.yaml, which must stay valid.
func TestExample(t *testing.T) {
	t.Setenv("SHARDGATE_ADMIN_PASSWORD", "admin-secret")
	t.Setenv("APP_PASSWORD", "app-secret")
	c, err := Load("../examples/shardgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Password != "admin-secret" || c.User("app").ServerPassword != "app-secret" {
		t.Errorf("environment not expanded: %+v", c)
	}
	if p := c.Database("app").Pool; p.Size != 40 || p.Mode != PoolTransaction {
		t.Errorf("app pool = %+v", p)
	}
	if p := c.Database("analytics").Pool; p.Mode != PoolSession || p.IdleTimeout != 0 || p.CheckoutTimeout != 5*time.Second {
		t.Errorf("analytics pool = %+v", p)
	}
	// Every option the example spells out with its default value must agree
	// with the loader's defaults.
	d := loadTestFile(t, "testdata/minimal.yaml")
	if c.Pool != d.Pool || c.Limits != d.Limits || c.Listen != d.Listen || c.ShutdownTimeout != d.ShutdownTimeout {
		t.Errorf("the example's top-level values differ from the defaults:\n%+v\n%+v", c, d)
	}
}

// TestDesignExample loads the example of DESIGN.md section 7, the public
// surface of the file format, with the TLS files it names.
func TestDesignExample(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "server")
	data, err := os.ReadFile("testdata/design.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDGATE_ADMIN_PASSWORD", "x")
	c, err := Parse(data, dir+"/shardgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Databases[0].Shards) != 2 || c.Databases[0].Pool.Size != 10 || c.TLS.Key != dir+"/server.key" {
		t.Errorf("unexpected result: %+v", c)
	}
}
