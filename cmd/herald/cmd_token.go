package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

// tokenBytes is the entropy of a generated token.
const tokenBytes = 32

// tokenEntryJSON is the json and yaml form of `herald token new`.
type tokenEntryJSON struct {
	// Token is the secret, for the client; it is shown only now.
	Token       string   `json:"token"`
	Name        string   `json:"name"`
	Tenant      string   `json:"tenant"`
	SHA256      string   `json:"sha256"`
	Permissions []string `json:"permissions"`
	Namespaces  []string `json:"namespaces,omitempty"`
}

func newTokenCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("token", "Make tokens for a node's auth_tokens_file", "Make tokens for a node's auth_tokens_file (docs/security.md).",
		"  herald token new --name shop-writer --tenant acme --permissions publish,subscribe --namespaces shop")
	var out outputFlags
	var name, tenant, perms, namespaces string
	n := &cobra.Command{
		Use:   "new --name N --tenant T",
		Short: "Print a new random token and the auth_tokens_file entry that accepts it",
		Long: `Print a fresh random token, for the client (--token, HERALD_TOKEN, a context), and the
auth_tokens_file entry that accepts it. The entry holds only the token's SHA-256.`,
		Example: `  herald token new --name shop-writer --tenant acme --permissions publish,subscribe --namespaces shop
  herald token new --name ops --tenant acme -o json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := out.resolve(c)
			if err != nil {
				return err
			}
			if name == "" || tenant == "" {
				return usageErrorf("--name and --tenant are required")
			}
			if err := (wire.StreamName{Tenant: tenant, Namespace: "ns", Stream: "s"}).Validate(); err != nil {
				return usageErrorf("--tenant: %v", err)
			}
			permList, nsList := splitList(perms), splitList(namespaces)
			if len(permList) == 0 {
				return usageErrorf("--permissions must name at least one")
			}
			for _, p := range permList {
				if err := supervisors.CheckPermission(p); err != nil {
					return usageErrorf("%v", err)
				}
			}
			for _, ns := range nsList {
				if err := (wire.StreamName{Tenant: "t", Namespace: ns, Stream: "s"}).Validate(); err != nil {
					return usageErrorf("--namespaces: %v", err)
				}
			}
			raw := make([]byte, tokenBytes)
			if _, err := rand.Read(raw); err != nil {
				return err
			}
			token := "hrld_" + base64.RawURLEncoding.EncodeToString(raw)
			digest := sha256.Sum256([]byte(token))
			e := tokenEntryJSON{Token: token, Name: name, Tenant: tenant, SHA256: hex.EncodeToString(digest[:]), Permissions: permList, Namespaces: nsList}
			if f.structured() {
				return writeValue(env.stdout, f, e)
			}
			w := env.stdout
			fmt.Fprintf(w, "# token for the client (--token, HERALD_TOKEN, client.WithToken); it is shown only now:\n# %s\n", token)
			fmt.Fprintf(w, "# entry for auth_tokens_file (it holds only the token's SHA-256):\n")
			fmt.Fprintf(w, "  - name: %q\n    tenant: %s\n    sha256: %s\n    permissions: [%s]\n", name, tenant, e.SHA256, strings.Join(permList, ", "))
			if len(nsList) > 0 {
				fmt.Fprintf(w, "    namespaces: [%s]\n", strings.Join(nsList, ", "))
			}
			return nil
		},
	}
	n.Flags().StringVar(&name, "name", "", "the token's name in logs (required)")
	n.Flags().StringVar(&tenant, "tenant", "", "the tenant the token is bound to (required)")
	n.Flags().StringVar(&perms, "permissions", "publish,subscribe,consume,manage", "comma-separated permissions")
	n.Flags().StringVar(&namespaces, "namespaces", "", "comma-separated namespaces the token is limited to (default: all)")
	addOutputFlags(n, &out, "an object: token, name, tenant, sha256, permissions, namespaces")
	c.AddCommand(n)
	return c
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
