package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// copySignature starts every binary COPY stream
// (https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4).
var copySignature = []byte("PGCOPY\n\xff\r\n\x00")

// copyHeader is the header shardgate writes: the signature, no flags, no
// header extension.
var copyHeader = append(append([]byte{}, copySignature...), 0, 0, 0, 0, 0, 0, 0, 0)

// copyTrailer ends a binary COPY stream: a field count of -1.
var copyTrailer = []byte{0xff, 0xff}

// copyReader reads tuples from a binary COPY stream.
type copyReader struct {
	r     *bufio.Reader
	tuple []byte   // the current tuple's bytes, field count included; reused
	field [][]byte // views into tuple; nil for NULL
}

func newCopyReader(r io.Reader) *copyReader {
	return &copyReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// header reads and checks the stream header.
func (c *copyReader) header() error {
	var h [19]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return fmt.Errorf("binary copy header: %w", err)
	}
	if !bytes.Equal(h[:11], copySignature) {
		return errors.New("binary copy header: bad signature")
	}
	if flags := binary.BigEndian.Uint32(h[11:]); flags&(1<<16) != 0 {
		return errors.New("binary copy header: OIDs are not supported")
	}
	ext := binary.BigEndian.Uint32(h[15:])
	if _, err := c.r.Discard(int(ext)); err != nil {
		return fmt.Errorf("binary copy header extension: %w", err)
	}
	return nil
}

// next reads the next tuple into c.tuple and c.field. It returns io.EOF at
// the trailer.
func (c *copyReader) next() error {
	c.tuple = c.tuple[:0]
	var n [4]byte
	if _, err := io.ReadFull(c.r, n[:2]); err != nil {
		return fmt.Errorf("binary copy: %w", noEOF(err))
	}
	count := int16(binary.BigEndian.Uint16(n[:2]))
	if count == -1 {
		return io.EOF
	}
	if count < 0 {
		return fmt.Errorf("binary copy: bad field count %d", count)
	}
	c.tuple = append(c.tuple, n[:2]...)
	// Record offsets first: c.tuple may move while it grows.
	type span struct{ off, n int }
	spans := make([]span, count)
	for i := range spans {
		if _, err := io.ReadFull(c.r, n[:]); err != nil {
			return fmt.Errorf("binary copy: %w", noEOF(err))
		}
		c.tuple = append(c.tuple, n[:]...)
		size := int32(binary.BigEndian.Uint32(n[:]))
		if size < 0 {
			spans[i] = span{-1, 0}
			continue
		}
		off := len(c.tuple)
		c.tuple = append(c.tuple, make([]byte, size)...)
		if _, err := io.ReadFull(c.r, c.tuple[off:]); err != nil {
			return fmt.Errorf("binary copy: %w", noEOF(err))
		}
		spans[i] = span{off, int(size)}
	}
	c.field = c.field[:0]
	for _, s := range spans {
		if s.off < 0 {
			c.field = append(c.field, nil)
		} else {
			c.field = append(c.field, c.tuple[s.off:s.off+s.n:s.off+s.n])
		}
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
