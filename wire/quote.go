package wire

import "strings"

// QuoteLiteral quotes s as an SQL string literal, as an escape string (E'…') when s
// holds a backslash (so that the result means s whatever
// standard_conforming_strings is).
func QuoteLiteral(s string) string {
	if strings.ContainsRune(s, '\\') {
		return "E'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// QuoteIdent quotes s as an SQL identifier.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
