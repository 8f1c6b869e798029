package router

import (
	"strconv"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// COPY (SELECT …) TO STDOUT of a query whose rows must be merged across
// shards (ORDER BY, LIMIT, aggregates, DISTINCT, set operations): the
// shards run the SELECT as any merged read (Merge.Rewritten), and the
// executor writes the merged rows to the client as COPY data in the
// statement's format (executor/copyout.go). PostgreSQL's own checks of the
// statement — its options, the query's names and types, FORCE_QUOTE's
// columns — come first, from one shard running Probe, the client's COPY
// with its query wrapped so that it computes no row:
//
//	COPY (SELECT * FROM (query) __shardgate_copy WHERE false) TO STDOUT (options)
//
// whose error positions ProbePosition maps back to the client's text.

// CopyOut is how a COPY (query) TO STDOUT over several shards writes its
// rows (PostgreSQL's CopyFormatOptions for COPY TO).
type CopyOut struct {
	Format     string // text, csv or binary
	Delimiter  byte
	Null       string
	Header     bool
	Quote      byte
	Escape     byte
	ForceQuote []string // FORCE_QUOTE columns
	QuoteAll   bool     // FORCE_QUOTE *
	Encoding   string   // ENCODING, "" when not given

	// Probe is the client's statement with its query wrapped to return
	// no row; ProbePosition maps the positions of its errors.
	Probe       string
	queryStart  int // the query's first character (0-based, in characters)
	queryLength int // the query's length in characters

	stmt *pg_query.CopyStmt // until finishCopyOut
}

// Wrapping of the query in Probe.
const (
	copyProbeBefore = "SELECT * FROM ("
	copyProbeAfter  = ") __shardgate_copy WHERE false"
)

// ProbePosition maps a 1-based character position in Probe to the client's
// statement; 0 when it falls in the wrapping.
func (c *CopyOut) ProbePosition(pos int) int {
	before, after := len(copyProbeBefore), len(copyProbeAfter)
	switch {
	case pos <= c.queryStart:
		return pos
	case pos <= c.queryStart+before:
		return 0
	case pos <= c.queryStart+before+c.queryLength:
		return pos - before
	case pos <= c.queryStart+before+c.queryLength+after:
		return 0
	}
	return pos - before - after
}

// finishCopyOut reads the options of the part's COPY (query) TO STDOUT
// once its text is known; a text whose query it cannot find is refused.
func (p *part) finishCopyOut() {
	if p.copyOut == nil || p.copyOut.stmt == nil {
		return
	}
	if out := copyOut(p.text, p.copyOut.stmt); out != nil {
		p.copyOut = out
		return
	}
	p.copyOut, p.merge = nil, nil
	p.fanout = unsupported(hintOneShard, "COPY of a query whose rows must be merged across shards (ORDER BY, LIMIT, aggregates, DISTINCT)")
}

// copyOut reads the options of COPY (query) TO STDOUT whose statement text
// is sql; nil when the query cannot be found in the text.
func copyOut(sql string, cs *pg_query.CopyStmt) *CopyOut {
	start, end, ok := copyQuerySpan(sql)
	if !ok {
		return nil
	}
	c := &CopyOut{Format: "text", Delimiter: '\t', Null: `\N`, Quote: '"'}
	var delim, null, quote, escape *string
	for _, n := range cs.Options {
		d := n.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "format":
			c.Format = strings.ToLower(defString(d))
		case "delimiter":
			s := defString(d)
			delim = &s
		case "null":
			s := defString(d)
			null = &s
		case "header":
			c.Header = d.Arg == nil || defBool(d.Arg)
		case "quote":
			s := defString(d)
			quote = &s
		case "escape":
			s := defString(d)
			escape = &s
		case "force_quote":
			if d.Arg.GetAStar() != nil {
				c.QuoteAll = true
			}
			for _, item := range d.Arg.GetList().GetItems() {
				c.ForceQuote = append(c.ForceQuote, item.GetString_().GetSval())
			}
		case "encoding":
			c.Encoding = defString(d)
		}
	}
	if c.Format == "csv" {
		c.Delimiter, c.Null = ',', ""
	}
	if delim != nil && len(*delim) > 0 {
		c.Delimiter = (*delim)[0]
	}
	if null != nil {
		c.Null = *null
	}
	if quote != nil && len(*quote) > 0 {
		c.Quote = (*quote)[0]
	}
	c.Escape = c.Quote
	if escape != nil && len(*escape) > 0 {
		c.Escape = (*escape)[0]
	}
	c.Probe = sql[:start] + copyProbeBefore + sql[start:end] + copyProbeAfter + sql[end:]
	c.queryStart = utf8.RuneCountInString(sql[:start])
	c.queryLength = utf8.RuneCountInString(sql[start:end])
	return c
}

// copyQuerySpan finds the query of COPY (query) TO in sql: the text inside
// the parentheses that follow COPY, as byte offsets.
func copyQuerySpan(sql string) (start, end int, ok bool) {
	sc, err := pg_query.Scan(sql)
	if err != nil {
		return 0, 0, false
	}
	depth, k := 0, 0
	for _, t := range sc.Tokens {
		if t.Token == pg_query.Token_SQL_COMMENT || t.Token == pg_query.Token_C_COMMENT {
			continue
		}
		k++
		switch {
		case k == 1 && t.Token != pg_query.Token_COPY:
			return 0, 0, false
		case t.Token == pg_query.Token_ASCII_40: // (
			if depth == 0 {
				start = int(t.End)
			}
			depth++
		case t.Token == pg_query.Token_ASCII_41: // )
			depth--
			if depth == 0 {
				return start, int(t.Start), start > 0
			}
		}
	}
	return 0, 0, false
}

// defString is an option's argument as PostgreSQL's defGetString reads
// it; "" for none.
func defString(d *pg_query.DefElem) string {
	switch {
	case d.Arg == nil:
		return ""
	case d.Arg.GetString_() != nil:
		return d.Arg.GetString_().GetSval()
	case d.Arg.GetInteger() != nil:
		return strconv.Itoa(int(d.Arg.GetInteger().GetIval()))
	case d.Arg.GetBoolean() != nil:
		if d.Arg.GetBoolean().GetBoolval() {
			return "true"
		}
		return "false"
	case d.Arg.GetTypeName() != nil:
		names := d.Arg.GetTypeName().GetNames()
		if len(names) > 0 {
			return names[len(names)-1].GetString_().GetSval()
		}
	case d.Arg.GetAConst() != nil:
		if s := d.Arg.GetAConst().GetSval(); s != nil {
			return s.GetSval()
		}
	}
	return ""
}
