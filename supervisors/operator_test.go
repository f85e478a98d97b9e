package supervisors

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/heraldmq/herald/client"
)

// What an operator relies on: the node's own traces, its logs, its build,
// its profiles, and failing early on a bad address.

// syncBuffer is a bytes.Buffer safe for the exporter's goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// With trace_exporter stdout the node traces a publish that carries no
// trace context (trace_sample_ratio defaults to 1 there), under the
// service name OTEL_SERVICE_NAME gives it; with the ratio 0 it does not.
func TestNodeStartsTracesForPublishesWithout(t *testing.T) {
	old := osGetenv
	osGetenv = func(k string) string {
		switch k {
		case "OTEL_SERVICE_NAME":
			return "herald-test"
		case "OTEL_RESOURCE_ATTRIBUTES":
			return "deployment.environment=ci,service.namespace=shop%2Feu"
		}
		return ""
	}
	t.Cleanup(func() { osGetenv = old })
	for _, tc := range []struct {
		name  string
		ratio float64
		spans bool
	}{{"default ratio", -1, true}, {"ratio 0", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuffer
			n := testNode(t, t.TempDir(), func(c *Config, o *Options) {
				c.TraceExporter, c.TraceSampleRatio = "stdout", tc.ratio
				o.TraceStdout = &out
			})
			ctx := testCtx(t)
			c := dialClient(t, n)
			if _, err := c.Publish(ctx, client.StreamName{Tenant: "t", Namespace: "n", Stream: "traced"}, []byte("plain")); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			if err := n.Shutdown(ctx); err != nil { // flushes the exporter
				t.Fatal(err)
			}
			got := out.String()
			if has := strings.Contains(got, `"Name":"herald.publish.receive"`); has != tc.spans {
				t.Fatalf("spans of a publish without trace context: %v, want %v:\n%.2000s", has, tc.spans, got)
			}
			if tc.spans {
				for _, want := range []string{`"Name":"herald.shard.append"`, `"Value":"herald-test"`, `"Value":"shop/eu"`} {
					if !strings.Contains(got, want) {
						t.Fatalf("the node's trace lacks %s:\n%.3000s", want, got)
					}
				}
			}
		})
	}
}

func TestTraceSampleRatioAndResource(t *testing.T) {
	for _, tc := range []struct {
		ratio    float64
		exporter string
		want     float64
	}{{-1, traceStdout, 1}, {-1, traceOTLP, 0}, {0.25, traceOTLP, 0.25}, {0, traceStdout, 0}} {
		cfg := DefaultConfig()
		cfg.TraceSampleRatio = tc.ratio
		if got := traceSampleRatio(cfg, tc.exporter); got != tc.want {
			t.Errorf("ratio %v with %s: %v, want %v", tc.ratio, tc.exporter, got, tc.want)
		}
	}
	for _, bad := range []float64{-0.5, 1.5, 2} {
		cfg := DefaultConfig()
		cfg.TraceSampleRatio = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "trace_sample_ratio") {
			t.Errorf("trace_sample_ratio %v: %v", bad, err)
		}
	}
	env := map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=1, b = x%20y ,broken", "OTEL_SERVICE_NAME": "svc"}
	res, err := envResource{func(k string) string { return env[k] }}.Detect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[attribute.Key]string{}
	for _, kv := range res.Attributes() {
		got[kv.Key] = kv.Value.AsString()
	}
	if got["a"] != "1" || got["b"] != "x y" || got[semconv.ServiceNameKey] != "svc" || len(got) != 3 {
		t.Fatalf("resource from the environment: %v", got)
	}
}

// Export errors are logged when they begin, then at most once an interval
// with how many were not.
func TestExportErrorLogThrottles(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	e := newExportErrorLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Minute, func() time.Time { return now })
	e.Handle(errors.New("connection refused"))
	for range 5 {
		now = now.Add(time.Second)
		e.Handle(errors.New("connection refused"))
	}
	now = now.Add(time.Minute)
	e.Handle(errors.New("timeout"))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "connection refused") ||
		!strings.Contains(lines[1], "timeout") || !strings.Contains(lines[1], "errors_since_last_logged=5") {
		t.Fatalf("export error log:\n%s", logs.String())
	}
}

// A bad or busy listen address fails before the data directory or a
// certificate is made.
func TestBadListenAddressFailsBeforeTheDataDir(t *testing.T) {
	busy := testNode(t, t.TempDir())
	for _, tc := range []struct{ name, listen, http string }{
		{"unparsable QUIC address", "not-an-address", "127.0.0.1:0"},
		{"busy QUIC port", busy.Addr(), "127.0.0.1:0"},
		{"busy HTTP port", "127.0.0.1:0", busy.HTTPAddr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.Listen, cfg.HTTP = tc.listen, tc.http
			n, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				_ = n.Shutdown(context.Background())
				t.Fatal("started")
			}
			if _, statErr := os.Stat(cfg.DataDir); !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("failed with %v, but made the data dir (%v)", err, statErr)
			}
		})
	}
}

// pprof is served only when configured; the build is a metric.
func TestPprofAndBuildInfo(t *testing.T) {
	get := func(n *Node, path string) int {
		t.Helper()
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	off := testNode(t, t.TempDir())
	if code := get(off, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof off: %d", code)
	}
	on := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.Pprof = true })
	if code := get(on, "/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("pprof on: %d", code)
	}
	if code := get(on, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK {
		t.Fatalf("pprof goroutine profile: %d", code)
	}
	b := ReadBuildInfo()
	found := false
	for k, v := range scrapeSeries(t, on) {
		if strings.HasPrefix(k, "herald_build_info{") {
			found = v == 1 && strings.Contains(k, `go_version="`+b.GoVersion+`"`) && strings.Contains(k, `version="`+b.Version+`"`)
		}
	}
	if !found {
		t.Fatalf("no herald_build_info for %+v", b)
	}
}

// Dead letters are counted, and logged at debug, not at info.
func TestDeadLettersCountedNotLoggedAtInfo(t *testing.T) {
	var logs syncBuffer
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	gone := actor.NewPID(n.sys.Address(), "no-such-actor")
	for range 5 {
		n.sys.Root.Send(gone, &struct{ x int }{}) // published to the event stream before Send returns
	}
	if got := n.stats.DeadLetters.Load(); got < 5 {
		t.Fatalf("dead letters counted: %d", got)
	}
	if got := scrapeSeries(t, n)["herald_actor_dead_letters_total"]; got < 5 {
		t.Fatalf("herald_actor_dead_letters_total = %v", got)
	}
	if strings.Contains(logs.String(), "[DeadLetter]") {
		t.Fatalf("dead letters logged at info:\n%s", logs.String())
	}
}
