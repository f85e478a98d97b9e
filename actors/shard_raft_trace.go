package actors

import (
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/asynkron/protoactor-go/actor"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/storage"
)

// Traces of a replicated publish. On the shard's leader a traced publish
// (one whose records carry trace context) gets three spans beside the
// actor span of its arrival, in the order they happen:
//
//   - herald.raft.propose: the proposal to raft (the entry appended to the
//     leader's log, not yet durable);
//   - herald.raft.replicate: the replication round, from the proposal until
//     the entry applies here: a quorum made it durable and the leader
//     learned it was committed (its raft index and term as attributes);
//   - herald.raft.apply: the apply, from there until the batch is durable in
//     the shard log (its offset and records as attributes), with the
//     storage writer's commit span as its child.
//
// Followers apply the same entry without its trace context (the entry
// does not carry it), so their work is not in the trace.

// traceProposal starts the propose span of m, if it is traced, and keeps
// in w the traceparent its replicate and apply spans are children of.
func (s *shard) traceProposal(ctx actor.Context, m *PublishRequest, w *proposalWait, bytes int) oteltrace.Span {
	if !s.cfg.Tracer.Enabled() {
		return nil
	}
	parent := m.Trace
	if ctx.Message() == m {
		if tp := currentTrace(ctx); tp != "" {
			parent = tp
		}
	}
	if parent == "" {
		return nil
	}
	w.trace = parent
	return s.cfg.Tracer.Start(parent, "herald.raft.propose", oteltrace.SpanKindInternal,
		attribute.String("herald.stream", s.cfg.Stream.String()), attribute.Int("herald.shard", int(s.cfg.Key.Shard)),
		attribute.Int("herald.batch.records", int(m.Count)), attribute.Int("herald.raft.entry.bytes", bytes),
		attribute.Int64("herald.raft.term", int64(s.replica.status().GetTerm())))
}

// traceProposed ends the propose span and starts the replication round's.
func (s *shard) traceProposed(span oteltrace.Span, w *proposalWait, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
	}
	span.End()
	if err == nil {
		w.span = s.cfg.Tracer.Start(w.trace, "herald.raft.replicate", oteltrace.SpanKindInternal,
			attribute.String("herald.stream", s.cfg.Stream.String()), attribute.Int("herald.shard", int(s.cfg.Key.Shard)),
			attribute.Int("herald.raft.voters", len(s.replica.core.conf.GetVoters())))
	}
}

// traceReplicated ends the replication round of w's proposal: its entry e
// applies here.
func (s *shard) traceReplicated(w *proposalWait, e *pb.Entry) {
	if w == nil || w.span == nil {
		return
	}
	w.span.SetAttributes(attribute.Int64("herald.raft.index", int64(e.GetIndex())), attribute.Int64("herald.raft.term", int64(e.GetTerm())))
	w.span.End()
	w.span = nil
}

// traceApply starts the apply span of w's batch b (just admitted, the last
// pending one), which ends when b is durable in the shard log, and returns
// its traceparent for the storage writer.
func (s *shard) traceApply(w *proposalWait, e *pb.Entry, b storage.Batch) string {
	if w == nil || w.trace == "" {
		return ""
	}
	span := s.cfg.Tracer.Start(w.trace, "herald.raft.apply", oteltrace.SpanKindInternal,
		attribute.String("herald.stream", s.cfg.Stream.String()), attribute.Int("herald.shard", int(s.cfg.Key.Shard)),
		attribute.Int64("herald.raft.index", int64(e.GetIndex())), attribute.Int64("herald.offset", int64(b.Base)),
		attribute.Int("herald.batch.records", int(b.Count)))
	if span == nil {
		return ""
	}
	s.core.pending[len(s.core.pending)-1].span = span
	return Traceparent(span.SpanContext())
}
