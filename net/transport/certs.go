package transport

import (
	"crypto"
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
	"strings"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// File names of the development certificates inside their directory.
const (
	// CAFileName is the self-signed CA certificate clients trust.
	CAFileName = "ca.pem"
	// CAKeyFileName is the CA's private key, kept to renew the server
	// certificate under the same CA.
	CAKeyFileName = "ca-key.pem"
	// ServerCertFileName is the server certificate, signed by the CA.
	ServerCertFileName = "server.pem"
	// ServerKeyFileName is the server certificate's private key.
	ServerKeyFileName = "server-key.pem"
)

// RenewBefore is how long a development server certificate must still be
// valid to be reused; one expiring sooner is renewed by
// EnsureDevCertificates.
const RenewBefore = 24 * time.Hour

// Lifetimes of generated certificates, in years.
const (
	caLifetimeYears     = 10
	serverLifetimeYears = 1
)

// DevCertificates names the PEM files of a development CA and the server
// certificate it signed, as written by EnsureDevCertificates. The CA's key
// sits beside CAFile as CAKeyFileName.
type DevCertificates struct {
	// CAFile is the CA certificate; clients pass it as ClientTLSOptions.CAFile.
	CAFile string
	// CertFile is the server certificate, for ServerTLSConfig.
	CertFile string
	// KeyFile is the server certificate's private key, for ServerTLSConfig.
	KeyFile string
}

// DevCertificatesDir is where a node keeps its development certificates:
// the tls directory under its data directory. The CLI looks for
// DevCertificatesDir(dataDir)/ca.pem when it is given no --ca.
func DevCertificatesDir(dataDir string) string {
	return filepath.Join(dataDir, "tls")
}

// EnsureDevCertificates makes dir (mode 0700 when it has to create it) hold
// a development CA and a server certificate signed by it, and returns their
// paths.
//
// The files in dir are reused when the server certificate is signed by the
// CA in ca.pem, matches server-key.pem, names every wanted host and stays
// valid for at least RenewBefore. Otherwise a new server certificate (ECDSA
// P-256, valid one year, server authentication) is issued: by the existing
// CA when ca.pem and ca-key.pem are sound and the CA outlives the new
// certificate, so clients that trust ca.pem keep working; else by a new
// self-signed CA (ECDSA P-256, valid ten years).
//
// The server certificate names localhost, 127.0.0.1, ::1, the machine's
// hostname and every entry of hosts (an IP address or a DNS name; blank
// entries are ignored). Every file is written to a temporary file and
// renamed into place, so a reader never sees half a file; private keys have
// mode 0600. Two processes must not call it on the same dir at once.
func EnsureDevCertificates(dir string, hosts []string) (DevCertificates, error) {
	if dir == "" {
		return DevCertificates{}, ErrNoDirectory
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return DevCertificates{}, fmt.Errorf("transport: create certificate directory: %w", err)
	}
	certs := DevCertificates{
		CAFile:   filepath.Join(dir, CAFileName),
		CertFile: filepath.Join(dir, ServerCertFileName),
		KeyFile:  filepath.Join(dir, ServerKeyFileName),
	}
	caKeyFile := filepath.Join(dir, CAKeyFileName)
	names := serverNames(hosts)
	now := time.Now()
	if serverReusable(certs, names, now) {
		return certs, nil
	}

	notAfter := now.AddDate(serverLifetimeYears, 0, 0)
	ca, caKey, ok := loadCA(certs.CAFile, caKeyFile, now, notAfter)
	if !ok {
		var caPEM, caKeyPEM []byte
		var err error
		ca, caKey, caPEM, caKeyPEM, err = newCA(now)
		if err != nil {
			return DevCertificates{}, err
		}
		// The key goes first: a crash between the two renames leaves a
		// CA whose key does not match, which the next call replaces.
		if err := writeFileAtomic(caKeyFile, caKeyPEM, 0o600); err != nil {
			return DevCertificates{}, err
		}
		if err := writeFileAtomic(certs.CAFile, caPEM, 0o644); err != nil {
			return DevCertificates{}, err
		}
	}
	certPEM, keyPEM, err := newServerCert(ca, caKey, names, now, notAfter)
	if err != nil {
		return DevCertificates{}, err
	}
	if err := writeFileAtomic(certs.KeyFile, keyPEM, 0o600); err != nil {
		return DevCertificates{}, err
	}
	if err := writeFileAtomic(certs.CertFile, certPEM, 0o644); err != nil {
		return DevCertificates{}, err
	}
	syncDir(dir)
	return certs, nil
}

// Errors returned by this package.
var (
	// ErrNoDirectory means EnsureDevCertificates got an empty dir.
	ErrNoDirectory = errors.New("transport: no certificate directory given")
	// ErrIncompleteKeyPair means ServerTLSConfig got a certificate file
	// without a key file or the other way round.
	ErrIncompleteKeyPair = errors.New("transport: certificate and key files must both be given")
	// ErrNoCertificate means a PEM file holds no certificate.
	ErrNoCertificate = errors.New("transport: no PEM certificate found")
	// ErrCertificateExpired means the server certificate given to
	// ServerTLSConfig is past its NotAfter date, so no client would accept it.
	ErrCertificateExpired = errors.New("transport: certificate has expired")
)

// DefaultServerName is the name a client verifies the server certificate
// against when ClientTLSOptions.ServerName is empty. Development
// certificates always carry it.
const DefaultServerName = "localhost"

// ServerTLSConfig returns the TLS configuration a node listens with: the
// certificate chain in certFile (PEM, leaf first) and its private key in
// keyFile, TLS 1.3 only, ALPN wire.ALPN only.
//
// The files are read once; a renewed certificate takes effect when the
// configuration is built again. It returns ErrIncompleteKeyPair when only
// one file is named, ErrCertificateExpired (wrapped) for an expired leaf,
// and the file or parse error otherwise. Each call returns a new
// configuration the caller owns.
func ServerTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, ErrIncompleteKeyPair
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("transport: load key pair %s, %s: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("transport: parse %s: %w", certFile, err)
		}
	}
	if time.Now().After(pair.Leaf.NotAfter) {
		return nil, fmt.Errorf("%w: %s expired at %s", ErrCertificateExpired, certFile,
			pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{wire.ALPN},
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// ClientTLSOptions says how a client verifies the node it dials.
type ClientTLSOptions struct {
	// CAFile is a PEM file (or several, comma-separated) of CA
	// certificates to trust instead of the system roots; empty means the
	// system roots. A development node's CA is
	// DevCertificatesDir(dataDir)/ca.pem.
	CAFile string
	// Insecure skips verification of the server certificate. It is for
	// experiments only: anyone on the path can impersonate the node.
	Insecure bool
	// ServerName is the name the server certificate must carry, and the
	// SNI sent; empty means DefaultServerName. Callers that dial an IP
	// address of a node whose certificate names a DNS name set it.
	ServerName string
	// CertFile and KeyFile are a client certificate and its key (PEM) to
	// present to a node that verifies client certificates; both or neither.
	CertFile, KeyFile string
}

// ClientTLSConfig returns the TLS configuration a client dials with: TLS
// 1.3 only, ALPN wire.ALPN only, roots from o.CAFile when given. It returns
// the file error when o.CAFile cannot be read and ErrNoCertificate (wrapped)
// when it holds no certificate. Each call returns a new configuration the
// caller owns.
func ClientTLSConfig(o ClientTLSOptions) (*tls.Config, error) {
	conf := &tls.Config{
		ServerName:         o.ServerName,
		InsecureSkipVerify: o.Insecure,
		NextProtos:         []string{wire.ALPN},
		MinVersion:         tls.VersionTLS13,
	}
	if conf.ServerName == "" {
		conf.ServerName = DefaultServerName
	}
	if o.CAFile != "" {
		// Several files, comma-separated, are all trusted: a development
		// cluster's nodes each generate their own CA.
		pool := x509.NewCertPool()
		for _, f := range strings.Split(o.CAFile, ",") {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("transport: read CA file: %w", err)
			}
			if !pool.AppendCertsFromPEM(data) {
				return nil, fmt.Errorf("%w in CA file %s", ErrNoCertificate, f)
			}
		}
		conf.RootCAs = pool
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, ErrIncompleteKeyPair
		}
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("transport: load client key pair %s, %s: %w", o.CertFile, o.KeyFile, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}

// hostNames is the set of names a server certificate must carry.
type hostNames struct {
	// dns are DNS names, deduplicated case-insensitively.
	dns []string
	// ips are IP addresses, deduplicated.
	ips []net.IP
}

// serverNames returns the fixed names (localhost, 127.0.0.1, ::1, the
// hostname) plus hosts.
func serverNames(hosts []string) hostNames {
	all := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		all = append(all, h)
	}
	all = append(all, hosts...)
	var n hostNames
	for _, h := range all {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !containsIP(n.ips, ip) {
				n.ips = append(n.ips, ip)
			}
			continue
		}
		if !containsFold(n.dns, h) {
			n.dns = append(n.dns, h)
		}
	}
	return n
}

// covers reports whether cert names every host in n.
func (n hostNames) covers(cert *x509.Certificate) bool {
	for _, h := range n.dns {
		if !containsFold(cert.DNSNames, h) {
			return false
		}
	}
	for _, ip := range n.ips {
		if !containsIP(cert.IPAddresses, ip) {
			return false
		}
	}
	return true
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func containsIP(list []net.IP, ip net.IP) bool {
	for _, x := range list {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}

// serverReusable reports whether the files named by certs form a server
// certificate that can be used as is: it parses, matches its key, chains to
// the CA for server authentication, names every host and is valid for at
// least RenewBefore from now. Any failure means "issue a new one".
func serverReusable(certs DevCertificates, names hostNames, now time.Time) bool {
	certPEM, err := os.ReadFile(certs.CertFile)
	if err != nil {
		return false
	}
	keyPEM, err := os.ReadFile(certs.KeyFile)
	if err != nil {
		return false
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM) // checks that the key matches
	if err != nil || pair.Leaf == nil {
		return false
	}
	leaf := pair.Leaf
	if now.Add(RenewBefore).After(leaf.NotAfter) || now.Before(leaf.NotBefore) || !names.covers(leaf) {
		return false
	}
	caPEM, err := os.ReadFile(certs.CAFile)
	if err != nil {
		return false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return false
	}
	_, err = leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err == nil
}

// loadCA returns the CA in caFile and its key from keyFile when both parse,
// match, and the CA may sign a certificate valid from now until notAfter.
func loadCA(caFile, keyFile string, now, notAfter time.Time) (*x509.Certificate, crypto.Signer, bool) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, false
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, false
	}
	ca, err := parseCertificatePEM(caPEM)
	if err != nil {
		return nil, nil, false
	}
	key, err := parsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, false
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, false
	}
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 ||
		now.Before(ca.NotBefore) || notAfter.After(ca.NotAfter) {
		return nil, nil, false
	}
	return ca, key, true
}

// newCA generates a self-signed CA and returns it with its key, in parsed
// and PEM form.
func newCA(now time.Time) (*x509.Certificate, crypto.Signer, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("transport: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cn := "Herald development CA"
	if h, err := os.Hostname(); err == nil && h != "" {
		cn += " (" + h + ")"
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Herald"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.AddDate(caLifetimeYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // signs leaf certificates only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("transport: create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("transport: parse new CA certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return ca, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// newServerCert issues a server certificate for names, signed by ca, and
// returns it and its new key in PEM form.
func newServerCert(ca *x509.Certificate, caKey crypto.Signer, names hostNames, now, notAfter time.Time) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: generate server key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Herald development server", Organization: []string{"Herald"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names.dns,
		IPAddresses:           names.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: create server certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// newSerial returns a random 128-bit certificate serial number.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("transport: generate serial number: %w", err)
	}
	return serial, nil
}

// encodeKeyPEM encodes key as a PKCS #8 "PRIVATE KEY" PEM block.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("transport: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCertificatePEM parses the first CERTIFICATE block of data.
func parseCertificatePEM(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, ErrNoCertificate
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// errNoPrivateKey means a PEM file holds no usable private key.
var errNoPrivateKey = errors.New("transport: no private key found")

// parsePrivateKeyPEM parses the first private key block of data, in PKCS #8
// or SEC 1 ("EC PRIVATE KEY") form.
func parsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errNoPrivateKey
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, errNoPrivateKey
		}
		return signer, nil
	}
}

// writeFileAtomic writes data to a temporary file in path's directory with
// mode perm, syncs it and renames it over path.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("transport: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("transport: write %s: %w", path, err)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// syncDir makes the renames in dir durable where the platform allows it.
// It is best effort: some platforms cannot open or sync a directory, and the
// files themselves are already synced.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
