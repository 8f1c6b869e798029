package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// foreignKeys maps option names that operators bring from PgBouncer and
// PgDog configurations to ours, relative to the mapping they appear in.
var foreignKeys = map[string]string{
	"pool_mode":              "pool.mode",
	"pooler_mode":            "pool.mode",
	"default_pool_size":      "pool.size",
	"pool_size":              "pool.size",
	"min_pool_size":          "pool.min_size",
	"server_idle_timeout":    "pool.idle_timeout",
	"query_wait_timeout":     "pool.checkout_timeout",
	"server_connect_timeout": "pool.connect_timeout",
	"listen_addr":            "listen",
	"listen_port":            "listen",
	"tls_certificate":        "tls.cert",
	"tls_private_key":        "tls.key",
	"client_tls_cert_file":   "tls.cert",
	"client_tls_key_file":    "tls.key",
	"database_name":          "database",
	"data_type":              "type",
}

// suggestKey returns a hint for the unknown key name in a mapping decoded
// into t: the option it most likely means, or the list of valid keys.
func suggestKey(name string, t reflect.Type) string {
	fields := structFields(t)
	if to, ok := foreignKeys[name]; ok {
		first, _, _ := strings.Cut(to, ".")
		if _, ok := fields[first]; ok {
			return fmt.Sprintf("; did you mean %q?", to)
		}
	}
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := closest(name, names); best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	// The key may belong one level down: "size" directly under a database
	// instead of under its pool, or "host" instead of under shards.
	for _, n := range names {
		ft := t.FieldByIndex(fields[n]).Type
		list := false
		if ft.Kind() == reflect.Slice {
			ft, list = ft.Elem(), true
		}
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() != reflect.Struct || ft == durationType {
			continue
		}
		if _, ok := structFields(ft)[name]; ok {
			if list {
				return fmt.Sprintf("; %q belongs in each entry of %q", name, n)
			}
			return fmt.Sprintf("; did you mean %q?", n+"."+name)
		}
		// "pool_size" for "pool.size", "tls_cert" for "tls.cert".
		if rest, ok := strings.CutPrefix(name, n+"_"); ok && !list {
			if _, ok := structFields(ft)[rest]; ok {
				return fmt.Sprintf("; did you mean %q?", n+"."+rest)
			}
		}
	}
	return fmt.Sprintf(" (valid keys: %s)", strings.Join(names, ", "))
}

// closest returns the candidate nearest to s by edit distance, if it is
// near enough to be a typo, or "".
func closest(s string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), c)
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := max(2, len(s)/3)
	if bestDist < 0 || bestDist > limit || bestDist >= len(s) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent bytes
// each cost 1, so "databses" is one step from "databases".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // too long to be a typo worth the work
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// suggestValue returns "; did you mean X?" for a mistyped enum value.
func suggestValue(s string, valid []string) string {
	if best := closest(s, valid); best != "" && s != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return ""
}
