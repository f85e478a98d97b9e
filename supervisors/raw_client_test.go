package supervisors

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
)

// testNode starts a node on loopback with ephemeral ports in dir.
func testNode(t testing.TB, dir string, mutate ...func(*Config, *Options)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = "127.0.0.1:0"
	// Raw test connections never close themselves on GoAway: do not let
	// every Shutdown with one open wait the whole production grace.
	cfg.DrainGrace = 500 * time.Millisecond
	opts := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		w := &testWriter{t: t}
		t.Cleanup(func() { w.done.Store(true) })
		opts.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for _, m := range mutate {
		m(&cfg, &opts)
	}
	n, err := Start(cfg, opts)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// testWriter sends logs to t.Log until the test ends (library goroutines may
// log a little after that).
type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// rawConn speaks the wire protocol by hand, for tests that need to send what
// the client never would.
type rawConn struct {
	t       testing.TB
	conn    *quic.Conn
	control *quic.Stream
	welcome wire.Welcome
}

func dialRaw(t testing.TB, n *Node) *rawConn {
	t.Helper()
	return dialRawToken(t, n, "")
}

// dialRawToken is dialRaw with token in the Hello ("" for none).
func dialRawToken(t testing.TB, n *Node, token string) *rawConn {
	t.Helper()
	tlsConf, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: n.CAFile(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr(), tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.CloseWithError(0, "test done") })
	control, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawConn{t: t, conn: conn, control: control}
	r.write(control, wire.AppendHello(nil, 1, wire.Hello{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes, Token: token, ClientName: "raw"}))
	f := r.read(control)
	if f.Header.Type != wire.TypeWelcome {
		t.Fatalf("want welcome, got %s %s", f.Header.Type, errFrame(f))
	}
	if r.welcome, err = wire.DecodeWelcome(f.Body); err != nil {
		t.Fatal(err)
	}
	if r.welcome.Features != wire.Features {
		t.Fatalf("the node announces features %#x to a Hello of all of them, want %#x", r.welcome.Features, wire.Features)
	}
	return r
}

func (r *rawConn) write(s *quic.Stream, b []byte) {
	r.t.Helper()
	if _, err := s.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawConn) read(s *quic.Stream) wire.Frame {
	r.t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := wire.ReadFrame(s, 64<<20)
	if err != nil {
		r.t.Fatalf("read frame: %v", err)
	}
	return f
}

func (r *rawConn) stream() *quic.Stream {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := r.conn.OpenStreamSync(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func records(payloads ...string) ([]byte, uint32) {
	recs := make([]wire.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = wire.Record{Payload: []byte(p)}
	}
	return wire.AppendRecords(nil, recs), uint32(len(recs))
}

// closedWith waits for the connection to be closed by the node and returns
// the application error code it carried.
func (r *rawConn) closedWith() wire.Code {
	r.t.Helper()
	select {
	case <-r.conn.Context().Done():
	case <-time.After(10 * time.Second):
		r.t.Fatal("connection was not closed")
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(r.conn.Context()); errors.As(err, &appErr) {
		return wire.Code(appErr.ErrorCode)
	}
	r.t.Fatalf("connection closed without an application error: %v", context.Cause(r.conn.Context()))
	return 0
}
