package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
)

// publishLoop serves one publish stream: each Publish is validated, routed
// to its shard and answered by the stream's lane. Acked publishes hold a
// window slot until answered, so at most PublishWindow wait per stream.
func (cs *connSession) publishLoop(s *quic.Stream, first wire.Frame) error {
	sctx, cancel := context.WithCancel(cs.ctx)
	defer cancel()
	window := make(chan struct{}, cs.cfg.PublishWindow)
	// A lane that ends while the loop runs (its stream's write failed)
	// ends the loop and tells the client to stop sending: nothing it sends
	// could be answered.
	var ended atomic.Bool
	lane := cs.openLane(s, window, func() {
		cancel()
		if !ended.Load() {
			s.CancelRead(quic.StreamErrorCode(wire.CodeInternal))
		}
	}, nil)
	if lane == nil {
		return nil
	}
	defer cs.root.Poison(lane)
	defer ended.Store(true) // runs first: the lane's normal end is no failure
	streams := map[wire.StreamName]*StreamHandle{}
	f := first
	for {
		if f.Header.Type != wire.TypePublish {
			return wire.Errorf(wire.CodeProtocolViolation, "%s frame on a publish stream", f.Header.Type)
		}
		p, err := wire.DecodePublish(f.Body)
		var werr *wire.Error
		if err != nil && (!errors.As(err, &werr) || werr.Code.Framing()) {
			return err
		}
		stages.MarkRecords(stages.NodeRead, p.Records)
		// Every publish holds a window slot until its shard answers (AckNone
		// ones too, though nothing is written for them), so what one stream
		// has in flight inside the node is bounded.
		select {
		case window <- struct{}{}:
		case <-sctx.Done():
			return nil
		}
		if werr == nil {
			werr = cs.routePublish(lane, streams, f.Header.RequestID, p)
		}
		if werr != nil {
			if werr.Code.Framing() {
				return werr
			}
			cs.root.Send(lane, &PublishRejected{ReqID: f.Header.RequestID, Ack: p.Ack, Err: werr})
		}
		f, err = wire.ReadFrame(s, cs.cfg.MaxFrameBytes)
		if err != nil {
			if errors.As(err, &werr) {
				return err
			}
			if errors.Is(err, io.EOF) {
				// The client ended the stream: answer what is outstanding,
				// then end ours.
				cs.finishPublishStream(sctx, lane, window)
			}
			return nil
		}
	}
}

// finishPublishStream waits (within sctx) until every acked publish on the
// stream has been answered, by taking every window slot, then has the lane
// flush and close its send side.
func (cs *connSession) finishPublishStream(sctx context.Context, lane *actor.PID, window chan struct{}) {
	for range cap(window) {
		select {
		case window <- struct{}{}:
		case <-sctx.Done():
			return
		}
	}
	cs.root.Send(lane, &CloseLane{})
}

// routePublish validates one publish and sends it to its shard.
func (cs *connSession) routePublish(lane *actor.PID, streams map[wire.StreamName]*StreamHandle, reqID uint64, p wire.Publish) *wire.Error {
	if cs.draining.Load() {
		return wire.Errorf(wire.CodeShuttingDown, "node is draining")
	}
	if err := p.Name.Validate(); err != nil {
		return err.(*wire.Error)
	}
	if werr := cs.allow(PermPublish, p.Name); werr != nil {
		return werr
	}
	// Delivered, the batch becomes a section of an EventBatch or ReadResult
	// frame, and each of its records one record of a group push: the
	// records must fit the largest of those frames.
	if limit := int(cs.cfg.MaxFrameBytes) - maxDeliveryOverhead; len(p.Records) > limit {
		cs.cfg.Stats.Limits.BatchBytes.Add(1)
		return &wire.Error{Code: wire.CodeBatchTooLarge, Detail: uint64(limit),
			Message: fmt.Sprintf("the records take %d bytes; at most %d fit a delivery frame", len(p.Records), limit)}
	}
	if _, err := wire.ValidateRecords(p.Records, p.Count); err != nil {
		var werr *wire.Error
		errors.As(err, &werr)
		return werr
	}
	h, ok := streams[p.Name]
	if ok && h.Deleted() {
		delete(streams, p.Name)
		ok = false
	}
	if !ok {
		var werr *wire.Error
		h, werr = cs.lookup(&LookupStreamRequest{Name: p.Name, AutoCreate: cs.cfg.AutoCreate})
		if werr != nil {
			return werr
		}
		if len(streams) > 1024 {
			clear(streams)
		}
		streams[p.Name] = h
	}
	shard := p.Shard
	keyed := wire.ShardFor(p.Key, h.Config.Shards, h.Config.Routing)
	switch {
	case shard == wire.AnyShard:
		shard = keyed
	case len(p.Key) > 0 && shard != keyed:
		// The client routed with a stale view of the stream (it was
		// recreated with other shards or routing): refuse, so it looks again.
		return wire.Errorf(wire.CodeInvalidShard, "key routes to shard %d of %s, not %d", keyed, h.Name, shard)
	}
	if shard >= uint32(len(h.Shards)) {
		return wire.ShardOutOfRange(h.Name, uint64(shard), len(h.Shards))
	}
	req := &PublishRequest{Received: time.Now(), ReqID: reqID, Ack: p.Ack, Count: p.Count, Records: p.Records, ReplyTo: lane,
		Conditional: p.Conditional, ExpectedOffset: p.ExpectedOffset,
		Idempotent: p.Idempotent, ProducerID: p.ProducerID, Sequence: p.Sequence}
	if cs.cfg.Tracer.Enabled() {
		if span := cs.tracePublish(h, shard, p); span != nil {
			req.Trace = Traceparent(span.SpanContext())
			defer span.End()
			// The root context has no sender middleware: put the context
			// in the envelope header here.
			env := &actor.MessageEnvelope{Message: req}
			env.SetHeader(TraceHeader, req.Trace)
			cs.root.Send(h.Shards[shard], env)
			return nil
		}
	}
	cs.root.Send(h.Shards[shard], req)
	return nil
}

// tracePublish starts the node's receive span of a publish: a child of the
// first sampled trace context its records carry (the client's publish span), or,
// for a publish with none, the root of a trace of the node's own when the
// tracer starts roots and samples this one. The span covers the
// connection's part, and the shard's spans are its children. A publish
// whose records carry other trace contexts too (a client merged several
// publishes into its frame) is linked to each of them, up to
// maxPublishLinks.
func (cs *connSession) tracePublish(h *StreamHandle, shard uint32, p wire.Publish) oteltrace.Span {
	// The trace contexts of the records, each once (a merged publish's
	// records follow each other).
	var tps []string
	it := wire.NewRecordIter(p.Records)
	var rec wire.Record
	for it.Next(&rec) && len(tps) <= maxPublishLinks {
		for _, hd := range rec.Headers {
			if hd.Key != TraceHeader {
				continue
			}
			if tp := string(hd.Value); len(tps) == 0 || tps[len(tps)-1] != tp {
				tps = append(tps, tp)
			}
			break
		}
	}
	// The parent is the first sampled context, so that a merged publish
	// whose first part was not sampled still records the span for the
	// parts that were; the others are links.
	parent := ""
	var links []string
	for i, tp := range tps {
		if sc := SpanContextOf(tp); sc.IsValid() && sc.IsSampled() {
			parent = tp
			links = append(append(links, tps[:i]...), tps[i+1:]...)
			break
		}
	}
	if parent == "" && len(tps) > 0 {
		parent, links = tps[0], tps[1:]
	}
	if len(links) > maxPublishLinks {
		links = links[:maxPublishLinks]
	}
	attrs := []attribute.KeyValue{attribute.String("messaging.system", "herald"), attribute.String("messaging.destination.name", h.Name.String()),
		attribute.Int("herald.shard", int(shard)), attribute.Int("messaging.batch.message_count", int(p.Count)),
		attribute.Int("herald.batch.bytes", len(p.Records)), attribute.Int("herald.ack", int(p.Ack))}
	if parent == "" {
		// No trace context: the node may start a trace of its own
		// (trace_sample_ratio).
		return cs.cfg.Tracer.StartRoot("herald.publish.receive", oteltrace.SpanKindServer, attrs...)
	}
	return cs.cfg.Tracer.StartLinked(parent, links, "herald.publish.receive", oteltrace.SpanKindServer, attrs...)
}

// maxPublishLinks bounds the links of one publish's receive span (the
// OpenTelemetry SDK keeps 128 by default).
const maxPublishLinks = 128
