// Command tracing publishes a record and consumes it with OpenTelemetry
// tracing on, printing the client's spans to stdout (or sending them to an
// OTLP collector). Run the node with tracing too, and its spans for the same
// record share the trace id:
//
//	./bin/herald node --trace stdout            # terminal 1
//	go run ./examples/tracing                    # terminal 2
//
// With -otlp, spans go over OTLP/HTTP to the collector named by the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/client"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tracing", flag.ContinueOnError)
	server := fs.String("server", "127.0.0.1:7400", "node address")
	ca := fs.String("ca", "data/tls/ca.pem", "CA certificate that signed the node's certificate")
	stream := fs.String("stream", "examples/tracing/demo", "stream: tenant/namespace/stream")
	otlp := fs.Bool("otlp", false, "export spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT) instead of stdout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	var exp sdktrace.SpanExporter
	var err error
	if *otlp {
		exp, err = otlptracehttp.New(ctx)
	} else {
		exp, err = stdouttrace.New(stdouttrace.WithWriter(out))
	}
	if err != nil {
		return err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("tracing-example")))
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	c, err := client.Dial(ctx, *server, client.WithCAFile(*ca), client.WithToken(os.Getenv("HERALD_TOKEN")), client.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	defer c.Close()
	name, err := client.ParseStreamName(*stream)
	if err != nil {
		return err
	}
	info, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true})
	if err != nil {
		return err
	}
	sub, err := c.Subscribe(ctx, name, client.WithStartOffset(info.Tails[0]))
	if err != nil {
		return err
	}
	defer sub.Close()

	// The application's own span: the publish is its child, and the
	// record carries the trace to the node and to every consumer.
	appCtx, span := tp.Tracer("tracing-example").Start(ctx, "place order")
	ack, err := c.PublishBatch(appCtx, name, [][]byte{[]byte("order-42")})
	span.End()
	if err != nil {
		return err
	}
	ev, err := sub.Next(ctx)
	if err != nil {
		return err
	}
	// Processing continues the trace from the consumer span Next recorded.
	_, work := tp.Tracer("tracing-example").Start(trace.ContextWithSpanContext(ctx, ev.Trace), "process order")
	work.End()
	fmt.Fprintf(out, "published offset %d and received %q in trace %s\n", ack.Offset, ev.Payload, ev.Trace.TraceID())
	return nil
}
