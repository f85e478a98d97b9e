package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself within 1 s.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// startNode runs an in-process node on a temporary data dir until the test ends.
func startNode(t *testing.T, configure func(*supervisors.Config)) *supervisors.Node {
	t.Helper()
	cfg := supervisors.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	if configure != nil {
		configure(&cfg)
	}
	n, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// The example runs as written against a real node.
func TestPubSubExample(t *testing.T) {
	t.Setenv("HERALD_TOKEN", "")
	n := startNode(t, nil)
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

// Against a node with tokens the example authenticates with $HERALD_TOKEN,
// and without it is refused as unauthenticated.
func TestPubSubExampleWithToken(t *testing.T) {
	const token = "examples-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	body := "tokens:\n  - name: examples\n    tenant: examples\n    token: " + token + "\n    permissions: [publish, subscribe, manage]\n"
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *supervisors.Config) { c.AuthTokensFile = tokens })
	args := []string{"-server", n.Addr(), "-ca", n.CAFile(), "-count", "10"}

	t.Setenv("HERALD_TOKEN", "")
	if err := run(context.Background(), args, io.Discard); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("without a token: %v, want ErrUnauthenticated", err)
	}
	t.Setenv("HERALD_TOKEN", token)
	var out bytes.Buffer
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "read 10 records back") {
		t.Fatalf("output lacks the read-back:\n%s", out.String())
	}
}
