package executor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/shardgate/shardgate/wire"
)

// CopyFormat describes the data of a COPY … FROM STDIN.
type CopyFormat struct {
	Format    string // text, csv or binary
	Delimiter byte   // text: tab, csv: comma
	Quote     byte   // csv only
	Escape    byte   // csv only
	Null      string // text: \N, csv: empty unquoted field
	Header    bool
	KeyCol    int // the field whose value routes the row
	// Table, KeyName and Fields (the plan's Copy) give the splitter's
	// errors about a row PostgreSQL's message and CONTEXT; without them
	// (Table "") the errors name only the field.
	Table   string
	KeyName string
	Fields  int
}

// NewCopyFormat fills PostgreSQL's defaults for options given as "".
func NewCopyFormat(format, delim, null, quote, escape string, header bool, keyCol int) (CopyFormat, error) {
	f := CopyFormat{Format: format, Header: header, KeyCol: keyCol}
	if f.Format == "" {
		f.Format = "text"
	}
	pick := func(s string, def byte, what string) (byte, error) {
		switch len(s) {
		case 0:
			return def, nil
		case 1:
			return s[0], nil
		}
		return 0, wire.Errorf(wire.FeatureNotSupported, "COPY %s must be a single one-byte character", what)
	}
	var err error
	switch f.Format {
	case "text":
		if f.Delimiter, err = pick(delim, '\t', "delimiter"); err != nil {
			return f, err
		}
		f.Null = `\N`
	case "csv":
		if f.Delimiter, err = pick(delim, ',', "delimiter"); err != nil {
			return f, err
		}
		if f.Quote, err = pick(quote, '"', "quote"); err != nil {
			return f, err
		}
		if f.Escape, err = pick(escape, f.Quote, "escape"); err != nil {
			return f, err
		}
	case "binary":
	default:
		return f, wire.Errorf(wire.FeatureNotSupported, "COPY format %q is not supported", f.Format)
	}
	if null != "" {
		f.Null = null
	}
	return f, nil
}

// CopySplitter cuts COPY data, which arrives in CopyData chunks whose
// boundaries mean nothing, into rows, and finds each row's key field.
type CopySplitter struct {
	f      CopyFormat
	buf    []byte
	header bool // the header (csv/text HEADER line, binary signature) was seen
	ended  bool // \. or the binary trailer was seen
	lineno int  // PostgreSQL's line number of the current row: lines read (the header's too), binary rows
	count  copyLineCount
	// Row receives one complete row (raw bytes, as they must be sent on)
	// and its key field (nil for NULL).
	Row func(raw, key []byte) error
	// All receives bytes every shard needs: header line, binary header and
	// trailer, the \. end marker.
	All func(raw []byte) error
}

// NewCopySplitter returns a splitter for f.
func NewCopySplitter(f CopyFormat) *CopySplitter {
	return &CopySplitter{f: f, count: newCopyLineCount(f)}
}

// Feed consumes one CopyData payload.
func (s *CopySplitter) Feed(data []byte) error {
	s.buf = append(s.buf, data...)
	var n int
	var err error
	if s.f.Format == "binary" {
		n, err = s.binaryRows()
	} else {
		n, err = s.lines()
	}
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	return err
}

// Finish checks that no partial row is left at CopyDone.
func (s *CopySplitter) Finish() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.f.Format != "binary" {
		// A last line without a newline is a row (PostgreSQL accepts it);
		// one that ends in a newline is a CSV row whose quoted field is
		// still open, which goes on as it is, for the shard to fail as
		// PostgreSQL would.
		line := s.buf
		s.buf = nil
		if !bytes.HasSuffix(line, []byte{'\n'}) {
			line = append(line, '\n')
		}
		return s.line(line)
	}
	if !s.header {
		// PostgreSQL's ReceiveCopyBinaryHeader, on a header cut short.
		switch b := s.buf; {
		case len(b) < len(copySignature) || !bytes.Equal(b[:len(copySignature)], copySignature):
			return wire.Errorf(wire.BadCopyFileFormat, "COPY file signature not recognized")
		case len(b) < 15:
			return wire.Errorf(wire.BadCopyFileFormat, "invalid COPY file header (missing flags)")
		case len(b) < 19:
			return wire.Errorf(wire.BadCopyFileFormat, "invalid COPY file header (missing length)")
		}
	}
	return wire.Errorf(wire.BadCopyFileFormat, "unexpected EOF in COPY data")
}

func (s *CopySplitter) lines() (int, error) {
	start := 0
	inQuote := false
	csv := s.f.Format == "csv"
	for i := 0; i < len(s.buf); i++ {
		c := s.buf[i]
		if csv {
			switch {
			case inQuote && c == s.f.Escape && s.f.Escape != s.f.Quote && i+1 < len(s.buf):
				i++ // escaped character
				continue
			case c == s.f.Quote:
				inQuote = !inQuote
				continue
			case inQuote:
				continue
			}
		} else if c == '\\' {
			i++ // escape sequence: the next byte is data, even a newline
			continue
		}
		if c != '\n' {
			continue
		}
		if err := s.line(s.buf[start : i+1]); err != nil {
			return start, err
		}
		start = i + 1
	}
	return start, nil
}

// line handles one complete line (with its newline).
func (s *CopySplitter) line(l []byte) error {
	if s.ended {
		return nil // PostgreSQL ignores data after \.
	}
	s.lineno += s.count.line(l)
	body := bytes.TrimRight(l, "\r\n")
	if s.f.Format == "text" && string(body) == `\.` || s.f.Format == "csv" && string(body) == `\.` {
		s.ended = true
		return s.All(l)
	}
	if s.f.Header && !s.header {
		s.header = true
		return s.All(l)
	}
	key, err := s.field(body)
	if err != nil {
		return s.rowError(err, body)
	}
	return s.Row(l, key)
}

// missingKey is PostgreSQL's error for a row without the key field.
func (s *CopySplitter) missingKey() *wire.Error {
	if s.f.KeyName == "" {
		return wire.Errorf(wire.BadCopyFileFormat, "missing data for the sharding key column (field %d)", s.f.KeyCol+1)
	}
	return wire.Errorf(wire.BadCopyFileFormat, "missing data for column %q", s.f.KeyName)
}

// rowError gives err, the splitter's error about the current row,
// PostgreSQL's CONTEXT: `COPY accounts, line 3: "…"` with the line as read
// (text and csv), `COPY accounts, line 3` for binary (line nil).
func (s *CopySplitter) rowError(err error, line []byte) error {
	e, ok := err.(*wire.Error)
	if !ok || s.f.Table == "" {
		return err
	}
	where := fmt.Sprintf("COPY %s, line %d", s.f.Table, s.lineno)
	if line != nil {
		where += `: "` + copyPrintout(line) + `"`
	}
	return e.WithContext(where)
}

// copyPrintout is PostgreSQL's limit_printout_length: a line longer than
// 100 bytes is cut there (at a character boundary) and ends in "...".
func copyPrintout(line []byte) string {
	const maxDisplay = 100
	if len(line) <= maxDisplay {
		return string(line)
	}
	cut := maxDisplay
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return string(line[:cut]) + "..."
}

// field returns the unescaped value of the key field of a text or csv
// line (nil for NULL).
func (s *CopySplitter) field(line []byte) ([]byte, error) {
	idx := 0
	i := 0
	csv := s.f.Format == "csv"
	for idx < s.f.KeyCol {
		if i >= len(line) {
			return nil, s.missingKey()
		}
		c := line[i]
		switch {
		case csv && c == s.f.Quote:
			i++
			for i < len(line) {
				if line[i] == s.f.Escape && s.f.Escape != s.f.Quote && i+1 < len(line) {
					i += 2
					continue
				}
				if line[i] == s.f.Quote {
					if s.f.Escape == s.f.Quote && i+1 < len(line) && line[i+1] == s.f.Quote {
						i += 2
						continue
					}
					break
				}
				i++
			}
			i++
		case !csv && c == '\\':
			i += 2
		case c == s.f.Delimiter:
			idx++
			i++
		default:
			i++
		}
	}
	// Now at the start of the key field: find its end.
	if csv {
		return s.csvValue(line[min(i, len(line)):])
	}
	j := i
	for j < len(line) && line[j] != s.f.Delimiter {
		if line[j] == '\\' {
			j++
		}
		j++
	}
	raw := line[i:min(j, len(line))]
	if string(raw) == s.f.Null {
		return nil, nil
	}
	return unescapeText(raw)
}

func (s *CopySplitter) csvValue(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != s.f.Quote {
		end := bytes.IndexByte(b, s.f.Delimiter)
		if end < 0 {
			end = len(b)
		}
		v := b[:end]
		if string(v) == s.f.Null {
			return nil, nil
		}
		return v, nil
	}
	var out []byte
	for i := 1; i < len(b); i++ {
		c := b[i]
		if c == s.f.Escape && i+1 < len(b) && (b[i+1] == s.f.Quote || b[i+1] == s.f.Escape) && (s.f.Escape != s.f.Quote || b[i+1] == s.f.Quote) {
			out = append(out, b[i+1])
			i++
			continue
		}
		if c == s.f.Quote {
			return append([]byte{}, out...), nil
		}
		out = append(out, c)
	}
	return nil, wire.Errorf(wire.BadCopyFileFormat, "unterminated CSV quoted field")
}

// unescapeText decodes COPY text-format backslash escapes.
func unescapeText(b []byte) ([]byte, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		return b, nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		i++
		switch c := b[i]; c {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			j := i + 1
			for j < len(b) && j < i+3 && isHex(b[j]) {
				j++
			}
			v, _ := strconv.ParseUint(string(b[i+1:j]), 16, 8)
			out = append(out, byte(v))
			i = j - 1
		default:
			if c >= '0' && c <= '7' {
				j := i
				for j < len(b) && j < i+3 && b[j] >= '0' && b[j] <= '7' {
					j++
				}
				v, _ := strconv.ParseUint(string(b[i:j]), 8, 8)
				out = append(out, byte(v))
				i = j - 1
				continue
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

var copySignature = []byte("PGCOPY\n\xff\r\n\x00")

func (s *CopySplitter) binaryRows() (int, error) {
	pos := 0
	b := s.buf
	if !s.header {
		if len(b) < 19 {
			return 0, nil
		}
		if !bytes.Equal(b[:11], copySignature) {
			return 0, wire.Errorf(wire.BadCopyFileFormat, "COPY file signature not recognized")
		}
		ext := int(binary.BigEndian.Uint32(b[15:19]))
		if ext < 0 || len(b) < 19+ext {
			return 0, nil
		}
		if err := s.All(b[:19+ext]); err != nil {
			return 0, err
		}
		s.header = true
		pos = 19 + ext
	}
	for pos+2 <= len(b) {
		n := int(int16(binary.BigEndian.Uint16(b[pos:])))
		if n == -1 {
			if err := s.All(b[pos : pos+2]); err != nil {
				return pos, err
			}
			s.ended = true
			return len(b), nil
		}
		if s.f.Fields > 0 && n != s.f.Fields {
			s.lineno++
			return pos, s.rowError(wire.Errorf(wire.BadCopyFileFormat, "row field count is %d, expected %d", n, s.f.Fields), nil)
		}
		if n < 0 {
			return pos, wire.Errorf(wire.BadCopyFileFormat, "invalid field count %d in binary COPY data", n)
		}
		p := pos + 2
		var key []byte
		keyNull := true
		complete := true
		for f := 0; f < n; f++ {
			if p+4 > len(b) {
				complete = false
				break
			}
			l := int(int32(binary.BigEndian.Uint32(b[p:])))
			p += 4
			if l < 0 {
				continue
			}
			if p+l > len(b) {
				complete = false
				break
			}
			if f == s.f.KeyCol {
				key, keyNull = b[p:p+l], false
			}
			p += l
		}
		if !complete {
			return pos, nil
		}
		s.lineno++
		if s.f.KeyCol >= n {
			return pos, s.rowError(s.missingKey(), nil)
		}
		if keyNull {
			key = nil
		}
		if err := s.Row(b[pos:p], key); err != nil {
			return pos, err
		}
		pos = p
	}
	return pos, nil
}
