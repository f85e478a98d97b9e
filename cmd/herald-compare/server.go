package main

import (
	"context"
	"crypto/tls"
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

// errUnknownServerMode is returned for a --server value other than the
// serverMode constants.
var errUnknownServerMode = errors.New("herald-compare: unknown server mode")

// serverMode is where a scenario's nats-server runs.
type serverMode string

const (
	// serverChild runs the server in a process of its own (this
	// executable's hidden serve subcommand), so that its CPU time is
	// measured apart from the clients': the default.
	serverChild serverMode = "child"
	// serverInProcess embeds the server in this process, beside the
	// clients; the server's CPU time cannot be told apart then.
	serverInProcess serverMode = "inproc"
)

// parseServerMode checks a --server value.
func parseServerMode(s string) (serverMode, error) {
	switch m := serverMode(s); m {
	case serverChild, serverInProcess:
		return m, nil
	}
	return "", fmt.Errorf("%w %q (want %s or %s)", errUnknownServerMode, s, serverChild, serverInProcess)
}

// serverOptions is what a scenario asks of its nats-server.
type serverOptions struct {
	tls        bool // server and clients speak TLS 1.3 and nothing else
	syncAlways bool // JetStream fsyncs every write before it acks (sync_interval: always)
}

// embeddedConfig is what an embedded nats-server starts with, in either
// mode.
type embeddedConfig struct {
	storeDir   string // JetStream store directory
	certFile   string // server certificate chain (PEM); empty for plaintext
	keyFile    string // server private key (PEM); empty for plaintext
	syncAlways bool   // server option SyncAlways (sync_interval: always)
}

// startEmbedded starts a nats-server in this process on 127.0.0.1 with a
// random port and JetStream file storage in c.storeDir. The storage config
// is nats-server's default unless c.syncAlways: file storage, flushed to the
// OS on every write and fsynced every two minutes, so a publish is acked
// before its fsync. The caller must shut the server down.
func startEmbedded(c embeddedConfig) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "herald-compare",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   c.storeDir,
		SyncAlways: c.syncAlways,
		NoLog:      true,
		NoSigs:     true,
	}
	if c.certFile != "" || c.keyFile != "" {
		cfg, err := serverTLSConfig(c.certFile, c.keyFile)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig = cfg
		opts.TLSTimeout = 10 // seconds: a thousand handshakes on a loaded 2-core machine
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("herald-compare: new nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errServerNotReady
	}
	return srv, nil
}

// serverRunner is a running nats-server: embedded in this process
// (inprocServer) or in a child process (childServer).
type serverRunner interface {
	// clientURL is the URL clients connect to.
	clientURL() string
	// cpuTime is the CPU time (user + system) the server has used so far;
	// errCPUShared when it shares this process with the clients.
	cpuTime() (time.Duration, error)
	// Close stops the server and waits until it has stopped.
	Close() error
}

// natsServer is one scenario's server: a fresh JetStream store directory, a
// running server and how clients reach it.
type natsServer struct {
	runner    serverRunner  // the running server
	mode      serverMode    // where it runs
	opts      serverOptions // what it was started with
	clientTLS *tls.Config   // what clients dial with; nil for plaintext
	dir       string        // JetStream store directory, removed by Close
}

// startServer starts a nats-server for one scenario with a JetStream store
// of its own, in this process or a child as e.cfg.server says. The caller must
// Close it.
func (e *env) startServer(ctx context.Context, o serverOptions) (*natsServer, error) {
	dir, err := os.MkdirTemp("", "herald-compare-nats-")
	if err != nil {
		return nil, err
	}
	c := embeddedConfig{storeDir: dir, syncAlways: o.syncAlways}
	s := &natsServer{mode: e.cfg.server, opts: o, dir: dir}
	if o.tls {
		c.certFile, c.keyFile = e.tls.certFile, e.tls.keyFile
		s.clientTLS = e.tls.clientConfig()
	}
	switch e.cfg.server {
	case serverInProcess:
		s.runner, err = startInProcess(c)
	default:
		s.runner, err = startChild(ctx, e.exe, c)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// connect opens a client connection to the server over loopback TCP (TLS
// 1.3 when the server speaks TLS, checked after the handshake). The caller
// must Close the connection before closing the server.
func (s *natsServer) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.NoReconnect()}, opts...)
	if s.clientTLS != nil {
		opts = append(opts, nats.Secure(s.clientTLS))
	}
	nc, err := nats.Connect(s.runner.clientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("herald-compare: connect %s: %w", name, err)
	}
	if s.clientTLS != nil {
		state, err := nc.TLSConnectionState()
		if err == nil {
			err = checkTLS13(state)
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("herald-compare: connect %s: %w", name, err)
		}
	}
	return nc, nil
}

// Close stops the server, waits for it, and removes its store.
func (s *natsServer) Close() error {
	err := s.runner.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}

// inprocServer is a nats-server embedded in this process.
type inprocServer struct {
	srv *server.Server // the running server
}

// startInProcess starts an embedded server.
func startInProcess(c embeddedConfig) (*inprocServer, error) {
	srv, err := startEmbedded(c)
	if err != nil {
		return nil, err
	}
	return &inprocServer{srv: srv}, nil
}

func (s *inprocServer) clientURL() string { return s.srv.ClientURL() }

func (s *inprocServer) cpuTime() (time.Duration, error) { return 0, errCPUShared }

// Close shuts the server down and waits for it.
func (s *inprocServer) Close() error {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	return nil
}
