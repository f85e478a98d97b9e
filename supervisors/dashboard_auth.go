package supervisors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// The dashboard's API authenticates every request when the node has tokens
// (auth_tokens_file): with the token itself (Authorization: Bearer T, for
// curl and scripts), or with a login cookie the page gets by posting the
// token once to /api/v1/login. The cookie holds the token's SHA-256 (which
// the tokens file may hold in the clear anyway, never the token), an expiry
// and an HMAC under a key the node makes at start, so it cannot be forged
// or stretched, and a restart ends every login. A principal is bound to a
// tenant as on the QUIC listener: it sees only its tenant's streams (and
// namespaces), and a request naming another tenant's stream is refused by
// name, before any lookup. A node without credentials (dev mode) serves
// everything to everyone, as its QUIC listener does. A node that
// authenticates only with client certificates has no token to present
// here: its API refuses every request.

// sessionCookie is the login cookie's name; sessionTTL its lifetime.
const (
	sessionCookie = "herald_session"
	sessionTTL    = 12 * time.Hour
	// maxLoginBody bounds a login request's body.
	maxLoginBody = 4 << 10
)

// apiError is an API refusal: an HTTP status and a JSON body
// {"error": message, "code": code}; code is the wire error table's name
// where one applies.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// codeUnavailable is the code of a refusal no wire error names: an actor
// the request needed did not answer in time.
const codeUnavailable = "unavailable"

// errUnauthenticated is the refusal of a request without valid credentials.
func errUnauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, code: wire.CodeUnauthenticated.String(), message: msg}
}

// fromWire turns a wire error into an API refusal.
func fromWire(err *wire.Error) *apiError {
	status := http.StatusServiceUnavailable
	switch err.Code {
	case wire.CodePermissionDenied:
		status = http.StatusForbidden
	case wire.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case wire.CodeStreamNotFound, wire.CodeGroupNotFound, wire.CodeInvalidShard:
		status = http.StatusNotFound
	case wire.CodeInvalidStreamName, wire.CodeInvalidRequest:
		status = http.StatusBadRequest
	case wire.CodeNotLeader:
		status = http.StatusConflict
	}
	return &apiError{status: status, code: err.Code.String(), message: err.Message}
}

// principal returns who r acts for, or why it is refused.
func (d *dashboard) principal(r *http.Request) (actors.Principal, *apiError) {
	auth := d.n.auth
	if auth.Dev() {
		return actors.DevPrincipal, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return actors.Principal{}, errUnauthenticated("the Authorization header must be Bearer TOKEN")
		}
		return d.tokenPrincipal(strings.TrimSpace(token))
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		digest, ok := d.openSession(c.Value, d.clock())
		if !ok {
			return actors.Principal{}, errUnauthenticated("the login has expired or is not this node's: log in again")
		}
		p, ok := auth.LookupDigest(digest)
		if !ok {
			return actors.Principal{}, errUnauthenticated("the login's token is no longer accepted: log in again")
		}
		return p, nil
	}
	if auth.Tokens() == 0 {
		return actors.Principal{}, errUnauthenticated("this node authenticates clients with certificates only (tls_client_ca): " +
			"its HTTP API needs a token, from auth_tokens_file")
	}
	return actors.Principal{}, errUnauthenticated("a token is required: send Authorization: Bearer TOKEN, or log in (POST /api/v1/login)")
}

// tokenPrincipal authenticates a token as the QUIC listener does.
func (d *dashboard) tokenPrincipal(token string) (actors.Principal, *apiError) {
	if token == "" {
		return actors.Principal{}, errUnauthenticated("a token is required")
	}
	if d.n.auth.Tokens() == 0 {
		return actors.Principal{}, errUnauthenticated("this node accepts no tokens (no auth_tokens_file)")
	}
	p, werr := d.n.auth.Authenticate(token, nil)
	if werr != nil {
		return actors.Principal{}, errUnauthenticated(werr.Message)
	}
	return p, nil
}

// sealSession returns a login cookie's value for the token whose SHA-256
// is digest, valid until expires.
func (d *dashboard) sealSession(digest [sha256.Size]byte, expires time.Time) string {
	body := binary.BigEndian.AppendUint64(nil, uint64(expires.Unix()))
	body = append(body, digest[:]...)
	mac := hmac.New(sha256.New, d.sessionKey[:])
	mac.Write(body)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(body) + "." + enc.EncodeToString(mac.Sum(nil))
}

// openSession checks a login cookie's value at now and returns its token
// digest.
func (d *dashboard) openSession(v string, now time.Time) ([sha256.Size]byte, bool) {
	var digest [sha256.Size]byte
	b64, sig64, ok := strings.Cut(v, ".")
	if !ok {
		return digest, false
	}
	enc := base64.RawURLEncoding
	body, err1 := enc.DecodeString(b64)
	sig, err2 := enc.DecodeString(sig64)
	if err1 != nil || err2 != nil || len(body) != 8+sha256.Size {
		return digest, false
	}
	mac := hmac.New(sha256.New, d.sessionKey[:])
	mac.Write(body)
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return digest, false
	}
	if now.Unix() >= int64(binary.BigEndian.Uint64(body[:8])) {
		return digest, false
	}
	copy(digest[:], body[8:])
	return digest, true
}

// whoami is who the API serves a request for (GET /api/v1/whoami).
type whoami struct {
	// Auth is "dev" (no credentials configured: everything is visible) or
	// "tokens".
	Auth string `json:"auth"`
	// Principal is the credentials' name; Tenant and Namespaces what they
	// may see (Tenant empty: every tenant).
	Principal  string   `json:"principal"`
	Tenant     string   `json:"tenant,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
	// Permissions are what the credentials allow, comma-separated.
	Permissions string `json:"permissions"`
	// Scope is "node" (every tenant, and the node's own figures) or
	// "tenant".
	Scope string `json:"scope"`
}

func (d *dashboard) whoamiOf(p actors.Principal) whoami {
	w := whoami{Auth: "tokens", Principal: p.Name, Tenant: p.Tenant, Namespaces: p.Namespaces, Permissions: p.Perms.String(), Scope: "tenant"}
	if d.n.auth.Dev() {
		w.Auth = "dev"
	}
	if p.Any {
		w.Scope = "node"
	}
	return w
}

// serveLogin answers POST /api/v1/login {"token": T}: a login cookie for
// the token's principal. In dev mode it answers who everyone is.
func (d *dashboard) serveLogin(w http.ResponseWriter, r *http.Request) {
	if d.n.auth.Dev() {
		writeJSON(w, http.StatusOK, d.whoamiOf(actors.DevPrincipal))
		return
	}
	// A JSON body only: a cross-site form cannot send one without CORS.
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, &apiError{status: http.StatusUnsupportedMediaType, code: wire.CodeInvalidRequest.String(),
			message: "send the token as JSON: {\"token\": \"...\"}"})
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLoginBody+1))
	if err == nil && len(body) > maxLoginBody {
		err = errors.New("body too large")
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, &apiError{status: http.StatusBadRequest, code: wire.CodeInvalidRequest.String(), message: "want {\"token\": \"...\"}: " + err.Error()})
		return
	}
	p, aerr := d.tokenPrincipal(req.Token)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	expires := d.clock().Add(sessionTTL)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: d.sealSession(sha256.Sum256([]byte(req.Token)), expires), Path: "/",
		Expires: expires, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, d.whoamiOf(p))
}

// serveLogout answers POST /api/v1/logout: the login cookie is cleared.
func (d *dashboard) serveLogout(w http.ResponseWriter, r *http.Request) {
	// A JSON request only, as for login: a cross-site form cannot log the
	// page out.
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, &apiError{status: http.StatusUnsupportedMediaType, code: wire.CodeInvalidRequest.String(),
			message: "log out with Content-Type: application/json"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}
