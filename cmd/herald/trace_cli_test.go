package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// stdoutSpan is the part of a span stdouttrace prints that the tests read.
type stdoutSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Resource    []struct {
		Key   string
		Value struct{ Value any }
	}
}

// readSpans parses the spans in text, one JSON object per line (other
// lines, such as log lines, are skipped).
func readSpans(t *testing.T, text string) []stdoutSpan {
	t.Helper()
	var spans []stdoutSpan
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(`{"Name"`)) {
			continue
		}
		var s stdoutSpan
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("span line %q: %v", line, err)
		}
		spans = append(spans, s)
	}
	return spans
}

// herald runs the CLI binary with args and extra environment, and returns
// its standard output and error.
func herald(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(heraldBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// A node started with tracing to stdout samples publishes that carry no
// trace context (trace_sample_ratio's default is 1 with stdout), so a plain
// `herald pub` shows the node's spans; `herald pub --trace` with the
// console exporter prints the publisher's producer span on standard error
// (its output stays the offsets), and the node's spans continue its trace.
func TestTraceStdoutNodeAndCLIPub(t *testing.T) {
	dir := t.TempDir()
	node := startNode(t, dir, "OTEL_TRACES_EXPORTER=console")
	ca := filepath.Join(dir, "tls", "ca.pem")

	out, _ := herald(t, nil, "pub", "-s", node.addr, "--ca", ca, "orders", "plain")
	if strings.TrimSpace(out) != "0 0" {
		t.Fatalf("plain pub printed %q", out)
	}
	out, errOut := herald(t, []string{"OTEL_TRACES_EXPORTER=console", "OTEL_SERVICE_NAME=checkout"},
		"pub", "--trace", "-s", node.addr, "--ca", ca, "orders", "traced")
	if strings.TrimSpace(out) != "0 1" {
		t.Fatalf("pub --trace printed %q on stdout (spans belong on stderr)", out)
	}
	var pubSpan *stdoutSpan
	for _, s := range readSpans(t, errOut) {
		if s.Name == "publish default/default/orders" {
			pubSpan = &s
		}
	}
	if pubSpan == nil {
		t.Fatalf("pub --trace printed no publish span on stderr:\n%s", errOut)
	}
	service := ""
	for _, kv := range pubSpan.Resource {
		if kv.Key == "service.name" {
			service, _ = kv.Value.Value.(string)
		}
	}
	if service != "checkout" {
		t.Errorf("the CLI's spans have service.name %q, want OTEL_SERVICE_NAME's checkout", service)
	}

	// The node exports in batches (every few seconds): poll its log.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(node.logPath)
		if err != nil {
			t.Fatal(err)
		}
		var plainRoot, child bool
		for _, s := range readSpans(t, string(b)) {
			if s.Name != "herald.publish.receive" {
				continue
			}
			if s.Parent.TraceID == "00000000000000000000000000000000" {
				plainRoot = true // the node's own trace of the plain publish
			}
			if s.SpanContext.TraceID == pubSpan.SpanContext.TraceID && s.Parent.SpanID == pubSpan.SpanContext.SpanID {
				child = true
			}
		}
		if plainRoot && child {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node spans: a root for the plain publish %v, a child of the CLI's publish span %v; node log:\n%s", plainRoot, child, b)
		}
		time.Sleep(100 * time.Millisecond) // polling a process's output, not asserting time
	}
}

// `herald pub --trace` exports over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT
// by default, with OTEL_RESOURCE_ATTRIBUTES on its resource, and the export
// is flushed before the command exits.
func TestTraceCLIOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []*coltrace.ExportTraceServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		req := &coltrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer collector.Close()

	dir := t.TempDir()
	node := startNode(t, dir)
	herald(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test"},
		"pub", "--trace", "-s", node.addr, "--ca", filepath.Join(dir, "tls", "ca.pem"), "orders", "a", "b")

	// The command has exited: what it exported has arrived.
	mu.Lock()
	defer mu.Unlock()
	spans, env := 0, ""
	for _, req := range got {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "deployment.environment" {
					env = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.Name == "publish default/default/orders" && len(s.TraceId) == 16 {
						spans++
					}
				}
			}
		}
	}
	if spans != 2 {
		t.Errorf("the collector got %d publish spans, want 2 (one per record published)", spans)
	}
	if env != "test" {
		t.Errorf("resource attribute deployment.environment = %q, want test (OTEL_RESOURCE_ATTRIBUTES)", env)
	}
}
