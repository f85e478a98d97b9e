package supervisors

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

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

// newTracerProvider builds the node's tracer provider from its config (nil
// when tracing is off). The OTLP exporters take their endpoint, headers and
// TLS settings from the standard OTEL_EXPORTER_OTLP_* variables. The node
// starts no trace of its own: it follows the publisher's sampling decision
// (a publish whose trace context is not sampled makes no span).
func newTracerProvider(ctx context.Context, cfg Config, nodeID string, stdout io.Writer, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch name := traceExporterName(cfg, getenv); name {
	case traceOff:
		return nil, nil
	case traceStdout:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case traceOTLP:
		switch p := otlpProtocol(cfg, getenv); p {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "http/protobuf", "http":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("trace_otlp_protocol %q: want grpc or http/protobuf", p)
		}
	default:
		return nil, fmt.Errorf("trace_exporter %q: want none, stdout or otlp", name)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("herald"), semconv.ServiceInstanceID(nodeID)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// No sampler is set: the SDK's default is parent-based, and it honours
	// the standard OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (for
	// example parentbased_traceidratio and 0.01).
	return sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp),
	), nil
}

// osGetenv is os.Getenv, for tests to replace.
var osGetenv = func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
