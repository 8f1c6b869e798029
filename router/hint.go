package router

import (
	"regexp"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/wire"
)

// commentHint is a routing directive written in a comment of the
// statement: /* shard: 2 */ or /* sharding_key: 42 */ (also -- comments,
// = instead of :, a shardgate. or shardgate_ prefix, and a quoted value).
type commentHint struct {
	shard *int
	key   *string
}

var hintPattern = regexp.MustCompile(`(?i)^\s*(?:shardgate[._])?(shard|sharding_key)\s*[:=]\s*(.*?)\s*$`)

// commentHint finds the routing directive in sql's comments, or nil.
func (r *Router) commentHint(sql string) (*commentHint, error) {
	if !strings.Contains(strings.ToLower(sql), "shard") {
		return nil, nil
	}
	var comments []string
	if scan, err := pg_query.Scan(sql); err == nil {
		for _, t := range scan.Tokens {
			if t.Token == pg_query.Token_C_COMMENT || t.Token == pg_query.Token_SQL_COMMENT {
				if int(t.Start) >= 0 && int(t.End) <= len(sql) && t.Start < t.End {
					comments = append(comments, sql[t.Start:t.End])
				}
			}
		}
	} else {
		// The scanner rejects the text (it will not parse either); a
		// directive in a C-style comment may still route it.
		comments = cComment.FindAllString(sql, -1)
	}
	var h *commentHint
	for _, c := range comments {
		c = strings.TrimPrefix(c, "--")
		c = strings.TrimSuffix(strings.TrimPrefix(c, "/*"), "*/")
		m := hintPattern.FindStringSubmatch(c)
		if m == nil {
			continue
		}
		if h == nil {
			h = &commentHint{}
		}
		value := unquote(m[2])
		if strings.EqualFold(m[1], "shard") {
			n, err := strconv.Atoi(value)
			if err != nil {
				return nil, wire.Errorf(wire.InvalidParameterValue, "shard hint %q is not a shard number", value)
			}
			if _, err := r.checkShard(n); err != nil {
				return nil, err
			}
			h.shard = &n
		} else {
			h.key = &value
		}
	}
	return h, nil
}

var cComment = regexp.MustCompile(`(?s)/\*.*?\*/`)

// unquote strips one level of single or double quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		q := string(s[0])
		return strings.ReplaceAll(s[1:len(s)-1], q+q, q)
	}
	return s
}

// resolve returns the shard a comment hint names; a shard number wins over
// a key.
func (h *commentHint) resolve(s *Statement) (int, error) {
	if h.shard != nil {
		return *h.shard, nil
	}
	return s.keyShard(*h.key)
}
