package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

func msg(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	b = append(b, body...)
	return FinishMessage(b, 0)
}

func TestReaderNext(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100_000)
	stream := append(msg('Q', "SELECT 1\x00"), msg('d', string(big))...)
	stream = append(stream, msg('S', "")...)
	r := NewReader(bytes.NewReader(stream), 4096, 1<<20)
	tests := []struct {
		typ  byte
		body []byte
	}{
		{'Q', []byte("SELECT 1\x00")},
		{'d', big},
		{'S', nil},
	}
	for _, tc := range tests {
		typ, raw, body, err := r.Next()
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if typ != tc.typ || !bytes.Equal(body, tc.body) || len(raw) != len(body)+5 {
			t.Fatalf("got %q body %d bytes, want %q %d bytes", typ, len(body), tc.typ, len(tc.body))
		}
	}
	if _, _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestReaderRejects(t *testing.T) {
	tests := []struct {
		name   string
		stream []byte
		max    int
		want   string // SQLSTATE, "" for a plain error
	}{
		{"negative length", []byte{'Q', 0xff, 0xff, 0xff, 0xff}, 1 << 20, ProtocolViolation},
		{"length below four", []byte{'Q', 0, 0, 0, 3}, 1 << 20, ProtocolViolation},
		{"too large", msg('Q', "0123456789"), 5, ProtocolViolation},
		{"truncated body", msg('Q', "0123456789")[:8], 1 << 20, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.stream), 4096, tc.max)
			_, _, _, err := r.Next()
			if err == nil {
				t.Fatal("want an error")
			}
			e, ok := AsError(err)
			if tc.want == "" {
				if ok || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("want unexpected EOF, got %v", err)
				}
				return
			}
			if !ok || e.Code != tc.want {
				t.Fatalf("want SQLSTATE %s, got %v", tc.want, err)
			}
		})
	}
}

func TestStartup(t *testing.T) {
	pkt := []byte{0, 0, 0, 0, 0, 3, 0, 0}
	pkt = append(pkt, "user\x00bob\x00\x00"...)
	pkt[3] = byte(len(pkt))
	r := NewReader(bytes.NewReader(pkt), 4096, 1<<20)
	body, err := r.Startup()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, pkt[4:]) {
		t.Fatalf("body %q", body)
	}
	for _, bad := range [][]byte{{0, 0, 0, 4}, {0, 1, 0, 0, 0}, {0xff, 0, 0, 0}} {
		r := NewReader(bytes.NewReader(bad), 4096, 1<<20)
		if _, err := r.Startup(); err == nil {
			t.Fatalf("%v: want an error", bad)
		}
	}
}

func TestErrorRoundTrip(t *testing.T) {
	e := &Error{Severity: "FATAL", Code: InvalidPassword, Message: "no", Detail: "d", Hint: "h"}
	b := AppendError(nil, e)
	r := NewReader(bytes.NewReader(b), 4096, 1<<20)
	typ, _, body, err := r.Next()
	if err != nil || typ != 'E' {
		t.Fatalf("typ %q err %v", typ, err)
	}
	e.LocalSeverity, e.localOf = "FATAL", "FATAL" // as sent: not translated
	if got := ParseError(body); !reflect.DeepEqual(got, e) {
		t.Fatalf("got %+v want %+v", got, e)
	}
}

// FuzzReader feeds arbitrary bytes to the framing code: it must never
// panic, and every message it returns must lie within the input.
func FuzzReader(f *testing.F) {
	f.Add(msg('Q', "SELECT 1\x00"))
	f.Add([]byte{'Q', 0xff, 0xff, 0xff, 0xff})
	f.Add(append(msg('P', "s\x00SELECT $1\x00\x00\x01\x00\x00\x00\x17"), msg('S', "")...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 64, 1<<16)
		total := 0
		for {
			_, raw, body, err := r.Next()
			if err != nil {
				break
			}
			if len(raw) != len(body)+5 {
				t.Fatalf("raw %d body %d", len(raw), len(body))
			}
			total += len(raw)
			if total > len(data) {
				t.Fatalf("read %d bytes from %d", total, len(data))
			}
		}
		r = NewReader(bytes.NewReader(data), 64, 1<<16)
		r.Startup()
		ParseError(data)
	})
}

// stutter returns its data in pieces and fails once with errPause after
// each piece: a socket whose read deadline keeps expiring.
type stutter struct {
	data  []byte
	piece int
	pause bool
}

var errPause = errors.New("pause")

func (s *stutter) Read(p []byte) (int, error) {
	if s.pause {
		s.pause = false
		return 0, errPause
	}
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), s.piece, len(s.data))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	s.pause = true
	return n, nil
}

// TestReaderResumesAfterError: a read error in the middle of a message,
// small or larger than the buffer, loses nothing; the next call returns
// the same message whole.
func TestReaderResumesAfterError(t *testing.T) {
	var stream []byte
	bodies := [][]byte{bytes.Repeat([]byte{'a'}, 10), bytes.Repeat([]byte{'b'}, 200), bytes.Repeat([]byte{'c'}, 3)}
	for _, b := range bodies {
		stream = append(stream, 'd', 0, 0, 0, 0)
		binary.BigEndian.PutUint32(stream[len(stream)-4:], uint32(len(b)+4))
		stream = append(stream, b...)
	}
	r := NewReader(&stutter{data: stream, piece: 7}, 16, 1<<20)
	for i, want := range bodies {
		for tries := 0; ; tries++ {
			typ, _, body, err := r.Next()
			if errors.Is(err, errPause) {
				if tries > 1000 {
					t.Fatal("no progress")
				}
				continue
			}
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if typ != 'd' || !bytes.Equal(body, want) {
				t.Fatalf("message %d: %q %q, want %q", i, typ, body, want)
			}
			break
		}
	}
}

// TestReaderFrames reads a stream through Frames where it can and Next
// where it must (a message not all in the buffer yet, one larger than the
// buffer, an invalid length), and checks that the two together return every
// message once, in order, whole.
func TestReaderFrames(t *testing.T) {
	var stream []byte
	var want [][]byte
	for i, n := range []int{0, 3, 40, 9, 300, 1, 17, 0, 60} {
		m := msg(byte('a'+i), string(bytes.Repeat([]byte{byte('0' + i)}, n)))
		stream = append(stream, m...)
		want = append(want, m)
	}
	tests := []struct {
		name  string
		piece int // bytes a read returns at most
		size  int // the Reader's buffer
	}{
		{"all buffered", 1 << 20, 4096},
		{"small reads", 7, 64},
		{"one byte at a time", 1, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(&stutter{data: stream, piece: tc.piece}, tc.size, 1<<20)
			var got [][]byte
			for len(got) < len(want) {
				if frames := r.Frames(); len(frames) > 0 {
					n := len(frames)
					for len(frames) > 0 {
						var raw []byte
						raw, frames = SplitFrame(frames)
						got = append(got, append([]byte(nil), raw...))
					}
					r.Discard(n)
					continue
				}
				_, raw, _, err := r.Next()
				if errors.Is(err, errPause) {
					continue
				}
				if err != nil {
					t.Fatalf("after %d messages: %v", len(got), err)
				}
				got = append(got, append([]byte(nil), raw...))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
	t.Run("invalid length", func(t *testing.T) {
		bad := append(msg('a', "x"), 'b', 0, 0, 0, 2)
		r := NewReader(bytes.NewReader(bad), 64, 1<<20)
		r.Next() // fills the buffer with both
		if _, _, _, err := r.Next(); err == nil {
			t.Fatal("Next accepted a length of 2")
		}
		r = NewReader(bytes.NewReader(bad), 64, 1<<20)
		r.ensure(len(bad))
		if frames := r.Frames(); !bytes.Equal(frames, msg('a', "x")) {
			t.Fatalf("Frames returned %q, want the first message alone", frames)
		}
	})
}

// TestReaderNextBuffered: NextBuffered returns a message only when all of
// it is buffered, consumes nothing otherwise (Next then reads it, whole),
// and leaves a message with an invalid length to Next, which reports it.
func TestReaderNextBuffered(t *testing.T) {
	a, b := msg('a', "first"), msg('b', "second message")
	r := NewReader(&stutter{data: append(append([]byte{}, a...), b...), piece: len(a) + 3}, 64, 1<<20)
	if _, _, _, ok := r.NextBuffered(); ok {
		t.Fatal("NextBuffered returned a message before anything was read")
	}
	if typ, ok := r.PeekType(); ok {
		t.Fatalf("PeekType returned %q before anything was read", typ)
	}
	if _, raw, _, err := r.Next(); err != nil || !bytes.Equal(raw, a) {
		t.Fatalf("Next = %q, %v; want %q", raw, err, a)
	}
	// Three bytes of b are buffered now: not enough.
	if typ, _, _, ok := r.NextBuffered(); ok {
		t.Fatalf("NextBuffered returned %q from a partial message", typ)
	}
	if got := r.Buffered(); got != 3 {
		t.Fatalf("%d bytes buffered after the refused NextBuffered, want 3 (nothing consumed)", got)
	}
	// PeekType sees the type of the partial message and consumes nothing.
	if typ, ok := r.PeekType(); !ok || typ != 'b' || r.Buffered() != 3 {
		t.Fatalf("PeekType = %q, %v (%d buffered); want 'b', true, 3", typ, ok, r.Buffered())
	}
	var raw []byte
	for {
		var err error
		if _, raw, _, err = r.Next(); errors.Is(err, errPause) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		break
	}
	if !bytes.Equal(raw, b) {
		t.Fatalf("Next after NextBuffered = %q, want %q", raw, b)
	}

	r = NewReader(bytes.NewReader(append(append([]byte{}, a...), b...)), 64, 1<<20)
	r.ensure(len(a) + len(b))
	for _, want := range [][]byte{a, b} {
		typ, raw, body, ok := r.NextBuffered()
		if !ok || typ != want[0] || !bytes.Equal(raw, want) || !bytes.Equal(body, want[5:]) {
			t.Fatalf("NextBuffered = %q %q %q %v, want %q", typ, raw, body, ok, want)
		}
	}

	bad := []byte{'c', 0, 0, 0, 2}
	r = NewReader(bytes.NewReader(bad), 64, 1<<20)
	r.ensure(len(bad))
	if _, _, _, ok := r.NextBuffered(); ok {
		t.Fatal("NextBuffered accepted a length of 2")
	}
	if _, _, _, err := r.Next(); err == nil {
		t.Fatal("Next accepted a length of 2")
	}
}

// TestReaderNextRun: NextRun takes the buffered whole messages of its type
// that come next, and stops (consuming nothing more) at a message of
// another type, a partial one, an invalid length or one above the limit.
func TestReaderNextRun(t *testing.T) {
	d1, d2, d3 := msg('D', "row one"), msg('D', "row two!"), msg('D', "row three")
	c := msg('C', "SELECT 3")
	all := bytes.Join([][]byte{d1, d2, d3, c}, nil)
	r := NewReader(bytes.NewReader(all), 256, 1<<20)
	r.ensure(len(all))
	if run, n := r.NextRun('C'); n != 0 || len(run) != 0 || r.Buffered() != len(all) {
		t.Fatalf("NextRun('C') before the rows = %q, %d (%d buffered)", run, n, r.Buffered())
	}
	if run, n := r.NextRun('D'); n != 3 || !bytes.Equal(run, all[:len(all)-len(c)]) {
		t.Fatalf("NextRun('D') = %q, %d; want the three rows", run, n)
	}
	if typ, raw, _, ok := r.NextBuffered(); !ok || typ != 'C' || !bytes.Equal(raw, c) {
		t.Fatalf("after the run: %q %q %v, want the CommandComplete", typ, raw, ok)
	}

	// A partial row ends the run; the rest comes through Next.
	r = NewReader(&stutter{data: all, piece: len(d1) + len(d2) + 4}, 256, 1<<20)
	if _, raw, _, err := r.Next(); err != nil || !bytes.Equal(raw, d1) {
		t.Fatalf("Next = %q, %v", raw, err)
	}
	if run, n := r.NextRun('D'); n != 1 || !bytes.Equal(run, d2) {
		t.Fatalf("NextRun with a partial third row = %q, %d; want the second row alone", run, n)
	}
	if r.Buffered() != 4 {
		t.Fatalf("%d bytes left buffered, want the 4 of the partial row", r.Buffered())
	}
	for {
		_, raw, _, err := r.Next()
		if errors.Is(err, errPause) {
			continue
		} else if err != nil || !bytes.Equal(raw, d3) {
			t.Fatalf("Next after the run = %q, %v; want the third row", raw, err)
		}
		break
	}

	// An invalid length and a body above the limit stop it too, left to
	// Next to report.
	for _, bad := range [][]byte{{'D', 0, 0, 0, 2}, {'D', 0, 0, 1, 0}} {
		data := append(append([]byte{}, d1...), bad...)
		r = NewReader(bytes.NewReader(append(data, make([]byte, 300)...)), 1024, 100)
		r.ensure(len(data))
		if run, n := r.NextRun('D'); n != 1 || !bytes.Equal(run, d1) {
			t.Fatalf("NextRun before % x = %q, %d; want the first row alone", bad, run, n)
		}
		if _, _, _, err := r.Next(); err == nil {
			t.Fatalf("Next accepted % x", bad)
		}
	}
	// The run cannot be appended to in place.
	r = NewReader(bytes.NewReader(all), 256, 1<<20)
	r.ensure(len(all))
	if run, _ := r.NextRun('D'); cap(run) != len(run) {
		t.Fatalf("the run's capacity %d reaches past its %d bytes", cap(run), len(run))
	}
}
