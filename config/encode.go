package config

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// YAML returns c as a config file: every option with its effective value
// (defaults filled, each database's pool resolved, ${ENV} expanded),
// durations as Go duration strings such as "5s". Loading the output gives
// back the same configuration. `proxy check-config` prints
// c.Redacted().YAML().
func (c *Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(encodeValue(reflect.ValueOf(c).Elem())); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeValue is the inverse of decoder.decode. It returns nil for a nil
// pointer or an empty list, whose key is then left out: to the loader an
// absent key, null and an empty list all mean "not set".
func encodeValue(v reflect.Value) *yaml.Node {
	if v.Type() == durationType {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: formatDuration(time.Duration(v.Int()))}
	}
	switch v.Kind() {
	case reflect.String:
		n := &yaml.Node{}
		// The loader expands ${…}; keep literal ones literal.
		n.SetString(strings.ReplaceAll(v.String(), "${", "$${"))
		return n
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return encodeValue(v.Elem())
	case reflect.Slice:
		if v.Len() == 0 {
			return nil
		}
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if k := v.Type().Elem().Kind(); k != reflect.Struct {
			n.Style = yaml.FlowStyle // [a, b] for lists of names and values
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, encodeValue(v.Index(i)))
		}
		return n
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := 0; i < v.NumField(); i++ {
			name, ok := yamlName(v.Type().Field(i))
			if !ok {
				continue
			}
			if child := encodeValue(v.Field(i)); child != nil {
				key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}
				n.Content = append(n.Content, key, child)
			}
		}
		return n
	}
	// Not used by the config types today; yaml.v3's own encoding is the
	// best guess for a kind added later.
	n := &yaml.Node{}
	if err := n.Encode(v.Interface()); err != nil {
		n.SetString(err.Error())
	}
	return n
}

// formatDuration writes d as time.Duration.String does, without the zero
// units it leaves at the end: "1h" rather than "1h0m0s", "5m" rather than
// "5m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
