package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// writeKeyPair writes a self-signed certificate and its key as PEM files
// in dir and returns their names.
func writeKeyPair(t *testing.T, dir, prefix string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, prefix+".crt"), filepath.Join(dir, prefix+".key")
	if err := pgtest.WriteSelfSignedCert(cert, key); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "server")
	writeKeyPair(t, dir, "other")
	writeFile(t, filepath.Join(dir, "garbage.pem"), "not PEM\n")
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	const tail = "databases: [{name: app, shards: [{host: h}]}]\n"
	for _, tc := range []struct {
		name, tls string
		err       string // "" for success; else the whole error after the file name
	}{
		{"relative names", "{cert: server.crt, key: server.key}", ""},
		{"verify-full with CA", "{server_sslmode: verify-full, server_ca: other.crt}", ""},
		{"sslmode only", "{server_sslmode: disable}", ""},
		{"missing cert", "{cert: nope.crt, key: server.key}",
			":1:13: tls.cert: stat " + filepath.Join(dir, "nope.crt") + ": no such file or directory"},
		{"mismatched pair", "{cert: server.crt, key: other.key}",
			":1:13: tls.cert: " + filepath.Join(dir, "server.crt") + " and " + filepath.Join(dir, "other.key") +
				" do not load as a key pair: tls: private key does not match public key"},
		{"not PEM", "{cert: garbage.pem, key: server.key}",
			":1:13: tls.cert: " + filepath.Join(dir, "garbage.pem") + " and " + filepath.Join(dir, "server.key") +
				" do not load as a key pair: tls: failed to find any PEM data in certificate input"},
		{"directory", "{cert: server.crt, key: adir}",
			":1:30: tls.key: " + filepath.Join(dir, "adir") + " is not a regular file"},
		{"device", "{cert: /dev/zero, key: server.key}",
			":1:13: tls.cert: /dev/zero is not a regular file"},
		{"CA without certificates", "{server_sslmode: verify-full, server_ca: garbage.pem}",
			":1:47: tls.server_ca: " + filepath.Join(dir, "garbage.pem") + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "shardgate.yaml")
			c, err := parse([]byte("tls: "+tc.tls+"\n"+tail), file, lookupTestEnv)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{c.TLS.Cert, c.TLS.Key, c.TLS.ServerCA} {
					if f != "" && !strings.HasPrefix(f, dir) {
						t.Errorf("file name %q not resolved against the config's directory", f)
					}
				}
				return
			}
			if err == nil || err.Error() != file+tc.err {
				t.Errorf("error =\n %v\nwant\n %s", err, file+tc.err)
			}
		})
	}
}
