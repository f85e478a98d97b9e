package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// `herald node` and the `herald bench` scenarios parse their own flags with
// Go's flag package (their flags are many and documented per scenario, and
// the node's are generated from its config keys, config.go); cobra hands
// them their arguments as they are. parseStdFlags gives them the behaviour
// of the other commands: --help prints the usage with examples on stdout
// and exits 0, and a bad flag prints one line and a hint, not the whole
// list of flags.

// stdFlagExamples are the examples of the commands that parse with Go's
// flag package, by flag set name.
var stdFlagExamples = map[string]string{
	"herald node": `  herald node                                   # dev defaults: ./data, QUIC 127.0.0.1:7400, HTTP 127.0.0.1:7401
  herald node --config herald.yaml --listen 0.0.0.0:7400 --log-format json
  herald node --tls-cert server.pem --tls-key server-key.pem
  HERALD_PUBLISH_WINDOW=256 herald node          # any config key as HERALD_<KEY>`,
	"herald bench isolation": "  herald bench isolation --fast 9 --duration 5s --json",
	"herald bench publish":   "  herald bench publish --durable both --batch 64 --payload 128 --duration 3s",
	"herald bench fanout":    "  herald bench fanout --fanouts 1,10,100 --duration 3s",
	"herald bench latency":   "  herald bench latency --fanouts 1,10 --rate 5000",
	"herald bench groups":    "  herald bench groups --records 100000 --window 100",
	"herald bench replay":    "  herald bench replay --records 100000 --batch 64",
	"herald bench idle":      "  herald bench idle --subscriptions 10000",
	"herald bench ceiling":   "  herald bench ceiling --duration 3s",
}

// parseStdFlags parses args with fs. It reports ok when the command should
// go on; otherwise the exit status: 0 after printing the help for -h or
// --help, 2 after printing a bad flag's error.
func parseStdFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil {
		return 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		printStdUsage(fs, stdout)
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", fs.Name(), err, fs.Name())
	return 2, false
}

// printStdUsage prints fs's usage: the command, its examples and its
// flags.
func printStdUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage:\n  %s [flags]\n\n", fs.Name())
	if ex := stdFlagExamples[fs.Name()]; ex != "" {
		fmt.Fprintf(w, "Examples:\n%s\n\n", ex)
	}
	fmt.Fprintln(w, "Flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
