package sharding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Type is the PostgreSQL data type of a sharding key column. The zero Type is
// invalid; it is also the type of the Null key.
type Type uint8

const (
	// Bigint is int8. Its extended hash is hashint8extended.
	Bigint Type = iota + 1
	// Integer is int4. It hashes like Bigint: hashint4extended equals
	// hashint8extended for every int4 value.
	Integer
	// Smallint is int2. It hashes like Bigint for the same reason.
	Smallint
	// Text hashes its bytes with hashtextextended (deterministic collations
	// only; nondeterministic ICU collations hash differently).
	Text
	// Varchar shares text's hash operator class, so it hashes like Text.
	Varchar
	// UUID hashes its 16 bytes with uuid_hash_extended.
	UUID
)

// String returns the type's SQL name, as PostgreSQL's format_type prints it.
func (t Type) String() string {
	switch t {
	case Bigint:
		return "bigint"
	case Integer:
		return "integer"
	case Smallint:
		return "smallint"
	case Text:
		return "text"
	case Varchar:
		return "character varying"
	case UUID:
		return "uuid"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// ParseType maps a type name to a Type. It accepts, in any case, the SQL
// names and their PostgreSQL aliases: bigint/int8, integer/int/int4,
// smallint/int2, text, varchar/character varying, uuid.
func ParseType(s string) (Type, error) {
	switch strings.ToLower(strings.Join(strings.Fields(s), " ")) {
	case "bigint", "int8":
		return Bigint, nil
	case "integer", "int", "int4":
		return Integer, nil
	case "smallint", "int2":
		return Smallint, nil
	case "text":
		return Text, nil
	case "varchar", "character varying":
		return Varchar, nil
	case "uuid":
		return UUID, nil
	}
	return 0, fmt.Errorf("sharding: unknown key type %q", s)
}

// family groups the types whose values hash and compare alike: a key of one
// type may be routed by a function of another type of the same family.
type family uint8

const (
	noFamily family = iota
	intFamily
	textFamily
	uuidFamily
)

func (t Type) family() family {
	switch t {
	case Bigint, Integer, Smallint:
		return intFamily
	case Text, Varchar:
		return textFamily
	case UUID:
		return uuidFamily
	}
	return noFamily
}

// intRange returns the smallest and largest value of an integer type.
func (t Type) intRange() (lo, hi int64) {
	switch t {
	case Smallint:
		return math.MinInt16, math.MaxInt16
	case Integer:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// Errors a *KeyError wraps, one per SQLSTATE PostgreSQL would report for the
// same input, so that the router can answer as the server would.
var (
	// ErrSyntax is invalid_text_representation (22P02).
	ErrSyntax = errors.New("invalid input syntax")
	// ErrRange is numeric_value_out_of_range (22003).
	ErrRange = errors.New("value out of range")
	// ErrBinary is invalid_binary_representation (22P03).
	ErrBinary = errors.New("incorrect binary data format")
)

// KeyError reports a key value that PostgreSQL's input or receive function
// for Type would reject. Its message is the one PostgreSQL gives.
type KeyError struct {
	Type  Type
	Value string // the text that failed to parse, or the decoded integer
	Size  int    // the length of a binary value, for ErrBinary
	Err   error  // ErrSyntax, ErrRange or ErrBinary
}

func (e *KeyError) Error() string {
	switch e.Err {
	case ErrRange:
		return `value "` + e.Value + `" is out of range for type ` + e.Type.String()
	case ErrBinary:
		return fmt.Sprintf("incorrect binary data format for type %s: %d bytes", e.Type, e.Size)
	}
	return "invalid input syntax for type " + e.Type.String() + `: "` + e.Value + `"`
}

func (e *KeyError) Unwrap() error { return e.Err }

func syntaxError(t Type, s string) error {
	return &KeyError{Type: t, Value: s, Err: ErrSyntax}
}

// value holds one key value; only the field of the key's family is set. It is
// comparable, so List uses it as a map key.
type value struct {
	i int64
	s string
	u [16]byte
}

// Key is a typed sharding key value, or NULL. The zero Key is NULL. Keys are
// comparable with ==.
type Key struct {
	typ Type
	v   value
}

// Null is the SQL NULL key. It is the zero Key.
var Null Key

// ParseKey parses the text representation of a value of type t, accepting
// what PostgreSQL's input function accepts. Integers follow pg_strtoint64 of
// PostgreSQL 16 and later (a superset of earlier releases): surrounding
// whitespace, a sign, decimal or 0x/0o/0b digits with single underscores
// between them, and a range check for the type, so "40000" is an error for
// Smallint as the cast would be. UUIDs follow ParseUUID. Text and varchar are
// taken as they are. Errors are *KeyError.
func ParseKey(t Type, text string) (Key, error) {
	switch t.family() {
	case intFamily:
		i, err := parseInt(t, text)
		if err != nil {
			return Key{}, err
		}
		return Key{typ: t, v: value{i: i}}, nil
	case textFamily:
		return Key{typ: t, v: value{s: text}}, nil
	case uuidFamily:
		u, err := ParseUUID(text)
		if err != nil {
			return Key{}, err
		}
		return Key{typ: t, v: value{u: u}}, nil
	}
	return Key{}, fmt.Errorf("sharding: parse key: invalid type %s", t)
}

// DecodeBinaryKey decodes a value of type t sent in PostgreSQL's binary
// format, as in a Bind parameter. Integers are big-endian two's complement of
// 2, 4 or 8 bytes whatever t is (drivers often send an int8 for an int4
// column), sign-extended and then range-checked against t. A UUID is its 16
// bytes. Text and varchar are the raw bytes, copied. A NULL parameter has no
// bytes at all; the caller passes Null instead of calling DecodeBinaryKey.
// Errors are *KeyError.
func DecodeBinaryKey(t Type, b []byte) (Key, error) {
	switch t.family() {
	case intFamily:
		var i int64
		switch len(b) {
		case 2:
			i = int64(int16(binary.BigEndian.Uint16(b)))
		case 4:
			i = int64(int32(binary.BigEndian.Uint32(b)))
		case 8:
			i = int64(binary.BigEndian.Uint64(b))
		default:
			return Key{}, &KeyError{Type: t, Size: len(b), Err: ErrBinary}
		}
		if lo, hi := t.intRange(); i < lo || i > hi {
			return Key{}, &KeyError{Type: t, Value: strconv.FormatInt(i, 10), Err: ErrRange}
		}
		return Key{typ: t, v: value{i: i}}, nil
	case textFamily:
		return Key{typ: t, v: value{s: string(b)}}, nil
	case uuidFamily:
		if len(b) != 16 {
			return Key{}, &KeyError{Type: t, Size: len(b), Err: ErrBinary}
		}
		return Key{typ: t, v: value{u: [16]byte(b)}}, nil
	}
	return Key{}, fmt.Errorf("sharding: decode key: invalid type %s", t)
}

// Type returns the key's type; it is 0 for Null.
func (k Key) Type() Type { return k.typ }

// IsNull reports whether k is the SQL NULL.
func (k Key) IsNull() bool { return k.typ == 0 }

// Int returns the value of an integer key, or 0.
func (k Key) Int() int64 { return k.v.i }

// Text returns the value of a text or varchar key, or "".
func (k Key) Text() string { return k.v.s }

// UUID returns the value of a uuid key, or the nil UUID.
func (k Key) UUID() [16]byte { return k.v.u }

// String returns the key's text representation as PostgreSQL's output
// function prints it, or NULL.
func (k Key) String() string {
	switch k.typ.family() {
	case intFamily:
		return strconv.FormatInt(k.v.i, 10)
	case textFamily:
		return k.v.s
	case uuidFamily:
		return formatUUID(k.v.u)
	}
	return "NULL"
}

// hash returns the key's extended hash with the partition seed, the value
// compute_partition_hash_value combines into the row hash.
func (k Key) hash() uint64 {
	switch k.typ.family() {
	case intFamily:
		return HashInt64(k.v.i)
	case textFamily:
		return HashText(k.v.s)
	case uuidFamily:
		return HashUUID(k.v.u)
	}
	return 0
}

// parseInt is pg_strtoint16/32/64 (src/backend/utils/adt/numutils.c) for the
// range of t. As there, overflow while accumulating digits is a range error
// at once, while a value just past the limit is found only after the trailing
// characters have been checked.
func parseInt(t Type, s string) (int64, error) {
	lo, hi := t.intRange()
	maxMag := uint64(-(lo + 1)) + 1 // |lo|, which int64 cannot negate
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	base := uint64(10)
	if i+1 < len(s) && s[i] == '0' {
		switch s[i+1] {
		case 'x', 'X':
			base, i = 16, i+2
		case 'o', 'O':
			base, i = 8, i+2
		case 'b', 'B':
			base, i = 2, i+2
		}
	}
	first := i
	var mag uint64
	for i < len(s) {
		c := s[i]
		if c == '_' {
			// An underscore may not be first in a decimal number (it may
			// follow a 0x prefix), and it must be followed by a digit.
			if base == 10 && i == first {
				return 0, syntaxError(t, s)
			}
			i++
			if i >= len(s) || digit(s[i]) >= base {
				return 0, syntaxError(t, s)
			}
			continue
		}
		d := digit(c)
		if d >= base {
			break
		}
		if mag > maxMag/base {
			return 0, &KeyError{Type: t, Value: s, Err: ErrRange}
		}
		mag = mag*base + d
		i++
	}
	if i == first {
		return 0, syntaxError(t, s)
	}
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i != len(s) {
		return 0, syntaxError(t, s)
	}
	if neg {
		if mag > maxMag {
			return 0, &KeyError{Type: t, Value: s, Err: ErrRange}
		}
		// Negating in uint64 is two's complement, so it also yields
		// math.MinInt64, whose magnitude int64 cannot hold.
		return int64(-mag), nil
	}
	if mag > uint64(hi) {
		return 0, &KeyError{Type: t, Value: s, Err: ErrRange}
	}
	return int64(mag), nil
}

// digit returns the value of the hexadecimal digit c, or 16 when c is none.
func digit(c byte) uint64 {
	if d, ok := unhex(c); ok {
		return uint64(d)
	}
	return 16
}

// isSpace is C isspace() in the C locale, which PostgreSQL uses to skip
// whitespace around integers. It is narrower than unicode.IsSpace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
