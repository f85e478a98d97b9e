package main

import (
	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/cmd/herald/internal/bench"
)

// newBenchCmd is `herald bench SCENARIO`: one subcommand per scenario of
// package bench, which parses its own flags.
func newBenchCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("bench SCENARIO", "Run a benchmark scenario (docs/benchmarks.md)",
		`Run a benchmark scenario. Scenarios start a node on a temporary data dir (so the whole run
is one command): by default a child herald node process, whose CPU time is reported apart
from the clients' (--in-process runs it in this process, as isolation always does and
ceiling does by default), and print a human summary, or JSON with --json. docs/benchmarks.md describes each and its
results. --cpuprofile FILE, before the scenario, profiles this process for the run;
--memprofile FILE writes its allocations over the run.`,
		`  herald bench isolation
  herald bench publish --json > publish.json
  herald bench --cpuprofile cpu.out fanout --fanouts 1,10 --in-process
  herald bench --memprofile mem.out groups --window ''`)
	c.PersistentFlags().String("cpuprofile", "", "write a CPU profile of the scenario's run to `file` (give it before the scenario)")
	c.PersistentFlags().String("memprofile", "", "write the allocations of the scenario's run (the allocs profile) to `file` (give it before the scenario)")
	for _, sc := range bench.Scenarios {
		name := sc.Name
		s := &cobra.Command{
			Use:                name + " [flags]",
			Short:              sc.Short,
			Long:               sc.Short + ". herald bench " + name + " --help lists its flags.",
			Example:            stdFlagExamples["herald bench "+name],
			DisableFlagParsing: true,
			RunE: func(_ *cobra.Command, args []string) error {
				// --cpuprofile / --memprofile FILE given before the scenario
				// arrive first.
				n := min(bench.ProfileArgs(args), len(args))
				args = append(append(append([]string{}, args[:n]...), name), args[n:]...)
				return exitCode(bench.Run(benchEnv(env), args)).asError()
			},
		}
		s.SetHelpFunc(func(c *cobra.Command, _ []string) {
			e := benchEnv(env)
			e.Stdout = c.OutOrStdout()
			bench.Run(e, []string{name, "--help"})
		})
		c.AddCommand(s)
	}
	return c
}

// benchEnv is the environment of a `herald bench` run: the command's
// streams and flag parsing, the node child being this executable.
func benchEnv(env *cliEnv) bench.Env {
	return bench.Env{Stdout: env.stdout, Stderr: env.stderr, Terminal: isTerminal(env.stderr), ParseFlags: parseStdFlags}
}
