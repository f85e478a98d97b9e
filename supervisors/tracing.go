package supervisors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Trace exporters (trace_exporter).
const (
	traceOff    = "none"
	traceStdout = "stdout"
	traceOTLP   = "otlp"
)

// traceExporterName resolves trace_exporter: the key if set, else the
// standard OTEL_TRACES_EXPORTER ("console" is stdout), else off.
func traceExporterName(cfg Config, getenv func(string) string) string {
	name := cfg.TraceExporter
	if name == "" {
		switch v := getenv("OTEL_TRACES_EXPORTER"); v {
		case "otlp":
			name = traceOTLP
		case "console":
			name = traceStdout
		default:
			name = traceOff
		}
	}
	return name
}

// otlpProtocol resolves trace_otlp_protocol: the key if set, else the
// standard OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf.
func otlpProtocol(cfg Config, getenv func(string) string) string {
	for _, v := range []string{cfg.TraceOTLPProtocol, getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL")} {
		if v != "" {
			return v
		}
	}
	return "http/protobuf"
}

// traceSampleRatio resolves trace_sample_ratio: the key, or for -1 (the
// default) 1 with the stdout exporter and 0 otherwise.
func traceSampleRatio(cfg Config, exporter string) float64 {
	if cfg.TraceSampleRatio >= 0 {
		return cfg.TraceSampleRatio
	}
	if exporter == traceStdout {
		return 1
	}
	return 0
}

// newTracerProvider builds the node's tracer provider from its config (nil
// when tracing is off) and says whether the node starts traces of its own.
// The OTLP exporters take their endpoint, headers and TLS settings from the
// standard OTEL_EXPORTER_OTLP_* variables, the resource its service name
// and attributes from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the
// name is "herald" without them). A publish with trace context follows the
// publisher's sampling decision; for one without, the node starts a trace
// of its own for trace_sample_ratio of them.
func newTracerProvider(ctx context.Context, cfg Config, nodeID string, stdout io.Writer, getenv func(string) string) (*sdktrace.TracerProvider, bool, error) {
	name := traceExporterName(cfg, getenv)
	if name == traceOff {
		return nil, false, nil
	}
	exp, err := NewSpanExporter(ctx, name, otlpProtocol(cfg, getenv), stdout)
	if err != nil {
		return nil, false, err
	}
	// Later sources win: herald's defaults, then the OTEL_* variables.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("herald"), semconv.ServiceInstanceID(nodeID)),
		resource.WithDetectors(envResource{getenv}))
	if err != nil {
		return nil, false, fmt.Errorf("trace resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithBatcher(exp)}
	ratio := traceSampleRatio(cfg, name)
	if ratio > 0 && ratio < 1 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	}
	// Otherwise the SDK's default sampler: parent-based, and it honours the
	// standard OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG.
	return sdktrace.NewTracerProvider(opts...), ratio > 0, nil
}

// NewSpanExporter returns the span exporter named: "stdout" writes a JSON
// object per span and line to stdout, "otlp" exports over protocol ("grpc" or "http/protobuf")
// to where the standard OTEL_EXPORTER_OTLP_* variables say (the node and
// the CLI's --trace share it).
func NewSpanExporter(ctx context.Context, name, protocol string, stdout io.Writer) (sdktrace.SpanExporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch name {
	case traceStdout:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case traceOTLP:
		switch protocol {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "http/protobuf", "http":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("OTLP protocol %q (trace_otlp_protocol, OTEL_EXPORTER_OTLP_PROTOCOL): want grpc or http/protobuf", protocol)
		}
	default:
		return nil, fmt.Errorf("trace_exporter %q: want none, stdout or otlp", name)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	return exp, nil
}

// OTELEnvResource returns a resource detector of OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, read through getenv.
func OTELEnvResource(getenv func(string) string) resource.Detector { return envResource{getenv} }

// envResource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES through
// getenv (resource.WithFromEnv reads the process environment, which tests
// cannot replace).
type envResource struct{ getenv func(string) string }

// Detect implements resource.Detector.
func (d envResource) Detect(context.Context) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	for _, kv := range strings.Split(d.getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			continue
		}
		if u, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			v = u
		}
		attrs = append(attrs, attribute.String(k, v))
	}
	if name := d.getenv("OTEL_SERVICE_NAME"); name != "" {
		attrs = append(attrs, semconv.ServiceName(name))
	}
	return resource.NewSchemaless(attrs...), nil
}

// osGetenv is os.Getenv, for tests to replace.
var osGetenv = func(k string) string { return strings.TrimSpace(os.Getenv(k)) }

// exportErrorLog is OpenTelemetry's error handler for a node that exports
// traces: the first error is logged at warn when it happens, later ones at
// most once per interval, with how many there were since.
type exportErrorLog struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	mu       struct {
		sync.Mutex
		// last is when an error was last logged; skipped how many since.
		last    time.Time
		skipped int
	}
}

func newExportErrorLog(log *slog.Logger, interval time.Duration, now func() time.Time) *exportErrorLog {
	return &exportErrorLog{log: log, interval: interval, now: now}
}

// Handle implements otel.ErrorHandler.
func (e *exportErrorLog) Handle(err error) {
	e.mu.Lock()
	now := e.now()
	if !e.mu.last.IsZero() && now.Sub(e.mu.last) < e.interval {
		e.mu.skipped++
		e.mu.Unlock()
		return
	}
	skipped := e.mu.skipped
	e.mu.last, e.mu.skipped = now, 0
	e.mu.Unlock()
	e.log.Warn("trace export failed; spans are being lost", slog.Any("error", err), slog.Int("errors_since_last_logged", skipped))
}
