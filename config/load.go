package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads, expands, defaults and validates the configuration file at
// path. The error, if any, is an ErrorList naming file:line:column for each
// problem, or the error from reading the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load for a file already read: path is used in error messages and
// to resolve relative TLS file names, and may be "". ${ENV} references are
// expanded from the process environment.
//
// Parse goes through four steps: YAML to a node tree; the tree to a Config
// that starts from the defaults (decode.go: strict keys and types, ${ENV});
// defaults that depend on other values, such as each database's effective
// pool (defaults.go); validation (validate.go). It returns every problem of
// every step that ran, and never a partly valid Config.
func Parse(data []byte, path string) (*Config, error) {
	return parse(data, path, os.LookupEnv)
}

func parse(data []byte, path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	r := newReporter(path)
	root, ok := parseYAML(data, r)
	if !ok {
		return nil, r.err()
	}
	c := defaultConfig()
	c.Path = path
	if root != nil {
		newDecoder(r, lookupEnv).decode(root, "", reflect.ValueOf(c).Elem())
	}
	resolveFiles(c, path)
	resolve(c, r.pos)
	validate(c, r, true)
	if err := r.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// parseYAML parses the one YAML document in data. It returns a nil root for
// an empty file, and ok false after reporting a syntax error.
func parseYAML(data []byte, r *reporter) (root *yaml.Node, ok bool) {
	defer func() {
		// yaml.v3 has panicked on malformed input before; a bad file must
		// never take the proxy down, least of all on reload.
		if p := recover(); p != nil {
			r.add(0, 0, "", "cannot parse YAML: %v", p)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		r.syntaxError(err)
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		r.syntaxError(err)
		return nil, false
	default:
		r.add(extra.Line, extra.Column, "", `a config file holds one YAML document; this "---" starts a second one`)
		return nil, false
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, true
		}
		return doc.Content[0], true
	}
	return &doc, true
}

var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reports a yaml.v3 parse error with its line in our format.
func (r *reporter) syntaxError(err error) {
	msg := err.Error()
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		r.add(line, 0, "", "invalid YAML: %s", m[2])
		return
	}
	r.add(0, 0, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}
