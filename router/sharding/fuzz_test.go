package sharding

import (
	"errors"
	"strconv"
	"testing"
)

// FuzzParseKey checks that ParseKey never panics, that its errors are
// *KeyError for every valid type, that a parsed key prints back to itself,
// and that it accepts every plain decimal strconv accepts within range.
func FuzzParseKey(f *testing.F) {
	for _, typ := range []Type{Bigint, Integer, Smallint, Text, Varchar, UUID} {
		for _, s := range []string{"0", "-9223372036854775808", "0x_7F", " 1_000 ", "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}", "héllo"} {
			f.Add(uint8(typ), s)
		}
	}
	f.Fuzz(func(t *testing.T, typ uint8, s string) {
		ty := Type(typ)
		k, err := ParseKey(ty, s)
		if ty.family() != noFamily {
			var ke *KeyError
			if err != nil && !errors.As(err, &ke) {
				t.Fatalf("ParseKey(%s, %q): %v is not a *KeyError", ty, s, err)
			}
			if ty.family() == intFamily {
				lo, hi := ty.intRange()
				if v, serr := strconv.ParseInt(s, 10, 64); serr == nil && v >= lo && v <= hi && (err != nil || k.Int() != v) {
					t.Fatalf("ParseKey(%s, %q) = %v, %v; strconv says %d", ty, s, k, err, v)
				}
			}
		}
		if err != nil {
			return
		}
		if k.Type() != ty || k.IsNull() {
			t.Fatalf("ParseKey(%s, %q) = %#v", ty, s, k)
		}
		back, err := ParseKey(ty, k.String())
		if err != nil || back != k {
			t.Fatalf("ParseKey(%s, %q) = %v, which parses back as %v, %v", ty, s, k, back, err)
		}
		if _, err := (Hash{Type: ty, Shards: 7}).Shard(k); err != nil {
			t.Fatalf("Hash.Shard(%v): %v", k, err)
		}
	})
}

// FuzzDecodeBinaryKey checks that DecodeBinaryKey never panics, that its
// errors are *KeyError for every valid type, and that a decoded key prints
// as text ParseKey reads back to the same key.
func FuzzDecodeBinaryKey(f *testing.F) {
	for _, typ := range []Type{Bigint, Integer, Smallint, Text, Varchar, UUID} {
		for _, b := range [][]byte{nil, {0x80, 0}, {0xff, 0xff, 0x80, 0}, {0, 0, 0, 0, 0, 0, 0, 42}, make([]byte, 16), []byte("héllo")} {
			f.Add(uint8(typ), b)
		}
	}
	f.Fuzz(func(t *testing.T, typ uint8, b []byte) {
		ty := Type(typ)
		k, err := DecodeBinaryKey(ty, b)
		if err != nil {
			var ke *KeyError
			if ty.family() != noFamily && !errors.As(err, &ke) {
				t.Fatalf("DecodeBinaryKey(%s, %x): %v is not a *KeyError", ty, b, err)
			}
			return
		}
		if k.Type() != ty || k.IsNull() {
			t.Fatalf("DecodeBinaryKey(%s, %x) = %#v", ty, b, k)
		}
		back, err := ParseKey(ty, k.String())
		if err != nil || back != k {
			t.Fatalf("DecodeBinaryKey(%s, %x) = %v, which parses back as %v, %v", ty, b, k, back, err)
		}
	})
}
