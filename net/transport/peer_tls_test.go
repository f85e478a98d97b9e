package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"

	"github.com/heraldmq/herald/net/peerwire"
)

// handshake runs a TLS handshake between a client and a server config
// over a pipe and returns each side's error.
func handshake(t *testing.T, client, server *tls.Config) (cerr, serr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		b, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer b.Close()
		s := tls.Server(b, server)
		err = s.Handshake()
		if err == nil {
			// TLS 1.3: the client's certificate is judged after the
			// client's Handshake returned; a read sees the verdict.
			_, err = s.Write([]byte{1})
		}
		done <- err
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := tls.Client(a, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	serr = <-done
	if cerr == nil && c.ConnectionState().NegotiatedProtocol != peerwire.ALPN {
		t.Fatalf("negotiated %q", c.ConnectionState().NegotiatedProtocol)
	}
	return cerr, serr
}

// Nodes under one cluster CA handshake both ways; a node under another CA
// is refused by either side; development mode encrypts between dev nodes
// but a cluster node refuses a dev one.
func TestClusterTLS(t *testing.T) {
	certs, err := NewClusterCertificates(t.TempDir(), []uint64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewClusterCertificates(t.TempDir(), []uint64{9})
	if err != nil {
		t.Fatal(err)
	}
	load := func(c ClusterCertificates, id uint64) PeerTLS {
		t.Helper()
		p, err := ClusterTLS(c.CAFile, c.Nodes[id][0], c.Nodes[id][1])
		if err != nil {
			t.Fatal(err)
		}
		if !p.Authenticated {
			t.Fatal("cluster TLS not authenticated")
		}
		return p
	}
	n1, n2, n9 := load(certs, 1), load(certs, 2), load(other, 9)
	if cerr, serr := handshake(t, n1.Client, n2.Server); cerr != nil || serr != nil {
		t.Fatalf("same CA: client %v, server %v", cerr, serr)
	}
	if cerr, serr := handshake(t, n9.Client, n2.Server); cerr == nil && serr == nil {
		t.Fatal("a node of another CA was accepted")
	}
	if cerr, serr := handshake(t, n1.Client, n9.Server); cerr == nil && serr == nil {
		t.Fatal("a node dialled a server of another CA")
	}
	d1, err := DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	if d1.Authenticated {
		t.Fatal("development TLS claims authentication")
	}
	if cerr, serr := handshake(t, d1.Client, d2.Server); cerr != nil || serr != nil {
		t.Fatalf("development mode: client %v, server %v", cerr, serr)
	}
	if cerr, serr := handshake(t, d1.Client, n2.Server); cerr == nil && serr == nil {
		t.Fatal("a cluster node accepted a development node")
	}
	// A certificate that does not chain to the CA it is configured with.
	if _, err := ClusterTLS(certs.CAFile, other.Nodes[9][0], other.Nodes[9][1]); err == nil {
		t.Fatal("a certificate of another CA loaded")
	}
	if _, err := ClusterTLS("", certs.Nodes[1][0], certs.Nodes[1][1]); !errors.Is(err, ErrNoClusterCA) {
		t.Fatalf("no CA: %v", err)
	}
}

// Under a cluster CA a node's certificate names its id; a certificate
// of another node of the same CA does not pass for it. Development TLS
// checks no identity.
func TestCheckPeerIdentity(t *testing.T) {
	certs, err := NewClusterCertificates(t.TempDir(), []uint64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ClusterTLS(certs.CAFile, certs.Nodes[1][0], certs.Nodes[1][1])
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(id uint64) []*x509.Certificate {
		pair, err := tls.LoadX509KeyPair(certs.Nodes[id][0], certs.Nodes[id][1])
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{c}
	}
	if err := p.CheckPeerIdentity(leaf(2), 2); err != nil {
		t.Fatalf("node 2's certificate for node 2: %v", err)
	}
	if err := p.CheckPeerIdentity(leaf(2), 1); err == nil {
		t.Fatal("node 2's certificate passed for node 1")
	}
	if err := p.CheckPeerIdentity(nil, 2); err == nil {
		t.Fatal("no certificate passed")
	}
	dev, err := DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.CheckPeerIdentity(nil, 2); err != nil {
		t.Fatalf("development TLS: %v", err)
	}
}
