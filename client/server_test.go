package client

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
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// The scripted in-test node: a QUIC listener on 127.0.0.1 with a
// self-signed certificate, speaking just enough of the protocol for each
// test to script the node's side.

var (
	certOnce   sync.Once
	serverCert tls.Certificate
	certPool   *x509.CertPool
)

func testCert(t testing.TB) (tls.Certificate, *x509.CertPool) {
	certOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true, IsCA: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			panic(err)
		}
		serverCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
		certPool = x509.NewCertPool()
		certPool.AddCert(leaf)
	})
	return serverCert, certPool
}

// testServer is a scripted node. Set the hooks before calling start.
type testServer struct {
	t    *testing.T
	ln   *quic.Listener
	tr   *quic.Transport
	addr string
	// clientTLS trusts the server's certificate.
	clientTLS *tls.Config

	// welcome is sent in answer to Hello unless onHello refuses.
	welcome wire.Welcome
	// onHello may refuse the Hello with an error.
	onHello func(h wire.Hello) *wire.Error
	// onControl handles each control frame after the handshake, on the
	// connection's control goroutine; nil means defaultControl.
	onControl func(sc *serverConn, f wire.Frame)
	// onRead answers Read frames for defaultControl.
	onRead func(sc *serverConn, f wire.Frame, r wire.Read)
	// cat is defaultControl's catalog.
	cat struct {
		sync.Mutex
		// streams are the streams that exist.
		streams map[wire.StreamName]wire.StreamInfo
		// describes counts DescribeStream frames per name.
		describes map[wire.StreamName]int
	}
	// onStream handles each stream the client opens, on its own goroutine,
	// given the stream's first frame.
	onStream func(sc *serverConn, st *quic.Stream, first wire.Frame)

	// conns receives each handshaken connection.
	conns chan *serverConn
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []*quic.Conn
	// stopped is set by stop (under mu): a connection accepted after it
	// (the listener hands out its queue after Close) is closed at once.
	stopped bool
}

// serverConn is the node's side of one connection.
type serverConn struct {
	srv   *testServer
	conn  *quic.Conn
	ctl   *quic.Stream
	hello wire.Hello
	ctlMu sync.Mutex
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	return newTestServerStreams(t, 1000)
}

// newTestServerStreams is newTestServer allowing each connection
// maxStreams streams at once (the control stream among them).
func newTestServerStreams(t *testing.T, maxStreams int64) *testServer {
	t.Helper()
	cert, pool := testCert(t)
	// The node's own transport, closed by stop: a listener made by
	// quic.ListenAddr keeps its socket until the last connection's ids are
	// forgotten, and a client that reconnects as the node stops can leave
	// one that never is.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(&tls.Config{
		Certificates: []tls.Certificate{cert}, NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13,
	}, &quic.Config{MaxIncomingStreams: maxStreams, MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &testServer{
		t: t, ln: ln, tr: tr, addr: ln.Addr().String(),
		clientTLS: &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{wire.ALPN}},
		welcome: wire.Welcome{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes,
			PublishWindow: 64, NodeID: "test-node"},
		conns: make(chan *serverConn, 4),
	}
	s.cat.streams = make(map[wire.StreamName]wire.StreamInfo)
	s.cat.describes = make(map[wire.StreamName]int)
	t.Cleanup(s.stop)
	return s
}

// addStream adds a stream to defaultControl's catalog.
func (s *testServer) addStream(name wire.StreamName, cfg wire.StreamConfig) {
	s.cat.Lock()
	defer s.cat.Unlock()
	s.cat.streams[name] = wire.StreamInfo{Name: name, Config: cfg, CreatedUnixNano: 1e18, Tails: make([]uint64, cfg.Shards)}
}

// describeCount returns how many DescribeStream frames named name.
func (s *testServer) describeCount(name wire.StreamName) int {
	s.cat.Lock()
	defer s.cat.Unlock()
	return s.cat.describes[name]
}

// defaultControl answers control frames from the catalog: CreateStream,
// DescribeStream, ListStreams, DeleteStream, and Read through onRead.
func (s *testServer) defaultControl(sc *serverConn, f wire.Frame) {
	id := f.Header.RequestID
	notFound := func(n wire.StreamName) {
		sc.writeCtl(wire.AppendError(nil, id, wire.Errorf(wire.CodeStreamNotFound, "%s", n)))
	}
	s.cat.Lock()
	defer s.cat.Unlock()
	switch f.Header.Type {
	case wire.TypeCreateStream:
		cs, err := wire.DecodeCreateStream(f.Body)
		if err != nil {
			s.t.Errorf("decode create: %v", err)
			return
		}
		info := wire.StreamInfo{Name: cs.Name, Config: cs.Config, CreatedUnixNano: 1e18, Tails: make([]uint64, cs.Config.Shards)}
		if old, ok := s.cat.streams[cs.Name]; ok {
			if old.Config != cs.Config {
				sc.writeCtl(wire.AppendError(nil, id, wire.Errorf(wire.CodeStreamExists, "%s", cs.Name)))
				return
			}
			info = old
		}
		s.cat.streams[cs.Name] = info
		sc.writeCtl(wire.AppendStreamInfo(nil, id, info))
	case wire.TypeDescribeStream:
		n, err := wire.DecodeDescribeStream(f.Body)
		if err != nil {
			s.t.Errorf("decode describe: %v", err)
			return
		}
		s.cat.describes[n]++
		if info, ok := s.cat.streams[n]; ok {
			sc.writeCtl(wire.AppendStreamInfo(nil, id, info))
		} else {
			notFound(n)
		}
	case wire.TypeListStreams:
		l, err := wire.DecodeListStreams(f.Body)
		if err != nil {
			s.t.Errorf("decode list: %v", err)
			return
		}
		var out []wire.StreamInfo
		for n, info := range s.cat.streams {
			if n.Tenant == l.Tenant && (l.Namespace == "" || n.Namespace == l.Namespace) {
				out = append(out, info)
			}
		}
		sc.writeCtl(wire.AppendStreamList(nil, id, out))
	case wire.TypeDeleteStream:
		n, err := wire.DecodeDeleteStream(f.Body)
		if err != nil {
			s.t.Errorf("decode delete: %v", err)
			return
		}
		if _, ok := s.cat.streams[n]; !ok {
			notFound(n)
			return
		}
		delete(s.cat.streams, n)
		sc.writeCtl(wire.AppendOK(nil, id))
	case wire.TypeRead:
		r, err := wire.DecodeRead(f.Body)
		if err != nil {
			s.t.Errorf("decode read: %v", err)
			return
		}
		if s.onRead == nil {
			s.t.Errorf("unexpected read %+v", r)
			return
		}
		s.onRead(sc, f, r)
	default:
		s.t.Errorf("unexpected control frame %v", f.Header.Type)
	}
}

// start accepts connections until the test ends.
func (s *testServer) start() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := s.ln.Accept(context.Background())
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.stopped {
				// A reconnecting client got in as the node stopped.
				s.mu.Unlock()
				_ = conn.CloseWithError(0, "test over")
				continue
			}
			s.open = append(s.open, conn)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serveConn(conn)
			}()
		}
	}()
}

func (s *testServer) stop() {
	_ = s.ln.Close()
	s.mu.Lock()
	s.stopped = true
	for _, c := range s.open {
		_ = c.CloseWithError(0, "test over")
	}
	s.mu.Unlock()
	s.wg.Wait()
	_ = s.tr.Close()
	_ = s.tr.Conn.Close()
}

func (s *testServer) serveConn(conn *quic.Conn) {
	ctx := conn.Context()
	ctl, err := conn.AcceptStream(ctx)
	if err != nil {
		return
	}
	f, err := wire.ReadFrame(ctl, wire.DefaultMaxFrameBytes)
	if err != nil {
		return
	}
	if f.Header.Type != wire.TypeHello || f.Header.RequestID != 1 {
		s.t.Errorf("first frame %v id %d, want hello id 1", f.Header.Type, f.Header.RequestID)
		return
	}
	hello, err := wire.DecodeHello(f.Body)
	if err != nil {
		s.t.Errorf("decode hello: %v", err)
		return
	}
	sc := &serverConn{srv: s, conn: conn, ctl: ctl, hello: hello}
	if s.onHello != nil {
		if e := s.onHello(hello); e != nil {
			sc.writeCtl(wire.AppendError(nil, 1, e))
			return
		}
	}
	sc.writeCtl(wire.AppendWelcome(nil, 1, s.welcome))
	s.conns <- sc

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			st, err := conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				first, err := wire.ReadFrame(st, wire.DefaultMaxFrameBytes)
				if err != nil {
					st.CancelWrite(0) // done with it both ways: its credit goes back
					return
				}
				if s.onStream == nil {
					s.t.Errorf("unexpected %v stream", first.Header.Type)
					return
				}
				s.onStream(sc, st, first)
			}()
		}
	}()
	for {
		f, err := wire.ReadFrame(ctl, wire.DefaultMaxFrameBytes)
		if err != nil {
			return
		}
		if s.onControl == nil {
			s.defaultControl(sc, f)
			continue
		}
		s.onControl(sc, f)
	}
}

// writeCtl writes b on the control stream.
func (sc *serverConn) writeCtl(b []byte) {
	sc.ctlMu.Lock()
	defer sc.ctlMu.Unlock()
	_, _ = sc.ctl.Write(b)
}

// dial connects a client to s.
func (s *testServer) dial(t *testing.T, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.addr, append([]Option{WithTLSConfig(s.clientTLS), WithLogger(testLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testLogger discards the client's logs unless HERALD_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testCtx returns a context that ends with the test, bounded so a hang
// fails instead of stalling the run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails the test unless err is a *wire.Error of code, checked with
// errors.As and errors.Is.
func wantCode(t *testing.T, err error, code wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *wire.Error, want %v", err, err, code)
	}
	if we.Code != code || !errors.Is(err, &wire.Error{Code: code}) {
		t.Fatalf("error %v has code %v, want %v", err, we.Code, code)
	}
}

// eventBatchAt encodes an EventBatch frame whose sections start at bases.
func eventBatchAt(shard uint32, ts int64, bases []uint64, batches ...[]wire.Record) []byte {
	var sections []*wire.Section
	var base uint64
	for i, recs := range batches {
		if bases != nil {
			base = bases[i]
		}
		sections = append(sections, wire.NewSection(shard, base, ts, uint32(len(recs)), wire.AppendRecords(nil, recs)))
		base += uint64(len(recs))
	}
	var buf bytesBuffer
	_ = wire.WriteEventBatch(&buf, 0, sections)
	return buf.b
}

// bytesBuffer is a minimal io.Writer.
type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
