package actors

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/heraldmq/herald/net/wire"
)

// A client merges publishes into one frame, each part's records carrying
// its own trace context. The node's receive span is a child of the first
// sampled one and links to the others, so a part that was sampled gets the
// node's span even when the part before it was not.
func TestTracePublishParentIsFirstSampledContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(t.Context())
	cs := &connSession{cfg: sessionConfig{Tracer: NewTracer(tp, false)}}
	const (
		unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
		sampled   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		other     = "00-5bf92f3577b34da6a3ce929d0e0e4737-10f067aa0ba902b8-01"
	)
	record := func(tp string) wire.Record {
		return wire.Record{Headers: []wire.RecordHeader{{Key: TraceHeader, Value: []byte(tp)}}, Payload: []byte("x")}
	}
	recs := []wire.Record{record(unsampled), record(unsampled), record(sampled), record(other)}
	p := wire.Publish{Count: uint32(len(recs)), Records: wire.AppendRecords(nil, recs)}
	h := &StreamHandle{}
	span := cs.tracePublish(h, 0, p)
	if span == nil {
		t.Fatal("no receive span for a frame with sampled parts behind an unsampled one")
	}
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	s := ended[0]
	if got := s.Parent().TraceID(); got != SpanContextOf(sampled).TraceID() {
		t.Fatalf("parent trace %s, want the first sampled context's %s", got, SpanContextOf(sampled).TraceID())
	}
	var linked []string
	for _, l := range s.Links() {
		linked = append(linked, l.SpanContext.TraceID().String())
	}
	want := []string{SpanContextOf(unsampled).TraceID().String(), SpanContextOf(other).TraceID().String()}
	if len(linked) != len(want) || linked[0] != want[0] || linked[1] != want[1] {
		t.Fatalf("links %v, want %v (the unsampled part once, then the other)", linked, want)
	}

	// Only unsampled contexts: the publisher decided, nothing is recorded.
	p.Records = wire.AppendRecords(nil, []wire.Record{record(unsampled)})
	p.Count = 1
	if span := cs.tracePublish(h, 0, p); span != nil {
		span.End()
		t.Fatal("a receive span for a publish whose only context is unsampled")
	}
}
