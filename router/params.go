package router

import (
	"strconv"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/wire"
)

// Parameter references ($1, $2, …) in a statement's text, found by
// PostgreSQL's own lexer (pg_query.Scan), so that a $1 inside a string, a
// quoted identifier, a comment or a dollar-quoted body does not count.

// ParamCount returns how many parameters a query (SELECT, INSERT, UPDATE,
// DELETE, MERGE, WITH, VALUES, TABLE) with text sql and types explicit
// parameter types needs in a Bind: as PostgreSQL's parse analysis, the
// highest $n it references or the number of types given, whichever is
// larger. ok is false for other statements and when sql cannot be scanned
// (the server then counts, or reports the error).
func ParamCount(sql string, types int) (n int, ok bool) {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return 0, false
	}
	first := 0
	for first < len(res.Tokens) && (res.Tokens[first].Token == pg_query.Token_SQL_COMMENT || res.Tokens[first].Token == pg_query.Token_C_COMMENT) {
		first++
	}
	if first == len(res.Tokens) {
		// The empty query (or only comments): PostgreSQL gives it the
		// parameters the Parse declared, and no others.
		return types, true
	}
	switch res.Tokens[first].Token {
	case pg_query.Token_SELECT, pg_query.Token_INSERT, pg_query.Token_UPDATE, pg_query.Token_DELETE_P,
		pg_query.Token_WITH, pg_query.Token_VALUES, pg_query.Token_TABLE, pg_query.Token_MERGE:
	default:
		// Elsewhere a $n may be another statement's (PREPARE … AS,
		// a function's BEGIN ATOMIC body): the server counts.
		return 0, false
	}
	n = types
	for _, t := range res.Tokens {
		if t.Token != pg_query.Token_PARAM || int(t.End) > len(sql) || t.Start+1 >= t.End {
			continue
		}
		if v, err := strconv.Atoi(sql[t.Start+1 : t.End]); err == nil && v > n {
			n = v
		}
	}
	return n, true
}

// withParamPosition gives err, PostgreSQL's 42P02 "there is no parameter
// $n" for a statement routed without that parameter, the position
// PostgreSQL's parse analysis reports: the character position of the
// first reference to $n in sql.
func withParamPosition(err error, sql string) error {
	e, ok := wire.AsError(err)
	if !ok || e.Code != wire.UndefinedParameter || e.Position != "" {
		return err
	}
	const prefix = "there is no parameter $"
	if len(e.Message) <= len(prefix) || e.Message[:len(prefix)] != prefix {
		return err
	}
	want := e.Message[len(prefix)-1:]
	res, serr := pg_query.Scan(sql)
	if serr != nil {
		return err
	}
	for _, t := range res.Tokens {
		if t.Token == pg_query.Token_PARAM && int(t.End) <= len(sql) && sql[t.Start:t.End] == want {
			f := *e
			f.Position = strconv.Itoa(utf8.RuneCountInString(sql[:t.Start]) + 1)
			return &f
		}
	}
	return err
}
