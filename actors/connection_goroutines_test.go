package actors

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
)

// quicPair returns both ends of a loopback QUIC connection speaking ALPN
// herald/1; the test's cleanup closes them.
func quicPair(t *testing.T) (server, client *quic.Conn) {
	t.Helper()
	certs, err := transport.EnsureDevCertificates(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := transport.ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", serverTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	client, err = quic.DialAddr(ctx, ln.Addr().String(), clientTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CloseWithError(0, "") })
	server, err = ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.CloseWithError(0, "") })
	return server, client
}

// spawnWatched spawns props under a parent that reports on the returned
// channel when the child has stopped.
func spawnWatched(t *testing.T, sys *actor.ActorSystem, props *actor.Props) (child *actor.PID, stopped <-chan struct{}) {
	t.Helper()
	pids, done := make(chan *actor.PID, 1), make(chan struct{})
	sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			pids <- ctx.Spawn(props)
		case *actor.Terminated:
			close(done)
		}
	}))
	return <-pids, done
}

// closeCode waits for conn to close and returns the application error code
// the peer closed it with.
func closeCode(t *testing.T, conn *quic.Conn) wire.Code {
	t.Helper()
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection is still open")
	}
	var ae *quic.ApplicationError
	if !errors.As(context.Cause(conn.Context()), &ae) || !ae.Remote {
		t.Fatalf("connection ended with %v, not closed by the node", context.Cause(conn.Context()))
	}
	return wire.Code(ae.ErrorCode)
}

// waitClosed fails the test unless g's goroutines all end.
func waitClosed(t *testing.T, g *Goroutines) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		g.CloseAndWait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection's goroutines did not end after it stopped")
	}
}

// A connection whose serving goroutine Goroutines refuses (the node is
// closing) closes its QUIC connection with shutting_down and stops itself,
// instead of leaving the client waiting for a handshake nobody runs.
func TestConnectionRefusedGoroutineClosesTheConnection(t *testing.T) {
	server, client := quicPair(t)
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	g := &Goroutines{}
	g.CloseAndWait()
	stats := &Stats{}
	_, stopped := spawnWatched(t, sys, NewConnectionProps(server, ConnectionConfig{
		MaxFrameBytes: wire.DefaultMaxFrameBytes, HandshakeTimeout: time.Minute, Stats: stats, Goroutines: g}))
	if code := closeCode(t, client); code != wire.CodeShuttingDown {
		t.Fatalf("connection closed with %s, want %s", code, wire.CodeShuttingDown)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection actor did not stop")
	}
	if n := stats.Connections.Load(); n != 0 {
		t.Fatalf("connections gauge %d after the connection stopped, want 0", n)
	}
}

// A connection's goroutines run under cfg.Goroutines: once the actor has
// stopped (without waiting for them) they end, so the node's CloseAndWait
// returns; and the place the handshake took among max_connections is given
// back, as is the connections gauge.
func TestConnectionStopEndsItsGoroutines(t *testing.T) {
	server, client := quicPair(t)
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	g := &Goroutines{}
	stats, authenticated := &Stats{}, &atomic.Int64{}
	conn, stopped := spawnWatched(t, sys, NewConnectionProps(server, ConnectionConfig{
		MaxFrameBytes: wire.DefaultMaxFrameBytes, HandshakeTimeout: time.Minute, Stats: stats,
		MaxConnections: 1, Authenticated: authenticated, Goroutines: g}))

	control, err := client.OpenStreamSync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.Write(wire.AppendHello(nil, 1, wire.Hello{Version: wire.Version, ClientName: "test"})); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(control, wire.DefaultMaxFrameBytes)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.Type != wire.TypeWelcome {
		t.Fatalf("answer to hello: %s frame, want welcome", f.Header.Type)
	}
	if n := authenticated.Load(); n != 1 {
		t.Fatalf("%d authenticated connections after welcome, want 1", n)
	}
	if n := stats.Connections.Load(); n != 1 {
		t.Fatalf("connections gauge %d while connected, want 1", n)
	}

	sys.Root.Stop(conn)
	<-stopped
	if code := closeCode(t, client); code != 0 {
		t.Fatalf("connection closed with %s, want 0", code)
	}
	waitClosed(t, g)
	if n := authenticated.Load(); n != 0 {
		t.Fatalf("%d authenticated connections after the connection stopped, want 0", n)
	}
	if n := stats.Connections.Load(); n != 0 {
		t.Fatalf("connections gauge %d after the connection stopped, want 0", n)
	}
}
