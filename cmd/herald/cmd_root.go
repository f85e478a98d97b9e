package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command tree:
//
//	herald node                                   run a broker (cmd_node.go)
//	herald stream create|describe|list|delete     (cmd_stream.go)
//	herald pub | sub | read                       (cmd_pub.go, cmd_sub.go, cmd_read.go)
//	herald group poll|ack|nack|dead-letters|redrive|discard|describe   (cmd_group.go)
//	herald context add|use|ls|rm                  (cmd_context.go)
//	herald bench SCENARIO                         (cmd_bench.go)
//	herald token new                              (cmd_token.go)
//	herald version | completion bash|zsh|fish|powershell
//
// Every command's RunE parses its flags and arguments into a xxxCmd value
// and runs it; cliEnv.parsed lets tests take the parsed value instead.
// Errors go back to runEnv, which prints them as one line (exitStatus): a
// command-line error is an errUsage error, a flag the parser refused an
// errBadFlag one.

// Command groups of herald's help.
const (
	groupClient = "client"
	groupNode   = "node"
	groupSetup  = "setup"
)

// errHelpShown is returned after printing the help for a bare `herald`
// (exit status 2, nothing more to print).
var errHelpShown = errors.New("help shown")

// newRootCmd builds the command tree for one run in env.
func newRootCmd(env *cliEnv) *cobra.Command {
	root := &cobra.Command{
		Use:   "herald",
		Short: "Herald: a message broker",
		Long: `Herald is a message broker: "herald node" runs one, the other commands are its clients.

Client commands take --server ADDR (default 127.0.0.1:7400), --token T, --ca FILE,
--insecure, and for a node with mutual TLS --cert FILE --cert-key FILE. A saved context
(herald context add) sets them for every command, from any directory.

` + streamArgHelp + `

See docs/ for the protocol, configuration and operations.`,
		Example: `  herald node                                 # a dev node: data in ./data, QUIC on 127.0.0.1:7400
  herald pub orders "hello" "world"           # publish two records to default/default/orders
  herald sub orders --count 2                 # read them back
  herald stream list                          # the streams of your tenant, as a table
  herald context add prod --server prod:7400 --ca ./prod-ca.pem --tenant acme --use`,
		Version:       versionLine(readVersion()),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				c.SetOut(env.stderr)
				_ = c.Help()
				return errHelpShown
			}
			return unknownSubcommand(c, args[0])
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %w", errBadFlag, err)
	})
	root.AddGroup(&cobra.Group{ID: groupClient, Title: "Client commands:"},
		&cobra.Group{ID: groupNode, Title: "Running a node:"},
		&cobra.Group{ID: groupSetup, Title: "Set-up:"})
	root.SetHelpCommandGroupID(groupSetup)
	root.SetCompletionCommandGroupID(groupSetup)
	for _, c := range []*cobra.Command{newStreamCmd(env), newPubCmd(env), newSubCmd(env), newReadCmd(env), newGroupCmd(env)} {
		c.GroupID = groupClient
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newNodeCmd(env), newClusterCmd(env), newBenchCmd(env), newTokenCmd(env)} {
		c.GroupID = groupNode
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newContextCmd(env), newVersionCmd(env)} {
		c.GroupID = groupSetup
		root.AddCommand(c)
	}
	return root
}

// parentCmd returns a command that only holds subcommands: run without one,
// or with an unknown one, it is a usage error naming the subcommands.
func parentCmd(use, short, long, example string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("missing subcommand: %s", subcommandList(c))
			}
			return unknownSubcommand(c, args[0])
		},
	}
}

// unknownSubcommand is the usage error for `c name` where c has no
// subcommand name.
func unknownSubcommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q: want %s", name, subcommandList(c))
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return usageErrorf("%s", msg)
}

// subcommandList lists c's visible subcommands: "create, describe, list or
// delete".
func subcommandList(c *cobra.Command) string {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && sub.Name() != "help" {
			names = append(names, sub.Name())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// normalizeArgs rewrites single-dash long flags (-count 5, -json), which
// Go's flag package accepted and so the CLI did before cobra, to the
// double-dash form. Only names that are long flags of the command args
// select are rewritten, and nothing after "--"; commands that parse their
// own flags (node, bench) get args as they are.
func normalizeArgs(root *cobra.Command, args []string) []string {
	c, _, err := root.Find(args)
	if err != nil || c.DisableFlagParsing {
		return args
	}
	known := map[string]bool{"help": true}
	if c == root {
		known["version"] = true
	}
	add := func(f *pflag.Flag) { known[f.Name] = true }
	c.Flags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		if name, _, _ := strings.Cut(a[1:], "="); known[name] {
			out[i] = "-" + a
		}
	}
	return out
}

// parsedOrRun hands the parsed command v to env.parsed when a test asked
// for it, and otherwise runs it.
func parsedOrRun(env *cliEnv, v any, run func() error) error {
	if env.parsed != nil {
		env.parsed(v)
		return nil
	}
	return run()
}
