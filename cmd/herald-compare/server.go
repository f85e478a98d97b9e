package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// errServerNotReady is returned when the embedded server does not accept
// connections in time.
var errServerNotReady = errors.New("herald-compare: embedded nats-server not ready")

// embeddedServer is a nats-server running in this process on 127.0.0.1 with a
// random port and JetStream file storage in its own temporary directory.
type embeddedServer struct {
	srv *server.Server // the running server
	dir string         // JetStream store directory, removed by Close
}

// startServer starts an embedded nats-server with JetStream enabled. The
// caller must Close it.
func startServer() (*embeddedServer, error) {
	dir, err := os.MkdirTemp("", "herald-compare-nats-")
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "herald-compare",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("herald-compare: new nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
		return nil, errServerNotReady
	}
	return &embeddedServer{srv: srv, dir: dir}, nil
}

// connect opens a client connection to the server over loopback TCP. The
// caller must Close the connection before closing the server.
func (s *embeddedServer) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.NoReconnect()}, opts...)
	nc, err := nats.Connect(s.srv.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("herald-compare: connect %s: %w", name, err)
	}
	return nc, nil
}

// Close shuts the server down, waits for it, and removes its store.
func (s *embeddedServer) Close() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	os.RemoveAll(s.dir)
}
