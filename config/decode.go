package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds how many values one file may decode to. Aliases let a
// small file name the same subtree many times; this keeps such a file from
// taking unbounded time and memory. Real files hold thousands of values.
const maxNodes = 1 << 18

var durationType = reflect.TypeFor[time.Duration]()

// decoder fills a Config from a yaml.Node tree, following the yaml struct
// tags of the config types. It is strict where yaml.v3's own decoder is
// lenient: an unknown key is an error (with a suggestion), a duration must
// carry a unit, and every error names the line and column of its node. It
// expands ${ENV} in every scalar before converting it, so numbers and
// durations can come from the environment too. It records the position of
// every value it sets in the reporter's positions.
type decoder struct {
	*reporter
	lookupEnv func(string) (string, bool)
	budget    int                 // values left to decode; see maxNodes
	active    map[*yaml.Node]bool // alias targets being decoded, to refuse cycles
}

func newDecoder(r *reporter, lookupEnv func(string) (string, bool)) *decoder {
	return &decoder{reporter: r, lookupEnv: lookupEnv, budget: maxNodes, active: map[*yaml.Node]bool{}}
}

// defaulter is implemented by config types whose fresh values (a new list
// entry, a new *TLS) start from defaults rather than zero values. Keys the
// file gives then overwrite them, so an explicit 0 stays 0.
type defaulter interface{ setDefaults() }

// decode decodes n, the value of option path, into v.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	d.budget--
	if d.budget <= 0 {
		if d.budget == 0 {
			d.atNode(n, path, "the file expands to more than %d values; check its aliases", maxNodes)
		}
		return
	}
	d.pos[path] = position{line: n.Line, column: n.Column, null: isNull(n)}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil {
			d.atNode(n, path, "alias *%s names no anchor", n.Value)
			return
		}
		if d.active[target] {
			d.atNode(n, path, "alias *%s refers to a value that contains it", n.Value)
			return
		}
		d.active[target] = true
		d.decode(target, path, v)
		delete(d.active, target)
		// Errors about path point at the alias, where the value is used.
		d.pos[path] = position{line: n.Line, column: n.Column, null: isNull(target)}
		return
	}
	if isNull(n) {
		return // null means "not set": keep the default
	}
	if v.Type() == durationType {
		d.duration(n, path, v)
		return
	}
	switch v.Kind() {
	case reflect.String:
		if s, ok := d.text(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.integer(n, path, v)
	case reflect.Bool:
		d.boolean(n, path, v)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if v.IsNil() {
			setDefaults(p)
		} else {
			p.Elem().Set(v.Elem())
		}
		d.decode(n, path, p.Elem())
		v.Set(p)
	case reflect.Slice:
		d.sequence(n, path, v)
	case reflect.Struct:
		d.mapping(n, path, v)
	default:
		// Unreachable for the config types; kept so that a new field of an
		// unsupported kind fails loudly in tests instead of being ignored.
		d.atNode(n, path, "cannot decode into %s", v.Type())
	}
}

func setDefaults(p reflect.Value) {
	if df, ok := p.Interface().(defaulter); ok {
		df.setDefaults()
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// text returns the scalar n with ${ENV} expanded, or reports that path
// wanted something else.
func (d *decoder) text(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.atNode(n, path, "expected %s, got %s", want, describe(n, path))
		return "", false
	}
	s, err := expandEnv(n.Value, d.lookupEnv)
	if err != nil {
		var ee *envError
		if errors.As(err, &ee) {
			d.atNode(n, path, "%s", ee.message(isSecret(path)))
		} else {
			d.atNode(n, path, "%v", err)
		}
		return "", false
	}
	return s, true
}

func (d *decoder) integer(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.text(n, path, "an integer")
	if !ok {
		return
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange), err == nil && v.OverflowInt(i):
		d.atNode(n, path, "integer %s is out of range", s)
	case err != nil:
		d.atNode(n, path, "expected an integer, got %s", describeText(n, path, s))
	default:
		v.SetInt(i)
	}
}

func (d *decoder) boolean(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.text(n, path, "true or false")
	if !ok {
		return
	}
	switch strings.ToLower(s) {
	case "true":
		v.SetBool(true)
	case "false":
		v.SetBool(false)
	default:
		d.atNode(n, path, "expected true or false, got %s", describeText(n, path, s))
	}
}

// duration decodes a Go duration string. A bare number is refused, because
// "timeout: 5" could mean seconds or milliseconds and Go would read
// nanoseconds; "0" is the one exception, as in time.ParseDuration.
func (d *decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.text(n, path, `a duration such as "5s"`)
	if !ok {
		return
	}
	if s != "0" && isBareNumber(s) {
		d.atNode(n, path, `expected a duration with a unit such as "%ss" or "%sms", got the bare number %s`, s, s, s)
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.atNode(n, path, `expected a duration such as "5s", "250ms" or "1h30m", got %s`, describeText(n, path, s))
		return
	}
	v.SetInt(int64(dur))
}

// isBareNumber reports whether s is a decimal number without a unit.
func isBareNumber(s string) bool {
	if strings.ContainsAny(s, "eEnNxX") { // leave "1e3", "Inf" and "0x10" to ParseDuration's message
		return false
	}
	_, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	return err == nil
}

func (d *decoder) sequence(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.atNode(n, path, "expected a list, got %s", describe(n, path))
		return
	}
	if len(n.Content) == 0 {
		// An empty list means the same as an absent one; keeping both nil
		// lets reflect.DeepEqual compare snapshots.
		v.SetZero()
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		e := s.Index(i)
		setDefaults(e.Addr())
		d.decode(c, indexPath(path, i), e)
	}
	v.Set(s)
}

// mapping decodes a struct. Merge keys ("<<: *defaults") are applied first,
// so that the mapping's own keys win, as YAML specifies.
func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.atNode(n, path, "expected a mapping, got %s", describe(n, path))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].ShortTag() == "!!merge" {
			d.merge(n.Content[i+1], path, v)
		}
	}
	fields := structFields(v.Type())
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.atNode(k, path, "expected an option name, got %s", describe(k, ""))
			continue
		}
		name := k.Value
		if strings.HasPrefix(name, "x-") {
			continue // extension keys hold anchors for aliases, as in docker-compose files
		}
		child := keyPath(path, name)
		if prev, ok := seen[name]; ok {
			d.atNode(k, child, "duplicate key %q (first given at line %d)", name, prev.Line)
			continue
		}
		seen[name] = k
		f, ok := fields[name]
		if !ok {
			d.unknownKeys[path] = true
			hint := ""
			if !d.full() {
				hint = suggestKey(name, v.Type())
			}
			d.atNode(k, child, "unknown key %q%s", name, hint)
			continue
		}
		d.decode(atKey(k, val), child, v.FieldByIndex(f))
	}
}

// atKey returns val positioned at its key k when val is a block mapping or
// list starting on a later line, so that errors about it point at
// "mapping:" rather than at its first entry.
func atKey(k, val *yaml.Node) *yaml.Node {
	if (val.Kind != yaml.MappingNode && val.Kind != yaml.SequenceNode) || val.Line <= k.Line {
		return val
	}
	moved := *val
	moved.Line, moved.Column = k.Line, k.Column
	return &moved
}

func (d *decoder) merge(n *yaml.Node, path string, v reflect.Value) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if d.active[n] {
		d.atNode(n, path, "merge key refers to a mapping that contains it")
		return
	}
	d.active[n] = true
	defer delete(d.active, n)
	switch n.Kind {
	case yaml.MappingNode:
		d.mapping(n, path, v)
	case yaml.SequenceNode:
		// Earlier mappings in the list win, so apply them last.
		for i := len(n.Content) - 1; i >= 0; i-- {
			m := n.Content[i]
			for m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			if m.Kind != yaml.MappingNode || d.active[m] {
				d.atNode(n.Content[i], path, "a merge key takes a mapping or a list of mappings")
				continue
			}
			d.active[m] = true
			d.mapping(m, path, v)
			delete(d.active, m)
		}
	default:
		d.atNode(n, path, "a merge key takes a mapping or a list of mappings, got %s", describe(n, path))
	}
}

// structFields maps the yaml names of t's fields to their indexes. Fields
// tagged "-" are not part of the file format.
func structFields(t reflect.Type) map[string][]int {
	fields := map[string][]int{}
	for i := 0; i < t.NumField(); i++ {
		if name, ok := yamlName(t.Field(i)); ok {
			fields[name] = t.Field(i).Index
		}
	}
	return fields
}

// yamlName returns the key of field f in the file.
func yamlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		return strings.ToLower(f.Name), true
	}
	return name, true
}

// isSecret reports whether path holds a password, whose value must never
// appear in an error message.
func isSecret(path string) bool {
	last := path[strings.LastIndexAny(path, ".]")+1:]
	return last == "password" || last == "server_password"
}

// describe says what node n is, for "expected X, got Y".
func describe(n *yaml.Node, path string) string {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return describeText(n, path, n.Value)
	}
	return "nothing"
}

// describeText quotes a scalar's text, unless it belongs to a password or is
// long enough to be something pasted in the wrong place.
func describeText(n *yaml.Node, path, s string) string {
	switch {
	case isSecret(path):
		return "a value that is not shown because it may be a password"
	case len(s) > 60:
		return strconv.Quote(s[:57] + "...")
	case n.ShortTag() != "!!str" && !strings.Contains(n.Value, "${"):
		return s // a number or boolean reads best unquoted
	}
	return strconv.Quote(s)
}
