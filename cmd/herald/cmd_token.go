package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

// tokenBytes is the entropy of a generated token.
const tokenBytes = 32

// runToken runs `herald token new`: it prints a fresh random token, for
// the client, and the tokens-file entry that accepts it, which holds only
// the token's SHA-256.
func runToken(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(stderr, "usage: herald token new --name N --tenant T [--permissions publish,subscribe,consume,manage] [--namespaces a,b]")
		return 2
	}
	fs := flag.NewFlagSet("herald token new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the token's name in logs (required)")
	tenant := fs.String("tenant", "", "the tenant the token is bound to (required)")
	perms := fs.String("permissions", "publish,subscribe,consume,manage", "comma-separated permissions")
	namespaces := fs.String("namespaces", "", "comma-separated namespaces the token is limited to (default: all)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *name == "" || *tenant == "" {
		fmt.Fprintln(stderr, "herald token new: --name and --tenant are required")
		return 2
	}
	if err := (wire.StreamName{Tenant: *tenant, Namespace: "ns", Stream: "s"}).Validate(); err != nil {
		fmt.Fprintln(stderr, "herald token new: --tenant:", err)
		return 2
	}
	permList, nsList := splitList(*perms), splitList(*namespaces)
	if len(permList) == 0 {
		fmt.Fprintln(stderr, "herald token new: --permissions must name at least one")
		return 2
	}
	for _, p := range permList {
		if err := supervisors.CheckPermission(p); err != nil {
			fmt.Fprintln(stderr, "herald token new:", err)
			return 2
		}
	}
	for _, ns := range nsList {
		if err := (wire.StreamName{Tenant: "t", Namespace: ns, Stream: "s"}).Validate(); err != nil {
			fmt.Fprintln(stderr, "herald token new: --namespaces:", err)
			return 2
		}
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		fmt.Fprintln(stderr, "herald token new:", err)
		return 1
	}
	token := "hrld_" + base64.RawURLEncoding.EncodeToString(raw)
	digest := sha256.Sum256([]byte(token))
	fmt.Fprintf(stdout, "# token for the client (--token, HERALD_TOKEN, client.WithToken); it is shown only now:\n# %s\n", token)
	fmt.Fprintf(stdout, "# entry for auth_tokens_file (it holds only the token's SHA-256):\n")
	fmt.Fprintf(stdout, "  - name: %q\n    tenant: %s\n    sha256: %s\n    permissions: [%s]\n",
		*name, *tenant, hex.EncodeToString(digest[:]), strings.Join(permList, ", "))
	if len(nsList) > 0 {
		fmt.Fprintf(stdout, "    namespaces: [%s]\n", strings.Join(nsList, ", "))
	}
	return 0
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
