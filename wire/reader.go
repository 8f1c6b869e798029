package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// maxStartupPacket is the largest startup packet accepted, as in PostgreSQL
// (MAX_STARTUP_PACKET_LENGTH).
const maxStartupPacket = 10000

// Reader reads framed messages from one connection.
type Reader struct {
	br  *bufio.Reader
	big []byte // the last message that did not fit in br, or the part of it read so far
	// bigLeft is how much of a large message is still to be read when an
	// error (a read deadline) interrupted it: the next Next resumes it.
	bigLeft int
	max     int // largest accepted body length
}

// NewReader returns a Reader over r with a buffer of size bytes that rejects
// bodies longer than max bytes.
func NewReader(r io.Reader, size, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size), max: max}
}

// Buffered reports how many bytes can be read without touching the socket.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// SetMax changes the largest accepted body length.
func (r *Reader) SetMax(max int) { r.max = max }

// Reset discards buffered data and reads from src from now on.
func (r *Reader) Reset(src io.Reader) { r.br.Reset(src); r.big = nil; r.bigLeft = 0 }

// Next reads one typed message. The returned raw slice holds the whole
// message (type, length and body) and body its body; both are valid until
// the next call. A read error (such as a deadline) loses nothing: the next
// call goes on with the same message.
func (r *Reader) Next() (typ byte, raw, body []byte, err error) {
	if r.bigLeft > 0 {
		return r.readBig()
	}
	hdr, err := r.br.Peek(5)
	if err != nil {
		return 0, nil, nil, err
	}
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
	if 5+n <= r.br.Size() {
		raw, err = r.br.Peek(5 + n)
		if err != nil {
			return 0, nil, nil, unexpectedEOF(err)
		}
		r.br.Discard(5 + n)
		return typ, raw, raw[5:], nil
	}
	// The message is larger than the buffer: grow a separate slice as the
	// bytes arrive, so a peer that announces a huge length cannot make us
	// allocate it before sending it.
	r.big = r.big[:0]
	r.big = append(r.big, hdr...)
	r.br.Discard(5)
	r.bigLeft = n
	return r.readBig()
}

// readBig reads the rest of a message larger than the buffer.
func (r *Reader) readBig() (typ byte, raw, body []byte, err error) {
	for r.bigLeft > 0 {
		chunk := min(r.bigLeft, 1<<20)
		start := len(r.big)
		r.big = append(r.big, make([]byte, chunk)...)
		k, err := io.ReadFull(r.br, r.big[start:])
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
	buf, _ := r.br.Peek(r.br.Buffered())
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
func (r *Reader) Discard(n int) { r.br.Discard(n) }

// SplitFrame returns the first message of frames, a run of whole messages
// such as Frames returns, and the messages after it.
func SplitFrame(frames []byte) (raw, rest []byte) {
	n := 1 + int(binary.BigEndian.Uint32(frames[1:5]))
	return frames[:n], frames[n:]
}

// PeekHeader returns the type and body length of the next message without
// consuming it, for relaying large bodies with Copy.
func (r *Reader) PeekHeader() (typ byte, n int, err error) {
	hdr, err := r.br.Peek(5)
	if err != nil {
		return 0, 0, err
	}
	n = int(int32(binary.BigEndian.Uint32(hdr[1:5]))) - 4
	if n < 0 {
		return 0, 0, &Error{Severity: "FATAL", Code: ProtocolViolation,
			Message: fmt.Sprintf("invalid message length %d for message type %q", n+4, hdr[0])}
	}
	return hdr[0], n, nil
}

// Size is the buffer size.
func (r *Reader) Size() int { return r.br.Size() }

// Copy writes the next message, whose header PeekHeader returned, to w
// without buffering it whole.
func (r *Reader) Copy(w io.Writer, n int) error {
	if _, err := io.CopyN(w, r.br, int64(5+n)); err != nil {
		return unexpectedEOF(err)
	}
	return nil
}

// Startup reads an untyped startup-phase packet (StartupMessage,
// SSLRequest, GSSENCRequest, CancelRequest) and returns its body, which
// starts with the int32 protocol version or request code.
func (r *Reader) Startup() ([]byte, error) {
	hdr, err := r.br.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(hdr)))
	if n < 8 || n > maxStartupPacket {
		return nil, &Error{Severity: "FATAL", Code: ProtocolViolation, Message: fmt.Sprintf("invalid length of startup packet: %d", n)}
	}
	raw, err := r.br.Peek(n)
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	r.br.Discard(n)
	return raw[4:], nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
