package main

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// startTestServer starts a server for o in mode, closed when the test ends.
func startTestServer(t *testing.T, mode serverMode, o serverOptions) *natsServer {
	t.Helper()
	cfg := testConfig()
	cfg.server = mode
	e := testEnv(t, cfg)
	srv, err := e.startServer(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

func TestTLSServerSpeaksOnlyTLS13(t *testing.T) {
	for _, mode := range []serverMode{serverChild, serverInProcess} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startTestServer(t, mode, serverOptions{tls: true})
			if !strings.HasPrefix(srv.runner.clientURL(), "tls://") {
				t.Errorf("client URL %s, want tls://", srv.runner.clientURL())
			}
			nc, err := srv.connect("tls13")
			if err != nil {
				t.Fatal(err)
			}
			state, err := nc.TLSConnectionState()
			nc.Close()
			if err != nil || state.Version != tls.VersionTLS13 {
				t.Errorf("negotiated %#x (%v), want TLS 1.3", state.Version, err)
			}

			// A client that offers at most TLS 1.2 is refused.
			old := srv.clientTLS.Clone()
			old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			if nc, err := nats.Connect(srv.runner.clientURL(), nats.Secure(old), nats.NoReconnect()); err == nil {
				nc.Close()
				t.Error("a TLS 1.2 client connected")
			}
			// A client that does not trust the throwaway CA is refused.
			untrusted := &tls.Config{MinVersion: tls.VersionTLS13}
			if nc, err := nats.Connect(srv.runner.clientURL(), nats.Secure(untrusted), nats.NoReconnect()); err == nil {
				nc.Close()
				t.Error("a client without the CA connected")
			}
		})
	}
}

func TestPlaintextServer(t *testing.T) {
	srv := startTestServer(t, serverChild, serverOptions{})
	if !strings.HasPrefix(srv.runner.clientURL(), "nats://") {
		t.Errorf("client URL %s, want nats://", srv.runner.clientURL())
	}
	nc, err := srv.connect("plain")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.TLSConnectionState(); err == nil {
		t.Error("a plaintext connection has a TLS state")
	}
}

func TestChildServerStops(t *testing.T) {
	cfg := testConfig()
	e := testEnv(t, cfg)
	srv, err := e.startServer(t.Context(), serverOptions{syncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	child := srv.runner.(*childServer)
	if _, err := child.cpuTime(); err != nil {
		t.Fatalf("cpu time of a running child: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-child.done:
	default:
		t.Fatal("Close returned before the child exited")
	}
	if err := child.cmd.Process.Signal(syscall.Signal(0)); err == nil {
		t.Error("the child process still exists")
	}
	if _, err := os.Stat(srv.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("store %s not removed: %v", srv.dir, err)
	}
}

func TestChildServerFailsToStart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	_, err = startChild(t.Context(), exe, embeddedConfig{storeDir: dir, certFile: missing, keyFile: missing})
	if !errors.Is(err, errChildNotReady) {
		t.Fatalf("err = %v, want %v", err, errChildNotReady)
	}
	if !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("error %q does not carry the child's stderr", err)
	}
}

func TestRunServeRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--store", t.TempDir(), "extra"},
		{"--store", t.TempDir(), "--tls-cert", "a.pem"},
		{"--bogus"},
	} {
		err := runServe(args, strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
		if !errors.Is(err, errServeUsage) {
			t.Errorf("runServe(%q) = %v, want %v", args, err, errServeUsage)
		}
	}
}

func TestRunServeStopsAtEndOfInput(t *testing.T) {
	var out strings.Builder
	done := make(chan error, 1)
	stdin, w := ioPipe(t)
	go func() { done <- runServe([]string{"--store", t.TempDir()}, stdin, &out, &strings.Builder{}) }()
	w.Close() // end of input at once: the server starts, says so, stops
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runServe did not return after end of input")
	}
	line, ok := strings.CutPrefix(strings.TrimSpace(out.String()), readyPrefix)
	if !ok || !strings.HasPrefix(line, "nats://127.0.0.1:") {
		t.Errorf("ready line %q", out.String())
	}
}

// ioPipe returns an os.Pipe whose ends are closed when the test ends.
func ioPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestParseServerMode(t *testing.T) {
	for _, s := range []string{"child", "inproc"} {
		if m, err := parseServerMode(s); err != nil || string(m) != s {
			t.Errorf("parseServerMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := parseServerMode("thread"); !errors.Is(err, errUnknownServerMode) {
		t.Errorf("parseServerMode(thread) = %v, want %v", err, errUnknownServerMode)
	}
}

func TestLineWriter(t *testing.T) {
	w := newLineWriter()
	for _, chunk := range []string{"rea", "dy tls://127.0.0.1:4", "222\nmore\n", "and more"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	select {
	case line := <-w.first:
		if line != "ready tls://127.0.0.1:4222" {
			t.Errorf("first line %q", line)
		}
	default:
		t.Fatal("no first line")
	}
	select {
	case line := <-w.first:
		t.Errorf("a second line %q", line)
	default:
	}
}

func TestLineWriterBounded(t *testing.T) {
	w := newLineWriter()
	big := strings.Repeat("x", 3*lineWriterMax)
	if n, err := w.Write([]byte(big)); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	w.mu.Lock()
	kept := len(w.mu.buf)
	w.mu.Unlock()
	if kept != lineWriterMax {
		t.Errorf("kept %d bytes, want %d", kept, lineWriterMax)
	}
}
