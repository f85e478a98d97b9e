package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// serveCommand is the hidden subcommand that runs one nats-server for a
// parent herald-compare: `herald-compare serve --store DIR [--tls-cert F
// --tls-key F] [--sync-always]`. It prints readyPrefix and the client URL on
// one line of stdout once the server accepts connections, and shuts the
// server down when stdin reaches end of file (the parent closes it, or
// exits).
const serveCommand = "serve"

// readyPrefix starts the line the serve subcommand prints when ready.
const readyPrefix = "ready "

// Bounds of the child's start and stop.
const (
	childStartTimeout = 30 * time.Second // until the ready line
	childStopTimeout  = 10 * time.Second // from closing stdin to a kill
)

// errServeUsage is returned for serve subcommand arguments it cannot run
// with.
var errServeUsage = errors.New("herald-compare serve: bad arguments")

// errChildNotReady is returned when the serve child exits or stays silent
// instead of printing its ready line.
var errChildNotReady = errors.New("herald-compare: nats-server child process not ready")

// serveMain runs the serve subcommand and returns the process exit code.
func serveMain(args []string) int {
	if err := runServe(args, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "herald-compare serve:", err)
		return 2
	}
	return 0
}

// runServe implements the serve subcommand.
func runServe(args []string, stdin io.Reader, stdout, log io.Writer) error {
	fs := flag.NewFlagSet("herald-compare serve", flag.ContinueOnError)
	fs.SetOutput(log)
	var c embeddedConfig
	fs.StringVar(&c.storeDir, "store", "", "JetStream store directory (required)")
	fs.StringVar(&c.certFile, "tls-cert", "", "server certificate chain, PEM (with --tls-key: TLS 1.3 only)")
	fs.StringVar(&c.keyFile, "tls-key", "", "server private key, PEM")
	fs.BoolVar(&c.syncAlways, "sync-always", false, "fsync every JetStream write before its ack")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errServeUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected arguments %q", errServeUsage, fs.Args())
	case c.storeDir == "":
		return fmt.Errorf("%w: --store is required", errServeUsage)
	case (c.certFile == "") != (c.keyFile == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errServeUsage)
	}
	srv, err := startEmbedded(c)
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if _, err := fmt.Fprintf(stdout, "%s%s\n", readyPrefix, srv.ClientURL()); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, stdin)
	return err
}

// childServer is a nats-server in a child process running serveCommand.
// Two goroutines are started for it: exec's copy of the child's output, and
// the one waiting for the process; both end when the process exits, which
// Close makes sure of.
type childServer struct {
	cmd    *exec.Cmd      // the child process
	stdin  io.WriteCloser // closing it asks the child to stop
	url    string         // client URL from the ready line
	stdout *lineWriter    // the child's stdout
	stderr bytes.Buffer   // the child's stderr; read only after done

	done    chan struct{} // closed once the process has exited and its output is copied
	waitErr error         // cmd.Wait's error; read only after done
}

// startChild starts exe's serve subcommand for c and waits for its ready
// line. exe is this executable (a test binary dispatches serveCommand in
// TestMain).
func startChild(ctx context.Context, exe string, c embeddedConfig) (*childServer, error) {
	args := []string{serveCommand, "--store", c.storeDir}
	if c.certFile != "" {
		args = append(args, "--tls-cert", c.certFile, "--tls-key", c.keyFile)
	}
	if c.syncAlways {
		args = append(args, "--sync-always")
	}
	s := &childServer{cmd: exec.Command(exe, args...), stdout: newLineWriter(), done: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, &s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("herald-compare: start nats-server child: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(childStartTimeout)
	defer timer.Stop()
	select {
	case line := <-s.stdout.first:
		url, ok := strings.CutPrefix(line, readyPrefix)
		if ok && url != "" {
			s.url = url
			return s, nil
		}
		err = fmt.Errorf("%w: it printed %q", errChildNotReady, line)
	case <-s.done:
		err = fmt.Errorf("%w: it exited (%v): %s", errChildNotReady, s.waitErr, strings.TrimSpace(s.stderr.String()))
	case <-timer.C:
		err = fmt.Errorf("%w: no ready line within %s", errChildNotReady, childStartTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.kill()
	return nil, err
}

func (s *childServer) clientURL() string { return s.url }

// cpuTime reads the child's CPU time from the kernel.
func (s *childServer) cpuTime() (time.Duration, error) {
	return processCPU(s.cmd.Process.Pid)
}

// Close closes the child's stdin, waits for it to shut its server down and
// exit (killing it after childStopTimeout), and returns why it failed, if it
// did. It must be called once.
func (s *childServer) Close() error {
	s.stdin.Close()
	timer := time.NewTimer(childStopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		s.kill()
		return fmt.Errorf("herald-compare: nats-server child did not stop within %s; killed", childStopTimeout)
	}
	if s.waitErr != nil {
		return fmt.Errorf("herald-compare: nats-server child: %w: %s", s.waitErr, strings.TrimSpace(s.stderr.String()))
	}
	return nil
}

// kill kills the child and waits for it to be gone.
func (s *childServer) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// lineWriter is an io.Writer for a child's stdout that hands its first
// complete line (without the newline) to first and keeps at most
// lineWriterMax bytes of the rest. Write is called from exec's copying
// goroutine.
type lineWriter struct {
	first chan string // receives the first line, once; buffered

	mu struct {
		sync.Mutex
		buf  []byte // output so far, capped at lineWriterMax
		sent bool   // the first line went to first
	}
}

// lineWriterMax bounds what a lineWriter keeps.
const lineWriterMax = 4096

func newLineWriter() *lineWriter {
	return &lineWriter{first: make(chan string, 1)}
}

// Write implements io.Writer; it never fails.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.sent {
		return len(p), nil
	}
	w.mu.buf = append(w.mu.buf, p[:min(len(p), lineWriterMax-len(w.mu.buf))]...)
	if i := bytes.IndexByte(w.mu.buf, '\n'); i >= 0 {
		w.first <- string(w.mu.buf[:i])
		w.mu.sent, w.mu.buf = true, nil
	}
	return len(p), nil
}
