package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/supervisors"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself within 1 s.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// lockedBuffer is the node's trace output (written by its exporter's
// goroutine).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The example runs as written against a node started with --trace stdout:
// its spans and the node's are one trace.
func TestTracingExample(t *testing.T) {
	cfg := supervisors.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.TraceExporter = "stdout"
	var nodeOut lockedBuffer
	n, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TraceStdout: &nodeOut})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-server", n.Addr(), "-ca", n.CAFile()}, &out); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil { // flushes the node's spans
		t.Fatal(err)
	}
	m := regexp.MustCompile(`in trace ([0-9a-f]{32})`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("example output lacks its trace id:\n%s", out.String())
	}
	for _, want := range []string{`"Name":"place order"`, `"Name":"publish examples/tracing/demo"`, `"Name":"receive examples/tracing/demo"`, `"Name":"process order"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("example spans lack %s", want)
		}
	}
	node := nodeOut.String()
	for _, want := range []string{`"Name":"herald.publish.receive"`, `"Name":"herald.shard.append"`, `"Name":"herald.storage.commit"`} {
		if !strings.Contains(node, want) {
			t.Errorf("node spans lack %s", want)
		}
	}
	if !strings.Contains(node, m[1]) {
		t.Errorf("the node's spans are not in the example's trace %s", m[1])
	}
}
