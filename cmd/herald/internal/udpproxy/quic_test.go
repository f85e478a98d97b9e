package udpproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// quicALPN is the protocol both ends of the test offer: quic-go fails the
// handshake without a common one.
const quicALPN = "herald-udpproxy-test"

// testTLS returns a server config with a self-signed certificate for
// 127.0.0.1 and a client config that trusts it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}},
		NextProtos:   []string{quicALPN},
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{quicALPN}}
	return server, client
}

// startQUICEcho serves ln until the end of the test: every stream of every
// connection gets back what it sends, until its FIN.
func startQUICEcho(t *testing.T, ln *quic.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.CloseWithError(0, "")
				for {
					str, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					wg.Go(func() {
						_, _ = io.Copy(str, str)
						str.Close()
					})
				}
			})
		}
	})
}

// quicEcho sends msg on a new stream of conn and checks that the same comes
// back, within ctx.
func quicEcho(ctx context.Context, conn *quic.Conn, msg string) error {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok {
		if err := str.SetDeadline(deadline); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(str, msg); err != nil {
		str.CancelRead(0)
		return err
	}
	if err := str.Close(); err != nil {
		str.CancelRead(0)
		return err
	}
	got, err := io.ReadAll(str)
	if err != nil {
		str.CancelRead(0)
		return err
	}
	if string(got) != msg {
		return errors.New("echo: got " + string(got) + ", want " + msg)
	}
	return nil
}

// A QUIC connection through the proxy works; once the link is cut its next
// round trip does not complete and it dies of its idle timeout; once healed,
// a new connection works.
func TestQUICThroughProxy(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	const idle = 500 * time.Millisecond
	serverTLS, clientTLS := testTLS(t)
	qconf := &quic.Config{MaxIdleTimeout: idle}
	ln, err := quic.ListenAddr("127.0.0.1:0", serverTLS, qconf)
	if err != nil {
		t.Fatal(err)
	}
	startQUICEcho(t, ln)
	p := newProxy(t, ln.Addr().String())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	conn, err := quic.DialAddr(ctx, p.Addr().String(), clientTLS, qconf)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	if err := quicEcho(ctx, conn, "hello through the proxy"); err != nil {
		t.Fatal(err)
	}
	if f, r := p.Forward().Stats(), p.Reverse().Stats(); f.Forwarded == 0 || r.Forwarded == 0 {
		t.Fatalf("the handshake and echo did not go through the proxy: forward %v, reverse %v", f, r)
	}

	p.Cut(true)
	atCut := p.Forward().Stats()
	rtCtx, rtCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = quicEcho(rtCtx, conn, "lost")
	rtCancel()
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("round trip over a cut link: %v, want a deadline error", err)
	}
	// Whatever the proxy had read before the cut is counted by now.
	during := p.Forward().Stats()
	if during.Dropped == atCut.Dropped {
		t.Fatalf("forward stats %v after the lost round trip, %v at the cut: nothing dropped", during, atCut)
	}
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatalf("the connection outlived its idle timeout (%v) on a cut link", idle)
	}
	var idleErr *quic.IdleTimeoutError
	if cause := context.Cause(conn.Context()); !errors.As(cause, &idleErr) {
		t.Fatalf("the connection closed with %v, want an idle timeout", cause)
	}
	if got := p.Forward().Stats(); got.Forwarded != during.Forwarded {
		t.Fatalf("forward stats %v when the connection died, %v during the cut: forwarded through a cut link", got, during)
	}

	p.Cut(false)
	conn2, err := quic.DialAddr(ctx, p.Addr().String(), clientTLS, qconf)
	if err != nil {
		t.Fatalf("dial after the heal: %v", err)
	}
	defer conn2.CloseWithError(0, "")
	if err := quicEcho(ctx, conn2, "hello again"); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	if got := p.Sessions(); got != 2 {
		t.Fatalf("%d sessions, want 2 (one per client socket)", got)
	}
	t.Logf("forward %v, reverse %v", p.Forward().Stats(), p.Reverse().Stats())
}
