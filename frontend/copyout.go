package frontend

import (
	"strconv"
	"strings"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// runCopyOut runs COPY (query) TO STDOUT whose rows are merged across
// shards (router/copyout.go): first the statement's probe on the first
// shard, for PostgreSQL's own errors about its options and its query
// (positions mapped back to the client's text), then the query merged,
// written to the client as COPY data (executor.CopyOut), CopyDone and the
// tag COPY n.
func (c *client) runCopyOut(p *routePlan) error {
	opts := p.CopyOut
	serr, err := c.xs.ProbeOn(p.Shards[0], opts.Probe)
	if err != nil {
		return c.shardFailed(err)
	}
	if serr != nil {
		if pos, perr := strconv.Atoi(serr.Position); perr == nil {
			if m := opts.ProbePosition(pos); m > 0 {
				serr.Position = strconv.Itoa(m)
			} else {
				serr.Position = ""
			}
		}
		c.ranOn(p.Shards[:1])
		c.releaseIfIdle()
		return c.shardedError(serr)
	}
	if err := c.copyOutSupported(p); err != nil {
		c.releaseIfIdle()
		return c.shardedError(err)
	}
	sink := executor.NewCopyOut(clientSink{c}, opts)
	a := c.answer(p, executor.DescribeRows)
	a.Sink = sink
	tag, err := c.xs.Execute(a, false)
	if err == nil {
		sink.Done()
		tag = "COPY " + strconv.FormatInt(sink.Rows(), 10)
	}
	return c.answerMany(p, tag, err)
}

// copyOutSupported refuses what the proxy cannot write as COPY TO would:
// the binary format (the shards' simple Queries answer text), an ENCODING
// other than the client's, and client encodings whose multibyte characters
// may contain ASCII bytes, which the escaping would take for delimiters.
func (c *client) copyOutSupported(p *routePlan) error {
	opts := p.CopyOut
	hint := "Route the statement to one shard with /* shard: N */, or copy the query's rows without merging them (no ORDER BY, LIMIT, aggregates or DISTINCT)."
	if opts.Format == "binary" {
		return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "COPY … TO in the binary format of a query whose rows are merged across shards is not supported",
			Hint:    "Use the text or CSV format. " + hint}
	}
	enc := ""
	if s := c.xs.Server(p.Shards[0]); s != nil {
		enc = s.Params["client_encoding"]
	}
	if opts.Encoding != "" && encodingName(opts.Encoding) != encodingName(enc) {
		return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "COPY … TO with an ENCODING other than client_encoding of a query whose rows are merged across shards is not supported",
			Hint:    "SET client_encoding instead. " + hint}
	}
	switch encodingName(enc) {
	case "sjis", "shiftjis", "shiftjis2004", "big5", "gbk", "uhc", "gb18030", "johab", "windows932", "windows936", "windows949", "windows950", "mskanji", "tcvn", "":
		return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "COPY … TO of a query whose rows are merged across shards is not supported in client_encoding " + enc,
			Hint:    "SET client_encoding TO 'UTF8' for the COPY. " + hint}
	}
	return nil
}

// encodingName normalises an encoding name as pg_char_to_encoding
// compares them: case and punctuation do not count.
func encodingName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}
