package supervisors

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
)

// Test tokens: long enough for the tokens file.
const (
	tokenAcme     = "acme-admin-token-0123456789"
	tokenGlobex   = "globex-admin-token-0123456789"
	tokenShopPub  = "acme-shop-publisher-0123456789"
	tokenAcmeRead = "acme-reader-token-0123456789"
)

// writeTokens writes a tokens file with four tokens: an admin for each of
// acme and globex, a publisher limited to acme's shop namespace (by
// digest), and a subscriber/consumer on acme.
func writeTokens(t *testing.T) string {
	t.Helper()
	digest := sha256.Sum256([]byte(tokenShopPub))
	body := `tokens:
  - name: acme-admin
    tenant: acme
    token: ` + tokenAcme + `
    permissions: [publish, subscribe, consume, manage]
  - name: globex-admin
    tenant: globex
    token: ` + tokenGlobex + `
    permissions: [publish, subscribe, consume, manage]
  - name: acme-shop-publisher
    tenant: acme
    sha256: ` + hex.EncodeToString(digest[:]) + `
    permissions: [publish]
    namespaces: [shop]
  - name: acme-reader
    tenant: acme
    token: ` + tokenAcmeRead + `
    permissions: [subscribe, consume]
`
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lockedBuffer collects a node's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withLog sends the node's log, at debug, to buf.
func withLog(buf *lockedBuffer) func(*Config, *Options) {
	return func(_ *Config, o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

func dialErr(n *Node, opts ...client.Option) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.Addr(), append([]client.Option{client.WithCAFile(n.CAFile())}, opts...)...)
	if err == nil {
		_ = c.Close()
	}
	return err
}

// A node with a tokens file refuses a missing or wrong token at the
// handshake with unauthenticated, and keeps serving the others.
func TestAuthTokensHandshake(t *testing.T) {
	var logs lockedBuffer
	n := testNode(t, t.TempDir(), withLog(&logs), func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	if err := dialErr(n); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("no token: %v, want unauthenticated", err)
	}
	wrong := "not-a-real-token-but-long-enough"
	if err := dialErr(n, client.WithToken(wrong)); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("wrong token: %v, want unauthenticated", err)
	}
	c := dialClient(t, n, client.WithToken(tokenAcme))
	ctx := context.Background()
	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, orders, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if got := scrapeSeries(t, n)["herald_auth_failures_total"]; got != 2 {
		t.Errorf("herald_auth_failures_total = %v, want 2", got)
	}
	text := logs.String()
	if !strings.Contains(text, "authentication is on") || !strings.Contains(text, "authentication failed") {
		t.Errorf("log lacks the auth lines:\n%s", text)
	}
	for _, secret := range []string{tokenAcme, tokenGlobex, tokenShopPub, tokenAcmeRead, wrong} {
		if strings.Contains(text, secret) {
			t.Errorf("log contains a token secret %q", secret)
		}
	}
}

// Tenant isolation: a client of tenant acme can never publish to,
// subscribe to, read, consume, describe, delete, create or list globex's
// streams, and cannot tell whether one exists: every attempt is
// permission_denied, the same for a stream that exists as for one that
// does not. Globex's data is untouched.
func TestAuthTenantIsolation(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	ctx := context.Background()
	acme := dialClient(t, n, client.WithToken(tokenAcme))
	globex := dialClient(t, n, client.WithToken(tokenGlobex))
	mine := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	theirs := client.StreamName{Tenant: "globex", Namespace: "shop", Stream: "orders"}
	missing := client.StreamName{Tenant: "globex", Namespace: "shop", Stream: "nothing-here"}
	for _, s := range []struct {
		c    *client.Client
		name client.StreamName
	}{{acme, mine}, {globex, theirs}} {
		if _, err := s.c.CreateStream(ctx, s.name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.c.PublishBatch(ctx, s.name, [][]byte{[]byte(s.name.Tenant + "-1"), []byte(s.name.Tenant + "-2")}); err != nil {
			t.Fatal(err)
		}
	}
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("%s: %v, want permission denied", what, err)
		}
	}
	for _, name := range []client.StreamName{theirs, missing} {
		_, err := acme.PublishBatch(ctx, name, [][]byte{[]byte("intruder")})
		denied("publish "+name.String(), err)
		_, err = acme.Subscribe(ctx, name, client.WithShard(0), client.WithStartOffset(0))
		denied("subscribe "+name.String(), err)
		_, err = acme.Read(ctx, name, 0, 0, 10)
		denied("read "+name.String(), err)
		_, err = acme.DescribeStream(ctx, name)
		denied("describe "+name.String(), err)
		_, err = acme.Group(name, "g").Poll(ctx, 0, 10, 0)
		denied("group poll "+name.String(), err)
		_, err = acme.Group(name, "g").Subscribe(ctx)
		denied("group subscribe "+name.String(), err)
		_, err = acme.Group(name, "g").Describe(ctx)
		denied("describe group "+name.String(), err)
		denied("delete "+name.String(), acme.DeleteStream(ctx, name))
		_, err = acme.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true})
		denied("create "+name.String(), err)
	}
	_, err := acme.ListStreams(ctx, "globex", "")
	denied("list globex", err)
	_, err = acme.ListStreams(ctx, client.AllTenants, "")
	denied("list every tenant", err)
	list, err := acme.ListStreams(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != mine {
		t.Errorf("acme lists %+v, want only %s", list, mine)
	}

	// Globex's stream holds exactly what globex wrote, and globex is served.
	page, err := globex.Read(ctx, theirs, 0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || string(page.Records[0].Payload) != "globex-1" || string(page.Records[1].Payload) != "globex-2" {
		t.Errorf("globex's stream holds %+v", page.Records)
	}
	// Some client calls describe the stream first and stop at its
	// refusal, so fewer than the 19 attempts reach the node as requests.
	if got := scrapeSeries(t, n)["herald_auth_denied_total"]; got < 10 {
		t.Errorf("herald_auth_denied_total = %v, want at least 10", got)
	}
}

// Permissions and namespaces: a publish-only token limited to namespace
// shop publishes there and nowhere else, and can neither subscribe nor
// manage; a subscribe/consume token reads and consumes but cannot publish.
func TestAuthPermissionsAndNamespaces(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	ctx := context.Background()
	admin := dialClient(t, n, client.WithToken(tokenAcme))
	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	ledger := client.StreamName{Tenant: "acme", Namespace: "billing", Stream: "ledger"}
	for _, s := range []client.StreamName{orders, ledger} {
		if _, err := admin.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	pub := dialClient(t, n, client.WithToken(tokenShopPub))
	if _, err := pub.PublishBatch(ctx, orders, [][]byte{[]byte("o1")}); err != nil {
		t.Fatalf("publish in shop: %v", err)
	}
	if _, err := pub.PublishBatch(ctx, ledger, [][]byte{[]byte("x")}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("publish in billing: %v, want permission denied", err)
	}
	if _, err := pub.Subscribe(ctx, orders, client.WithShard(0)); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("subscribe with a publish token: %v, want permission denied", err)
	}
	if _, err := pub.CreateStream(ctx, client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "new"}, client.StreamConfig{Shards: 1}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("create with a publish token: %v, want permission denied", err)
	}
	if _, err := pub.ListStreams(ctx, "acme", ""); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("list with a publish token: %v, want permission denied", err)
	}

	reader := dialClient(t, n, client.WithToken(tokenAcmeRead))
	if _, err := reader.PublishBatch(ctx, orders, [][]byte{[]byte("x")}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("publish with a reader token: %v, want permission denied", err)
	}
	page, err := reader.Read(ctx, orders, 0, 0, 10)
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Payload) != "o1" {
		t.Fatalf("read: %+v, %v", page.Records, err)
	}
	recs, err := reader.Group(orders, "workers").Poll(ctx, 0, 10, 0)
	if err != nil || len(recs) != 1 {
		t.Fatalf("group poll: %+v, %v", recs, err)
	}
	if _, err := reader.Group(orders, "workers").AckOffsets(ctx, 0, recs[0].Offset); err != nil {
		t.Fatal(err)
	}
	if err := reader.DeleteStream(ctx, orders); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("delete with a reader token: %v, want permission denied", err)
	}
}

// Without credentials configured the node says, in its log at start, that
// it runs in dev mode, and every client may do everything.
func TestAuthDevModeLogged(t *testing.T) {
	var logs lockedBuffer
	n := testNode(t, t.TempDir(), withLog(&logs))
	if !strings.Contains(logs.String(), "dev mode") {
		t.Errorf("no dev mode line in the log:\n%s", logs.String())
	}
	c := dialClient(t, n)
	if _, err := c.CreateStream(context.Background(), client.StreamName{Tenant: "any", Namespace: "ns", Stream: "s"}, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
}

// testCA is a certificate authority for client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, name+".pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, file: file}
}

// issue writes a client certificate for common name cn and its key, and
// returns their files.
func (ca *testCA) issue(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+"-"+ca.cert.Subject.CommonName+".pem"), filepath.Join(dir, cn+"-"+ca.cert.Subject.CommonName+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Mutual TLS: the tenant is the client certificate's common name. A client
// without a certificate, or with one from another CA, does not get in; a
// client with acme's certificate works on acme and is denied on globex.
func TestAuthMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, rogue := newTestCA(t, dir, "clients-ca"), newTestCA(t, dir, "rogue-ca")
	acmeCert, acmeKey := ca.issue(t, dir, "acme")
	rogueCert, rogueKey := rogue.issue(t, dir, "acme")
	n := testNode(t, filepath.Join(dir, "node"), func(c *Config, _ *Options) {
		c.TLSClientCA = ca.file
		c.TLSClientPermissions = "publish,subscribe,manage"
	})
	if err := dialErr(n); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	if err := dialErr(n, client.WithClientCert(rogueCert, rogueKey)); err == nil {
		t.Fatal("a client with a certificate from another CA got in")
	}
	c := dialClient(t, n, client.WithClientCert(acmeCert, acmeKey))
	ctx := context.Background()
	mine := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, mine, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, mine, [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	theirs := client.StreamName{Tenant: "globex", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, theirs, client.StreamConfig{Shards: 1}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("create in globex: %v, want permission denied", err)
	}
	// consume is not among tls_client_permissions.
	if _, err := c.Group(mine, "g").Poll(ctx, 0, 1, 0); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("group poll without consume: %v, want permission denied", err)
	}
}

// With both tokens and mutual TLS, a client may use either; when it
// presents both they must name one tenant.
func TestAuthTokensAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "clients-ca")
	acmeCert, acmeKey := ca.issue(t, dir, "acme")
	n := testNode(t, filepath.Join(dir, "node"), func(c *Config, _ *Options) {
		c.TLSClientCA = ca.file
		c.AuthTokensFile = writeTokens(t)
	})
	if err := dialErr(n, client.WithToken(tokenGlobex)); err != nil {
		t.Errorf("token only: %v", err)
	}
	if err := dialErr(n, client.WithClientCert(acmeCert, acmeKey)); err != nil {
		t.Errorf("certificate only: %v", err)
	}
	if err := dialErr(n, client.WithClientCert(acmeCert, acmeKey), client.WithToken(tokenAcme)); err != nil {
		t.Errorf("certificate and token of one tenant: %v", err)
	}
	if err := dialErr(n, client.WithClientCert(acmeCert, acmeKey), client.WithToken(tokenGlobex)); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("certificate of acme with globex's token: %v, want unauthenticated", err)
	}
	if err := dialErr(n); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("neither: %v, want unauthenticated", err)
	}
}

// The tokens file is checked strictly, and its errors never quote a secret.
func TestParseTokens(t *testing.T) {
	secret := "a-secret-token-that-must-not-leak"
	good := "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n    permissions: [publish]\n"
	grants, err := ParseTokens([]byte(good))
	if err != nil || len(grants) != 1 || grants[0].Principal.Tenant != "acme" || grants[0].Principal.Perms != actors.PermPublish ||
		grants[0].Digest != sha256.Sum256([]byte(secret)) {
		t.Fatalf("good file: %+v, %v", grants, err)
	}
	for name, body := range map[string]string{
		"empty":            "",
		"no tokens":        "tokens: []\n",
		"unknown key":      "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n    permissions: [publish]\n    role: admin\n",
		"no name":          "tokens:\n  - tenant: acme\n    token: " + secret + "\n    permissions: [publish]\n",
		"no secret":        "tokens:\n  - name: a\n    tenant: acme\n    permissions: [publish]\n",
		"both secrets":     "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n    sha256: " + strings.Repeat("ab", 32) + "\n    permissions: [publish]\n",
		"short token":      "tokens:\n  - name: a\n    tenant: acme\n    token: short\n    permissions: [publish]\n",
		"bad digest":       "tokens:\n  - name: a\n    tenant: acme\n    sha256: xyz\n    permissions: [publish]\n",
		"bad tenant":       "tokens:\n  - name: a\n    tenant: 'ac/me'\n    token: " + secret + "\n    permissions: [publish]\n",
		"no permissions":   "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n",
		"bad permission":   "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n    permissions: [admin]\n",
		"bad namespace":    "tokens:\n  - name: a\n    tenant: acme\n    token: " + secret + "\n    permissions: [publish]\n    namespaces: ['a b']\n",
		"duplicate name":   good + "  - name: a\n    tenant: b\n    token: another-secret-long-enough\n    permissions: [publish]\n",
		"duplicate secret": good + "  - name: b\n    tenant: b\n    token: " + secret + "\n    permissions: [publish]\n",
		"two documents":    good + "---\n" + good,
	} {
		_, err := ParseTokens([]byte(body))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error quotes the secret: %v", name, err)
		}
	}
	// A node refuses to start on a bad tokens file, naming it.
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte("tokens: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP, cfg.AuthTokensFile = t.TempDir(), "127.0.0.1:0", "", p
	if n, err := Start(cfg, Options{Logger: slog.New(slog.DiscardHandler)}); err == nil || !errors.Is(err, ErrTokensFile) {
		if n != nil {
			_ = n.Shutdown(context.Background())
		}
		t.Errorf("start with an empty tokens file: %v", err)
	}
}
