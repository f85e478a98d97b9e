package client

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/net/wire"
)

// Tracing. A publish is a producer span; its W3C trace context goes into
// every record's headers as `traceparent` (when the span is sampled), so
// the node continues the trace and every consumer of the record can link
// back to it. A subscription's Next starts a consumer span, the child of the
// record's producer span; a group Delivery's consumer span has a link to
// each record's. A group Ack is a span in the delivery's trace.

// TraceHeader is the record header that carries W3C trace context.
const TraceHeader = "traceparent"

// WithTracerProvider sets where the client's spans go (default: the global
// provider, otel.GetTracerProvider(), looked up at Dial).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

var traceContext = propagation.TraceContext{}

// clientTracer starts the client's spans.
type clientTracer struct {
	t trace.Tracer
	// global: the client follows the global provider, and publishes skip
	// tracing (no span, no allocation) while none has been set and the
	// caller's context carries no span.
	global bool
}

// unsetGlobal is the global provider before any otel.SetTracerProvider:
// otel.GetTracerProvider returns another one once a provider is set.
var unsetGlobal = otel.GetTracerProvider()

func newClientTracer(tp trace.TracerProvider) clientTracer {
	global := tp == nil
	if global {
		tp = otel.GetTracerProvider()
	}
	return clientTracer{t: tp.Tracer("github.com/heraldmq/herald/client"), global: global}
}

// off reports that publishes under ctx are not traced.
func (ct clientTracer) off(ctx context.Context) bool {
	return ct.global && otel.GetTracerProvider() == unsetGlobal && !trace.SpanContextFromContext(ctx).IsValid()
}

// startPublish starts a publish's producer span under ctx and returns it
// with the traceparent to put in the records (empty unless sampled). With
// tracing off it returns a nil span.
func (ct clientTracer) startPublish(ctx context.Context, name StreamName, records int) (trace.Span, string) {
	if ct.off(ctx) {
		return nil, ""
	}
	_, span := ct.t.Start(ctx, "publish "+name.String(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "herald"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", name.String()), attribute.Int("messaging.batch.message_count", records)))
	sc := span.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		return span, ""
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return span, carrier[TraceHeader]
}

// endPublish ends a publish span with its outcome.
func endPublish(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// withTrace returns headers with the traceparent header added (a new
// slice; headers is shared by the caller's options).
func withTrace(headers []wire.RecordHeader, traceparent string) []wire.RecordHeader {
	if traceparent == "" {
		return headers
	}
	out := make([]wire.RecordHeader, 0, len(headers)+1)
	for _, h := range headers {
		if h.Key != TraceHeader { // the publish span replaces one the caller set
			out = append(out, h)
		}
	}
	return append(out, wire.RecordHeader{Key: TraceHeader, Value: []byte(traceparent)})
}

// spanContextOf reads a record's trace context.
func spanContextOf(headers Headers) trace.SpanContext {
	tp := headers.Get(TraceHeader)
	if len(tp) == 0 {
		return trace.SpanContext{}
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{TraceHeader: string(tp)})
	return trace.SpanContextFromContext(ctx)
}

// receive records a consumer span for one record, the child of its producer
// span, and returns its context (invalid when the record is not traced).
func (ct clientTracer) receive(stream string, shard uint32, offset uint64, headers Headers) trace.SpanContext {
	if ct.off(context.Background()) {
		return trace.SpanContext{}
	}
	parent := spanContextOf(headers)
	if !parent.IsValid() {
		return trace.SpanContext{}
	}
	_, span := ct.t.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "receive "+stream,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "herald"), attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.destination.name", stream), attribute.Int("herald.shard", int(shard)),
			attribute.Int64("herald.offset", int64(offset))))
	span.End()
	return span.SpanContext()
}

// receiveBatch records a consumer span for a group delivery: the child of
// its record's producer span when it holds one record, otherwise a new
// trace with a link to each record's producer span.
func (ct clientTracer) receiveBatch(stream string, recs []GroupRecord) trace.SpanContext {
	if ct.off(context.Background()) {
		return trace.SpanContext{}
	}
	attrs := trace.WithAttributes(attribute.String("messaging.system", "herald"), attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.destination.name", stream), attribute.Int("messaging.batch.message_count", len(recs)))
	ctx := context.Background()
	var links []trace.Link
	if len(recs) == 1 {
		sc := spanContextOf(recs[0].Headers)
		if !sc.IsValid() {
			return trace.SpanContext{}
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		for _, r := range recs {
			if sc := spanContextOf(r.Headers); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64("herald.offset", int64(r.Offset))}})
			}
		}
		if len(links) == 0 {
			return trace.SpanContext{}
		}
	}
	_, span := ct.t.Start(ctx, "receive "+stream, trace.WithSpanKind(trace.SpanKindConsumer), attrs, trace.WithLinks(links...))
	span.End()
	return span.SpanContext()
}

// settle records a group ack's span in the trace of the delivery it
// commits.
func (ct clientTracer) settle(stream string, delivery trace.SpanContext, count int, err error) {
	if !delivery.IsValid() {
		return
	}
	_, span := ct.t.Start(trace.ContextWithRemoteSpanContext(context.Background(), delivery), "settle "+stream,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("messaging.system", "herald"), attribute.String("messaging.operation.type", "settle"),
			attribute.String("messaging.destination.name", stream), attribute.Int("messaging.batch.message_count", count)))
	endPublish(span, err)
}

// deliveryTraces remembers the consumer span of recent group deliveries by
// cursor, so an Ack can join their trace. It is bounded: the oldest are
// forgotten.
type deliveryTraces struct {
	mu    sync.Mutex
	spans map[string]trace.SpanContext
	order []string
}

const maxDeliveryTraces = 4096

func (d *deliveryTraces) put(cursor Cursor, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.spans == nil {
		d.spans = map[string]trace.SpanContext{}
	}
	if _, ok := d.spans[string(cursor)]; ok {
		d.spans[string(cursor)] = sc
		return
	}
	if len(d.order) >= maxDeliveryTraces {
		delete(d.spans, d.order[0])
		d.order = d.order[1:]
	}
	d.spans[string(cursor)] = sc
	d.order = append(d.order, string(cursor))
}

func (d *deliveryTraces) take(cursor Cursor) trace.SpanContext {
	d.mu.Lock()
	defer d.mu.Unlock()
	sc, ok := d.spans[string(cursor)]
	if ok {
		delete(d.spans, string(cursor))
	}
	return sc
}
