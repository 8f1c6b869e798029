package config

//go:generate sh -c "python3 gen_saslprep.py > saslprep_tables.go && gofmt -w saslprep_tables.go"

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// saslPrep prepares a password for SCRAM the way PostgreSQL's pg_saslprep
// (src/common/saslprep.c) does, so that verifiers computed here match those
// in pg_authid and those libpq clients compute: SASLprep (RFC 4013) maps
// non-ASCII spaces to U+0020, drops characters mapped to nothing, applies
// NFKC, and checks prohibited, unassigned and bidirectional characters.
// Like PostgreSQL, it returns the password unchanged when it is ASCII, not
// valid UTF-8, or not a valid SASLprep string: PostgreSQL then hashes the
// raw bytes rather than refusing the password.
func saslPrep(password string) string {
	if isASCII(password) || !utf8.ValidString(password) {
		return password
	}
	mapped := make([]rune, 0, len(password))
	for _, r := range password {
		switch {
		case unicode.Is(saslNonASCIISpace, r):
			mapped = append(mapped, ' ')
		case unicode.Is(saslMappedToNothing, r):
		default:
			mapped = append(mapped, r)
		}
	}
	if len(mapped) == 0 {
		return password
	}
	out := []rune(norm.NFKC.String(string(mapped)))
	randAL := false
	for _, r := range out {
		if unicode.Is(saslProhibited, r) || unicode.Is(saslUnassigned, r) {
			return password
		}
		if unicode.Is(saslRandALCat, r) {
			randAL = true
		}
	}
	// A string with right-to-left characters must not contain left-to-right
	// ones, and must start and end with a right-to-left character.
	if randAL {
		for _, r := range out {
			if unicode.Is(saslLCat, r) {
				return password
			}
		}
		if !unicode.Is(saslRandALCat, out[0]) || !unicode.Is(saslRandALCat, out[len(out)-1]) {
			return password
		}
	}
	return string(out)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
