package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/net/wire"
)

// contextLsJSON is one context in the json and yaml form of `herald context
// ls`; the token itself is never printed.
type contextLsJSON struct {
	Name     string `json:"name"`
	Current  bool   `json:"current"`
	Server   string `json:"server,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	CA       string `json:"ca,omitempty"`
	Cert     string `json:"cert,omitempty"`
	CertKey  string `json:"cert_key,omitempty"`
	TokenSet bool   `json:"token_set"`
}

func newContextCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("context", "Save and pick the node and credentials the client commands use",
		`A context names a node (--server), the CA to trust (--ca), a token (--token), a tenant
for bare stream names (--tenant) and, for mutual TLS, a client certificate. The current
context applies to every client command, from any directory; --context NAME or
HERALD_CONTEXT picks another for one command. A flag or environment variable
(HERALD_SERVER, HERALD_TOKEN, HERALD_CA, HERALD_CERT, HERALD_CERT_KEY) still overrides
the context's value.

Contexts are kept in $HERALD_CONFIG_DIR/contexts.yaml, by default in the user's config
directory (~/.config/herald/contexts.yaml on Linux), readable only by the user: it holds
tokens.`,
		`  herald context add local --server 127.0.0.1:7400 --ca ./data/tls/ca.pem --use
  herald context add prod --server a:7400,b:7400 --ca /etc/herald/ca.pem --token "$TOKEN" --tenant acme
  herald context use prod
  herald context ls
  herald context rm local`)
	c.AddCommand(newContextAddCmd(env), newContextUseCmd(env), newContextLsCmd(env), newContextRmCmd(env))
	return c
}

// contextStoreOf loads the store of env's config directory.
func contextStoreOf(env *cliEnv) (*contextStore, string, error) {
	dir, err := configDir(env.getenv, env.userConfigDir)
	if err != nil {
		return nil, "", err
	}
	s, err := loadContexts(dir)
	return s, dir, err
}

// completeContextNames completes the first argument with saved contexts.
func completeContextNames(env *cliEnv) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		s, _, err := contextStoreOf(env)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, c := range s.Contexts {
			names = append(names, c.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func newContextAddCmd(env *cliEnv) *cobra.Command {
	var nc cliContext
	var use, force bool
	c := &cobra.Command{
		Use:   "add NAME [--server ADDR] [--ca FILE] [--token T] [--tenant T]",
		Short: "Save a context",
		Long: `Save a context. Files (--ca, --cert, --cert-key) are stored as absolute paths and must
exist. The first context saved becomes the current one; --use makes this one current.
A context of that name already saved is replaced only with --force.`,
		Example: `  herald context add local --server 127.0.0.1:7400 --ca ./data/tls/ca.pem
  herald context add prod --server prod:7400 --ca /etc/herald/ca.pem --token "$TOKEN" --tenant acme --use`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("add takes one NAME")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			nc.Name = args[0]
			if err := (wire.StreamName{Tenant: nc.Name, Namespace: "n", Stream: "s"}).Validate(); err != nil {
				return usageErrorf("context name %q: 1-64 of [A-Za-z0-9._-]", nc.Name)
			}
			if nc.Tenant != "" {
				if err := (wire.StreamName{Tenant: nc.Tenant, Namespace: "n", Stream: "s"}).Validate(); err != nil {
					return usageErrorf("--tenant %q: %v", nc.Tenant, err)
				}
			}
			for _, p := range []struct {
				flag string
				path *string
			}{{"ca", &nc.CA}, {"cert", &nc.Cert}, {"cert-key", &nc.CertKey}} {
				if *p.path == "" {
					continue
				}
				abs, err := filepath.Abs(*p.path)
				if err != nil {
					return err
				}
				if !fileExists(abs) {
					return usageErrorf("--%s %s: no such file", p.flag, *p.path)
				}
				*p.path = abs
			}
			s, dir, err := contextStoreOf(env)
			if err != nil {
				return err
			}
			if old := s.find(nc.Name); old != nil {
				if !force {
					return usageErrorf("context %q exists: --force replaces it", nc.Name)
				}
				*old = nc
			} else {
				s.Contexts = append(s.Contexts, nc)
			}
			if use || s.Current == "" {
				s.Current = nc.Name
			}
			if err := s.save(dir); err != nil {
				return err
			}
			note := ""
			if s.Current == nc.Name {
				note = "; it is the current context"
			}
			_, err = fmt.Fprintf(env.stdout, "saved context %s in %s%s\n", nc.Name, filepath.Join(dir, contextsFile), note)
			return err
		},
	}
	f := c.Flags()
	f.StringVarP(&nc.Server, "server", "s", "", "node `address`, or seeds a:7400,b:7400")
	f.StringVar(&nc.CA, "ca", "", "CA certificate `file` to trust")
	f.StringVar(&nc.Token, "token", "", "authentication `token`")
	f.StringVar(&nc.Tenant, "tenant", "", "the `tenant` of bare and NAMESPACE/NAME stream names")
	f.StringVar(&nc.Cert, "cert", "", "client certificate `file` for mutual TLS")
	f.StringVar(&nc.CertKey, "cert-key", "", "the client certificate's private key `file`")
	f.BoolVar(&use, "use", false, "make it the current context")
	f.BoolVarP(&force, "force", "f", false, "replace a context of that name")
	return c
}

func newContextUseCmd(env *cliEnv) *cobra.Command {
	var none bool
	c := &cobra.Command{
		Use:               "use NAME",
		Short:             "Make a context the current one",
		Long:              "Make a saved context the current one: every client command uses it. --none uses none.",
		Example:           "  herald context use prod\n  herald context use --none",
		ValidArgsFunction: completeContextNames(env),
		RunE: func(_ *cobra.Command, args []string) error {
			switch {
			case none && len(args) > 0:
				return usageErrorf("--none does not take a NAME")
			case !none && len(args) != 1:
				return usageErrorf("use takes one NAME (or --none)")
			}
			s, dir, err := contextStoreOf(env)
			if err != nil {
				return err
			}
			if none {
				s.Current = ""
			} else {
				if s.find(args[0]) == nil {
					return usageErrorf("no context %q (herald context ls lists them)", args[0])
				}
				s.Current = args[0]
			}
			if err := s.save(dir); err != nil {
				return err
			}
			if none {
				_, err = fmt.Fprintln(env.stdout, "no current context")
			} else {
				_, err = fmt.Fprintf(env.stdout, "using context %s\n", args[0])
			}
			return err
		},
	}
	c.Flags().BoolVar(&none, "none", false, "use no context: flags, environment and built-in defaults only")
	return c
}

func newContextLsCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the saved contexts",
		Long:    "List the saved contexts; * marks the current one. Tokens are never printed, only whether one is set.",
		Example: "  herald context ls\n  herald context ls -o json",
		Args:    noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := out.resolve(c)
			if err != nil {
				return err
			}
			s, dir, err := contextStoreOf(env)
			if err != nil {
				return err
			}
			list := make([]contextLsJSON, len(s.Contexts))
			for i, x := range s.Contexts {
				list[i] = contextLsJSON{Name: x.Name, Current: x.Name == s.Current, Server: x.Server, Tenant: x.Tenant,
					CA: x.CA, Cert: x.Cert, CertKey: x.CertKey, TokenSet: x.Token != ""}
			}
			if f.structured() {
				return writeValue(env.stdout, f, list)
			}
			if len(list) == 0 {
				_, err := fmt.Fprintf(env.stdout, "No contexts in %s (herald context add NAME saves one).\n", filepath.Join(dir, contextsFile))
				return err
			}
			t := newTable("CURRENT", "NAME", "SERVER", "TENANT", "CA", "TOKEN")
			for _, x := range list {
				cur, token := "", "-"
				if x.Current {
					cur = "*"
				}
				if x.TokenSet {
					token = "set"
				}
				appendRow(t, cur, x.Name, dash(x.Server), dash(x.Tenant), dash(x.CA), token)
			}
			return writeTable(env.stdout, t)
		},
	}
	addOutputFlags(c, &out, "an array of {name, current, server, tenant, ca, cert, cert_key, token_set}")
	return c
}

// dash is s, or "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newContextRmCmd(env *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:               "rm NAME",
		Aliases:           []string{"remove", "delete"},
		Short:             "Remove a saved context",
		Long:              "Remove a saved context. Removing the current one leaves no context current.",
		Example:           "  herald context rm local",
		ValidArgsFunction: completeContextNames(env),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("rm takes one NAME")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			s, dir, err := contextStoreOf(env)
			if err != nil {
				return err
			}
			if !s.remove(args[0]) {
				return usageErrorf("no context %q (herald context ls lists them)", args[0])
			}
			if err := s.save(dir); err != nil {
				return err
			}
			_, err = fmt.Fprintf(env.stdout, "removed context %s\n", args[0])
			return err
		},
	}
}
