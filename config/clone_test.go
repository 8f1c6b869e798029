package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// tricky strings the filler cycles through: YAML that needs quoting, ${…}
// that must stay literal, several lines.
var tricky = []string{"plain", "with ${X} ref", "two\nlines", "123", "true", " lead", "#hash", "- dash", "k: v", "~", "$${"}

// fill sets every field reachable from v to a distinct non-zero value,
// with two entries in every list, so that a field added to the config
// types is covered by the tests below without changing them.
func fill(v reflect.Value, n *int) {
	*n++
	if v.Type() == durationType {
		v.SetInt(int64(*n) * int64(1500*time.Millisecond))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(tricky[*n%len(tricky)] + "<" + strconv.Itoa(*n) + ">")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(v.Index(i), n)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), n)
		}
	default:
		panic("fill: unsupported kind " + v.Kind().String())
	}
}

func filledConfig() *Config {
	c := &Config{}
	n := 0
	fill(reflect.ValueOf(c).Elem(), &n)
	return c
}

// sharesMemory reports the path of the first pointer or slice that a and b
// share.
func sharesMemory(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharesMemory(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := 0; i < a.Len(); i++ {
			if p := sharesMemory(a.Index(i), b.Index(i), indexPath(path, i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if p := sharesMemory(a.Field(i), b.Field(i), keyPath(path, a.Type().Field(i).Name)); p != "" {
				return p
			}
		}
	}
	return ""
}

func TestClone(t *testing.T) {
	c := filledConfig()
	d := c.Clone()
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("Clone differs:\n%+v\n%+v", c, d)
	}
	if p := sharesMemory(reflect.ValueOf(c), reflect.ValueOf(d), ""); p != "" {
		t.Errorf("Clone shares %s with the original", p)
	}
	if (*Config)(nil).Clone() != nil || (*Config)(nil).Redacted() != nil {
		t.Error("nil Config does not clone to nil")
	}
}

// passwords returns the values of every field whose key names a password.
func passwords(v reflect.Value, yamlKey string, out *[]string) {
	switch v.Kind() {
	case reflect.String:
		if strings.Contains(yamlKey, "password") {
			*out = append(*out, v.String())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			passwords(v.Elem(), yamlKey, out)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			passwords(v.Index(i), yamlKey, out)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			name, _ := yamlName(v.Type().Field(i))
			passwords(v.Field(i), name, out)
		}
	}
}

func TestRedacted(t *testing.T) {
	for name, c := range map[string]*Config{
		"filled": filledConfig(),
		"full":   loadTestFile(t, "testdata/full.yaml"),
	} {
		t.Run(name, func(t *testing.T) {
			var secrets, after []string
			passwords(reflect.ValueOf(c), "", &secrets)
			r := c.Redacted()
			passwords(reflect.ValueOf(r), "", &after)
			for _, p := range after {
				if p != "" && p != redacted {
					t.Errorf("Redacted left password %q", p)
				}
			}
			var again []string
			passwords(reflect.ValueOf(c), "", &again)
			if !reflect.DeepEqual(secrets, again) {
				t.Error("Redacted changed the original")
			}
			out, err := r.YAML()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(string(out), s) {
					t.Errorf("YAML of the redacted config contains %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestYAMLRoundTrip checks that loading YAML's output gives back the same
// configuration.
func TestYAMLRoundTrip(t *testing.T) {
	c := loadTestFile(t, "testdata/full.yaml")
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	d, err := parse(out, c.Path, lookupTestEnv)
	if err != nil {
		t.Fatalf("reloading YAML output: %v\n%s", err, out)
	}
	for i := range c.Databases {
		for j := range c.Databases[i].ShardedTables {
			d.Databases[i].ShardedTables[j].Line = c.Databases[i].ShardedTables[j].Line
		}
	}
	if !reflect.DeepEqual(c, d) {
		t.Errorf("round trip differs:\n%+v\n%+v\n%s", c, d, out)
	}
	for _, want := range []string{"shutdown_timeout: 1m30s\n", "server_lifetime: 2h\n", "checkout_timeout: 250ms\n", "idle_timeout: 0s\n", "app-$${literal}-secret"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML output lacks %q:\n%s", want, out)
		}
	}
}

// TestEncodeEveryField decodes the encoding of a config with every field
// set, without validation (the values are not valid), to check that the
// encoder and decoder agree on every type.
func TestEncodeEveryField(t *testing.T) {
	c := filledConfig()
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(out, &root); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := newReporter("")
	d := &Config{}
	newDecoder(r, lookupTestEnv).decode(root.Content[0], "", reflect.ValueOf(d).Elem())
	if err := r.err(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Fields outside the file format do not round-trip.
	d.Path = c.Path
	for i := range c.Databases {
		for j := range c.Databases[i].ShardedTables {
			d.Databases[i].ShardedTables[j].Line = c.Databases[i].ShardedTables[j].Line
		}
	}
	if !reflect.DeepEqual(c, d) {
		t.Errorf("round trip differs:\n%+v\n%+v\n%s", c, d, out)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Second: "1s", 90 * time.Second: "1m30s", time.Minute: "1m", time.Hour: "1h",
		time.Hour + time.Minute: "1h1m", time.Hour + time.Second: "1h0m1s", 250 * time.Millisecond: "250ms",
		-time.Hour: "-1h",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(formatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v", formatDuration(d), back, err)
		}
	}
}

func TestRedactedControlString(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://sg:s3cret@db:5432/control":     "postgres://sg:<redacted>@db:5432/control",
		"postgres://sg@db/control":                 "postgres://sg@db/control",
		"host=db user=sg password=s3cret dbname=c": "host=db user=sg password=<redacted> dbname=c",
		"host=db password = 'a b\\' c' dbname=c":   "host=db password = <redacted> dbname=c",
	} {
		c := &Config{Cluster: &Cluster{Control: in}}
		if got := c.Redacted().Cluster.Control; got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
		if c.Cluster.Control != in {
			t.Fatal("Redacted changed the original")
		}
	}
}
