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
	next   int // the client's lines consumed so far
	shards []shardLines
}

// shardLines is one shard's part: enc holds the pieces, last is the
// client's line count when the shard's previous piece ended.
type shardLines struct {
	enc  []byte
	last int
	full bool // enc reached maxCopyLineBytes: no more recording
}

func newCopyLines(shards int, binaryFormat bool) *copyLines {
	return &copyLines{binary: binaryFormat, shards: make([]shardLines, shards)}
}

// lines returns how many of PostgreSQL's COPY lines raw is: its newlines
// in text and csv, one per row in binary (the header and trailer none).
func (cl *copyLines) lines(raw []byte, row bool) int {
	if cl.binary {
		if row {
			return 1
		}
		return 0
	}
	return bytes.Count(raw, []byte{'\n'})
}

// sent records that raw, n of the client's lines, went to the shards
// ks (indexes into the plan's shards); the client's count then advances
// by n.
func (cl *copyLines) sent(n int, ks ...int) {
	if n == 0 {
		return
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
		sh.enc = binary.AppendUvarint(sh.enc, uint64(cl.next-sh.last))
		sh.enc = binary.AppendUvarint(sh.enc, uint64(n))
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
