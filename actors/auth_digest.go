package actors

import (
	"crypto/sha256"
	"crypto/subtle"
)

// Principals returns the principals of the configured tokens, in the
// tokens file's order (none in dev mode).
func (a *Authenticator) Principals() []Principal {
	if a == nil {
		return nil
	}
	out := make([]Principal, len(a.tokens))
	for i := range a.tokens {
		out[i] = a.tokens[i].Principal
	}
	return out
}

// LookupDigest returns the principal of the token whose SHA-256 is digest,
// comparing in constant time: the node's HTTP listener keeps a login as the
// token's digest, never the token.
func (a *Authenticator) LookupDigest(digest [sha256.Size]byte) (Principal, bool) {
	if a == nil {
		return Principal{}, false
	}
	found := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(digest[:], a.tokens[i].Digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return a.tokens[found].Principal, true
}
