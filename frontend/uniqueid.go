package frontend

import (
	"bytes"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

var uniqueIDCall = []byte("shardgate.unique_id")

// expandUniqueIDs replaces every call of shardgate.unique_id() outside
// literals, quoted identifiers and comments with a new id from the proxy,
// so that routing sees the value (INSERT … VALUES (shardgate.unique_id(), …)
// routes by it). It returns sql itself when there is no call.
func expandUniqueIDs(sql []byte, next func() int64) []byte {
	if !mentionsUniqueID(sql) {
		return sql
	}
	var out []byte
	last := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(sql, i, c)
		case c == '$':
			i = skipDollar(sql, i)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-', c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipSpaceAndComments(sql, i)
		case (c == 's' || c == 'S') && (i == 0 || !identChar(sql[i-1])) && hasFold(sql[i:], uniqueIDCall):
			j := skipSpaces(sql, i+len(uniqueIDCall))
			if j < len(sql) && sql[j] == '(' {
				k := skipSpaces(sql, j+1)
				if k < len(sql) && sql[k] == ')' {
					out = append(out, sql[last:i]...)
					out = strconv.AppendInt(out, next(), 10)
					i = k + 1
					last = i
					continue
				}
			}
			i++
		default:
			i++
		}
	}
	if out == nil {
		return sql
	}
	return append(out, sql[last:]...)
}

func identChar(c byte) bool {
	return c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func skipSpaces(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipQuoted skips a '…' or "…" token (doubled quotes inside; E'…'
// backslash escapes are handled by treating \' as escaped).
func skipQuoted(b []byte, i int, q byte) int {
	escapes := q == '\'' && i > 0 && (b[i-1] == 'E' || b[i-1] == 'e')
	i++
	for i < len(b) {
		switch {
		case escapes && b[i] == '\\':
			i += 2
		case b[i] == q && i+1 < len(b) && b[i+1] == q:
			i += 2
		case b[i] == q:
			return i + 1
		default:
			i++
		}
	}
	return i
}

// skipDollar skips a dollar-quoted string ($tag$…$tag$); a lone $ (as in
// $1) is one byte.
func skipDollar(b []byte, i int) int {
	j := i + 1
	for j < len(b) && (b[j] == '_' || b[j] >= 'a' && b[j] <= 'z' || b[j] >= 'A' && b[j] <= 'Z' || j > i+1 && b[j] >= '0' && b[j] <= '9') {
		j++
	}
	if j >= len(b) || b[j] != '$' {
		return i + 1
	}
	tag := b[i : j+1]
	end := bytes.Index(b[j+1:], tag)
	if end < 0 {
		return len(b)
	}
	return j + 1 + end + len(tag)
}

func hasFold(b, word []byte) bool {
	return len(b) >= len(word) && bytes.EqualFold(b[:len(word)], word)
}

// mentionsUniqueID reports whether sql contains shardgate.unique_id, in
// any ASCII case, anywhere (in a literal or comment too). Every simple
// Query and Parse asks, and almost none does: it looks only at the dots of
// the text (bytes.IndexByte), not at every byte.
func mentionsUniqueID(sql []byte) bool {
	pre := uniqueIDCall[:len("shardgate")]
	post := uniqueIDCall[len("shardgate."):]
	for i := len(pre); i+len(post) < len(sql); i++ {
		j := bytes.IndexByte(sql[i:len(sql)-len(post)], '.')
		if j < 0 {
			return false
		}
		i += j
		if bytes.EqualFold(sql[i-len(pre):i], pre) && bytes.EqualFold(sql[i+1:i+1+len(post)], post) {
			return true
		}
	}
	return false
}

// uniqueIDInParse refuses shardgate.unique_id() in a prepared statement: a
// statement is parsed once but must produce a new id per execution.
func uniqueIDInParse(query []byte) error {
	if mentionsUniqueID(query) && !bytes.Equal(expandUniqueIDs(query, func() int64 { return 0 }), query) {
		return wire.Errorf(wire.FeatureNotSupported,
			"shardgate.unique_id() is supported in simple queries only; call SELECT shardgate.unique_id() and pass the value as a parameter")
	}
	return nil
}
