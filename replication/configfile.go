package replication

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shardgate/shardgate/config"
)

// shardingKeys are the keys of a database entry that a cutover moves from
// the destination's entry to the source's.
var shardingKeys = []string{"shards", "sharded_tables", "sharded_schemas", "omni_tables"}

// RewriteCutoverFile returns the config file text with database src's
// shards and sharding rules replaced by dst's, edited at the YAML node
// level: everything else — comments, ${ENV} references for secrets, key
// order — stays as the operator wrote it.
func RewriteCutoverFile(data []byte, src, dst string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the file is not a YAML mapping")
	}
	dbs := mapValue(doc.Content[0], "databases")
	if dbs == nil || dbs.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("no databases list")
	}
	var s, d *yaml.Node
	for _, e := range dbs.Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		switch name := mapValue(e, "name"); {
		case name == nil:
		case name.Value == src:
			s = e
		case name.Value == dst:
			d = e
		}
	}
	if s == nil || d == nil {
		return nil, fmt.Errorf("database %q or %q is not written in the file (aliases and merges are not followed)", src, dst)
	}
	for _, key := range shardingKeys {
		removeKey(s, key)
		if v := mapValue(d, key); v != nil {
			s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, cloneNode(v))
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	enc.Close()
	return buf.Bytes(), nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func removeKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = cloneNode(x)
	}
	return &c
}

// WriteCutoverFile rewrites the config file at path for a cutover of src
// onto dst's shards (RewriteCutoverFile), after checking that the
// rewritten file parses to exactly want (the configuration the cutover
// installs). The current file is kept as <path>.bak-<timestamp>; the new
// one is written to a temporary file and renamed over path. It returns the
// parsed configuration and the backup's name.
func WriteCutoverFile(path, src, dst string, want *config.Config, now time.Time) (*config.Config, string, error) {
	old, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("write config: %w", err)
	}
	data, err := RewriteCutoverFile(old, src, dst)
	if err != nil {
		return nil, "", fmt.Errorf("write config: %w", err)
	}
	parsed, err := config.Parse(data, path)
	if err != nil {
		return nil, "", fmt.Errorf("write config: the rewritten file does not parse: %w", err)
	}
	got, exp := parsed.Database(src), want.Database(src)
	if got == nil || exp == nil || !reflect.DeepEqual(got.Shards, exp.Shards) || !reflect.DeepEqual(withoutLines(got.ShardedTables), withoutLines(exp.ShardedTables)) ||
		!reflect.DeepEqual(got.ShardedSchemas, exp.ShardedSchemas) || !reflect.DeepEqual(got.OmniTables, exp.OmniTables) {
		return nil, "", fmt.Errorf("write config: the rewritten file does not describe the new shards of %q", src)
	}
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	backup := path + ".bak-" + now.UTC().Format("20060102T150405.000Z")
	if err := writeAtomic(backup, old, mode); err != nil {
		return nil, "", fmt.Errorf("write config: backup: %w", err)
	}
	header := []byte("# Rewritten by shardgate at a resharding cutover (" + now.UTC().Format(time.RFC3339) +
		"): database " + src + " now has " + dst + "'s shards; the previous file is " + filepath.Base(backup) + ".\n")
	if err := writeAtomic(path, append(header, data...), mode); err != nil {
		return nil, "", fmt.Errorf("write config: %w", err)
	}
	return parsed, backup, nil
}

// withoutLines drops the file positions, which differ between files.
func withoutLines(ts []config.ShardedTable) []config.ShardedTable {
	out := make([]config.ShardedTable, len(ts))
	for i, t := range ts {
		t.Line = 0
		out[i] = t
	}
	return out
}
