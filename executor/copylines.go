package executor

import (
	"bytes"
	"encoding/binary"
	"regexp"
	"strconv"

	"github.com/shardgate/shardgate/wire"
)

// Line numbers of a split COPY FROM STDIN.
//
// PostgreSQL's errors about a row of COPY FROM STDIN say where it was in
// their CONTEXT: "COPY accounts, line 6" (a duplicate key, a bad value, a
// row too short). Each shard counts the lines it got, which are only its
// rows (and the header): its line 4 can be the client's line 6. The proxy
// remembers, per shard, which of the client's lines it sent there, and
// puts the client's number into the shard's error (copyLines.fix).
//
// The record is compact — per piece of data sent, two varints: how many
// of the client's lines went elsewhere since the shard's previous piece,
// and how many lines this one has, about two bytes per row — and bounded:
// past maxCopyLineBytes per shard the proxy stops recording and leaves
// that shard's numbers as they are (a COPY of some ten million rows).

// maxCopyLineBytes bounds each shard's record of line numbers.
const maxCopyLineBytes = 8 << 20

// copyLines is the record of one split COPY.
type copyLines struct {
	binary bool
	next   int           // the client's lines consumed so far
	count  copyLineCount // the client's line counting
	shards []shardLines
}

// shardLines is one shard's part: enc holds the pieces, last is the
// client's line count when the shard's previous piece ended.
type shardLines struct {
	enc   []byte
	last  int
	count copyLineCount // the shard's: its first line is not the client's
	full  bool          // enc reached maxCopyLineBytes: no more recording
}

func newCopyLines(shards int, f CopyFormat) *copyLines {
	cl := &copyLines{binary: f.Format == "binary", count: newCopyLineCount(f), shards: make([]shardLines, shards)}
	for k := range cl.shards {
		cl.shards[k].count = cl.count
	}
	return cl
}

// copyLineCount counts lines as PostgreSQL's COPY FROM does
// (CopyReadLineText): one per line, and in CSV one more for each line
// ending inside a quoted field — compared with '\r' until the end of the
// first line told the file's line ending, so that a quoted newline of the
// first line does not count.
type copyLineCount struct {
	csv           bool
	quote, escape byte
	eol           byte // 0 before the first line's end, else '\n' or '\r' (CR LF)
}

func newCopyLineCount(f CopyFormat) copyLineCount {
	c := copyLineCount{csv: f.Format == "csv", quote: f.Quote, escape: f.Escape}
	if c.escape == c.quote {
		c.escape = 0 // as PostgreSQL: the quote then only toggles
	}
	return c
}

// line returns how many lines l, one line with its end, counts.
func (c *copyLineCount) line(l []byte) int {
	n := 1
	if c.csv {
		end := byte('\r')
		if c.eol == '\n' {
			end = '\n'
		}
		inQuote, lastEsc := false, false
		for _, ch := range l {
			if inQuote && ch == c.escape {
				lastEsc = !lastEsc
			}
			if ch == c.quote && !lastEsc {
				inQuote = !inQuote
			}
			if ch != c.escape {
				lastEsc = false
			}
			if inQuote && ch == end {
				n++
			}
		}
	}
	if c.eol == 0 {
		c.eol = '\n'
		if bytes.HasSuffix(l, []byte("\r\n")) {
			c.eol = '\r'
		}
	}
	return n
}

// sent records that raw went to shards ks: a line of text or csv (row or
// not), a row of binary (the header and trailer are no line).
func (cl *copyLines) sent(raw []byte, row bool, ks ...int) {
	if cl.binary && !row {
		return
	}
	n := 1
	if !cl.binary {
		n = cl.count.line(raw)
	}
	for _, k := range ks {
		sh := &cl.shards[k]
		if sh.full {
			continue
		}
		if len(sh.enc) >= maxCopyLineBytes {
			sh.full = true
			continue
		}
		// The shard may count the piece as fewer lines (it is the shard's
		// first but not the client's): its last line is the client's last.
		local := n
		if !cl.binary {
			local = min(sh.count.line(raw), n)
		}
		sh.enc = binary.AppendUvarint(sh.enc, uint64(cl.next+n-local-sh.last))
		sh.enc = binary.AppendUvarint(sh.enc, uint64(local))
		sh.last = cl.next + n
	}
	cl.next += n
}

// client returns the client's line number of shard k's line local, or
// false when the record does not cover it.
func (cl *copyLines) client(k, local int) (int, bool) {
	sh := &cl.shards[k]
	if sh.full || local < 1 {
		return 0, false
	}
	b := sh.enc
	at, global := 0, 0 // lines of the shard and of the client before the piece
	for len(b) > 0 {
		gap, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return 0, false
		}
		n, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return 0, false
		}
		b = b[n1+n2:]
		global += int(gap)
		if local <= at+int(n) {
			return global + local - at, true
		}
		at += int(n)
		global += int(n)
	}
	return 0, false
}

// copyContextLine finds the line number in a COPY error's CONTEXT.
var copyContextLine = regexp.MustCompile(`^(COPY [^\n]*?, line )([0-9]+)`)

// fix gives e, shard k's error, the client's line number in its CONTEXT.
func (cl *copyLines) fix(k int, e *wire.Error) *wire.Error {
	for i, f := range e.More {
		if f.Type != 'W' {
			continue
		}
		m := copyContextLine.FindStringSubmatchIndex(f.Value)
		if m == nil {
			return e
		}
		local, err := strconv.Atoi(f.Value[m[4]:m[5]])
		if err != nil {
			return e
		}
		line, ok := cl.client(k, local)
		if !ok {
			return e
		}
		fixed := *e
		fixed.More = append([]wire.ErrorField{}, e.More...)
		fixed.More[i].Value = f.Value[:m[4]] + strconv.Itoa(line) + f.Value[m[5]:]
		return &fixed
	}
	return e
}
