package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/supervisors"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself within 1 s.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// The example runs as written against a real node: a first run publishes
// and processes 200 jobs; a second run of the same member resumes at the
// group's committed position and gets only the 50 new ones.
func TestGroupMemberExample(t *testing.T) {
	cfg := supervisors.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	n, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"-server", n.Addr(), "-ca", n.CAFile(), "-member", "m1"}

	var out bytes.Buffer
	if err := run(ctx, append(args, "-produce", "200", "-count", "200"), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"published 200 jobs", "m1 joined workers: shards [0 1 2 3]", "attempt 1: job-0\n", "attempt 1: job-199\n", "m1 processed 200 records"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("first run lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(ctx, append(args, "-produce", "50", "-count", "50"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "attempt 1: job-"); got != 50 || strings.Contains(out.String(), "attempt 2") {
		t.Fatalf("second run processed %d first attempts (want the 50 new jobs only):\n%s", got, out.String())
	}
}
