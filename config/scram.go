package config

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
)

// scramPrefix starts every SCRAM-SHA-256 verifier.
const scramPrefix = "SCRAM-SHA-256$"

// DefaultSCRAMIterations is PostgreSQL's default scram_iterations.
const DefaultSCRAMIterations = 4096

// SCRAMVerifier is what a server stores to check SCRAM-SHA-256 logins
// without knowing the password (RFC 5802, RFC 7677): the form of
// pg_authid.rolpassword, "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
// with base64 salt and keys. A user's password in the config may be one,
// copied from PostgreSQL; the proxy then authenticates clients with SCRAM
// against it without holding the plaintext.
type SCRAMVerifier struct {
	Iterations int
	Salt       []byte
	StoredKey  []byte // SHA-256(HMAC(SaltedPassword, "Client Key"))
	ServerKey  []byte // HMAC(SaltedPassword, "Server Key")
}

// ParseSCRAMVerifier parses a verifier in pg_authid.rolpassword form. It
// reports false for anything else, including a plaintext password.
func ParseSCRAMVerifier(s string) (v SCRAMVerifier, ok bool) {
	rest, ok := strings.CutPrefix(s, scramPrefix)
	if !ok {
		return SCRAMVerifier{}, false
	}
	iterSalt, keys, ok1 := strings.Cut(rest, "$")
	iter, salt, ok2 := strings.Cut(iterSalt, ":")
	stored, server, ok3 := strings.Cut(keys, ":")
	if !ok1 || !ok2 || !ok3 {
		return SCRAMVerifier{}, false
	}
	v.Iterations, _ = strconv.Atoi(iter)
	var err1, err2, err3 error
	v.Salt, err1 = base64.StdEncoding.Strict().DecodeString(salt)
	v.StoredKey, err2 = base64.StdEncoding.Strict().DecodeString(stored)
	v.ServerKey, err3 = base64.StdEncoding.Strict().DecodeString(server)
	if v.Iterations < 1 || err1 != nil || err2 != nil || err3 != nil || len(v.Salt) == 0 ||
		len(v.StoredKey) != sha256.Size || len(v.ServerKey) != sha256.Size {
		return SCRAMVerifier{}, false
	}
	return v, true
}

// IsSCRAMVerifier reports whether s is a well-formed SCRAM-SHA-256 verifier.
func IsSCRAMVerifier(s string) bool {
	_, ok := ParseSCRAMVerifier(s)
	return ok
}

// NewSCRAMVerifier computes the verifier of password for salt and iteration
// count, as PostgreSQL does: the password goes through SASLprep (ASCII
// passwords are used as they are), then PBKDF2-HMAC-SHA-256. Iteration
// counts below 1 count as 1.
func NewSCRAMVerifier(password string, salt []byte, iterations int) SCRAMVerifier {
	iterations = max(iterations, 1)
	salted := pbkdf2SHA256([]byte(saslPrep(password)), salt, iterations)
	clientKey := hmacSHA256(salted, []byte("Client Key"))
	storedKey := sha256.Sum256(clientKey)
	return SCRAMVerifier{
		Iterations: iterations,
		Salt:       bytes.Clone(salt),
		StoredKey:  storedKey[:],
		ServerKey:  hmacSHA256(salted, []byte("Server Key")),
	}
}

// Matches reports whether password is the one v was computed from, in
// constant time with respect to the keys. It costs v.Iterations HMACs.
func (v SCRAMVerifier) Matches(password string) bool {
	w := NewSCRAMVerifier(password, v.Salt, v.Iterations)
	return subtle.ConstantTimeCompare(w.StoredKey, v.StoredKey) == 1 &&
		subtle.ConstantTimeCompare(w.ServerKey, v.ServerKey) == 1
}

// String formats v as PostgreSQL stores it in pg_authid.rolpassword.
func (v SCRAMVerifier) String() string {
	enc := base64.StdEncoding
	return scramPrefix + strconv.Itoa(v.Iterations) + ":" + enc.EncodeToString(v.Salt) +
		"$" + enc.EncodeToString(v.StoredKey) + ":" + enc.EncodeToString(v.ServerKey)
}

// pbkdf2SHA256 is PBKDF2 (RFC 8018) with HMAC-SHA-256 for one 32-byte
// block, which is all SCRAM-SHA-256 needs: Hi(password, salt, i) of RFC 5802.
// It is written out rather than taken from crypto/pbkdf2, which refuses
// short passwords and salts when Go runs in FIPS 140-only mode, while
// PostgreSQL accepts any.
func pbkdf2SHA256(password, salt []byte, iterations int) []byte {
	mac := hmac.New(sha256.New, password)
	mac.Write(salt)
	mac.Write([]byte{0, 0, 0, 1})
	u := mac.Sum(nil)
	out := bytes.Clone(u)
	for i := 1; i < iterations; i++ {
		mac.Reset()
		mac.Write(u)
		u = mac.Sum(u[:0])
		for j := range out {
			out[j] ^= u[j]
		}
	}
	return out
}

func hmacSHA256(key, msg []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(msg)
	return mac.Sum(nil)
}
