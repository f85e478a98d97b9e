package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/supervisors"
)

func newNodeCmd(env *cliEnv) *cobra.Command {
	c := &cobra.Command{
		Use:   "node [flags]",
		Short: "Run a broker node",
		Long: `Run a broker node until SIGINT or SIGTERM, then drain and exit 0 (a second signal exits
at once with status 1).

Configuration, in rising precedence: built-in defaults, a YAML file (--config),
environment variables HERALD_<KEY>, flags (docs/configuration.md lists every key). On
its first start a node without --tls-cert generates a development CA and certificate
under its data directory, where the CLI finds the CA (DATA_DIR/tls/ca.pem).`,
		Example:            stdFlagExamples["herald node"],
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitCode(runNode(args, env.stdout, env.stderr)).asError()
		},
	}
	c.SetHelpFunc(func(c *cobra.Command, _ []string) {
		fmt.Fprintf(c.OutOrStdout(), "%s\n\n", c.Long)
		fs := flag.NewFlagSet("herald node", flag.ContinueOnError)
		registerNodeFlags(fs)
		printStdUsage(fs, c.OutOrStdout())
	})
	return c
}

// exitCode is an exit status a command chose and already explained on
// stderr (exitStatus prints nothing more); 0 is no error.
type exitCode int

// Error says which status it is.
func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// asError returns nil for status 0 and the status as an error otherwise.
func (e exitCode) asError() error {
	if e == 0 {
		return nil
	}
	return e
}

// runNode runs `herald node`: it loads the configuration, starts a node and
// serves until SIGINT or SIGTERM, then drains and exits 0. A second signal
// during the drain exits at once with status 1.
func runNode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald node", flag.ContinueOnError)
	nf := registerNodeFlags(fs)
	if code, ok := parseStdFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "herald node: unexpected argument %q\nRun 'herald node --help' for usage.\n", fs.Arg(0))
		return 2
	}
	cfg, err := loadNodeConfig(fs, nf, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "herald node: %v\n", err)
		return 2
	}
	logger := supervisors.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	slog.SetDefault(logger)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	node, err := supervisors.Start(cfg, supervisors.Options{Logger: logger})
	if err != nil {
		logger.Error("herald node failed to start", slog.Any("error", err))
		return 1
	}
	sig := <-sigs
	logger.Info("signal received; draining", slog.String("signal", sig.String()), slog.Duration("timeout", cfg.ShutdownTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- node.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("shutdown failed", slog.Any("error", err))
			return 1
		}
		return 0
	case sig := <-sigs:
		logger.Error("second signal; exiting without finishing the drain", slog.String("signal", sig.String()))
		return 1
	}
}
