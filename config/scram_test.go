package config

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSCRAMVerifierMatchesPostgreSQL recomputes verifiers that PostgreSQL
// stored in pg_authid, with their salt and iteration count: the same
// password must give the same keys, SASLprep included.
func TestSCRAMVerifierMatchesPostgreSQL(t *testing.T) {
	f, err := os.Open("testdata/scram_postgres.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		quoted, stored, ok := strings.Cut(text, "\t")
		password, err := strconv.Unquote(quoted)
		if !ok || err != nil {
			t.Fatalf("scram_postgres.txt:%d: malformed line", line)
		}
		n++
		t.Run(quoted, func(t *testing.T) {
			want, ok := ParseSCRAMVerifier(stored)
			if !ok {
				t.Fatalf("ParseSCRAMVerifier(%q) failed", stored)
			}
			if got := want.String(); got != stored {
				t.Errorf("String() = %q, want %q", got, stored)
			}
			got := NewSCRAMVerifier(password, want.Salt, want.Iterations)
			if got.String() != stored {
				t.Errorf("NewSCRAMVerifier = %s\nPostgreSQL gave    %s", got, stored)
			}
			if !want.Matches(password) {
				t.Error("Matches(password) = false")
			}
			if want.Matches(password + "x") {
				t.Error("Matches(wrong password) = true")
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d vectors read", n)
	}
}

// TestSCRAMRFC7677 checks the keys against the SCRAM-SHA-256 exchange of
// RFC 7677 section 3: the server checks the client's proof with StoredKey
// and signs with ServerKey, exactly as the proxy does.
func TestSCRAMRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	v := NewSCRAMVerifier("pencil", salt, 4096)
	authMessage := []byte("n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")

	proof, _ := base64.StdEncoding.DecodeString("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
	clientSig := hmacSHA256(v.StoredKey, authMessage)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ clientSig[i]
	}
	if sum := sha256.Sum256(clientKey); !bytes.Equal(sum[:], v.StoredKey) {
		t.Error("the RFC's ClientProof does not verify against StoredKey")
	}
	serverSig := base64.StdEncoding.EncodeToString(hmacSHA256(v.ServerKey, authMessage))
	if want := "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; serverSig != want {
		t.Errorf("ServerSignature = %s, want %s", serverSig, want)
	}
}

func TestParseSCRAMVerifier(t *testing.T) {
	valid := NewSCRAMVerifier("secret", []byte("0123456789abcdef"), 4096).String()
	if !IsSCRAMVerifier(valid) {
		t.Fatalf("IsSCRAMVerifier(%q) = false", valid)
	}
	v, _ := ParseSCRAMVerifier(valid)
	if v.Iterations != 4096 || string(v.Salt) != "0123456789abcdef" || len(v.StoredKey) != 32 || len(v.ServerKey) != 32 {
		t.Errorf("ParseSCRAMVerifier(%q) = %+v", valid, v)
	}
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, s := range []string{
		"",
		"secret",
		"md5" + strings.Repeat("0", 32),
		"SCRAM-SHA-256$",
		"SCRAM-SHA-256$4096:c2FsdA==$" + key, // one key
		"SCRAM-SHA-256$0:c2FsdA==$" + key + ":" + key,          // no iterations
		"SCRAM-SHA-256$x:c2FsdA==$" + key + ":" + key,          // bad iterations
		"SCRAM-SHA-256$4096:$" + key + ":" + key,               // empty salt
		"SCRAM-SHA-256$4096:c2FsdA$" + key + ":" + key,         // unpadded base64
		"SCRAM-SHA-256$4096:c2FsdA==$c2hvcnQ=:" + key,          // short StoredKey
		"SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + key + "=", // bad ServerKey
		"SCRAM-SHA-1$4096:c2FsdA==$" + key + ":" + key,
		strings.Replace(valid, "$", "$$", 1),
	} {
		if _, ok := ParseSCRAMVerifier(s); ok {
			t.Errorf("ParseSCRAMVerifier(%q) succeeded", s)
		}
	}
}

func TestSCRAMVerifierRoundTrip(t *testing.T) {
	for _, iter := range []int{1, 2, 4096, 10000} {
		for _, salt := range [][]byte{{0}, []byte("salt"), bytes.Repeat([]byte{0xff}, 28)} {
			v := NewSCRAMVerifier("pw", salt, iter)
			w, ok := ParseSCRAMVerifier(v.String())
			if !ok || w.String() != v.String() || !w.Matches("pw") {
				t.Errorf("round trip of %s failed: %+v, %v", v, w, ok)
			}
		}
	}
	if v := NewSCRAMVerifier("pw", []byte("s"), 0); v.Iterations != 1 || !IsSCRAMVerifier(v.String()) {
		t.Errorf("NewSCRAMVerifier with 0 iterations = %s", v)
	}
}

// TestPBKDF2 checks pbkdf2SHA256 against RFC 7914 section 11's
// PBKDF2-HMAC-SHA-256 vector (first 32 bytes of the 64 given).
func TestPBKDF2(t *testing.T) {
	got := pbkdf2SHA256([]byte("passwd"), []byte("salt"), 1)
	want := "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
	if hexs := hex.EncodeToString(got); hexs != want {
		t.Errorf("PBKDF2 = %s, want %s", hexs, want)
	}
}

func TestSASLPrep(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"pencil", "pencil"},
		{"a\x07b", "a\x07b"}, // ASCII passes unchanged, control characters and all
		{"I\u00adX", "IX"},   // RFC 4013 section 3 examples
		{"user", "user"},
		{"USER", "USER"},
		{"\u00aa", "a"},
		{"\u2168", "IX"},
		{"\u0007\u00e9", "\u0007\u00e9"}, // prohibited: unchanged
		{"\u0627\u0031", "\u0627\u0031"}, // bidi violation: unchanged
		{"a\u00a0b\u00e9", "a b\u00e9"},
		{"\u00ad", "\u00ad"}, // maps to nothing at all: unchanged
		{"\xff\u00e9", "\xff\u00e9"},
	} {
		if got := saslPrep(tc.in); got != tc.want {
			t.Errorf("saslPrep(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
	}
}
