package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// The client commands (stream, pub, sub, read) share the connection flags below
// and one way of parsing: flags may come before, between or after the
// positional arguments, and "--" ends the flags.

// Defaults of the client commands' flags.
const (
	// defaultServer is the node address when neither --server nor
	// HERALD_SERVER is given.
	defaultServer = "127.0.0.1:7400"
	// defaultTimeout bounds each non-streaming call.
	defaultTimeout = 10 * time.Second
	// devCAPath is where a development node started in the working
	// directory with the default data dir writes its CA.
	devCAPath = "data/tls/ca.pem"
)

// clientFlags are the connection flags of every client command.
type clientFlags struct {
	// server is the node's QUIC address (--server, HERALD_SERVER).
	server string
	// token authenticates the client (--token, HERALD_TOKEN).
	token string
	// ca is the CA file to trust (--ca); empty means the default lookup.
	ca string
	// insecure skips certificate verification (--insecure).
	insecure bool
	// cert and key are a client certificate for mutual TLS (--cert,
	// --cert-key).
	cert, key string
	// timeout bounds each non-streaming call (--timeout).
	timeout time.Duration
	// maxFrame is the largest frame body the CLI accepts (--max-frame-bytes).
	maxFrame frameBytesFlag
}

// frameBytesFlag is a frame size in bytes: 1 to 4 GiB − 1 (a u32 on the wire).
type frameBytesFlag uint32

func (v *frameBytesFlag) String() string { return strconv.FormatUint(uint64(*v), 10) }

func (v *frameBytesFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > math.MaxUint32 {
		return fmt.Errorf("%q: want a byte count from 1 to %d", s, uint64(math.MaxUint32))
	}
	*v = frameBytesFlag(n)
	return nil
}

// registerClientFlags adds the connection flags to fs, with defaults taken
// from the environment through getenv.
func registerClientFlags(fs *flag.FlagSet, getenv func(string) string) *clientFlags {
	f := &clientFlags{}
	server := getenv("HERALD_SERVER")
	if server == "" {
		server = defaultServer
	}
	fs.StringVar(&f.server, "server", server, "node `address` (env HERALD_SERVER)")
	// The token's default is not the environment's value: usage output
	// would print the secret. options reads HERALD_TOKEN instead.
	fs.StringVar(&f.token, "token", "", "authentication `token` (default $HERALD_TOKEN)")
	fs.StringVar(&f.ca, "ca", "", "CA certificate `file` to trust (default ./"+devCAPath+" if it exists, else $HERALD_DATA_DIR/tls/ca.pem)")
	fs.BoolVar(&f.insecure, "insecure", false, "skip verification of the node's certificate (experiments only)")
	fs.StringVar(&f.cert, "cert", getenv("HERALD_CERT"), "client certificate `file` for a node with mutual TLS (env HERALD_CERT)")
	fs.StringVar(&f.key, "cert-key", getenv("HERALD_CERT_KEY"), "the client certificate's private key `file` (env HERALD_CERT_KEY)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "bound on each non-streaming call")
	f.maxFrame = wire.DefaultMaxFrameBytes
	fs.Var(&f.maxFrame, "max-frame-bytes", "largest frame `bytes` to accept: at least the node's max_frame_bytes")
	return f
}

// caFile returns the CA file to trust: --ca, else ./data/tls/ca.pem if it
// exists, else $HERALD_DATA_DIR/tls/ca.pem if it exists, else "" (the system
// roots).
func (f *clientFlags) caFile(getenv func(string) string, exists func(string) bool) string {
	if f.ca != "" {
		return f.ca
	}
	if exists(devCAPath) {
		return devCAPath
	}
	if dir := getenv("HERALD_DATA_DIR"); dir != "" {
		if p := filepath.Join(dir, "tls", "ca.pem"); exists(p) {
			return p
		}
	}
	return ""
}

// options returns the client.Dial options the flags ask for.
func (f *clientFlags) options(getenv func(string) string, exists func(string) bool) []client.Option {
	opts := []client.Option{client.WithName("herald-cli"), client.WithMaxFrameBytes(uint32(f.maxFrame))}
	if ca := f.caFile(getenv, exists); ca != "" && !f.insecure {
		opts = append(opts, client.WithCAFile(ca))
	}
	if f.insecure {
		opts = append(opts, client.WithInsecure())
	}
	if token := cmp.Or(f.token, getenv("HERALD_TOKEN")); token != "" {
		opts = append(opts, client.WithToken(token))
	}
	if f.cert != "" || f.key != "" {
		opts = append(opts, client.WithClientCert(f.cert, f.key))
	}
	return opts
}

// dial connects to the node, bounded by the --timeout.
func (f *clientFlags) dial(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := client.Dial(ctx, f.server, f.options(os.Getenv, fileExists)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.server, err)
	}
	return c, nil
}

// fileExists reports whether path names an existing regular file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// newFlagSet returns a flag set for `herald <name>` that reports errors to
// stderr and returns them instead of exiting.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: herald %s %s\n\nflags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseInterleaved parses args with fs, allowing flags after positional
// arguments: it parses, takes the next positional argument, and parses the
// rest again. After "--" every argument is positional. It returns the
// positional arguments in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			// The flag package has printed the problem and the usage.
			return nil, fmt.Errorf("%w: %w", errFlagsReported, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// errUsage marks an error in the command line (exit status 2).
var errUsage = errors.New("usage")

// errFlagsReported marks a flag error the flag package already printed
// (exit status 2, nothing more to print).
var errFlagsReported = errors.New("invalid flags")

// errRefused is the error of a refused conditional publish (exit status 1);
// the command printed the outcome, so nothing more is printed.
var errRefused = errors.New("conditional publish refused")

// usageErrorf returns a command-line error.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// exitStatus prints err as one line to stderr, prefixed with the command,
// and returns the exit status: 2 for a command-line error, 1 otherwise, 0
// for nil.
func exitStatus(stderr io.Writer, cmd string, err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errFlagsReported) {
		return 2
	}
	if errors.Is(err, errRefused) {
		// The command printed the outcome.
		return 1
	}
	msg := strings.ReplaceAll(err.Error(), "herald: ", "")
	msg = strings.ReplaceAll(msg, "\n", " ")
	fmt.Fprintf(stderr, "herald %s: %s\n", cmd, msg)
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// parseStreamArg parses a STREAM argument ("orders" is
// default/default/orders).
func parseStreamArg(s string) (client.StreamName, error) {
	n, err := client.ParseStreamName(s)
	if err != nil {
		return n, usageErrorf("stream %q: %v", s, strings.TrimPrefix(err.Error(), "herald: "))
	}
	return n, nil
}
