package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// SelfSignedCert returns a new self-signed ECDSA certificate for
// 127.0.0.1 and localhost, with its key.
func SelfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pgtest: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "shardgate test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pgtest: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// WriteSelfSignedCert writes a SelfSignedCert to certPath and its key to
// keyPath (mode 0600), as PEM: for PostgreSQL's ssl (Options.SSL) and the
// proxy's tls section in tests.
func WriteSelfSignedCert(certPath, keyPath string) error {
	cert, err := SelfSignedCert()
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return fmt.Errorf("pgtest: key: %w", err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// writeSSLFiles writes the certificate and key of Options.SSL as
// server.crt and server.key into the data directory (PostgreSQL's default
// ssl_cert_file and ssl_key_file), owned by the server's user: PostgreSQL
// refuses a key that others can read.
func (c *Cluster) writeSSLFiles() error {
	cert, key := filepath.Join(c.DataDir, "server.crt"), filepath.Join(c.DataDir, "server.key")
	if err := WriteSelfSignedCert(cert, key); err != nil {
		return err
	}
	for _, path := range []string{cert, key} {
		if err := c.env.chown(path); err != nil {
			return err
		}
	}
	return nil
}
