package transport

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"

	"github.com/heraldmq/herald/net/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// allFiles are the four files EnsureDevCertificates keeps.
var allFiles = []string{CAFileName, CAKeyFileName, ServerCertFileName, ServerKeyFileName}

// readAll returns the contents of the four certificate files in dir.
func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	for _, name := range allFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = data
	}
	return out
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := parseCertificatePEM(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}

func readKey(t *testing.T, path string) crypto.Signer {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := parsePrivateKeyPEM(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return key
}

func ensure(t *testing.T, dir string, hosts ...string) DevCertificates {
	t.Helper()
	certs, err := EnsureDevCertificates(dir, hosts)
	if err != nil {
		t.Fatalf("EnsureDevCertificates: %v", err)
	}
	return certs
}

// verifyServer checks that the server certificate in certs chains to the CA
// for server authentication under every name.
func verifyServer(t *testing.T, certs DevCertificates, names ...string) {
	t.Helper()
	ca := readCert(t, certs.CAFile)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf := readCert(t, certs.CertFile)
	for _, name := range names {
		_, err := leaf.Verify(x509.VerifyOptions{
			DNSName:   name,
			Roots:     roots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("server certificate does not verify for %q: %v", name, err)
		}
	}
}

func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -48*time.Hour && d < 48*time.Hour
}

func TestEnsureDevCertificatesGenerates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "tls")
	certs := ensure(t, dir, "herald.example", "10.1.2.3", " ", "localhost")

	want := DevCertificates{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "server.pem"),
		KeyFile:  filepath.Join(dir, "server-key.pem"),
	}
	if certs != want {
		t.Fatalf("EnsureDevCertificates = %+v, want %+v", certs, want)
	}

	// Modes: directory 0700, keys 0600, no temporary files left behind.
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, want 0700", st.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(allFiles) {
		t.Errorf("dir holds %d entries, want %d: %v", len(entries), len(allFiles), entries)
	}
	for name, perm := range map[string]fs.FileMode{
		CAFileName: 0o644, CAKeyFileName: 0o600, ServerCertFileName: 0o644, ServerKeyFileName: 0o600,
	} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != perm {
			t.Errorf("%s mode = %v, want %v", name, st.Mode().Perm(), perm)
		}
	}

	now := time.Now()
	ca := readCert(t, certs.CAFile)
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v KeyUsage=%v, want a CA that signs certificates", ca.IsCA, ca.KeyUsage)
	}
	if err := ca.CheckSignatureFrom(ca); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	if !near(ca.NotAfter, now.AddDate(10, 0, 0)) {
		t.Errorf("CA NotAfter = %v, want about ten years from now", ca.NotAfter)
	}
	caKey := readKey(t, filepath.Join(dir, CAKeyFileName))
	if !caKey.Public().(*ecdsa.PublicKey).Equal(ca.PublicKey) {
		t.Error("ca-key.pem does not match ca.pem")
	}

	leaf := readCert(t, certs.CertFile)
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("server key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.IsCA {
		t.Error("server certificate is a CA")
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("server ExtKeyUsage = %v, want [ServerAuth]", leaf.ExtKeyUsage)
	}
	if !near(leaf.NotAfter, now.AddDate(1, 0, 0)) {
		t.Errorf("server NotAfter = %v, want about a year from now", leaf.NotAfter)
	}
	if _, err := tls.LoadX509KeyPair(certs.CertFile, certs.KeyFile); err != nil {
		t.Errorf("server key pair: %v", err)
	}
	names := []string{"localhost", "127.0.0.1", "::1", "herald.example", "10.1.2.3"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	verifyServer(t, certs, names...)
	if n := len(leaf.DNSNames) + len(leaf.IPAddresses); n > len(names) {
		t.Errorf("server certificate has %d names (%v %v), want at most %d: duplicates or blanks",
			n, leaf.DNSNames, leaf.IPAddresses, len(names))
	}
}

func TestEnsureDevCertificatesReuses(t *testing.T) {
	dir := t.TempDir()
	ensure(t, dir, "herald.example")
	before := readAll(t, dir)
	// Same hosts, in another spelling: nothing to renew.
	ensure(t, dir, "HERALD.example", "")
	after := readAll(t, dir)
	for _, name := range allFiles {
		if !bytes.Equal(before[name], after[name]) {
			t.Errorf("%s changed on the second call", name)
		}
	}
}

// issueServer writes a server certificate for localhost signed by the CA in
// dir, valid from notBefore to notAfter, with a matching key.
func issueServer(t *testing.T, dir string, notBefore, notAfter time.Time) {
	t.Helper()
	ca := readCert(t, filepath.Join(dir, CAFileName))
	caKey := readKey(t, filepath.Join(dir, CAKeyFileName))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, ServerCertFileName), "CERTIFICATE", der)
	writeKey(t, filepath.Join(dir, ServerKeyFileName), key)
}

// writeExpiredCA replaces the CA in dir with one that expired an hour ago.
func writeExpiredCA(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "expired CA"},
		NotBefore:             now.Add(-48 * time.Hour),
		NotAfter:              now.Add(-time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, CAFileName), "CERTIFICATE", der)
	writeKey(t, filepath.Join(dir, CAKeyFileName), key)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "PRIVATE KEY", der)
}

func TestEnsureDevCertificatesRenews(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		// spoil damages the files written by a first call.
		spoil func(t *testing.T, dir string)
		// hosts are passed to the second call.
		hosts []string
		// newCA says the CA must be replaced too.
		newCA bool
	}{
		{
			name:  "server certificate expired",
			spoil: func(t *testing.T, dir string) { issueServer(t, dir, now.Add(-48*time.Hour), now.Add(-time.Hour)) },
		},
		{
			name:  "server certificate expires within a day",
			spoil: func(t *testing.T, dir string) { issueServer(t, dir, now.Add(-time.Hour), now.Add(time.Hour)) },
		},
		{
			name: "server certificate not yet valid",
			spoil: func(t *testing.T, dir string) {
				issueServer(t, dir, now.Add(time.Hour), now.AddDate(1, 0, 0))
			},
		},
		{
			name:  "new host",
			spoil: func(*testing.T, string) {},
			hosts: []string{"new.example", "192.0.2.1"},
		},
		{
			name: "corrupt server certificate",
			spoil: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, ServerCertFileName), []byte("garbage"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "server key does not match",
			spoil: func(t *testing.T, dir string) {
				key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				writeKey(t, filepath.Join(dir, ServerKeyFileName), key)
			},
		},
		{
			name: "server key missing",
			spoil: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, ServerKeyFileName)); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "CA key missing and server certificate expired",
			spoil: func(t *testing.T, dir string) {
				issueServer(t, dir, now.Add(-48*time.Hour), now.Add(-time.Hour))
				if err := os.Remove(filepath.Join(dir, CAKeyFileName)); err != nil {
					t.Fatal(err)
				}
			},
			newCA: true,
		},
		{
			name:  "CA expired",
			spoil: writeExpiredCA,
			newCA: true,
		},
		{
			name: "CA replaced",
			spoil: func(t *testing.T, dir string) {
				other := t.TempDir()
				ensure(t, other)
				data, err := os.ReadFile(filepath.Join(other, CAFileName))
				if err != nil {
					t.Fatal(err)
				}
				// The server certificate no longer chains to ca.pem, and
				// ca-key.pem no longer matches it.
				if err := os.WriteFile(filepath.Join(dir, CAFileName), data, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			newCA: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ensure(t, dir)
			tt.spoil(t, dir)
			before := readAll(t, dirWithMissing(t, dir))
			certs := ensure(t, dir, tt.hosts...)
			after := readAll(t, dir)

			if bytes.Equal(before[ServerCertFileName], after[ServerCertFileName]) {
				t.Error("server certificate was not renewed")
			}
			if caChanged := !bytes.Equal(before[CAFileName], after[CAFileName]); caChanged != tt.newCA {
				t.Errorf("CA replaced = %v, want %v", caChanged, tt.newCA)
			}
			verifyServer(t, certs, append([]string{"localhost", "127.0.0.1"}, tt.hosts...)...)
			leaf := readCert(t, certs.CertFile)
			if time.Until(leaf.NotAfter) < 300*24*time.Hour {
				t.Errorf("renewed server certificate expires at %v, want about a year from now", leaf.NotAfter)
			}
			// The renewed set is stable.
			ensure(t, dir, tt.hosts...)
			if again := readAll(t, dir); !bytes.Equal(again[ServerCertFileName], after[ServerCertFileName]) {
				t.Error("renewed server certificate was renewed again")
			}
		})
	}
}

// dirWithMissing copies dir into a new directory, creating empty files for
// the certificate files that are missing, so readAll can snapshot it.
func dirWithMissing(t *testing.T, dir string) string {
	t.Helper()
	snap := t.TempDir()
	for _, name := range allFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func TestEnsureDevCertificatesErrors(t *testing.T) {
	if _, err := EnsureDevCertificates("", nil); !errors.Is(err, ErrNoDirectory) {
		t.Errorf("empty dir: err = %v, want ErrNoDirectory", err)
	}
	// A regular file where the directory should be.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureDevCertificates(filepath.Join(file, "tls"), nil); err == nil {
		t.Error("dir under a regular file: err = nil, want an error")
	}
}

func TestServerTLSConfig(t *testing.T) {
	certs := ensure(t, t.TempDir())
	conf, err := ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if conf.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %x, want TLS 1.3", conf.MinVersion)
	}
	if len(conf.NextProtos) != 1 || conf.NextProtos[0] != wire.ALPN {
		t.Errorf("NextProtos = %q, want [%q]", conf.NextProtos, wire.ALPN)
	}
	if len(conf.Certificates) != 1 {
		t.Errorf("Certificates = %d, want 1", len(conf.Certificates))
	}

	expiredDir := t.TempDir()
	ensure(t, expiredDir)
	issueServer(t, expiredDir, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))

	tests := []struct {
		name          string
		cert, key     string
		wantIs        error
		wantNotExists bool
	}{
		{name: "no key", cert: certs.CertFile, wantIs: ErrIncompleteKeyPair},
		{name: "no cert", key: certs.KeyFile, wantIs: ErrIncompleteKeyPair},
		{name: "missing file", cert: certs.CertFile + ".missing", key: certs.KeyFile, wantIs: fs.ErrNotExist},
		{name: "key is not the cert's", cert: certs.CertFile, key: filepath.Join(filepath.Dir(certs.CAFile), CAKeyFileName)},
		{
			name: "expired", wantIs: ErrCertificateExpired,
			cert: filepath.Join(expiredDir, ServerCertFileName), key: filepath.Join(expiredDir, ServerKeyFileName),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := ServerTLSConfig(tt.cert, tt.key)
			if err == nil {
				t.Fatalf("ServerTLSConfig = %v, want an error", conf)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want %v", err, tt.wantIs)
			}
		})
	}
}

func TestClientTLSConfig(t *testing.T) {
	certs := ensure(t, t.TempDir())
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificates here\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name           string
		opts           ClientTLSOptions
		wantServerName string
		wantRoots      bool
		wantErr        error
	}{
		{name: "defaults", wantServerName: "localhost"},
		{name: "server name", opts: ClientTLSOptions{ServerName: "herald.example"}, wantServerName: "herald.example"},
		{name: "CA file", opts: ClientTLSOptions{CAFile: certs.CAFile}, wantServerName: "localhost", wantRoots: true},
		{name: "insecure", opts: ClientTLSOptions{Insecure: true}, wantServerName: "localhost"},
		{name: "missing CA file", opts: ClientTLSOptions{CAFile: certs.CAFile + ".missing"}, wantErr: fs.ErrNotExist},
		{name: "CA file without certificates", opts: ClientTLSOptions{CAFile: notPEM}, wantErr: ErrNoCertificate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := ClientTLSConfig(tt.opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if conf.ServerName != tt.wantServerName {
				t.Errorf("ServerName = %q, want %q", conf.ServerName, tt.wantServerName)
			}
			if (conf.RootCAs != nil) != tt.wantRoots {
				t.Errorf("RootCAs set = %v, want %v", conf.RootCAs != nil, tt.wantRoots)
			}
			if conf.InsecureSkipVerify != tt.opts.Insecure {
				t.Errorf("InsecureSkipVerify = %v, want %v", conf.InsecureSkipVerify, tt.opts.Insecure)
			}
			if conf.MinVersion != tls.VersionTLS13 {
				t.Errorf("MinVersion = %x, want TLS 1.3", conf.MinVersion)
			}
			if len(conf.NextProtos) != 1 || conf.NextProtos[0] != wire.ALPN {
				t.Errorf("NextProtos = %q, want [%q]", conf.NextProtos, wire.ALPN)
			}
		})
	}
}

// tlsHandshake runs a TLS handshake over loopback TCP and returns the
// client's view and both sides' errors.
func tlsHandshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	var serverErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			serverErr = err
			return
		}
		defer c.Close()
		conn := tls.Server(c, server)
		if serverErr = conn.HandshakeContext(ctx); serverErr != nil {
			return
		}
		// Answer the client's byte, so both sides see a working channel.
		var b [1]byte
		if _, serverErr = io.ReadFull(conn, b[:]); serverErr == nil {
			_, serverErr = conn.Write(b[:])
		}
	})
	defer wg.Wait()

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn := tls.Client(raw, client)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		wg.Wait()
		return tls.ConnectionState{}, err, serverErr
	}
	var b [1]byte
	if _, err := conn.Write([]byte{'h'}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != 'h' {
		t.Fatalf("echo = %q, %v", b[:], err)
	}
	state := conn.ConnectionState()
	wg.Wait()
	return state, nil, serverErr
}

func clientConf(t *testing.T, o ClientTLSOptions) *tls.Config {
	t.Helper()
	conf, err := ClientTLSConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func TestTLSHandshake(t *testing.T) {
	certs := ensure(t, t.TempDir(), "herald.example")
	server, err := ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts ClientTLSOptions
		// wantErr, when set, is a pointer to the error type errors.As must find.
		wantErr any
	}{
		{name: "with CA", opts: ClientTLSOptions{CAFile: certs.CAFile}},
		{name: "with CA and server name", opts: ClientTLSOptions{CAFile: certs.CAFile, ServerName: "herald.example"}},
		{name: "insecure", opts: ClientTLSOptions{Insecure: true}},
		{name: "without CA", opts: ClientTLSOptions{}, wantErr: new(x509.UnknownAuthorityError)},
		{
			name:    "wrong server name",
			opts:    ClientTLSOptions{CAFile: certs.CAFile, ServerName: "other.example"},
			wantErr: new(x509.HostnameError),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, clientErr, serverErr := tlsHandshake(t, server, clientConf(t, tt.opts))
			if tt.wantErr != nil {
				if !errors.As(clientErr, tt.wantErr) {
					t.Fatalf("client err = %v, want %T", clientErr, tt.wantErr)
				}
				if serverErr == nil {
					t.Error("server handshake succeeded, want an error")
				}
				return
			}
			if clientErr != nil || serverErr != nil {
				t.Fatalf("handshake: client %v, server %v", clientErr, serverErr)
			}
			if state.NegotiatedProtocol != wire.ALPN {
				t.Errorf("NegotiatedProtocol = %q, want %q", state.NegotiatedProtocol, wire.ALPN)
			}
			if state.Version != tls.VersionTLS13 {
				t.Errorf("Version = %x, want TLS 1.3", state.Version)
			}
		})
	}
}

// TestTLSHandshakeNoALPN checks that a peer without Herald's ALPN is refused.
func TestTLSHandshakeNoALPN(t *testing.T) {
	certs := ensure(t, t.TempDir())
	server, err := ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	client := clientConf(t, ClientTLSOptions{CAFile: certs.CAFile})
	client.NextProtos = []string{"h3"}
	_, clientErr, serverErr := tlsHandshake(t, server, client)
	if clientErr == nil || serverErr == nil {
		t.Fatalf("handshake: client %v, server %v; want both to fail", clientErr, serverErr)
	}
}

// TestQUICHandshake dials a real QUIC listener with the configurations.
// The listener runs on an explicit quic.Transport rather than
// quic.ListenAddr: the transport behind ListenAddr keeps reading until the
// IDs of its last closed connection expire (3 PTO, longer than goleak waits
// under -race), while Transport.Close stops it at once.
func TestQUICHandshake(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	certs := ensure(t, t.TempDir())
	server, err := ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	ln, err := tr.Listen(server, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// The server echoes one stream per connection, for every connection
	// the listener accepts, until it is closed.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // runs before wg.Wait: unblocks Accept
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.CloseWithError(0, "")
				str, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				_, _ = io.Copy(str, str)
				_ = str.Close()
				// Wait for the client to close, so the echo is delivered.
				<-conn.Context().Done()
			})
		}
	})

	t.Run("with CA", func(t *testing.T) {
		conn, err := quic.DialAddr(ctx, ln.Addr().String(), clientConf(t, ClientTLSOptions{CAFile: certs.CAFile}), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseWithError(0, "bye")
		if got := conn.ConnectionState().TLS.NegotiatedProtocol; got != wire.ALPN {
			t.Errorf("NegotiatedProtocol = %q, want %q", got, wire.ALPN)
		}
		str, err := conn.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := str.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if err := str.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(str)
		if err != nil || string(got) != "ping" {
			t.Fatalf("echo = %q, %v; want \"ping\"", got, err)
		}
	})

	t.Run("without CA", func(t *testing.T) {
		conn, err := quic.DialAddr(ctx, ln.Addr().String(), clientConf(t, ClientTLSOptions{}), nil)
		if err == nil {
			conn.CloseWithError(0, "")
			t.Fatal("dial succeeded without the CA, want a verification error")
		}
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("err = %v, want an x509.UnknownAuthorityError", err)
		}
	})
}
