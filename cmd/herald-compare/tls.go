package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// errTLSVersion is returned when a connection that should speak TLS 1.3
// negotiated something else (or no TLS at all).
var errTLSVersion = errors.New("herald-compare: connection did not negotiate TLS 1.3")

// tlsMaterial is a throwaway certificate authority and a server certificate
// for 127.0.0.1 signed by it, generated when the command starts and written
// as PEM files into a temporary directory, so that a nats-server in another
// process can load them. The key never leaves that directory, which Close
// removes.
type tlsMaterial struct {
	dir      string         // holds the PEM files; removed by Close
	certFile string         // the server certificate chain, PEM
	keyFile  string         // the server's private key, PEM
	roots    *x509.CertPool // the throwaway CA, which clients trust
}

// newTLSMaterial generates a P-256 CA and a server certificate for the
// loopback address valid for a day. The caller must Close it.
func newTLSMaterial() (*tlsMaterial, error) {
	dir, err := os.MkdirTemp("", "herald-compare-tls-")
	if err != nil {
		return nil, err
	}
	m := &tlsMaterial{dir: dir, certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server-key.pem")}
	if err := m.generate(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("herald-compare: generate TLS certificate: %w", err)
	}
	return m, nil
}

// generate creates the CA and the server certificate and writes the files.
func (m *tlsMaterial) generate() error {
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(25 * time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald-compare throwaway CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "herald-compare nats-server"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	if err := os.WriteFile(m.certFile, chain, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(m.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	m.roots = x509.NewCertPool()
	m.roots.AddCert(ca)
	return nil
}

// clientConfig is what every TLS client of the bench uses: it trusts only
// the throwaway CA and accepts nothing below TLS 1.3.
func (m *tlsMaterial) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: m.roots, MinVersion: tls.VersionTLS13}
}

// Close removes the PEM files.
func (m *tlsMaterial) Close() error {
	return os.RemoveAll(m.dir)
}

// serverTLSConfig loads a certificate chain and key for nats-server and
// accepts nothing below TLS 1.3.
func serverTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("herald-compare: load TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// checkTLS13 returns errTLSVersion unless state is a completed TLS 1.3
// handshake.
func checkTLS13(state tls.ConnectionState) error {
	if !state.HandshakeComplete || state.Version != tls.VersionTLS13 {
		return fmt.Errorf("%w (handshake complete %v, version %#x)", errTLSVersion, state.HandshakeComplete, state.Version)
	}
	return nil
}
