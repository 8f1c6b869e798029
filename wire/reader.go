package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// maxStartupPacket is the largest startup packet accepted, as in PostgreSQL
// (MAX_STARTUP_PACKET_LENGTH).
const maxStartupPacket = 10000

// Reader reads framed messages from one connection, through a buffer of
// its own rather than a bufio.Reader: a message whose bytes are buffered
// is a slice of the buffer and two index moves, where bufio took a Peek of
// its header, a Peek of the whole message and a Discard, about 250
// instructions a message with their checks; the relay reads a dozen
// messages a statement (docs/benchmarks.md, issue 13, seventeenth step).
type Reader struct {
	src  io.Reader
	buf  []byte
	r, w int    // buf[r:w] is buffered
	err  error  // the last read's error, returned once it is reached
	big  []byte // the last message that did not fit in buf, or the part of it read so far
	// bigLeft is how much of a large message is still to be read when an
	// error (a read deadline) interrupted it: the next Next resumes it.
	bigLeft int
	max     int // largest accepted body length
}

// maxEmptyReads is how many reads that return nothing and no error fill
// tries before it gives up with io.ErrNoProgress (as bufio).
const maxEmptyReads = 100

// NewReader returns a Reader over r with a buffer of size bytes that rejects
// bodies longer than max bytes.
func NewReader(r io.Reader, size, max int) *Reader {
	if size < 16 {
		size = 16
	}
	return &Reader{src: r, buf: make([]byte, size), max: max}
}

// Buffered reports how many bytes can be read without touching the socket.
func (r *Reader) Buffered() int { return r.w - r.r }

// SetMax changes the largest accepted body length.
func (r *Reader) SetMax(max int) { r.max = max }

// Reset discards buffered data and reads from src from now on.
func (r *Reader) Reset(src io.Reader) {
	r.src, r.r, r.w, r.err = src, 0, 0, nil
	r.big, r.bigLeft = nil, 0
}

// fill reads once into the free end of the buffer, after moving what is
// buffered to its front; a read's error is kept in r.err.
func (r *Reader) fill() {
	if r.r > 0 {
		copy(r.buf, r.buf[r.r:r.w])
		r.w -= r.r
		r.r = 0
	}
	for range maxEmptyReads {
		n, err := r.src.Read(r.buf[r.w:])
		if n < 0 || n > len(r.buf)-r.w {
			r.err = fmt.Errorf("wire: read returned %d bytes for a buffer of %d", n, len(r.buf)-r.w)
			return
		}
		r.w += n
		if err != nil {
			r.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	r.err = io.ErrNoProgress
}

// readErr returns the kept read error and clears it, so that the next
// call reads again (a deadline, say, that was lifted since).
func (r *Reader) readErr() error {
	err := r.err
	r.err = nil
	return err
}

// ensure reads until n bytes (at most the buffer's size) are buffered, or
// returns the read error that stopped it; the error is returned once, and
// the next call reads again. Buffered bytes stay where they are in the
// buffer only until ensure reads.
func (r *Reader) ensure(n int) error {
	for r.w-r.r < n {
		if r.err != nil {
			return r.readErr()
		}
		r.fill()
	}
	return nil
}

// Next reads one typed message. The returned raw slice holds the whole
// message (type, length and body) and body its body; both are valid until
// the next call. A read error (such as a deadline) loses nothing: the next
// call goes on with the same message.
func (r *Reader) Next() (typ byte, raw, body []byte, err error) {
	if r.bigLeft > 0 {
		return r.readBig()
	}
	if r.w-r.r < 5 {
		if err := r.ensure(5); err != nil {
			return 0, nil, nil, err
		}
	}
	hdr := r.buf[r.r : r.r+5]
	typ = hdr[0]
	n := int(int32(binary.BigEndian.Uint32(hdr[1:5]))) - 4
	if n < 0 {
		return 0, nil, nil, &Error{Severity: "FATAL", Code: ProtocolViolation,
			Message: fmt.Sprintf("invalid message length %d for message type %q", n+4, typ)}
	}
	if n > r.max {
		return 0, nil, nil, &Error{Severity: "FATAL", Code: ProtocolViolation,
			Message: fmt.Sprintf("message of type %q is too large: %d bytes (the limit is %d)", typ, n, r.max)}
	}
	if 5+n <= len(r.buf) {
		if r.w-r.r < 5+n {
			if err := r.ensure(5 + n); err != nil {
				return 0, nil, nil, unexpectedEOF(err)
			}
		}
		raw = r.buf[r.r : r.r+5+n : r.r+5+n]
		r.r += 5 + n
		return typ, raw, raw[5:], nil
	}
	// The message is larger than the buffer: grow a separate slice as the
	// bytes arrive, so a peer that announces a huge length cannot make us
	// allocate it before sending it.
	r.big = append(r.big[:0], hdr...)
	r.r += 5
	r.bigLeft = n
	return r.readBig()
}

// NextBuffered returns the next message, as Next, when all of it is in
// the buffer already (and its length is valid); ok false means it is not,
// and nothing was consumed: the caller goes on with PeekHeader or Next. A
// relay reads most messages this way, without a look at its source.
func (r *Reader) NextBuffered() (typ byte, raw, body []byte, ok bool) {
	if r.bigLeft > 0 {
		return 0, nil, nil, false
	}
	end, ok := r.wholeAt(r.r)
	if !ok {
		return 0, nil, nil, false
	}
	raw = r.buf[r.r:end:end]
	r.r = end
	return raw[0], raw, raw[5:], true
}

// PeekType returns the type of the next message when its first byte is
// buffered, without consuming anything; ok false means it is not (or a
// large message is being read): the caller goes on with Next.
func (r *Reader) PeekType() (typ byte, ok bool) {
	if r.bigLeft > 0 || r.w == r.r {
		return 0, false
	}
	return r.buf[r.r], true
}

// wholeAt returns where the message that starts at buf[i] ends, when all
// of it is buffered and its length is valid (Next reports the invalid
// ones, with PostgreSQL's errors).
func (r *Reader) wholeAt(i int) (end int, ok bool) {
	if r.w-i < 5 {
		return 0, false
	}
	n := int(int32(binary.BigEndian.Uint32(r.buf[i+1 : i+5])))
	if n < 4 || n-4 > r.max || r.w-i < 1+n {
		return 0, false
	}
	return i + 1 + n, true
}

// NextRun consumes the messages of type typ that come next and are
// buffered whole (with valid lengths), up to the first that is not, and
// returns their bytes, one after the other as they arrived, and how many
// there are (none: an empty run, nothing consumed). A relay that passes
// rows on unchanged takes a result's buffered rows in one call and one
// copy instead of one of each a row.
func (r *Reader) NextRun(typ byte) (run []byte, count int) {
	if r.bigLeft > 0 {
		return nil, 0
	}
	start, i := r.r, r.r
	for i < r.w && r.buf[i] == typ {
		end, ok := r.wholeAt(i)
		if !ok {
			break
		}
		i = end
		count++
	}
	r.r = i
	return r.buf[start:i:i], count
}

// read is io.Reader's Read from the buffer, as bufio.Reader's: what is
// buffered, else one read of the source, straight into p when p is at
// least as large as the buffer.
func (r *Reader) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.r == r.w {
		if r.err != nil {
			return 0, r.readErr()
		}
		if len(p) >= len(r.buf) {
			return r.src.Read(p)
		}
		r.r, r.w = 0, 0
		r.fill()
		if r.r == r.w {
			return 0, r.readErr()
		}
	}
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	return n, nil
}

// readerFunc makes read an io.Reader for io.ReadFull.
type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// readBig reads the rest of a message larger than the buffer.
func (r *Reader) readBig() (typ byte, raw, body []byte, err error) {
	for r.bigLeft > 0 {
		chunk := min(r.bigLeft, 1<<20)
		start := len(r.big)
		r.big = append(r.big, make([]byte, chunk)...)
		k, err := io.ReadFull(readerFunc(r.read), r.big[start:])
		r.big = r.big[:start+k]
		r.bigLeft -= k
		if err != nil {
			return 0, nil, nil, unexpectedEOF(err)
		}
	}
	raw = r.big
	if cap(r.big) > 1<<22 {
		r.big = nil // do not pin huge buffers
	}
	return raw[0], raw, raw[5:], nil
}

// Frames returns the whole messages at the head of the buffer, without
// reading from the connection: nil when the next message is not all there
// yet or is larger than the buffer (Next reads it), or when its length is
// invalid (Next reports it). The slice is valid until the next call of a
// Reader method other than Frames; Discard consumes messages of it, which
// SplitFrame takes apart. A relay copies such runs of messages to its peer
// whole instead of one message at a time.
func (r *Reader) Frames() []byte {
	if r.bigLeft > 0 {
		return nil
	}
	buf := r.buf[r.r:r.w]
	n := 0
	for len(buf)-n >= 5 {
		size := int(int32(binary.BigEndian.Uint32(buf[n+1 : n+5])))
		if size < 4 || size-4 > r.max || len(buf)-n < 1+size {
			break
		}
		n += 1 + size
	}
	return buf[:n]
}

// Discard consumes the first n bytes of what Frames returned (whole
// messages).
func (r *Reader) Discard(n int) { r.r += min(n, r.w-r.r) }

// SplitFrame returns the first message of frames, a run of whole messages
// such as Frames returns, and the messages after it.
func SplitFrame(frames []byte) (raw, rest []byte) {
	n := 1 + int(binary.BigEndian.Uint32(frames[1:5]))
	return frames[:n], frames[n:]
}

// PeekHeader returns the type and body length of the next message without
// consuming it, for relaying large bodies with Copy.
func (r *Reader) PeekHeader() (typ byte, n int, err error) {
	if r.w-r.r < 5 {
		if err := r.ensure(5); err != nil {
			return 0, 0, err
		}
	}
	hdr := r.buf[r.r : r.r+5]
	n = int(int32(binary.BigEndian.Uint32(hdr[1:5]))) - 4
	if n < 0 {
		return 0, 0, &Error{Severity: "FATAL", Code: ProtocolViolation,
			Message: fmt.Sprintf("invalid message length %d for message type %q", n+4, hdr[0])}
	}
	return hdr[0], n, nil
}

// Size is the buffer size.
func (r *Reader) Size() int { return len(r.buf) }

// Copy writes the next message, whose header PeekHeader returned, to w
// without buffering it whole.
func (r *Reader) Copy(w io.Writer, n int) error {
	if _, err := io.CopyN(w, readerFunc(r.read), int64(5+n)); err != nil {
		return unexpectedEOF(err)
	}
	return nil
}

// Startup reads an untyped startup-phase packet (StartupMessage,
// SSLRequest, GSSENCRequest, CancelRequest) and returns its body, which
// starts with the int32 protocol version or request code.
func (r *Reader) Startup() ([]byte, error) {
	if err := r.ensure(4); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(r.buf[r.r : r.r+4])))
	if n < 8 || n > maxStartupPacket {
		return nil, &Error{Severity: "FATAL", Code: ProtocolViolation, Message: fmt.Sprintf("invalid length of startup packet: %d", n)}
	}
	if n > len(r.buf) {
		return nil, &Error{Severity: "FATAL", Code: ProtocolViolation, Message: fmt.Sprintf("invalid length of startup packet: %d", n)}
	}
	if err := r.ensure(n); err != nil {
		return nil, unexpectedEOF(err)
	}
	raw := r.buf[r.r : r.r+n : r.r+n]
	r.r += n
	return raw[4:], nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
