package wire

import (
	"errors"
	"fmt"
)

//go:generate go run ./internal/gencodes

// The SQLSTATE constants, one per PostgreSQL condition, are generated into
// codes_gen.go from PostgreSQL's errcodes.txt. The proxy answers with
// PostgreSQL's own codes only (Appendix A of the manual) and puts its own
// reason into Detail or Hint.

// Error is an ErrorResponse the proxy sends to a client, or one a server
// sent (ParseError). It implements error so that it can travel up the stack
// and be sent where it lands.
type Error struct {
	Severity string // ERROR, FATAL: never translated ('V', or 'S' without one)
	Code     string // SQLSTATE
	Message  string
	Detail   string
	Hint     string
	Position string // 'P': the 1-based character position in the statement

	// LocalSeverity is a server's 'S' field as it sent it, translated
	// by lc_messages (FEHLER, ERREUR), and localOf the Severity it
	// translates: a re-encoded server error gives the client this one,
	// as PostgreSQL did, unless the proxy changed Severity since (an
	// error that ends the session becomes FATAL). Empty for the proxy's
	// own errors, which give Severity.
	LocalSeverity string
	localOf       string

	// Routine is a server's 'R' field: the PostgreSQL function that raised
	// the error, such as RevalidateCachedQuery. Unlike Message it is never
	// translated (lc_messages), so together with Code it tells one server
	// error from another where the SQLSTATE alone is too broad.
	Routine string

	// More are a server's other fields (where, schema, table, column,
	// data type and constraint names, file, line, routine, internal query
	// and position), in the order it sent them: a server's error the proxy
	// re-encodes reaches the client with every field PostgreSQL gave it.
	More []ErrorField

	// At is where PostgreSQL raises the proxy-made e, when it raises the
	// same error in several places (origin.go); nil takes origins' place.
	At *Location
}

// ErrorField is one field of an ErrorResponse or NoticeResponse.
type ErrorField struct {
	Type  byte // PostgreSQL's field type code ('W', 's', 't', 'n', 'F', …)
	Value string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (SQLSTATE %s)", e.Severity, e.Message, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// WithContext returns a copy of e, a proxy-made error, with PostgreSQL's
// CONTEXT field where and, after it, the place PostgreSQL raises e (which
// appendFields adds only to errors without More).
func (e *Error) WithContext(where string) *Error {
	c := *e
	c.More = []ErrorField{{Type: 'W', Value: where}}
	if at := locationOf(e); at != nil {
		c.More = append(c.More, ErrorField{'F', at.file}, ErrorField{'L', at.line}, ErrorField{'R', at.routine})
	}
	return &c
}

// Fatal reports whether the client connection must close after sending e.
func (e *Error) Fatal() bool { return e.Severity == "FATAL" || e.Severity == "PANIC" }

// Errorf returns an ERROR-severity error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}

// Fatalf returns a FATAL-severity error with code and a formatted message.
func Fatalf(code, format string, args ...any) *Error {
	return &Error{Severity: "FATAL", Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error if it is one (or wraps one). A nil err
// or an *Error itself costs no allocation (errors.As's target escapes), as
// the sharded path checks every exchange's error with it.
func AsError(err error) (*Error, bool) {
	switch e := err.(type) {
	case nil:
		return nil, false
	case *Error:
		return e, true
	}
	return asWrapped(err)
}

// asWrapped is AsError's errors.As, kept out of line so that its escaping
// target is allocated only for an error that is not an *Error.
//
//go:noinline
func asWrapped(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// AppendError appends e as an ErrorResponse message.
func AppendError(buf []byte, e *Error) []byte {
	return appendFields(buf, 'E', e)
}

// AppendNotice appends e as a NoticeResponse message.
func AppendNotice(buf []byte, e *Error) []byte {
	return appendFields(buf, 'N', e)
}

func appendFields(buf []byte, typ byte, e *Error) []byte {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	start := len(buf)
	buf = append(buf, typ, 0, 0, 0, 0)
	local := sev
	if e.LocalSeverity != "" && e.localOf == e.Severity {
		local = e.LocalSeverity
	}
	buf = appendField(buf, 'S', local)
	buf = appendField(buf, 'V', sev)
	buf = appendField(buf, 'C', e.Code)
	buf = appendField(buf, 'M', e.Message)
	if e.Detail != "" {
		buf = appendField(buf, 'D', e.Detail)
	}
	if e.Hint != "" {
		buf = appendField(buf, 'H', e.Hint)
	}
	if e.Position != "" {
		buf = appendField(buf, 'P', e.Position)
	}
	for _, f := range e.More {
		buf = appendField(buf, f.Type, f.Value)
	}
	if e.More == nil && e.Routine == "" {
		// The proxy's own: where PostgreSQL raises the same (origin.go).
		if at := locationOf(e); at != nil {
			buf = appendField(buf, 'F', at.file)
			buf = appendField(buf, 'L', at.line)
			buf = appendField(buf, 'R', at.routine)
		}
	}
	buf = append(buf, 0)
	return FinishMessage(buf, start)
}

func appendField(buf []byte, f byte, v string) []byte {
	buf = append(buf, f)
	buf = append(buf, v...)
	return append(buf, 0)
}

// ParseError decodes the fields of an ErrorResponse or NoticeResponse body.
func ParseError(body []byte) *Error {
	e := &Error{}
	for len(body) > 0 && body[0] != 0 {
		f := body[0]
		body = body[1:]
		i := 0
		for i < len(body) && body[i] != 0 {
			i++
		}
		v := string(body[:i])
		if i < len(body) {
			i++
		}
		body = body[i:]
		switch f {
		case 'V':
			e.Severity = v
		case 'S':
			e.LocalSeverity = v
			if e.Severity == "" {
				e.Severity = v
			}
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		case 'D':
			e.Detail = v
		case 'H':
			e.Hint = v
		case 'P':
			e.Position = v
		case 'R':
			e.Routine = v
			e.More = append(e.More, ErrorField{f, v})
		default:
			e.More = append(e.More, ErrorField{f, v})
		}
	}
	if e.LocalSeverity != "" {
		e.localOf = e.Severity
	}
	return e
}
