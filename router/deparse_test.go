package router

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// TestDeparseRoundTrip: what the router writes back (deparse, after
// guardTests) reads as the expression the client wrote, for operators
// whose precedence the deparser gets wrong: each expression is parsed,
// deparsed, parsed again, and the two trees compared.
func TestDeparseRoundTrip(t *testing.T) {
	exprs := []string{
		"(NOT a) IS NULL", "(NOT a) IS TRUE", "(a OR b) IS NULL", "(a AND b) IS NULL", "NOT (a IS NULL)",
		"(a = b) = c", "a = (b = c)", "(a < b) < c", "- (a + b)", "-(-a)", "(a || b) IS NULL", "(a IS NULL) = b",
		"(a OR b) IS NOT NULL", "(NOT a) IS NOT FALSE", "(a AND NOT b) IS UNKNOWN",
		"(a BETWEEN b AND c) = d", "a BETWEEN (b AND c) AND d", "(a LIKE b) = c", "(a IN (1,2)) = b",
		"NOT (a = b)", "(NOT a) = b", "(NOT a) AND b", "NOT (a AND b)", "(a OR b) AND c", "a OR (b AND c)",
		"(a::int + b)::text", "(a + b)::text", "(-a)::text", "(- 1)::text", "(a * b) ^ c", "a * (b ^ c)",
		"(a ^ b) ^ c", "a ^ (b ^ c)", "(a - b) - c", "a - (b - c)", "(a / b) * c", "a / (b * c)",
		"(a IS DISTINCT FROM b) IS NULL", "(a IS DISTINCT FROM b) = c", "a IS DISTINCT FROM (b = c)",
		"(a COLLATE \"C\") < b", "(a < b) COLLATE \"C\"", "(a AT TIME ZONE 'UTC') = b", "(a ->> 'x') = b", "a ->> ('x' || b)",
		"(a @> b) = c", "(CASE WHEN a THEN b END) IS NULL", "(a[1]).f", "(ROW(a, b)).f1", "(ARRAY[a])[1]", "(a = ANY(b)) IS NULL",
		"NOT a IS NULL", "(a ISNULL) = b", "(a IS NOT NULL) IS NOT NULL", "(a + b) % c", "a % (b + c)", "(a & b) | c", "a & (b | c)",
		"(a << b) + c", "a << (b + c)", "(a)::int[]", "(a || b)[1]", "(a - b) COLLATE \"C\"",
		"(EXISTS (SELECT 1)) IS NULL", "(NOT EXISTS (SELECT 1)) IS NULL", "(a SIMILAR TO b) IS NULL", "(a ~ b) = c",
		"(a <> b) IS TRUE", "(a IS TRUE) IS FALSE", "(-a) ^ 2", "-(a ^ 2)", "(a::int) ^ 2",
	}
	for _, e := range exprs {
		if out, ok, err := roundTrip(e); err != nil {
			t.Fatal(err)
		} else if !ok {
			t.Errorf("%s: deparsed as %q, which reads differently", e, out)
		}
	}
}

// roundTrip parses SELECT e FROM t, deparses it as the router does and
// parses that again: ok when both trees are the same expression (the one
// guardTests makes, where it wraps an operand). An error is an expression
// that does not parse (the test's own mistake).
func roundTrip(e string) (out string, ok bool, err error) {
	tree, err := pg_query.Parse("SELECT " + e + " FROM t")
	if err != nil {
		return "", false, fmt.Errorf("%s: parse: %w", e, err)
	}
	if out, err = deparse(tree.Version, tree.Stmts[0].Stmt); err != nil {
		return "", false, nil
	}
	again, perr := pg_query.Parse(out)
	if perr != nil {
		return out + " (does not parse: " + perr.Error() + ")", false, nil
	}
	want := withoutLocations(guardTests(tree.Stmts[0].Stmt)).GetSelectStmt().TargetList[0]
	return out, sameExpr(want, withoutLocations(again.Stmts[0].Stmt.GetSelectStmt().TargetList[0])), nil
}

// TestDeparseRandomExpressions: random expressions, fully parenthesized,
// over PostgreSQL's operators of every precedence level, read alike after
// deparse. DEPARSE_SEED replays a run; the seed is printed on failure.
func TestDeparseRandomExpressions(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("DEPARSE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DEPARSE_SEED=%q: %v", v, err)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	leaves := []string{"a", "b", "c", "1", "'x'", "NULL", "true", "t.d", "$1"}
	binary := []string{"AND", "OR", "=", "<>", "<", ">=", "+", "-", "*", "/", "%", "^", "||", "LIKE", "NOT LIKE", "ILIKE",
		"IS DISTINCT FROM", "IS NOT DISTINCT FROM", "~", "@>", "&", "|", "#", "<<", "->>", "->", "OPERATOR(pg_catalog.+)"}
	postfix := []string{"IS NULL", "IS NOT NULL", "IS TRUE", "IS NOT TRUE", "IS FALSE", "IS UNKNOWN", "ISNULL", "NOTNULL"}
	var gen func(depth int) string
	gen = func(depth int) string {
		if depth == 0 || rng.IntN(4) == 0 {
			return leaves[rng.IntN(len(leaves))]
		}
		switch rng.IntN(10) {
		case 0:
			return "(NOT " + gen(depth-1) + ")"
		case 1:
			return "(- " + gen(depth-1) + ")"
		case 2:
			return "(" + gen(depth-1) + " " + postfix[rng.IntN(len(postfix))] + ")"
		case 3:
			return "(" + gen(depth-1) + " BETWEEN " + gen(depth-1) + " AND " + gen(depth-1) + ")"
		case 4:
			return "(" + gen(depth-1) + " IN (" + gen(depth-1) + ", " + gen(depth-1) + "))"
		case 5:
			return "(" + gen(depth-1) + ")::text"
		case 6:
			return "(" + gen(depth-1) + " = ANY (" + gen(depth-1) + "))"
		case 7:
			// Of a column or constant: over an operator it would be of a
			// type without collations, PostgreSQL's error.
			return "(" + leaves[rng.IntN(len(leaves))] + " COLLATE \"C\")"
		default:
			return "(" + gen(depth-1) + " " + binary[rng.IntN(len(binary))] + " " + gen(depth-1) + ")"
		}
	}
	failures := 0
	for i := 0; i < 3000 && failures < 5; i++ {
		e := gen(4)
		out, ok, err := roundTrip(e)
		if err != nil {
			continue // not every combination is valid SQL
		}
		if !ok {
			failures++
			t.Errorf("seed %d (DEPARSE_SEED=%d replays it): %s\n deparsed as %s", seed, seed, e, out)
		}
	}
}

// TestDeparseRoundTripForms: the SQL forms with a syntax of their own
// (typed literals and SQL-standard intervals, casts with typmods, the
// functions with keywords, window frames, ordered-set aggregates,
// operators by name) read alike after deparse, as the router writes them
// into the statements the shards run.
func TestDeparseRoundTripForms(t *testing.T) {
	for _, e := range []string{
		"INTERVAL '1' DAY", "INTERVAL '1 2' DAY TO HOUR", "INTERVAL '1' YEAR", "interval(2) '1.23456 seconds'", "INTERVAL '1:2' MINUTE TO SECOND",
		"date '2020-01-01'", "timestamp(3) '2020-01-01 1:2:3.45678'", "time with time zone '12:00+02'", "timestamptz '2020-01-01'",
		"CAST(x AS numeric(10,2))", "x::timestamp(3)", "'a'::char(5)", "B'101'::bit(3)", "1::float(24)", "1::double precision",
		"EXTRACT(epoch FROM x)", "SUBSTRING(x FROM 1 FOR 2)", "SUBSTRING(x FROM 'a.c')", "POSITION('a' IN x)", "TRIM(BOTH 'x' FROM y)", "TRIM(LEADING FROM y)",
		"OVERLAY(x PLACING 'ab' FROM 2 FOR 3)", "x AT TIME ZONE 'UTC'", "CURRENT_DATE", "CURRENT_TIMESTAMP(3)", "LOCALTIME", "SESSION_USER", "CURRENT_SCHEMA",
		"ARRAY(SELECT 1)", "ROW(1, 'a')", "(x).f", "x[1:2]", "x[:2]", "U&'\\0041'", "E'a\\nb'", "B'101'", "X'1F'", "$$dol$$",
		"1e5", ".5", "-1", "- 1", "+1", "2147483648", "9223372036854775808", "1.50", "'1'::money", "NULL::int", "'{1,2}'::int[]",
		"x IS DOCUMENT", "COALESCE(a, b)", "NULLIF(a, b)", "GREATEST(a, b)", "a IS NOT DISTINCT FROM b", "x <@ y",
		"CASE x WHEN 1 THEN 'a' ELSE 'b' END", "x::varchar(10)", "'x'::name", "x COLLATE \"C\" < 'b'", "x::text COLLATE \"C\"",
		"count(*) FILTER (WHERE a > 1)", "percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", "string_agg(x, ',' ORDER BY y DESC NULLS LAST)",
		"sum(x) OVER (PARTITION BY a ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)", "sum(x) OVER (ORDER BY b RANGE BETWEEN '1 day' PRECEDING AND CURRENT ROW EXCLUDE TIES)",
		"array_agg(DISTINCT x ORDER BY x)", "json_build_object('a', 1)", "x -> 'a' ->> 'b'", "x #>> '{a,b}'", "x @? '$.a'", "'a' || 1",
		"OPERATOR(pg_catalog.=)(a, b)", "a OPERATOR(pg_catalog.=) b", "x SIMILAR TO 'a%' ESCAPE '#'", "x LIKE 'a#%' ESCAPE '#'", "x NOT ILIKE 'a'",
		"a BETWEEN SYMMETRIC 2 AND 1", "x IS NORMALIZED", "NORMALIZE(x, NFKC)", "'2020-01-01'::date + 1", "xmlelement(name foo, 'bar')",
		"CURRENT_TIME(2)", "LOCALTIMESTAMP(1)", "USER", "CURRENT_CATALOG", "SYSTEM_USER", "x::bit varying(5)", "'1'::interval minute", "'1'::interval(0)", "'1 day'::interval hour to second(2)",
	} {
		if out, ok, err := roundTrip(e); err != nil {
			t.Fatal(err)
		} else if !ok {
			t.Errorf("%s: deparsed as %q, which reads differently", e, out)
		}
	}
}
