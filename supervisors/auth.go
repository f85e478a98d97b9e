package supervisors

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// A node authenticates clients by token (auth_tokens_file), by client
// certificate (tls_client_ca), or both; with neither it runs in dev mode
// and logs so at start. docs/security.md is the operator's guide.

// MinTokenBytes is the shortest token a tokens file may hold in plain
// text: shorter ones are guessable.
const MinTokenBytes = 16

// TokensFile is the YAML document auth_tokens_file names.
type TokensFile struct {
	Tokens []TokenEntry `yaml:"tokens"`
}

// TokenEntry is one token in the tokens file: its secret (in plain text,
// or better as its SHA-256), the tenant it is bound to, what it may do
// there and, optionally, in which namespaces.
type TokenEntry struct {
	// Name identifies the token in logs; it is not secret.
	Name string `yaml:"name"`
	// Token is the secret itself; SHA256 is its SHA-256 in hex. Exactly
	// one is set.
	Token  string `yaml:"token"`
	SHA256 string `yaml:"sha256"`
	// Tenant is the one tenant the token can touch.
	Tenant string `yaml:"tenant"`
	// Permissions are publish, subscribe, consume, manage and cluster.
	Permissions []string `yaml:"permissions"`
	// Namespaces, if any, are the only namespaces of Tenant it can touch.
	Namespaces []string `yaml:"namespaces"`
}

// ErrTokensFile wraps every problem with the tokens file.
var ErrTokensFile = errors.New("auth_tokens_file")

// LoadTokensFile reads and checks the tokens file at path.
func LoadTokensFile(path string) ([]actors.TokenGrant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokensFile, err)
	}
	grants, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrTokensFile, path, err)
	}
	return grants, nil
}

// ParseTokens parses and checks a tokens file's content. Unknown keys, a
// token without a tenant or a permission, two entries with one name or
// one secret, and short plain-text tokens are errors. Error messages never
// quote a secret.
func ParseTokens(b []byte) ([]actors.TokenGrant, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f TokensFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no tokens")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("no tokens")
	}
	var errs []error
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	grants := make([]actors.TokenGrant, 0, len(f.Tokens))
	for i, t := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
		}
		if t.Name == "" {
			bad("name must be set")
		} else {
			where = fmt.Sprintf("tokens[%d] (%s)", i, t.Name)
			if names[t.Name] {
				bad("name used twice")
			}
			names[t.Name] = true
		}
		var g actors.TokenGrant
		switch {
		case (t.Token == "") == (t.SHA256 == ""):
			bad("set exactly one of token and sha256")
		case t.Token != "":
			if len(t.Token) < MinTokenBytes {
				bad("token must be at least %d bytes", MinTokenBytes)
			}
			g.Digest = sha256.Sum256([]byte(t.Token))
		default:
			d, err := hex.DecodeString(strings.TrimSpace(t.SHA256))
			if err != nil || len(d) != sha256.Size {
				bad("sha256 must be %d hex digits", 2*sha256.Size)
			}
			copy(g.Digest[:], d)
		}
		if other, dup := digests[g.Digest]; dup && g.Digest != ([sha256.Size]byte{}) {
			bad("same secret as %s", other)
		}
		digests[g.Digest] = where
		if err := (wire.StreamName{Tenant: t.Tenant, Namespace: "ns", Stream: "s"}).Validate(); err != nil {
			bad("tenant: %v", err)
		}
		if len(t.Permissions) == 0 {
			bad("permissions must list at least one of publish, subscribe, consume, manage, cluster")
		}
		var perms actors.Permission
		for _, name := range t.Permissions {
			p, err := actors.ParsePermission(name)
			if err != nil {
				bad("%v", err)
			}
			perms |= p
		}
		for _, ns := range t.Namespaces {
			if err := (wire.StreamName{Tenant: "t", Namespace: ns, Stream: "s"}).Validate(); err != nil {
				bad("namespaces: %v", err)
			}
		}
		g.Principal = actors.Principal{Name: t.Name, Tenant: t.Tenant, Perms: perms, Namespaces: t.Namespaces}
		grants = append(grants, g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return grants, nil
}

// CheckPermission returns an error unless name is a permission a token
// or client certificate may grant: publish, subscribe, consume, manage or
// cluster.
func CheckPermission(name string) error {
	_, err := actors.ParsePermission(name)
	return err
}

// parseList splits a comma-separated configuration value, dropping blanks.
func parseList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// certGrant returns what a verified client certificate grants under cfg
// (nil when tls_client_ca is not set).
func certGrant(cfg Config) (*actors.CertGrant, error) {
	if cfg.TLSClientCA == "" {
		return nil, nil
	}
	var g actors.CertGrant
	for _, name := range parseList(cfg.TLSClientPermissions) {
		p, err := actors.ParsePermission(name)
		if err != nil {
			return nil, fmt.Errorf("config tls_client_permissions: %w", err)
		}
		g.Perms |= p
	}
	if g.Perms == 0 {
		return nil, errors.New("config tls_client_permissions: must list at least one permission")
	}
	g.Namespaces = parseList(cfg.TLSClientNamespaces)
	return &g, nil
}

// newAuthenticator builds the node's authenticator from cfg.
func newAuthenticator(cfg Config) (*actors.Authenticator, error) {
	var grants []actors.TokenGrant
	if cfg.AuthTokensFile != "" {
		var err error
		if grants, err = LoadTokensFile(cfg.AuthTokensFile); err != nil {
			return nil, err
		}
	}
	certs, err := certGrant(cfg)
	if err != nil {
		return nil, err
	}
	return actors.NewAuthenticator(grants, certs), nil
}

// requireClientCerts makes conf verify client certificates against the CA
// file: required when they are the only credentials, optional (verified
// when presented) when tokens are accepted too.
func requireClientCerts(conf *tls.Config, caFile string, tokensToo bool) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("node: tls_client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("node: tls_client_ca %s: no PEM certificate in it", caFile)
	}
	conf.ClientCAs = pool
	conf.ClientAuth = tls.RequireAndVerifyClientCert
	if tokensToo {
		conf.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return nil
}

// logAuth says at start how clients are authenticated; dev mode is a
// warning. It names the tokens file and the CA, never a secret.
func (n *Node) logAuth() {
	if n.auth.Dev() {
		n.logger.Warn("authentication is off (dev mode): neither auth_tokens_file nor tls_client_ca is set, " +
			"so every client may publish, subscribe, consume and manage streams of every tenant")
		return
	}
	attrs := []any{slog.String("tokens_file", n.cfg.AuthTokensFile), slog.Int("tokens", n.auth.Tokens())}
	if n.cfg.TLSClientCA != "" {
		attrs = append(attrs, slog.String("client_ca", n.cfg.TLSClientCA), slog.String("client_cert_permissions", n.cfg.TLSClientPermissions))
	}
	n.logger.Info("authentication is on", attrs...)
}
