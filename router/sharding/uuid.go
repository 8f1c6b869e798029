package sharding

// ParseUUID parses s the way PostgreSQL's uuid_in does (string_to_uuid in
// src/backend/utils/adt/uuid.c): 32 hexadecimal digits of either case,
// optionally wrapped in braces, with an optional hyphen after any group of
// four digits except the last. So "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
// "A0EEBC999C0B4EF8BB6D6BB9BD380A11", "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}"
// and "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11" are all accepted. Surrounding
// whitespace is not. The error is a *KeyError wrapping ErrSyntax.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	i := 0
	braces := len(s) > 0 && s[0] == '{'
	if braces {
		i++
	}
	for n := range u {
		if len(s)-i < 2 {
			return [16]byte{}, syntaxError(UUID, s)
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return [16]byte{}, syntaxError(UUID, s)
		}
		u[n] = hi<<4 | lo
		i += 2
		if i < len(s) && s[i] == '-' && n%2 == 1 && n < len(u)-1 {
			i++
		}
	}
	if braces {
		if i >= len(s) || s[i] != '}' {
			return [16]byte{}, syntaxError(UUID, s)
		}
		i++
	}
	if i != len(s) {
		return [16]byte{}, syntaxError(UUID, s)
	}
	return u, nil
}

// formatUUID renders u the way uuid_out does: lower case, hyphenated 8-4-4-4-12.
func formatUUID(u [16]byte) string {
	const hexDigits = "0123456789abcdef"
	var buf [36]byte
	j := 0
	for n, x := range u {
		if n == 4 || n == 6 || n == 8 || n == 10 {
			buf[j] = '-'
			j++
		}
		buf[j] = hexDigits[x>>4]
		buf[j+1] = hexDigits[x&0xf]
		j += 2
	}
	return string(buf[:])
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
