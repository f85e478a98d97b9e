package transport

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
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/heraldmq/herald/net/peerwire"
)

// Node-to-node TLS. Peers dial each other by the addresses in --peers, so a
// node's certificate need not name its address: a peer is trusted when its
// certificate chains to the cluster CA (and says which node it is in its
// Hello). Both sides present a certificate and verify the other's: mutual
// TLS, 1.3 only, ALPN peerwire.ALPN only.

// PeerTLS is the TLS a node speaks to its peers with: Server for the
// connections it accepts, Client for those it dials.
type PeerTLS struct {
	// Server offers both the peer protocol and the group relays
	// (peerwire.RelayALPN); Client speaks the peer protocol.
	Server, Client *tls.Config
	// Authenticated is false in development mode: traffic is encrypted,
	// and a peer is whoever answers at the address.
	Authenticated bool
}

// RelayClient is Client for a group relay connection (peerwire.RelayALPN).
func (p PeerTLS) RelayClient() *tls.Config {
	c := p.Client.Clone()
	c.NextProtos = []string{peerwire.RelayALPN}
	return c
}

// ErrNoClusterCA is a cluster certificate and key without a cluster CA, or
// the reverse.
var ErrNoClusterCA = errors.New("transport: --cluster-ca, --cluster-cert and --cluster-key go together")

// ClusterTLS returns mutual TLS under the cluster CA in caFile, with this
// node's certificate chain and key. The certificate must chain to the CA;
// its names are not checked (peers are reached by the addresses the
// operator configured).
func ClusterTLS(caFile, certFile, keyFile string) (PeerTLS, error) {
	if caFile == "" || certFile == "" || keyFile == "" {
		return PeerTLS{}, ErrNoClusterCA
	}
	data, err := os.ReadFile(caFile)
	if err != nil {
		return PeerTLS{}, fmt.Errorf("transport: read cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return PeerTLS{}, fmt.Errorf("%w in cluster CA file %s", ErrNoCertificate, caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return PeerTLS{}, fmt.Errorf("transport: load cluster key pair %s, %s: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return PeerTLS{}, fmt.Errorf("transport: parse %s: %w", certFile, err)
		}
	}
	if time.Now().After(pair.Leaf.NotAfter) {
		return PeerTLS{}, fmt.Errorf("%w: %s expired at %s", ErrCertificateExpired, certFile, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	verify := verifyUnder(pool)
	if err := verify(pair.Certificate, nil); err != nil {
		return PeerTLS{}, fmt.Errorf("transport: %s does not chain to the cluster CA %s: %w", certFile, caFile, err)
	}
	server := &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{peerwire.ALPN, peerwire.RelayALPN},
		MinVersion:   tls.VersionTLS13,
		// The chain is checked by verify: Go's own check of a client
		// certificate would demand the client-auth usage of every chain.
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify,
	}
	client := &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{peerwire.ALPN},
		MinVersion:   tls.VersionTLS13,
		ServerName:   DefaultServerName,
		// Names are not checked (see above); the chain is, by verify.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: verify,
	}
	return PeerTLS{Server: server, Client: client, Authenticated: true}, nil
}

// verifyUnder checks that the peer's chain leads to a CA in pool.
func verifyUnder(pool *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("transport: the peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, der := range raw {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return fmt.Errorf("transport: peer certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
}

// DevPeerTLS returns development-mode peer TLS (no --cluster-ca): a
// certificate made up for this process, and no check of the peer's. The
// traffic is encrypted; who is at a peer's address is not proven. The
// node logs that loudly at start.
func DevPeerTLS() (PeerTLS, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PeerTLS{}, fmt.Errorf("transport: generate peer key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PeerTLS{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "Herald development peer", Organization: []string{"Herald"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{DefaultServerName},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PeerTLS{}, fmt.Errorf("transport: create peer certificate: %w", err)
	}
	pair := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	server := &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{peerwire.ALPN, peerwire.RelayALPN},
		MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert}
	client := &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{peerwire.ALPN},
		MinVersion: tls.VersionTLS13, ServerName: DefaultServerName, InsecureSkipVerify: true}
	return PeerTLS{Server: server, Client: client}, nil
}

// ClusterCertificates are the files NewClusterCertificates writes.
type ClusterCertificates struct {
	CAFile string
	// Nodes are each node's certificate and key files, by node id.
	Nodes map[uint64][2]string
}

// NewClusterCertificates makes a cluster CA in dir (ca.pem, ca-key.pem)
// and a certificate for each node id signed by it (node-ID.pem,
// node-ID-key.pem), each usable for both sides of a peer connection. It
// overwrites what is there.
func NewClusterCertificates(dir string, nodes []uint64) (ClusterCertificates, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ClusterCertificates{}, fmt.Errorf("transport: %w", err)
	}
	now := time.Now()
	ca, caKey, caPEM, caKeyPEM, err := newCA(now)
	if err != nil {
		return ClusterCertificates{}, err
	}
	out := ClusterCertificates{CAFile: dir + "/ca.pem", Nodes: map[uint64][2]string{}}
	if err := writeFileAtomic(out.CAFile, caPEM, 0o644); err != nil {
		return ClusterCertificates{}, err
	}
	if err := writeFileAtomic(dir+"/ca-key.pem", caKeyPEM, 0o600); err != nil {
		return ClusterCertificates{}, err
	}
	for _, id := range nodes {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return ClusterCertificates{}, fmt.Errorf("transport: generate node key: %w", err)
		}
		serial, err := newSerial()
		if err != nil {
			return ClusterCertificates{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: fmt.Sprintf("Herald node %d", id), Organization: []string{"Herald"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.AddDate(serverLifetimeYears, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:     []string{DefaultServerName},
			URIs:         []*url.URL{PeerURI(id)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return ClusterCertificates{}, fmt.Errorf("transport: create node certificate: %w", err)
		}
		keyPEM, err := encodeKeyPEM(key)
		if err != nil {
			return ClusterCertificates{}, err
		}
		cert, keyFile := fmt.Sprintf("%s/node-%d.pem", dir, id), fmt.Sprintf("%s/node-%d-key.pem", dir, id)
		if err := writeFileAtomic(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return ClusterCertificates{}, err
		}
		if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
			return ClusterCertificates{}, err
		}
		out.Nodes[id] = [2]string{cert, keyFile}
	}
	return out, nil
}

// PeerURI is the URI a cluster node's certificate names it by
// (herald://node/ID): under a cluster CA a peer must present a certificate
// naming the node id its Hello claims, so one node's certificate cannot
// speak for another.
func PeerURI(id uint64) *url.URL {
	return &url.URL{Scheme: "herald", Host: "node", Path: "/" + strconv.FormatUint(id, 10)}
}

// CheckPeerIdentity checks that a verified peer certificate (leaf first)
// names node id by PeerURI. Development TLS (unauthenticated) checks
// nothing.
func (p PeerTLS) CheckPeerIdentity(certs []*x509.Certificate, id uint64) error {
	if !p.Authenticated {
		return nil
	}
	if len(certs) == 0 {
		return errors.New("transport: the peer presented no certificate")
	}
	want := PeerURI(id).String()
	for _, u := range certs[0].URIs {
		if u.String() == want {
			return nil
		}
	}
	return fmt.Errorf("transport: the peer's certificate does not name %s (it must carry that URI SAN), yet it says it is node %d", want, id)
}
