package frontend

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

const scramIterations = 4096

// verifiers caches SCRAM verifiers computed from plaintext passwords: PBKDF2
// is deliberately slow, and a salt fixed per (user, password) per process is
// what PostgreSQL's stored verifiers have too.
type verifiers struct {
	mu sync.Mutex // guards m
	m  map[string]config.SCRAMVerifier
}

func (v *verifiers) get(user, password string) config.SCRAMVerifier {
	if sv, ok := config.ParseSCRAMVerifier(password); ok {
		return sv
	}
	key := user + "\x00" + password
	v.mu.Lock()
	defer v.mu.Unlock()
	if sv, ok := v.m[key]; ok {
		return sv
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	sv := config.NewSCRAMVerifier(password, salt, scramIterations)
	if v.m == nil {
		v.m = map[string]config.SCRAMVerifier{}
	}
	v.m[key] = sv
	return sv
}

func authFailed(user string) *wire.Error {
	return wire.Fatalf(wire.InvalidPassword, "password authentication failed for user \"%s\"", user)
}

// authenticate runs the authentication exchange for user u (nil when the
// user is unknown: the exchange still runs, so that a client cannot tell
// unknown users from wrong passwords) and sends AuthenticationOk.
func (c *client) authenticate(name string, method config.AuthType, password string, known bool) error {
	switch method {
	case config.AuthTrust:
		if !known {
			return authFailed(name)
		}
	case config.AuthPlain:
		pw, err := c.askPassword([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 3})
		if err != nil {
			return err
		}
		if !known || config.IsSCRAMVerifier(password) || subtle.ConstantTimeCompare([]byte(pw), []byte(password)) != 1 {
			if known && config.IsSCRAMVerifier(password) {
				if sv, ok := config.ParseSCRAMVerifier(password); ok && scramMatches(sv, pw) {
					break
				}
			}
			return authFailed(name)
		}
	case config.AuthMD5:
		var salt [4]byte
		rand.Read(salt[:])
		msg := append([]byte{'R', 0, 0, 0, 12, 0, 0, 0, 5}, salt[:]...)
		pw, err := c.askPassword(msg)
		if err != nil {
			return err
		}
		want := md5Password(name, password, salt[:])
		if !known || subtle.ConstantTimeCompare([]byte(pw), []byte(want)) != 1 {
			return authFailed(name)
		}
	default:
		sv := c.l.verifiers.get(name, password)
		if !known {
			salt := make([]byte, 16)
			rand.Read(salt)
			sv = config.NewSCRAMVerifier(randomString(), salt, scramIterations)
		}
		if err := c.scram(name, sv); err != nil {
			return err
		}
		if !known {
			return authFailed(name)
		}
	}
	c.w.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 0})
	return nil
}

func randomString() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func md5Password(user, password string, salt []byte) string {
	inner := password
	if !strings.HasPrefix(password, "md5") || len(password) != 35 {
		h := md5.Sum([]byte(password + user))
		inner = "md5" + hex.EncodeToString(h[:])
	}
	h := md5.Sum(append([]byte(inner[3:]), salt...))
	return "md5" + hex.EncodeToString(h[:])
}

// askPassword sends an authentication request and reads a PasswordMessage.
func (c *client) askPassword(req []byte) (string, error) {
	c.w.Write(req)
	if err := c.w.Flush(); err != nil {
		return "", err
	}
	typ, _, body, err := c.r.Next()
	if err != nil {
		return "", err
	}
	if typ != 'p' {
		return "", wire.Fatalf(wire.ProtocolViolation, "expected password response, got message type %q", typ)
	}
	pw, _, ok := wire.CString(body)
	if !ok {
		return "", wire.Fatalf(wire.ProtocolViolation, "invalid password packet")
	}
	return string(pw), nil
}

// scram runs SCRAM-SHA-256 (RFC 5802, RFC 7677) without channel binding.
func (c *client) scram(user string, sv config.SCRAMVerifier) error {
	mech := "SCRAM-SHA-256"
	msg := []byte{'R', 0, 0, 0, 0, 0, 0, 0, 10}
	msg = append(msg, mech...)
	msg = append(msg, 0, 0)
	c.w.Write(wire.FinishMessage(msg, 0))
	if err := c.w.Flush(); err != nil {
		return err
	}
	gs2, clientFirstBare, clientNonce, err := c.scramClientFirst(mech)
	if err != nil {
		return err
	}
	nonce := clientNonce + randomString()
	serverFirst := fmt.Sprintf("r=%s,s=%s,i=%d", nonce, base64.StdEncoding.EncodeToString(sv.Salt), sv.Iterations)
	msg = []byte{'R', 0, 0, 0, 0, 0, 0, 0, 11}
	msg = append(msg, serverFirst...)
	c.w.Write(wire.FinishMessage(msg, 0))
	if err := c.w.Flush(); err != nil {
		return err
	}
	withoutProof, proof, gotNonce, cbind, err := c.scramClientFinal()
	if err != nil {
		return err
	}
	if gotNonce != nonce {
		return wire.Fatalf(wire.ProtocolViolation, "SCRAM nonce mismatch")
	}
	if cb, err := base64.StdEncoding.DecodeString(cbind); err != nil || string(cb) != gs2 {
		return wire.Fatalf(wire.ProtocolViolation, "SCRAM channel binding check failed")
	}
	authMessage := clientFirstBare + "," + serverFirst + "," + withoutProof
	mac := hmac.New(sha256.New, sv.StoredKey)
	mac.Write([]byte(authMessage))
	clientSig := mac.Sum(nil)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ clientSig[i]
	}
	stored := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(stored[:], sv.StoredKey) != 1 {
		return authFailed(user)
	}
	mac = hmac.New(sha256.New, sv.ServerKey)
	mac.Write([]byte(authMessage))
	final := "v=" + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	msg = []byte{'R', 0, 0, 0, 0, 0, 0, 0, 12}
	msg = append(msg, final...)
	c.w.Write(wire.FinishMessage(msg, 0))
	return nil
}

// scramClientFirst reads the client's SASLInitialResponse and returns its
// GS2 header, its client-first-message-bare and its nonce.
func (c *client) scramClientFirst(mech string) (gs2, clientFirstBare, clientNonce string, err error) {
	typ, _, body, err := c.r.Next()
	if err != nil {
		return "", "", "", err
	}
	if typ != 'p' {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "expected SASL response, got message type %q", typ)
	}
	gotMech, rest, ok := wire.CString(body)
	if !ok || string(gotMech) != mech {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "client selected an invalid SASL authentication mechanism")
	}
	n, rest, ok := wire.Uint32(rest)
	if !ok || int(int32(n)) != len(rest) {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SASLInitialResponse")
	}
	clientFirst := string(rest)
	if strings.HasPrefix(clientFirst, "p=") {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "channel binding (SCRAM-SHA-256-PLUS) is not supported")
	}
	if !strings.HasPrefix(clientFirst, "n,") && !strings.HasPrefix(clientFirst, "y,") {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SCRAM message: invalid GS2 header")
	}
	parts := strings.SplitN(clientFirst, ",", 3)
	if len(parts) != 3 {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SCRAM message")
	}
	gs2 = parts[0] + "," + parts[1] + ","
	clientFirstBare = parts[2]
	for _, attr := range strings.Split(clientFirstBare, ",") {
		if strings.HasPrefix(attr, "r=") {
			clientNonce = attr[2:]
		}
	}
	if clientNonce == "" {
		return "", "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SCRAM message: missing nonce")
	}
	return gs2, clientFirstBare, clientNonce, nil
}

// scramClientFinal reads the client's SASLResponse with the
// client-final-message and returns it without its proof, the proof, and
// the nonce and channel binding it carries.
func (c *client) scramClientFinal() (withoutProof string, proof []byte, nonce, cbind string, err error) {
	typ, _, body, err := c.r.Next()
	if err != nil {
		return "", nil, "", "", err
	}
	if typ != 'p' {
		return "", nil, "", "", wire.Fatalf(wire.ProtocolViolation, "expected SASL response, got message type %q", typ)
	}
	clientFinal := string(body)
	i := strings.LastIndex(clientFinal, ",p=")
	if i < 0 {
		return "", nil, "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SCRAM message: missing proof")
	}
	withoutProof = clientFinal[:i]
	proof, err = base64.StdEncoding.DecodeString(clientFinal[i+3:])
	if err != nil || len(proof) != sha256.Size {
		return "", nil, "", "", wire.Fatalf(wire.ProtocolViolation, "malformed SCRAM message: invalid proof")
	}
	for _, attr := range strings.Split(withoutProof, ",") {
		switch {
		case strings.HasPrefix(attr, "r="):
			nonce = attr[2:]
		case strings.HasPrefix(attr, "c="):
			cbind = attr[2:]
		}
	}
	return withoutProof, proof, nonce, cbind, nil
}

// scramMatches reports whether password produces verifier sv.
func scramMatches(sv config.SCRAMVerifier, password string) bool {
	got := config.NewSCRAMVerifier(password, sv.Salt, sv.Iterations)
	return subtle.ConstantTimeCompare(got.StoredKey, sv.StoredKey) == 1
}
