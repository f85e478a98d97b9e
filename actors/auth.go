package actors

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"github.com/heraldmq/herald/net/wire"
)

// Permission is one right a principal may hold on its tenant's streams.
type Permission uint8

// The permissions a token or client certificate grants.
const (
	// PermPublish: publish to streams (and create them by publishing, when
	// auto_create is on).
	PermPublish Permission = 1 << iota
	// PermSubscribe: subscribe to streams and read ranges of them.
	PermSubscribe
	// PermConsume: use consumer groups (poll, ack, nack, push members,
	// dead letters, describe).
	PermConsume
	// PermManage: create, delete, describe and list streams.
	PermManage
	// PermCluster: change the cluster (drain, undrain, add or remove a
	// node) through a node's HTTP listener. It is not a permission on streams: the
	// principal's tenant and namespaces do not limit it, and it allows
	// nothing on the client protocol.
	PermCluster

	// PermAll is every permission on streams (PermCluster is apart).
	PermAll = PermPublish | PermSubscribe | PermConsume | PermManage
)

// permNames are the permissions' names in configuration and errors.
var permNames = []struct {
	p    Permission
	name string
}{{PermPublish, "publish"}, {PermSubscribe, "subscribe"}, {PermConsume, "consume"}, {PermManage, "manage"}, {PermCluster, "cluster"}}

// ParsePermission returns the permission named name.
func ParsePermission(name string) (Permission, error) {
	for _, pn := range permNames {
		if pn.name == name {
			return pn.p, nil
		}
	}
	return 0, fmt.Errorf("unknown permission %q (have publish, subscribe, consume, manage, cluster)", name)
}

// String lists the permissions in p, comma-separated.
func (p Permission) String() string {
	var parts []string
	for _, pn := range permNames {
		if p&pn.p != 0 {
			parts = append(parts, pn.name)
		}
	}
	return strings.Join(parts, ",")
}

// Principal is who a connection acts for: the tenant its credentials are
// bound to, what they allow there, and optionally which namespaces. The
// zero Principal allows nothing; DevPrincipal allows everything.
type Principal struct {
	// Name identifies the credentials in logs (a token's configured name,
	// a certificate's subject); never the secret.
	Name string
	// Tenant is the only tenant the principal can touch; empty with Any.
	Tenant string
	// Any is set in dev mode: every tenant, every permission.
	Any bool
	// Perms are the permissions held on Tenant.
	Perms Permission
	// Namespaces, when not empty, are the only namespaces of Tenant the
	// principal can touch.
	Namespaces []string
}

// DevPrincipal is what every connection acts as when the node has no
// credentials configured (dev mode).
var DevPrincipal = Principal{Name: "dev", Any: true, Perms: PermAll | PermCluster}

// Allow checks that p may use perm on the stream name, or returns a
// permission_denied error. It looks at the name only, never at whether the
// stream exists, so a refusal says nothing about other tenants' streams.
// perm may hold several permissions: any one of them allows (a describe
// takes any). The message says what is wrong, in this order: the stream is
// another tenant's (and which tenant the credentials have), its namespace
// is not among the credentials' namespaces, or the credentials lack the
// permission (and which they hold).
func (p *Principal) Allow(perm Permission, name wire.StreamName) *wire.Error {
	if p.Any {
		return nil
	}
	if name.Tenant != p.Tenant {
		return wire.Errorf(wire.CodePermissionDenied, "credentials %q belong to tenant %s: %s is in tenant %s", p.Name, p.Tenant, name, name.Tenant)
	}
	if !p.namespaceAllowed(name.Namespace) {
		return wire.Errorf(wire.CodePermissionDenied, "credentials %q of tenant %s are limited to namespaces %s: %s is in namespace %s",
			p.Name, p.Tenant, strings.Join(p.Namespaces, ","), name, name.Namespace)
	}
	if p.Perms&perm == 0 {
		return p.missing(perm)
	}
	return nil
}

// missing is the error for credentials that hold none of perm.
func (p *Principal) missing(perm Permission) *wire.Error {
	want := perm.String()
	if strings.Contains(want, ",") {
		want = "any of " + want
	}
	held := p.Perms.String()
	if held == "" {
		held = "none"
	}
	return wire.Errorf(wire.CodePermissionDenied, "credentials %q of tenant %s do not allow %s (they allow %s)", p.Name, p.Tenant, want, held)
}

// AllowList checks a ListStreams of tenant (and namespace, "" for all) and
// returns the tenant to list: when tenant is empty, the principal's own
// ("default" in dev mode). Only a principal of every tenant (dev mode) may
// list wire.AllTenants.
func (p *Principal) AllowList(tenant, namespace string) (string, *wire.Error) {
	if tenant == wire.AllTenants && !p.Any {
		return "", wire.Errorf(wire.CodePermissionDenied, "credentials %q belong to tenant %s: they cannot list every tenant", p.Name, p.Tenant)
	}
	if p.Any {
		if tenant == "" {
			tenant = "default"
		}
		return tenant, nil
	}
	if tenant == "" {
		tenant = p.Tenant
	}
	if tenant != p.Tenant {
		return "", wire.Errorf(wire.CodePermissionDenied, "credentials %q belong to tenant %s: they cannot list tenant %s", p.Name, p.Tenant, tenant)
	}
	if namespace != "" && !p.namespaceAllowed(namespace) {
		return "", wire.Errorf(wire.CodePermissionDenied, "credentials %q of tenant %s are limited to namespaces %s: they cannot list namespace %s",
			p.Name, p.Tenant, strings.Join(p.Namespaces, ","), namespace)
	}
	if p.Perms&PermManage == 0 {
		return "", p.missing(PermManage)
	}
	return tenant, nil
}

// Sees reports whether a listed stream may be shown to p.
func (p *Principal) Sees(name wire.StreamName) bool {
	return p.Any || (name.Tenant == p.Tenant && p.namespaceAllowed(name.Namespace))
}

func (p *Principal) namespaceAllowed(ns string) bool {
	return len(p.Namespaces) == 0 || slices.Contains(p.Namespaces, ns)
}

// TokenGrant binds one token to a principal. The token itself is kept only
// as its SHA-256 digest.
type TokenGrant struct {
	// Digest is the SHA-256 of the token.
	Digest [sha256.Size]byte
	// Principal is what the token authenticates as.
	Principal Principal
}

// CertGrant says what a verified client certificate authenticates as: the
// tenant is its subject's common name, with Perms and Namespaces.
type CertGrant struct {
	Perms      Permission
	Namespaces []string
}

// Authenticator turns a Hello's token and the TLS peer certificates into a
// Principal. It is immutable after NewAuthenticator and shared by every
// connection.
type Authenticator struct {
	tokens []TokenGrant
	// certs is set when client certificates are verified (mutual TLS).
	certs *CertGrant
}

// NewAuthenticator returns an authenticator for tokens and, when certs is
// not nil, verified client certificates. With neither it is in dev mode.
func NewAuthenticator(tokens []TokenGrant, certs *CertGrant) *Authenticator {
	return &Authenticator{tokens: slices.Clone(tokens), certs: certs}
}

// Dev reports whether no credentials are configured: every connection then
// acts as DevPrincipal.
func (a *Authenticator) Dev() bool { return a == nil || (len(a.tokens) == 0 && a.certs == nil) }

// Tokens returns how many tokens are accepted.
func (a *Authenticator) Tokens() int {
	if a == nil {
		return 0
	}
	return len(a.tokens)
}

// Authenticate returns the principal for a connection that sent token and
// presented peer (the verified chain's leaf first; nil without a client
// certificate), or an unauthenticated error. A token, when sent, decides;
// if a certificate was presented too, both must name the same tenant.
// Without a token, a verified certificate decides.
func (a *Authenticator) Authenticate(token string, peer []*x509.Certificate) (Principal, *wire.Error) {
	if a.Dev() {
		return DevPrincipal, nil
	}
	var fromCert *Principal
	if a.certs != nil && len(peer) > 0 {
		cn := peer[0].Subject.CommonName
		if err := (wire.StreamName{Tenant: cn, Namespace: "ns", Stream: "s"}).Validate(); err != nil {
			return Principal{}, wire.Errorf(wire.CodeUnauthenticated, "client certificate's common name is not a tenant name: %v", err)
		}
		fromCert = &Principal{Name: "cert:" + cn, Tenant: cn, Perms: a.certs.Perms, Namespaces: a.certs.Namespaces}
	}
	if token != "" {
		p, ok := a.lookupToken(token)
		if !ok {
			return Principal{}, wire.Errorf(wire.CodeUnauthenticated, "unknown token")
		}
		if fromCert != nil && fromCert.Tenant != p.Tenant {
			return Principal{}, wire.Errorf(wire.CodeUnauthenticated, "the token and the client certificate name different tenants")
		}
		return p, nil
	}
	if fromCert != nil {
		return *fromCert, nil
	}
	if a.certs != nil && len(a.tokens) == 0 {
		return Principal{}, wire.Errorf(wire.CodeUnauthenticated, "a client certificate is required")
	}
	return Principal{}, wire.Errorf(wire.CodeUnauthenticated, "a token is required")
}

// lookupToken finds token's grant, comparing digests in constant time.
func (a *Authenticator) lookupToken(token string) (Principal, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].Digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return a.tokens[found].Principal, true
}
