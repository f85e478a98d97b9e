package actors

import (
	"context"
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/actor/middleware/propagator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/net/wire"
)

// Tracing of actor messages. The trace context of a message travels in its
// envelope header as W3C `traceparent` (protoactor has no OpenTelemetry
// middleware at the pinned version). Two middlewares do it for every actor
// of the node, so any hop can be traced, not only the hand-written spans:
//
//   - the sender middleware gives an outgoing message the trace context of
//     the message being handled (or, for a message that carries its own,
//     that one), unless it has one already;
//   - the receiver middleware starts a span for a message that arrives with
//     a trace context, as its child, and hands the span's context on in the
//     header, so what the actor sends (and the spans it starts by hand) are
//     children of it.
//
// The middlewares are installed only when the node traces: with tracing off
// no envelope, header or span is made for any message.

// TraceHeader is the envelope header (and record header) that carries W3C
// trace context.
const TraceHeader = "traceparent"

// tracedMessage is a message that carries the trace context it belongs to
// (hand-written hops set it, for example a shard's AppendRequest carries its
// append span's).
type tracedMessage interface {
	traceparent() string
}

var traceContext = propagation.TraceContext{}

// SpanContextOf parses a traceparent value.
func SpanContextOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{TraceHeader: traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Traceparent formats a span context as a traceparent value ("" if invalid).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier[TraceHeader]
}

// Tracer starts the node's spans. The zero Tracer traces nothing.
type Tracer struct {
	t trace.Tracer
	// roots: the node starts traces of its own for publishes that carry
	// none (its provider's sampler decides which are kept).
	roots bool
}

// NewTracer returns a Tracer over tp (nil: a Tracer that traces nothing).
// With roots, StartRoot starts traces; without, the node only continues
// those publishers start.
func NewTracer(tp trace.TracerProvider, roots bool) *Tracer {
	if tp == nil {
		return &Tracer{}
	}
	return &Tracer{t: tp.Tracer("github.com/heraldmq/herald"), roots: roots}
}

// StartRoot starts a trace of the node's own, when the Tracer starts
// roots and the sampler keeps it; otherwise it returns nil.
func (t *Tracer) StartRoot(name string, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	if !t.Enabled() || !t.roots {
		return nil
	}
	_, span := t.t.Start(context.Background(), name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	if !span.SpanContext().IsSampled() {
		span.End()
		return nil
	}
	return span
}

// Enabled reports whether the node traces at all.
func (t *Tracer) Enabled() bool { return t != nil && t.t != nil }

// Start starts a span as a child of parent (a traceparent value); with no
// valid parent it starts none and returns nil. Sampling is parent-based:
// the provider's sampler decides.
func (t *Tracer) Start(parent, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	return t.StartLinked(parent, nil, name, kind, attrs...)
}

// StartLinked is Start with links to the span contexts in links too
// (traceparent values; invalid ones are skipped).
func (t *Tracer) StartLinked(parent string, links []string, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	if !t.Enabled() || parent == "" {
		return nil
	}
	sc := SpanContextOf(parent)
	if !sc.IsValid() || !sc.IsSampled() {
		return nil // the publisher decided: nothing to record
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	if len(links) > 0 {
		ls := make([]trace.Link, 0, len(links))
		for _, l := range links {
			if lc := SpanContextOf(l); lc.IsValid() {
				ls = append(ls, trace.Link{SpanContext: lc})
			}
		}
		opts = append(opts, trace.WithLinks(ls...))
	}
	_, span := t.t.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), name, opts...)
	return span
}

// Middleware returns the spawn middleware that installs the tracing sender
// and receiver middlewares on an actor and every actor it spawns.
func (t *Tracer) Middleware() actor.SpawnMiddleware {
	return propagator.New().WithItselfForwarded().
		WithSenderMiddleware(traceSender).
		WithReceiverMiddleware(t.traceReceiver).
		SpawnMiddleware
}

// traceSender propagates trace context to outgoing messages.
func traceSender(next actor.SenderFunc) actor.SenderFunc {
	return func(c actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
		if env.GetHeader(TraceHeader) == "" {
			tp := ""
			if m, ok := env.Message.(tracedMessage); ok {
				// It says its own trace (possibly none): feedback and
				// control messages must not drag the trace of whatever
				// their sender was handling into unrelated work.
				tp = m.traceparent()
			} else if h := c.MessageHeader(); h != nil {
				tp = h.Get(TraceHeader)
			}
			if tp != "" {
				env.SetHeader(TraceHeader, tp)
			}
		}
		next(c, target, env)
	}
}

// traceReceiver starts a span for a message that arrives with trace context.
func (t *Tracer) traceReceiver(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		parent := env.GetHeader(TraceHeader)
		if parent == "" {
			next(c, env)
			return
		}
		msg := strings.TrimPrefix(fmt.Sprintf("%T", env.Message), "*actors.")
		span := t.Start(parent, "actor "+msg, trace.SpanKindInternal,
			attribute.String("actor.pid", c.Self().Id), attribute.String("actor.message", msg))
		if span == nil {
			next(c, env)
			return
		}
		if a, ok := env.Message.(spanAttributed); ok {
			span.SetAttributes(a.spanAttributes()...)
		}
		if tp := Traceparent(span.SpanContext()); tp != "" {
			env.SetHeader(TraceHeader, tp)
		}
		defer span.End() // also when the handler panics
		next(c, env)
	}
}

// currentTrace returns the trace context of the message an actor handles
// ("" without one).
func currentTrace(ctx actor.Context) string {
	if h := ctx.MessageHeader(); h != nil {
		return h.Get(TraceHeader)
	}
	return ""
}

// spanAttributed is a message that describes itself on its actor span.
type spanAttributed interface {
	spanAttributes() []attribute.KeyValue
}

func sectionAttributes(secs []*wire.Section) []attribute.KeyValue {
	if len(secs) == 0 {
		return nil
	}
	records, bytes := 0, 0
	for _, s := range secs {
		records += int(s.Count())
		bytes += len(s.Records)
	}
	return []attribute.KeyValue{attribute.Int("herald.sections", len(secs)), attribute.Int64("herald.offset", int64(secs[0].Base())),
		attribute.Int("herald.batch.records", records), attribute.Int("herald.batch.bytes", bytes)}
}

func (m *SectionsPushed) spanAttributes() []attribute.KeyValue { return sectionAttributes(m.Sections) }
func (m *WriteSections) spanAttributes() []attribute.KeyValue  { return sectionAttributes(m.Sections) }

func (m *PublishRequest) spanAttributes() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int("herald.batch.records", int(m.Count)), attribute.Int("herald.batch.bytes", len(m.Records))}
}

func (m *AppendRequest) spanAttributes() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int("herald.shard", int(m.Shard.Shard)), attribute.Int64("herald.offset", int64(m.Batch.Base)),
		attribute.Int("herald.batch.records", int(m.Batch.Count))}
}

func (m *AppendsCommitted) spanAttributes() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int("herald.shard", int(m.Shard.Shard)), attribute.Int64("herald.offset", int64(m.From)),
		attribute.Int64("herald.offset.end", int64(m.Through))}
}

func (m *GroupClaimGranted) spanAttributes() []attribute.KeyValue {
	if len(m.Records) == 0 {
		return nil
	}
	return []attribute.KeyValue{attribute.Int("herald.group.records", len(m.Records)),
		attribute.Int("herald.shard", int(m.Records[0].Shard)), attribute.Int64("herald.offset", int64(m.Records[0].Offset))}
}

// Messages that carry no trace whatever their sender was handling: they are
// feedback (credit, commit notices, writes done) or control, and would
// otherwise chain one publish's trace through every later round of work.
func (*commitNow) traceparent() string         { return "" }
func (*CreditReturned) traceparent() string    { return "" }
func (*SectionsWritten) traceparent() string   { return "" }
func (*GroupClaimRequest) traceparent() string { return "" }
func (*WatchTail) traceparent() string         { return "" }
func (*MetaWriteRequest) traceparent() string  { return "" }
func (*MetaWriteResponse) traceparent() string { return "" }

// AppendsCommitted and PublishAcked carry the trace of the batch they are
// about (the first traced one of a commit group, for AppendsCommitted).
func (m *AppendsCommitted) traceparent() string { return m.Trace }
func (m *PublishAcked) traceparent() string     { return m.Trace }

// GroupClaimGranted carries the trace of what set its read going: the read
// comes back in a message of its own, which has none.
func (m *GroupClaimGranted) traceparent() string { return m.Trace }
