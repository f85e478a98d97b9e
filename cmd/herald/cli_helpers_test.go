package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The tests never read the contexts of the user running them: every
// process of the test binary, and every herald process it starts, has a
// HERALD_CONFIG_DIR of its own that holds no contexts (tests of contexts
// set their own with t.Setenv).
func init() {
	if os.Getenv("HERALD_CONFIG_DIR") == "" {
		os.Setenv("HERALD_CONFIG_DIR", filepath.Join(os.TempDir(), fmt.Sprintf("herald-test-no-contexts-%d", os.Getpid())))
	}
}

// parseCommandLine parses `herald args...` as a run would, with getenv as
// the environment and no contexts, and returns the parsed command instead
// of running it.
func parseCommandLine(args []string, stderr io.Writer, getenv func(string) string) (any, error) {
	var got any
	env := &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: stderr, getenv: getenv,
		userConfigDir: func() (string, error) { return "", errors.New("no config directory in parse tests") },
		isTerminal:    func(any) bool { return false },
		parsed:        func(v any) { got = v }}
	root := newRootCmd(env)
	root.SetArgs(normalizeArgs(root, args))
	root.SetOut(io.Discard)
	root.SetErr(stderr)
	if _, err := root.ExecuteC(); err != nil {
		return nil, err
	}
	if got == nil {
		return nil, errors.New("nothing parsed")
	}
	return got, nil
}

// parseAs parses `herald cmd args...` and returns the parsed *T.
func parseAs[T any](cmd string, args []string, stderr io.Writer, getenv func(string) string) (*T, error) {
	v, err := parseCommandLine(append([]string{cmd}, args...), stderr, getenv)
	if err != nil {
		return nil, err
	}
	t, ok := v.(*T)
	if !ok {
		return nil, fmt.Errorf("parsed %T", v)
	}
	return t, nil
}

func parseStreamCmd(args []string, stderr io.Writer, getenv func(string) string) (*streamCmd, error) {
	return parseAs[streamCmd]("stream", args, stderr, getenv)
}

func parsePubCmd(args []string, stderr io.Writer, getenv func(string) string) (*pubCmd, error) {
	return parseAs[pubCmd]("pub", args, stderr, getenv)
}

func parseSubCmd(args []string, stderr io.Writer, getenv func(string) string) (*subCmd, error) {
	return parseAs[subCmd]("sub", args, stderr, getenv)
}

func parseReadCmd(args []string, stderr io.Writer, getenv func(string) string) (*readCmd, error) {
	return parseAs[readCmd]("read", args, stderr, getenv)
}

func parseGroupCmd(args []string, stderr io.Writer, getenv func(string) string) (*groupCmd, error) {
	return parseAs[groupCmd]("group", args, stderr, getenv)
}

// runStream and the others run `herald stream args...` and so on in this
// process.
func runStream(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(append([]string{"stream"}, args...), stdin, stdout, stderr)
}

func runPub(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(append([]string{"pub"}, args...), stdin, stdout, stderr)
}

func runSub(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(append([]string{"sub"}, args...), stdin, stdout, stderr)
}

func runRead(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(append([]string{"read"}, args...), stdin, stdout, stderr)
}

func runGroup(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(append([]string{"group"}, args...), stdin, stdout, stderr)
}

func runToken(args []string, stdout, stderr io.Writer) int {
	return run(append([]string{"token"}, args...), strings.NewReader(""), stdout, stderr)
}
