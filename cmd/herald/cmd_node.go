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

	"github.com/heraldmq/herald/supervisors"
)

// runNode runs `herald node`: it loads the configuration, starts a node and
// serves until SIGINT or SIGTERM, then drains and exits 0. A second signal
// during the drain exits at once with status 1.
func runNode(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nf := registerNodeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "herald node: unexpected argument %q\n", fs.Arg(0))
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
