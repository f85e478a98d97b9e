package supervisors

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/heraldmq/herald/client"
)

// discardExporter takes spans and drops them: the benchmark measures making
// and handing off spans, not an exporter's I/O.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkPublishTracing measures durable publish throughput (batches of
// 64 × 128 B, acked per batch, pipelined) with tracing off, and with the
// client and node tracing, the client sampling 1% and 100% of publishes.
// One op is one batch.
//
//	go test -run '^$' -bench BenchmarkPublishTracing -benchtime 5s ./supervisors/
func BenchmarkPublishTracing(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"sampled-1pct", 0.01}, {"sampled-100pct", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			var copts []client.Option
			var mutate []func(*Config, *Options)
			if bc.ratio >= 0 {
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(bc.ratio))))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				copts = append(copts, client.WithTracerProvider(tp))
				mutate = append(mutate, func(_ *Config, o *Options) { o.TracerProvider = tp })
			}
			n := testNode(b, b.TempDir(), mutate...)
			c := dialClient(b, n, copts...)
			ctx := context.Background()
			name := client.StreamName{Tenant: "bench", Namespace: "bench", Stream: "tracing"}
			if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
				b.Fatal(err)
			}
			pipelinePublishes(b, c, name)
		})
	}
}
