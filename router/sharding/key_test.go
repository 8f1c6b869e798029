package sharding

import (
	"errors"
	"math"
	"testing"
)

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Type
	}{
		{"bigint", Bigint}, {"INT8", Bigint},
		{"integer", Integer}, {"int", Integer}, {"int4", Integer},
		{"smallint", Smallint}, {"int2", Smallint},
		{"text", Text}, {"varchar", Varchar}, {"Character  Varying", Varchar},
		{"uuid", UUID}, {" UUID ", UUID},
	} {
		got, err := ParseType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseType(got.String()); err != nil || back != got {
			t.Errorf("ParseType(%q.String()) = %v, %v", got, back, err)
		}
	}
	for _, in := range []string{"", "vector", "numeric", "int16", "char"} {
		if got, err := ParseType(in); err == nil {
			t.Errorf("ParseType(%q) = %v, want an error", in, got)
		}
	}
	if got := Type(0).String(); got != "Type(0)" {
		t.Errorf("Type(0).String() = %q", got)
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		in   string
		want int64
		err  error // nil, ErrSyntax or ErrRange
	}{
		{"zero", Bigint, "0", 0, nil},
		{"positive", Bigint, "42", 42, nil},
		{"negative", Bigint, "-42", -42, nil},
		{"plus sign", Bigint, "+42", 42, nil},
		{"surrounding whitespace", Bigint, " \t42\n\r\v\f", 42, nil},
		{"leading zeros are decimal", Bigint, "017", 17, nil},
		{"max int64", Bigint, "9223372036854775807", math.MaxInt64, nil},
		{"min int64", Bigint, "-9223372036854775808", math.MinInt64, nil},
		{"max int64 + 1", Bigint, "9223372036854775808", 0, ErrRange},
		{"min int64 - 1", Bigint, "-9223372036854775809", 0, ErrRange},
		{"far too long", Bigint, "99999999999999999999", 0, ErrRange},
		{"far too long with junk", Bigint, "99999999999999999999x", 0, ErrRange},
		{"hex", Bigint, "0x1F", 31, nil},
		{"hex upper", Bigint, "0X1f", 31, nil},
		{"octal", Bigint, "0o17", 15, nil},
		{"binary", Bigint, "-0b101", -5, nil},
		{"underscores", Bigint, "1_000_000", 1000000, nil},
		{"underscore after prefix", Bigint, "0x_1F", 31, nil},
		{"hex min int64", Bigint, "-0x8000000000000000", math.MinInt64, nil},
		{"hex max int64 + 1", Bigint, "0x8000000000000000", 0, ErrRange},
		{"underscore first", Bigint, "_1000", 0, ErrSyntax},
		{"underscore last", Bigint, "1000_", 0, ErrSyntax},
		{"double underscore", Bigint, "1__000", 0, ErrSyntax},
		{"prefix without digits", Bigint, "0x", 0, ErrSyntax},
		{"bad octal digit", Bigint, "0o8", 0, ErrSyntax},
		{"empty", Bigint, "", 0, ErrSyntax},
		{"blank", Bigint, "   ", 0, ErrSyntax},
		{"sign only", Bigint, "-", 0, ErrSyntax},
		{"space after sign", Bigint, "- 1", 0, ErrSyntax},
		{"two signs", Bigint, "+-1", 0, ErrSyntax},
		{"inner space", Bigint, "4 2", 0, ErrSyntax},
		{"trailing junk", Bigint, "42x", 0, ErrSyntax},
		{"decimal point", Bigint, "4.0", 0, ErrSyntax},
		{"exponent", Bigint, "1e3", 0, ErrSyntax},
		{"no-break space is not whitespace", Bigint, "\u00a042", 0, ErrSyntax},
		{"word", Bigint, "abc", 0, ErrSyntax},
		{"max int32", Integer, "2147483647", math.MaxInt32, nil},
		{"min int32", Integer, "-2147483648", math.MinInt32, nil},
		{"max int32 + 1", Integer, "2147483648", 0, ErrRange},
		{"min int32 - 1", Integer, "-2147483649", 0, ErrRange},
		{"int64 for integer", Integer, "9223372036854775807", 0, ErrRange},
		{"max int16", Smallint, "32767", math.MaxInt16, nil},
		{"min int16", Smallint, "-32768", math.MinInt16, nil},
		{"max int16 + 1", Smallint, "32768", 0, ErrRange},
		{"min int16 - 1", Smallint, "-32769", 0, ErrRange},
		{"smallint 40000", Smallint, "40000", 0, ErrRange},
		{"just past the limit, then junk", Smallint, "32768x", 0, ErrSyntax},
		{"smallint hex max", Smallint, "0x7fff", math.MaxInt16, nil},
		{"smallint hex max + 1", Smallint, "0x8000", 0, ErrRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseKey(tc.typ, tc.in)
			if tc.err != nil {
				var ke *KeyError
				if !errors.Is(err, tc.err) || !errors.As(err, &ke) || ke.Type != tc.typ {
					t.Fatalf("ParseKey(%s, %q) = %v, %v; want a *KeyError wrapping %v", tc.typ, tc.in, k, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%s, %q): %v", tc.typ, tc.in, err)
			}
			if k.Type() != tc.typ || k.Int() != tc.want || k.IsNull() {
				t.Errorf("ParseKey(%s, %q) = %s %v, want %d", tc.typ, tc.in, k.Type(), k, tc.want)
			}
		})
	}
}

func TestParseKeyText(t *testing.T) {
	for _, typ := range []Type{Text, Varchar} {
		for _, in := range []string{"", " padded ", "héllo", "0x1F", "NULL"} {
			k, err := ParseKey(typ, in)
			if err != nil || k.Text() != in || k.String() != in || k.Type() != typ || k.IsNull() {
				t.Errorf("ParseKey(%s, %q) = %v, %v", typ, in, k, err)
			}
		}
	}
	k, err := ParseKey(UUID, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11")
	if err != nil || k.String() != "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" {
		t.Errorf("ParseKey(uuid) = %v, %v", k, err)
	}
	if _, err := ParseKey(Type(0), "1"); err == nil {
		t.Error("ParseKey with an invalid type succeeded")
	}
	if _, err := ParseKey(Type(99), "1"); err == nil {
		t.Error("ParseKey with an unknown type succeeded")
	}
}

// TestKeyErrorMessages checks that errors read as PostgreSQL's do, so that
// the router can pass them on unchanged.
func TestKeyErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		typ  Type
		in   string
		want string
	}{
		{Smallint, "40000", `value "40000" is out of range for type smallint`},
		{Bigint, "abc", `invalid input syntax for type bigint: "abc"`},
		{UUID, "xyz", `invalid input syntax for type uuid: "xyz"`},
	} {
		_, err := ParseKey(tc.typ, tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseKey(%s, %q) error = %v, want %s", tc.typ, tc.in, err, tc.want)
		}
	}
	_, err := DecodeBinaryKey(UUID, make([]byte, 15))
	if want := "incorrect binary data format for type uuid: 15 bytes"; err == nil || err.Error() != want {
		t.Errorf("DecodeBinaryKey error = %v, want %s", err, want)
	}
}

func TestDecodeBinaryKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		in   []byte
		want string // the key's String, when err is nil
		err  error
	}{
		{"int8", Bigint, []byte{0, 0, 0, 0, 0, 0, 0, 42}, "42", nil},
		{"int8 -1", Bigint, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "-1", nil},
		{"int8 min", Bigint, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}, "-9223372036854775808", nil},
		{"int4 into bigint", Bigint, []byte{0xff, 0xff, 0xff, 0xfe}, "-2", nil},
		{"int2 into bigint", Bigint, []byte{0x80, 0x00}, "-32768", nil},
		{"int4", Integer, []byte{0x7f, 0xff, 0xff, 0xff}, "2147483647", nil},
		{"int8 into integer", Integer, []byte{0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, "2147483647", nil},
		{"int8 too big for integer", Integer, []byte{0, 0, 0, 1, 0, 0, 0, 0}, "", ErrRange},
		{"int2", Smallint, []byte{0xff, 0xfb}, "-5", nil},
		{"int4 into smallint", Smallint, []byte{0xff, 0xff, 0x80, 0x00}, "-32768", nil},
		{"int4 too big for smallint", Smallint, []byte{0, 0, 0x9c, 0x40}, "", ErrRange},
		{"int8 too small for smallint", Smallint, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff}, "", ErrRange},
		{"empty int", Bigint, nil, "", ErrBinary},
		{"one byte", Smallint, []byte{1}, "", ErrBinary},
		{"three bytes", Integer, []byte{1, 2, 3}, "", ErrBinary},
		{"nine bytes", Bigint, make([]byte, 9), "", ErrBinary},
		{"text", Text, []byte("héllo"), "héllo", nil},
		{"empty text", Text, []byte{}, "", nil},
		{"nil varchar", Varchar, nil, "", nil},
		{"uuid", UUID, []byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11},
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", nil},
		{"short uuid", UUID, make([]byte, 15), "", ErrBinary},
		{"long uuid", UUID, make([]byte, 17), "", ErrBinary},
		{"uuid as text", UUID, []byte("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "", ErrBinary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := DecodeBinaryKey(tc.typ, tc.in)
			if tc.err != nil {
				var ke *KeyError
				if !errors.Is(err, tc.err) || !errors.As(err, &ke) {
					t.Fatalf("DecodeBinaryKey = %v, %v; want a *KeyError wrapping %v", k, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Type() != tc.typ || k.String() != tc.want {
				t.Errorf("DecodeBinaryKey = %s %q, want %q", k.Type(), k, tc.want)
			}
		})
	}
	if _, err := DecodeBinaryKey(Type(0), []byte{0, 1}); err == nil {
		t.Error("DecodeBinaryKey with an invalid type succeeded")
	}
}

// TestDecodeBinaryKeyCopies checks that a text key does not alias the buffer
// it was decoded from, which the frontend reuses for the next message.
func TestDecodeBinaryKeyCopies(t *testing.T) {
	buf := []byte("tenant")
	k, err := DecodeBinaryKey(Text, buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXX")
	if k.Text() != "tenant" {
		t.Errorf("key changed with its buffer: %q", k.Text())
	}
}

func TestParseUUID(t *testing.T) {
	want := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	// The accepted forms are those of PostgreSQL's uuid_in documentation.
	for _, in := range []string{
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eebc999c0b4ef8bb6d6bb9bd380a11",
		"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
		"{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
		"a0eEBc99-9C0b-4ef8-bb6d-6bb9bd380a11",
	} {
		got, err := ParseUUID(in)
		if err != nil || got != want {
			t.Errorf("ParseUUID(%q) = %x, %v", in, got, err)
		}
	}
	for _, in := range []string{
		"",
		"{}",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",    // 31 digits
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",  // 33 digits
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",  // hyphen after the last group
		"-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",  // leading hyphen
		"a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",  // two hyphens
		"a0eeb-c99-9c0b-4ef8-bb6d-6bb9bd380a11",  // hyphen inside a group
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",  // unclosed brace
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",  // unopened brace
		"(a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11)", // wrong brackets
		" a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",  // whitespace
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
		"g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", // not hex
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1\x00",
	} {
		if got, err := ParseUUID(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseUUID(%q) = %x, %v; want ErrSyntax", in, got, err)
		}
	}
}

func TestNull(t *testing.T) {
	if !Null.IsNull() || Null.Type() != 0 || Null.String() != "NULL" || Null != (Key{}) {
		t.Errorf("Null = %#v", Null)
	}
	k, _ := ParseKey(Bigint, "0")
	if k.IsNull() || k == Null {
		t.Error("bigint 0 is NULL")
	}
	k, _ = ParseKey(Text, "")
	if k.IsNull() || k == Null {
		t.Error("empty text is NULL")
	}
}
