package transport

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"math/big"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/fuzzseed"
)

// The PEM files a node reads back (its development CA and server
// certificate and key, a client's CA file) are fuzzed here through
// parseCertificatePEM and parsePrivateKeyPEM. Each target checks that the
// parser never panics, that a file with nothing of its kind gets the
// package's error, and that what it accepts, written back as PEM, parses to
// an equal certificate or key.
//
// The seed corpora under testdata/fuzz/<FuzzName>/ are built by
// fuzzSeedFiles from fixed keys (Ed25519 certificates and keys from fixed
// seeds sign deterministically); TestFuzzSeedFilesCurrent fails when one is
// stale, and
//
//	go test -run '^TestFuzzSeedFilesCurrent$' -update-seeds ./net/transport/
//
// rewrites them. Files the fuzzer adds (failing inputs, named by hash) are
// left alone.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed files under testdata/fuzz from the encoders")

// firstBlock returns the first PEM block of data whose type is one of
// types, or nil.
func firstBlock(data []byte, types ...string) *pem.Block {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil
		}
		for _, t := range types {
			if block.Type == t {
				return block
			}
		}
	}
}

func FuzzParseCertificatePEM(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cert, err := parseCertificatePEM(data)
		if err != nil {
			if firstBlock(data, "CERTIFICATE") == nil && !errors.Is(err, ErrNoCertificate) {
				t.Fatalf("no certificate block: error %v, want ErrNoCertificate", err)
			}
			return
		}
		if block := firstBlock(data, "CERTIFICATE"); block == nil || !bytes.Equal(block.Bytes, cert.Raw) {
			t.Fatal("the certificate parsed is not the first CERTIFICATE block")
		}
		again, err := parseCertificatePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
		if err != nil || !again.Equal(cert) {
			t.Fatalf("the certificate written back parses to %v, %v", again, err)
		}
	})
}

func FuzzParsePrivateKeyPEM(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := parsePrivateKeyPEM(data)
		if err != nil {
			if firstBlock(data, "PRIVATE KEY", "EC PRIVATE KEY") == nil && !errors.Is(err, errNoPrivateKey) {
				t.Fatalf("no private key block: error %v, want errNoPrivateKey", err)
			}
			return
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatalf("the key parsed (%T) does not encode: %v", key, err)
		}
		again, err := parsePrivateKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		if err != nil {
			t.Fatalf("the key written back does not parse: %v", err)
		}
		k, ok := key.(interface{ Equal(crypto.PrivateKey) bool })
		if !ok || !k.Equal(again) {
			t.Fatalf("the key written back parses to another key (%T)", again)
		}
	})
}

// seedPEMs returns fixed certificates and keys in PEM form.
func seedPEMs(t testing.TB) (certs, keys map[string][]byte) {
	t.Helper()
	edKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: "Herald development CA", Organization: []string{"Herald"}},
		NotBefore:             at,
		NotAfter:              at.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(nil, tmpl, tmpl, edKey.Public(), edKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(43),
		Subject:      pkix.Name{CommonName: "Herald development server"},
		NotBefore:    at,
		NotAfter:     at.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(nil, leafTmpl, ca, edKey.Public(), edKey)
	if err != nil {
		t.Fatal(err)
	}
	block := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	caPEM, leafPEM := block("CERTIFICATE", caDER), block("CERTIFICATE", leafDER)

	edPKCS8, err := x509.MarshalPKCS8PrivateKey(edKey)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ecPKCS8, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ecSEC1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	xKey, err := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	xPKCS8, err := x509.MarshalPKCS8PrivateKey(xKey)
	if err != nil {
		t.Fatal(err)
	}
	edKeyPEM := block("PRIVATE KEY", edPKCS8)

	certs = map[string][]byte{
		"ca":                 caPEM,
		"leaf_then_ca":       cat(leafPEM, caPEM),
		"key_then_cert":      cat(edKeyPEM, leafPEM),
		"text_around":        cat([]byte("issued by herald\n"), caPEM, []byte("trailing\n")),
		"cut_der":            block("CERTIFICATE", caDER[:len(caDER)-10]),
		"trailing_der":       block("CERTIFICATE", append(bytes.Clone(caDER), 0)),
		"bad_base64":         bytes.Replace(caPEM, []byte("M"), []byte("!"), 1),
		"headers":            pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: caDER}),
		"no_certificate":     edKeyPEM,
		"empty":              {},
		"end_line_only":      []byte("-----END CERTIFICATE-----\n"),
		"begin_without_end":  []byte("-----BEGIN CERTIFICATE-----\nMIIB\n"),
		"nested_begin_lines": []byte("-----BEGIN CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
	}
	keys = map[string][]byte{
		"ed25519_pkcs8":     edKeyPEM,
		"ecdsa_pkcs8":       block("PRIVATE KEY", ecPKCS8),
		"ecdsa_sec1":        block("EC PRIVATE KEY", ecSEC1),
		"cert_then_key":     cat(caPEM, block("EC PRIVATE KEY", ecSEC1)),
		"x25519_not_signer": block("PRIVATE KEY", xPKCS8),
		"rsa_type_skipped":  block("RSA PRIVATE KEY", ecSEC1),
		"sec1_in_pkcs8":     block("PRIVATE KEY", ecSEC1),
		"cut_der":           block("EC PRIVATE KEY", ecSEC1[:len(ecSEC1)-3]),
		"no_key":            caPEM,
		"empty":             {},
	}
	return certs, keys
}

func fuzzSeedFiles(t testing.TB) []fuzzseed.Seed {
	var out []fuzzseed.Seed
	certs, keys := seedPEMs(t)
	for name, b := range certs {
		out = append(out, fuzzseed.Seed{Target: "FuzzParseCertificatePEM", Name: name, Vals: []any{b}})
	}
	for name, b := range keys {
		out = append(out, fuzzseed.Seed{Target: "FuzzParsePrivateKeyPEM", Name: name, Vals: []any{b}})
	}
	return out
}
func TestFuzzSeedFilesCurrent(t *testing.T) {
	fuzzseed.Check(t, fuzzSeedFiles(t), *updateSeeds)
}
