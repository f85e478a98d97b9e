package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// The client commands (stream, pub, sub, read, group) share the connection
// flags below. Each setting is taken, in falling precedence, from its flag,
// its environment variable, the selected context (contexts.go) and the
// built-in default.

// Defaults of the client commands' flags.
const (
	// defaultServer is the node address when no flag, variable or context
	// gives one.
	defaultServer = "127.0.0.1:7400"
	// defaultTimeout bounds each non-streaming call.
	defaultTimeout = 10 * time.Second
	// devCAPath is where a development node started in the working
	// directory with the default data dir writes its CA.
	devCAPath = "data/tls/ca.pem"
)

// streamArgHelp says how a STREAM argument is read; every command that
// takes one puts it in its help.
const streamArgHelp = `STREAM is NAME, NAMESPACE/NAME or TENANT/NAMESPACE/NAME. A bare NAME is in namespace
"default" of the current context's tenant ("default" without a context or without a
tenant in it); NAMESPACE/NAME is in the context's tenant too.`

// clientFlags are the connection flags of every client command.
type clientFlags struct {
	// server is the node's QUIC address, or comma-separated seeds (--server,
	// HERALD_SERVER, the context's).
	server string
	// token authenticates the client (--token only: HERALD_TOKEN and the
	// context's token are read by options, so that no usage text or
	// default ever holds a secret).
	token string
	// ctxToken is the selected context's token.
	ctxToken string
	// ca is the CA file to trust (--ca, HERALD_CA, the context's); empty
	// means the default lookup of caFile. caFrom says which gave it.
	ca, caFrom string
	// insecure skips certificate verification (--insecure).
	insecure bool
	// cert and key are a client certificate for mutual TLS (--cert,
	// --cert-key, HERALD_CERT, HERALD_CERT_KEY, the context's).
	cert, key string
	// timeout bounds each non-streaming call (--timeout).
	timeout time.Duration
	// maxFrame is the largest frame body the CLI accepts (--max-frame-bytes).
	maxFrame frameBytesFlag
	// contextName is --context.
	contextName string
	// context is the selected context, nil for none (set by resolve).
	context *cliContext
	// tenant is the tenant of bare and two-part stream names: the
	// context's, else "default".
	tenant string
	// getenv reads the environment (set by resolve; os.Getenv if nil).
	getenv func(string) string
	// trace exports the command's spans through the OTEL_* variables
	// (--trace; cmd_trace.go).
	trace bool
	// env is the command's environment (set by resolve).
	env *cliEnv
	// replica is which replica serves reads and subscriptions (--replica,
	// on sub and read only).
	replica client.Replica
}

// frameBytesFlag is a frame size in bytes: 1 to 4 GiB − 1 (a u32 on the
// wire), in parseSize's syntax.
type frameBytesFlag uint32

func (v *frameBytesFlag) String() string { return formatSize(int64(*v)) }

// Type names the value in usage text.
func (v *frameBytesFlag) Type() string { return "bytes" }

func (v *frameBytesFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n <= 0 || n > math.MaxUint32 {
		return fmt.Errorf("%q: want a byte count from 1 to %d (4GiB - 1)", s, uint64(math.MaxUint32))
	}
	*v = frameBytesFlag(n)
	return nil
}

// registerClientFlags adds the connection flags to fs. Call resolve after
// parsing.
func registerClientFlags(fs *pflag.FlagSet) *clientFlags {
	f := &clientFlags{timeout: defaultTimeout, maxFrame: wire.DefaultMaxFrameBytes}
	fs.StringVarP(&f.server, "server", "s", "", "node `address`, or seeds a:7400,b:7400 (default $HERALD_SERVER, else the context's, else "+defaultServer+")")
	fs.StringVar(&f.token, "token", "", "authentication `token` (default $HERALD_TOKEN, else the context's)")
	fs.StringVar(&f.ca, "ca", "", "CA certificate `file` to trust, or several comma-separated (default $HERALD_CA, else the context's, else ./"+devCAPath+" if it exists, else $HERALD_DATA_DIR/tls/ca.pem)")
	fs.BoolVar(&f.insecure, "insecure", false, "skip verification of the node's certificate (experiments only)")
	fs.StringVar(&f.cert, "cert", "", "client certificate `file` for a node with mutual TLS (default $HERALD_CERT, else the context's)")
	fs.StringVar(&f.key, "cert-key", "", "the client certificate's private key `file` (default $HERALD_CERT_KEY, else the context's)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "bound on each non-streaming call")
	fs.Var(&f.maxFrame, "max-frame-bytes", "largest frame to accept, e.g. 16MiB: at least the node's max_frame_bytes")
	fs.StringVar(&f.contextName, "context", "", "use this saved `context` (default $HERALD_CONTEXT, else the current one; see herald context)")
	fs.BoolVar(&f.trace, "trace", false, "export this command's spans with OpenTelemetry, as the OTEL_* variables say (OTEL_TRACES_EXPORTER otlp or console, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...)")
	return f
}

// resolve fills in what the flags of fs left unset from the environment
// and the selected context.
func (f *clientFlags) resolve(fs *pflag.FlagSet, env *cliEnv) error {
	f.getenv, f.env = env.getenv, env
	ctx, err := selectedContext(f.contextName, env.getenv, env.userConfigDir)
	if err != nil {
		return err
	}
	f.context = ctx
	var c cliContext
	if ctx != nil {
		c = *ctx
	}
	pick := func(name, flagValue, envName, ctxValue string) string {
		if fs.Changed(name) {
			return flagValue
		}
		return cmp.Or(env.getenv(envName), ctxValue)
	}
	f.server = cmp.Or(pick("server", f.server, "HERALD_SERVER", c.Server), defaultServer)
	switch {
	case fs.Changed("ca"):
		f.caFrom = "--ca"
	case env.getenv("HERALD_CA") != "":
		f.ca, f.caFrom = env.getenv("HERALD_CA"), "HERALD_CA"
	case c.CA != "":
		f.ca, f.caFrom = c.CA, fmt.Sprintf("context %q", c.Name)
	}
	f.cert = pick("cert", f.cert, "HERALD_CERT", c.Cert)
	f.key = pick("cert-key", f.key, "HERALD_CERT_KEY", c.CertKey)
	f.ctxToken = c.Token
	f.tenant = cmp.Or(c.Tenant, "default")
	if f.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	return nil
}

// caFile returns the CA file to trust: the one given (--ca, HERALD_CA, the
// context's), else ./data/tls/ca.pem if it exists, else
// $HERALD_DATA_DIR/tls/ca.pem if it exists, else "" (the system roots).
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

// caLookup says where the CA was looked for and what was used, for the
// hint after a failed verification.
func (f *clientFlags) caLookup(getenv func(string) string, exists func(string) bool) string {
	if f.ca != "" {
		return fmt.Sprintf("trusted %s (from %s)", f.ca, f.caFrom)
	}
	ctx := "no context in use"
	if f.context != nil {
		ctx = fmt.Sprintf("context %q has no ca", f.context.Name)
	}
	wd, _ := os.Getwd()
	looked := fmt.Sprintf("looked in --ca, HERALD_CA (not set), %s, ./%s (in %s)", ctx, devCAPath, wd)
	if dir := getenv("HERALD_DATA_DIR"); dir != "" {
		looked += ", " + filepath.Join(dir, "tls", "ca.pem")
	} else {
		looked += " and $HERALD_DATA_DIR/tls/ca.pem (HERALD_DATA_DIR not set)"
	}
	if ca := f.caFile(getenv, exists); ca != "" {
		return looked + "; trusted " + ca
	}
	return looked + "; found none there, so trusted only the system's roots"
}

// options returns the client.Dial options the flags ask for.
func (f *clientFlags) options(getenv func(string) string, exists func(string) bool) []client.Option {
	opts := []client.Option{client.WithName("herald-cli"), client.WithMaxFrameBytes(uint32(f.maxFrame))}
	if f.replica != client.ReplicaNearest {
		opts = append(opts, client.WithReplica(f.replica))
	}
	if ca := f.caFile(getenv, exists); ca != "" && !f.insecure {
		opts = append(opts, client.WithCAFile(ca))
	}
	if f.insecure {
		opts = append(opts, client.WithInsecure())
	}
	if token := cmp.Or(f.token, getenv("HERALD_TOKEN"), f.ctxToken); token != "" {
		opts = append(opts, client.WithToken(token))
	}
	if f.cert != "" || f.key != "" {
		opts = append(opts, client.WithClientCert(f.cert, f.key))
	}
	return opts
}

// hasCredentials reports whether the client authenticates with a token or
// a certificate (without either, a node that accepts it is in dev mode).
func (f *clientFlags) hasCredentials() bool {
	return cmp.Or(f.token, f.getEnv("HERALD_TOKEN"), f.ctxToken, f.cert) != ""
}

// getEnv reads an environment variable through the resolved getenv.
func (f *clientFlags) getEnv(key string) string {
	if f.getenv == nil {
		return os.Getenv(key)
	}
	return f.getenv(key)
}

// dial connects to the node, bounded by the --timeout. A certificate the
// CLI cannot verify gets a hint: where the CA was looked for and how to
// point at it.
func (f *clientFlags) dial(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	getenv := f.getEnv
	opts := f.options(getenv, fileExists)
	if f.trace && f.env != nil {
		tp, err := newCLITracerProvider(ctx, f.env)
		if err != nil {
			return nil, err
		}
		if tp != nil {
			opts = append(opts, client.WithTracerProvider(tp))
		}
	}
	c, err := client.Dial(ctx, f.server, opts...)
	if err != nil {
		err = fmt.Errorf("connect to %s: %w", f.server, err)
		if unknownAuthority(err) {
			return nil, fmt.Errorf("%w (the node's certificate is not signed by a CA the CLI trusts: it %s. "+
				"Point at the node's CA with --ca FILE, HERALD_CA, or a context: herald context add NAME --server %s --ca FILE; "+
				"a node writes its development CA to DATA_DIR/tls/ca.pem)", err, f.caLookup(getenv, fileExists), f.server)
		}
		return nil, err
	}
	return c, nil
}

// clustered reports whether --server names several nodes: then the
// commands that publish, create, describe and read streams talk to the
// cluster (client.ClusterClient), sending each request to the node that
// leads its shard.
func (f *clientFlags) clustered() bool { return strings.Contains(f.server, ",") }

// dialCluster connects to every node --server names that answers.
func (f *clientFlags) dialCluster(ctx context.Context) (*client.ClusterClient, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	cc, err := client.DialCluster(ctx, f.server, f.options(f.getEnv, fileExists)...)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster at %s: %w", f.server, err)
	}
	return cc, nil
}

// unknownAuthority reports whether err is a TLS verification failure for a
// certificate signed by a CA not trusted. quic-go reports the handshake's
// failure as a TLS alert whose text is the verification error's, so the
// text is checked when the typed error is not in the chain.
func unknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return true
	}
	return strings.Contains(err.Error(), "certificate signed by unknown authority")
}

// fileExists reports whether path names an existing regular file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// errUsage marks an error in the command line (exit status 2, and a hint
// to run --help).
var errUsage = errors.New("usage")

// errBadFlag marks an error the flag parser found: an unknown flag or a
// value it cannot parse. It is a usage error.
var errBadFlag = fmt.Errorf("%w: bad flag", errUsage)

// errRefused is the error of a refused conditional publish (exit status 1);
// the command printed the outcome, so nothing more is printed.
var errRefused = errors.New("conditional publish refused")

// usageErrorf returns a command-line error.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// exitStatus prints err as one line to stderr, prefixed with the command
// ("sub", "stream create"; "" for herald itself), and returns the exit
// status: 2 for a command-line error, after a second line saying how to get
// help; 1 otherwise; 0 for nil or a request for help.
func exitStatus(stderr io.Writer, cmd string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errRefused) {
		// The command printed the outcome.
		return 1
	}
	if errors.Is(err, errHelpShown) {
		return 2
	}
	var code exitCode
	if errors.As(err, &code) {
		// The command explained itself.
		return int(code)
	}
	msg := err.Error()
	for _, prefix := range []string{errBadFlag.Error() + ": ", errUsage.Error() + ": "} {
		msg = strings.ReplaceAll(msg, prefix, "")
	}
	msg = strings.ReplaceAll(msg, "herald: ", "")
	msg = strings.ReplaceAll(msg, "\n", " ")
	path := strings.TrimSpace("herald " + cmd)
	fmt.Fprintf(stderr, "%s: %s\n", path, msg)
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		return 2
	}
	return 1
}

// parseStreamArg parses a STREAM argument (streamArgHelp): a bare name and
// NAMESPACE/NAME are in tenant.
func parseStreamArg(s, tenant string) (client.StreamName, error) {
	n, err := client.ParseStreamName(s)
	if err == nil && strings.Count(s, "/") < 2 {
		n.Tenant = tenant
		err = n.Validate()
	}
	if err != nil {
		return n, usageErrorf("stream %q: %v", s, strings.TrimPrefix(err.Error(), "herald: "))
	}
	return n, nil
}
