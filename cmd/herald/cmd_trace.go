package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/heraldmq/herald/supervisors"
)

// --trace: a client command exports its spans (a publish's producer span,
// whose trace context the records carry to the node and on to consumers; a
// subscriber's receive spans; a group member's receive and settle spans)
// through the OpenTelemetry SDK's standard variables:
//
//   - OTEL_TRACES_EXPORTER: otlp (the default), console (a JSON object per
//     span and line on standard error, so that the command's output stays
//     parseable) or none;
//   - OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
//     _HEADERS, _INSECURE and the rest, read by the OTLP exporter itself;
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (the default) or grpc;
//   - OTEL_SERVICE_NAME (default herald-cli) and OTEL_RESOURCE_ATTRIBUTES;
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default: every trace).

// traceShutdownBound bounds the export of the spans still buffered when
// the command ends.
const traceShutdownBound = 5 * time.Second

// traceExporterFromEnv resolves OTEL_TRACES_EXPORTER for --trace: the
// exporter name supervisors.NewSpanExporter takes, or "none".
func traceExporterFromEnv(getenv func(string) string) (string, error) {
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "", "otlp":
		return "otlp", nil
	case "console":
		return "stdout", nil
	case "none":
		return "none", nil
	default:
		return "", usageErrorf("--trace: OTEL_TRACES_EXPORTER=%q: want otlp, console or none", v)
	}
}

// newCLITracerProvider builds the tracer provider of a command run with
// --trace (nil when OTEL_TRACES_EXPORTER=none) and registers its shutdown,
// which exports what is buffered, to run when the command ends.
func newCLITracerProvider(ctx context.Context, env *cliEnv) (*sdktrace.TracerProvider, error) {
	getenv := env.getenv
	name, err := traceExporterFromEnv(getenv)
	if err != nil || name == "none" {
		return nil, err
	}
	protocol := cmp.Or(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")),
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")), "http/protobuf")
	exp, err := supervisors.NewSpanExporter(ctx, name, protocol, env.stderr)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("herald-cli")),
		resource.WithDetectors(supervisors.OTELEnvResource(getenv)))
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("--trace: resource: %w", err)
	}
	// The SDK's default sampler: parent-based, always on, unless
	// OTEL_TRACES_SAMPLER says otherwise.
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
	env.atExit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), traceShutdownBound)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			fmt.Fprintf(env.stderr, "herald: --trace: exporting spans: %v\n", err)
		}
	})
	return tp, nil
}
