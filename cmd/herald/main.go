// Command herald is Herald's single binary: `herald node` runs a broker and
// the other subcommands are clients of one. The command tree is built with
// cobra (cmd_root.go); run is its testable entry point.
package main

import (
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// cliEnv is what a command sees of the process: its standard streams, its
// environment and whether they are terminals. Tests build one to run
// commands in-process.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// getenv reads the environment (os.Getenv).
	getenv func(string) string
	// userConfigDir is os.UserConfigDir; contexts live under it unless
	// HERALD_CONFIG_DIR says otherwise.
	userConfigDir func() (string, error)
	// isTerminal reports whether v, one of the standard streams, is a
	// terminal: delete asks for confirmation only then, and pub --count
	// shows progress only then.
	isTerminal func(v any) bool
	// parsed, when set, receives each client command's parsed form instead
	// of running it (the parse tests).
	parsed func(any)
	// exits are run, last first, when the command has ended (runEnv):
	// what a command started that must outlive its RunE, such as a tracer
	// provider that still holds spans.
	exits []func()
}

// atExit has fn run when the command has ended.
func (e *cliEnv) atExit(fn func()) { e.exits = append(e.exits, fn) }

// processEnv returns the environment of a real process with the given
// streams.
func processEnv(stdin io.Reader, stdout, stderr io.Writer) *cliEnv {
	return &cliEnv{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv,
		userConfigDir: os.UserConfigDir, isTerminal: isTerminal}
}

// isTerminal reports whether v is an *os.File open on a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// run runs the herald command line args (without the program name) and
// returns the exit status: 0 on success or for --help, 1 when the command
// failed, 2 for a command-line error. Errors are printed to stderr as one
// line (and, for a command-line error, a hint to run --help).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runEnv(processEnv(stdin, stdout, stderr), args)
}

// runEnv is run in env.
func runEnv(env *cliEnv, args []string) int {
	root := newRootCmd(env)
	root.SetArgs(normalizeArgs(root, args))
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	c, err := root.ExecuteC()
	for i := len(env.exits) - 1; i >= 0; i-- {
		env.exits[i]()
	}
	env.exits = nil
	name := ""
	if c != nil {
		name = strings.TrimSpace(strings.TrimPrefix(c.CommandPath(), root.Name()))
	}
	return exitStatus(env.stderr, name, err)
}
