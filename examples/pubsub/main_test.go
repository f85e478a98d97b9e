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

// The example runs as written against a real node.
func TestPubSubExample(t *testing.T) {
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
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-server", n.Addr(), "-ca", n.CAFile(), "-count", "500"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"published 500 records", "offset 0: record 0", "offset 499: record 499", "read 500 records back"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
