package main

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/heraldmq/herald/supervisors"
)

// `herald token new` prints a token and a tokens-file entry that accepts
// exactly that token (by its SHA-256) with the asked tenant, permissions
// and namespaces.
func TestTokenNew(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runToken([]string{"new", "--name", "shop", "--tenant", "acme", "--permissions", "publish,subscribe", "--namespaces", "shop"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "# hrld_") {
		t.Fatalf("output:\n%s", out.String())
	}
	token := strings.TrimPrefix(lines[1], "# ")
	var entry strings.Builder
	entry.WriteString("tokens:\n")
	for _, l := range lines[3:] {
		entry.WriteString(l + "\n")
	}
	grants, err := supervisors.ParseTokens([]byte(entry.String()))
	if err != nil {
		t.Fatalf("entry does not parse: %v\n%s", err, entry.String())
	}
	p := grants[0].Principal
	if grants[0].Digest != sha256.Sum256([]byte(token)) || p.Tenant != "acme" || p.Name != "shop" ||
		p.Perms.String() != "publish,subscribe" || len(p.Namespaces) != 1 || p.Namespaces[0] != "shop" {
		t.Fatalf("grant %+v for token %q", grants[0], token)
	}
	if strings.Contains(entry.String(), token) {
		t.Fatal("the tokens-file entry holds the token itself")
	}
	// Two runs give two tokens.
	var again bytes.Buffer
	runToken([]string{"new", "--name", "shop", "--tenant", "acme"}, &again, &errOut)
	if strings.Contains(again.String(), token) {
		t.Fatal("the same token twice")
	}
}

func TestTokenNewUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"old"}, {"new"}, {"new", "--name", "a"}, {"new", "--name", "a", "--tenant", "a/b"},
		{"new", "--name", "a", "--tenant", "t", "--permissions", "admin"}, {"new", "--name", "a", "--tenant", "t", "--permissions", ""},
		{"new", "--name", "a", "--tenant", "t", "--namespaces", "a b"}} {
		var out, errOut bytes.Buffer
		if code := runToken(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
