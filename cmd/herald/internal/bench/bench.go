package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
)

// Env is what the herald command gives a run of `herald bench`.
type Env struct {
	// Stdout receives the summary or the JSON; Stderr errors and the
	// progress line.
	Stdout, Stderr io.Writer
	// Terminal reports that Stderr is a terminal: only then is the progress
	// line drawn.
	Terminal bool
	// ParseFlags parses a scenario's flags and reports ok when the scenario
	// should go on; otherwise the exit status (0 after a help, 2 after a bad
	// flag, printed). nil: fs.Parse, the error printed on Stderr.
	ParseFlags func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool)
	// NodeExecutable returns the herald binary that runs as the child
	// `herald node`. nil: this executable (os.Executable).
	NodeExecutable func() (string, error)
}

// Scenario is one scenario of `herald bench`.
type Scenario struct {
	// Name is the word after `herald bench`; Short says what it measures.
	Name, Short string
	// run runs it with its flags.
	run func(env *Env, args []string) int
}

// Scenarios are the scenarios of `herald bench`, in the order of its help.
var Scenarios = []Scenario{
	{"isolation", "nine fast subscribers beside one that never reads", runIsolation},
	{"publish", "the publish matrix: durable and ephemeral, single-record async and batches, payloads", runPublish},
	{"fanout", "delivery rate to 1..N subscribers of one stream", runFanout},
	{"latency", "publish-to-delivery latency at a paced rate", runLatency},
	{"groups", "consumer groups: push members with credit windows", runGroups},
	{"replay", "reading a durable stream back from its start", runReplay},
	{"idle", "memory and goroutines of many idle subscriptions", runIdle},
	{"ceiling", "the machine's ceilings: Badger synced commits, quic-go streams, against Herald's publish", runCeiling},
}

// Run runs `herald bench [--cpuprofile FILE] [--memprofile FILE] SCENARIO
// [flags]` (args without `herald bench`) and returns the exit status: 0, 1
// when the scenario failed, 2 for a command-line error.
func Run(env Env, args []string) int {
	// --cpuprofile FILE before the scenario profiles this process (clients,
	// and the node with --in-process) for the scenario's run; --memprofile
	// FILE writes its allocations (the allocs profile) at the run's end.
	var cpuProfile, memProfile string
	for n := ProfileArgs(args); n > 0; n -= 2 {
		if len(args) < 2 {
			fmt.Fprintf(env.Stderr, "herald bench: %s needs a file\n", args[0])
			return 2
		}
		if strings.TrimLeft(args[0], "-") == "cpuprofile" {
			cpuProfile = args[1]
		} else {
			memProfile = args[1]
		}
		args = args[2:]
	}
	names := make([]string, len(Scenarios))
	for i, sc := range Scenarios {
		names[i] = sc.Name
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(env.Stderr, "usage: herald bench [--cpuprofile FILE] [--memprofile FILE] %s [flags]   (see docs/benchmarks.md)\n", strings.Join(names, "|"))
		return 2
	}
	var sc *Scenario
	for i := range Scenarios {
		if Scenarios[i].Name == args[0] {
			sc = &Scenarios[i]
		}
	}
	if sc == nil {
		fmt.Fprintf(env.Stderr, "herald bench: unknown scenario %q (have: %s)\n", args[0], strings.Join(names, ", "))
		return 2
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(env.Stderr, "herald bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(env.Stderr, "herald bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if memProfile != "" {
		f, err := os.Create(memProfile)
		if err != nil {
			fmt.Fprintln(env.Stderr, "herald bench:", err)
			return 1
		}
		defer func() {
			if err := errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close()); err != nil {
				fmt.Fprintln(env.Stderr, "herald bench: memory profile:", err)
			}
		}()
	}
	return sc.run(&env, args[1:])
}

// ProfileArgs returns how many of args, from the first, are the profile
// flags Run takes before the scenario (--cpuprofile FILE, --memprofile
// FILE); a flag whose file is missing counts as 2 (Run refuses it).
func ProfileArgs(args []string) int {
	n := 0
	for n < len(args) {
		switch strings.TrimLeft(args[n], "-") {
		case "cpuprofile", "memprofile":
			if !strings.HasPrefix(args[n], "-") {
				return n
			}
			n += 2
		default:
			return n
		}
	}
	return n
}

// parse parses a scenario's flags with env.ParseFlags.
func (env *Env) parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if env.ParseFlags != nil {
		return env.ParseFlags(fs, args, env.Stdout, env.Stderr)
	}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(env.Stdout)
		fs.PrintDefaults()
		return 0, false
	}
	fmt.Fprintf(env.Stderr, "%s: %v\n", fs.Name(), err)
	return 2, false
}

// usageError prints a scenario's command-line error and returns 2.
func (env *Env) usageError(scenario string, err error) int {
	fmt.Fprintf(env.Stderr, "herald bench %s: %v\n", scenario, err)
	return 2
}
