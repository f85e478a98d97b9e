package actors

import (
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/storage"
)

// ErrStorageFailed wraps the error of the commit that broke the log; every
// append after it fails with it.
var ErrStorageFailed = errors.New("storage writer: log failed")

// StorageWriterConfig configures the storage writer.
type StorageWriterConfig struct {
	// Log is the durable log; the writer is its only committer.
	Log storage.Log
	// Tracer traces the commits of traced batches (nil: none).
	Tracer *Tracer
	// MaxGroupBatches bounds the batches in one commit (default 1024).
	MaxGroupBatches int
	// MaxGroupBytes bounds the record bytes in one commit (default 32 MiB).
	MaxGroupBytes int
	// OnFailure is called once, from the writer, when a commit fails.
	OnFailure func(error)
	// Stats is the node's, for metrics (may be nil).
	Stats *Stats
	// Goroutines starts the writer's stream drops (nil: untracked).
	Goroutines *Goroutines
	// Failed, shared by every instance of the writer, holds the error that
	// broke the log: a writer that restarts stays failed, so appends queued
	// behind a failed commit are never written above its hole.
	Failed *atomic.Pointer[error]
}

// storageWriter group-commits durable appends: every AppendRequest that
// queued up while the previous commit was syncing goes into the next commit,
// which is one write and one sync. It needs no timer: a lone batch is
// committed as soon as the writer sees it, and under load the groups grow by
// themselves. It is one of the two actor kinds allowed to block in Receive
// (the sync); shards feed it without waiting and hold their own bounds.
type storageWriter struct {
	cfg StorageWriterConfig
	// pending are the appends and meta writes of the next commit, in arrival order.
	pending []pendingWrite
	// pendingBatches and pendingBytes size the next commit.
	pendingBatches, pendingBytes int
	// markerQueued is true while a commitNow is in the mailbox.
	markerQueued bool
	// failed is the sticky error after a failed commit.
	failed error
	// inflight is the group being committed; if the commit panics, the
	// failed instance answers it (AppendFailed) before the restart, so no
	// shard waits for, or is told about, a batch that was never written.
	inflight []pendingWrite
}

// pendingWrite is one queued request: an append from a shard, a meta write
// or a tail request waiting for the appends ahead of it.
type pendingWrite struct {
	from   *actor.PID
	append *AppendRequest
	meta   *MetaWriteRequest
	tail   *TailRequest
	drop   *DropStreamRequest
	// span is a traced batch's commit span, from its arrival to its sync.
	span trace.Span
}

// NewStorageWriterProps returns the props of a storage writer.
func NewStorageWriterProps(cfg StorageWriterConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Failed == nil {
		cfg.Failed = &atomic.Pointer[error]{}
	}
	if cfg.MaxGroupBatches <= 0 {
		cfg.MaxGroupBatches = 1024
	}
	if cfg.MaxGroupBytes <= 0 {
		cfg.MaxGroupBytes = 32 << 20
	}
	return actor.PropsFromProducer(func() actor.Actor {
		w := &storageWriter{cfg: cfg}
		if p := cfg.Failed.Load(); p != nil {
			w.failed = *p
		}
		return w
	})
}

// Receive dispatches.
func (w *storageWriter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *AppendRequest:
		w.onAppend(ctx, ctx.Sender(), m)
	case *MetaWriteRequest:
		w.onMetaWrite(ctx, ctx.Sender(), m)
	case *TailRequest:
		w.onTail(ctx, ctx.Sender(), m)
	case *DropStreamRequest:
		w.onDropStream(ctx, ctx.Sender(), m)
	case *commitNow:
		w.onCommitNow(ctx)
	case *dropDone:
		w.onDropDone(ctx, m)
	case *actor.Restarting:
		w.onRestarting(ctx)
	case *actor.Started, *actor.Stopping:
		// Nothing to do: a new instance starts empty (a broken log stays
		// broken through cfg.Failed), and what is pending is committed
		// once Stopped.
	case *actor.Stopped:
		w.onStopped(ctx)
	default:
		ctx.Logger().Warn("storage writer: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// onAppend queues a shard's append for the next commit.
func (w *storageWriter) onAppend(ctx actor.Context, from *actor.PID, m *AppendRequest) {
	w.enqueue(ctx, pendingWrite{from: from, append: m})
}

// onMetaWrite queues a metadata write for the next commit.
func (w *storageWriter) onMetaWrite(ctx actor.Context, from *actor.PID, m *MetaWriteRequest) {
	w.enqueue(ctx, pendingWrite{from: from, meta: m})
}

// onTail queues a tail request behind the appends ahead of it.
func (w *storageWriter) onTail(ctx actor.Context, from *actor.PID, m *TailRequest) {
	w.enqueue(ctx, pendingWrite{from: from, tail: m})
}

// onDropStream queues a stream drop behind the appends ahead of it.
func (w *storageWriter) onDropStream(ctx actor.Context, from *actor.PID, m *DropStreamRequest) {
	w.enqueue(ctx, pendingWrite{from: from, drop: m})
}

// onCommitNow commits what queued up behind the writer's marker.
func (w *storageWriter) onCommitNow(ctx actor.Context) {
	w.markerQueued = false
	w.commit(ctx)
}

// onDropDone queues the metadata deletes of a finished stream drop for the
// next commit, or answers its failure.
func (w *storageWriter) onDropDone(ctx actor.Context, m *dropDone) {
	if m.err != nil {
		if m.from != nil {
			ctx.Send(m.from, &MetaWriteResponse{Err: m.err})
		}
		return
	}
	w.enqueue(ctx, pendingWrite{from: m.from, meta: &MetaWriteRequest{Puts: m.metas}})
}

// onRestarting runs on the failed instance: the commit of inflight
// panicked, so its outcome is unknown, and every request still pending is
// answered too (the new instance starts empty).
func (w *storageWriter) onRestarting(ctx actor.Context) {
	err := fmt.Errorf("%w: the storage writer restarted during a commit", ErrStorageFailed)
	w.cfg.Failed.CompareAndSwap(nil, &err)
	if w.cfg.OnFailure != nil {
		w.cfg.OnFailure(err)
	}
	w.answer(ctx, w.inflight, err)
	w.answer(ctx, w.pending, err)
	w.inflight, w.pending = nil, nil
}

// onStopped commits anything still pending before the writer goes: the
// node stops the writer last, after the shards. A stream drop still
// running beside it ends on its own, and the node waits for it before
// closing storage; the metadata deletes it would have sent back are not
// committed (the deleted stream is listed again at the next start, and can
// be deleted again).
func (w *storageWriter) onStopped(ctx actor.Context) {
	w.commit(ctx)
}

func (w *storageWriter) enqueue(ctx actor.Context, p pendingWrite) {
	if p.append != nil && p.append.Trace != "" && w.cfg.Tracer.Enabled() {
		p.span = w.cfg.Tracer.Start(currentTrace(ctx), "herald.storage.commit", trace.SpanKindInternal,
			attribute.Int("herald.shard", int(p.append.Shard.Shard)), attribute.Int64("herald.offset", int64(p.append.Batch.Base)),
			attribute.Int("herald.storage.queued_batches", w.pendingBatches))
	}
	w.pending = append(w.pending, p)
	if p.append != nil {
		w.pendingBatches++
		w.pendingBytes += len(p.append.Batch.Records)
	}
	if w.pendingBatches >= w.cfg.MaxGroupBatches || w.pendingBytes >= w.cfg.MaxGroupBytes {
		w.commit(ctx)
		return
	}
	if !w.markerQueued {
		w.markerQueued = true
		ctx.Send(ctx.Self(), &commitNow{})
	}
}

// commit writes everything pending in one commit and answers every requester.
func (w *storageWriter) commit(ctx actor.Context) {
	if len(w.pending) == 0 {
		return
	}
	group := w.pending
	w.pending = nil
	nBatches := w.pendingBatches
	w.pendingBatches, w.pendingBytes = 0, 0

	var appends []storage.Append
	var metas []storage.MetaPut
	for _, p := range group {
		switch {
		case p.append != nil:
			// A batch's own metadata (producer state) rides with it, in the
			// same transaction even if the commit is split.
			appends = append(appends, storage.Append{Shard: p.append.Shard, Batch: p.append.Batch, Metas: p.append.Metas})
		case p.meta != nil:
			metas = append(metas, p.meta.Puts...)
		}
	}
	err := w.failed
	if err == nil && (len(appends) > 0 || len(metas) > 0) {
		w.inflight = group
		start := time.Now()
		cerr := w.cfg.Log.Commit(appends, metas)
		w.inflight = nil
		record(w.cfg.Stats.Hist.CommitSeconds, time.Since(start).Seconds())
		record(w.cfg.Stats.Hist.CommitBatches, float64(nBatches))
		if cerr != nil {
			err = fmt.Errorf("%w: %w", ErrStorageFailed, cerr)
			w.failed = err
			w.cfg.Failed.CompareAndSwap(nil, &err)
			ctx.Logger().Error("storage writer: commit failed; refusing further writes", slog.Any("error", cerr),
				slog.Int("batches", nBatches))
			if w.cfg.OnFailure != nil {
				w.cfg.OnFailure(err)
			}
		} else {
			w.cfg.Stats.add(&w.cfg.Stats.Commits, 1)
			w.cfg.Stats.add(&w.cfg.Stats.CommittedBatches, uint64(nBatches))
		}
	}
	w.answer(ctx, group, err)
}

// answer replies to every request of a committed (or failed) group: one
// AppendsCommitted/AppendFailed per shard, in order, then meta and tail
// answers.
func (w *storageWriter) answer(ctx actor.Context, group []pendingWrite, err error) {
	type shardAnswer struct {
		to          *actor.PID
		from, until uint64
		trace       string
	}
	var order []storage.ShardKey
	answers := map[storage.ShardKey]*shardAnswer{}
	for _, p := range group {
		if p.span != nil {
			p.span.SetAttributes(attribute.Int("herald.storage.group_writes", len(group)))
			if err != nil {
				p.span.SetStatus(codes.Error, err.Error())
			}
			p.span.End()
		}
		if p.append == nil {
			continue
		}
		a, ok := answers[p.append.Shard]
		if !ok {
			a = &shardAnswer{to: p.from, from: p.append.Batch.Base}
			answers[p.append.Shard] = a
			order = append(order, p.append.Shard)
		}
		a.until = p.append.Batch.End()
		if a.trace == "" {
			a.trace = p.append.Trace
		}
	}
	for _, k := range order {
		a := answers[k]
		if a.to == nil {
			continue
		}
		if err != nil {
			ctx.Send(a.to, &AppendFailed{Shard: k, From: a.from, Err: err})
		} else {
			ctx.Send(a.to, &AppendsCommitted{Shard: k, From: a.from, Through: a.until, Trace: a.trace})
		}
	}
	for _, p := range group {
		switch {
		case p.meta != nil && p.from != nil:
			ctx.Send(p.from, &MetaWriteResponse{Err: err, Token: p.meta.Token})
		case p.tail != nil && p.from != nil:
			ctx.Send(p.from, w.recoveryState(ctx, p.tail))
		case p.drop != nil:
			if w.failed != nil {
				if p.from != nil {
					ctx.Send(p.from, &MetaWriteResponse{Err: w.failed})
				}
				continue
			}
			// Dropping a big stream's data takes a while: it runs beside the
			// writer (every append of the stream is committed by now), and
			// its metadata deletes come back as an ordinary commit.
			d, from := p.drop, p.from
			self, root := ctx.Self(), ctx.ActorSystem().Root
			if !w.cfg.Goroutines.Go(func() {
				metas, err := w.dropData(d)
				root.Send(self, &dropDone{from: from, metas: metas, err: err})
			}) && from != nil {
				ctx.Send(from, &MetaWriteResponse{Err: fmt.Errorf("%w: the node is stopping", ErrStorageFailed)})
			}
		}
	}
}

// recoveryState reads what a (re)starting shard needs, after the commits
// ahead of the request.
func (w *storageWriter) recoveryState(ctx actor.Context, r *TailRequest) *TailResponse {
	resp := &TailResponse{Err: w.failed}
	if resp.Err != nil {
		return resp
	}
	if resp.Tail, resp.Err = w.cfg.Log.Tail(r.Shard); resp.Err != nil {
		return resp
	}
	if resp.First, resp.Err = w.cfg.Log.First(r.Shard); resp.Err != nil {
		return resp
	}
	if len(r.ProducerPrefix) > 0 {
		resp.Err = w.cfg.Log.ScanMeta(r.ProducerPrefix, func(_, v []byte) error {
			resp.Producers = append(resp.Producers, append([]byte(nil), v...))
			return nil
		})
		if resp.Err == nil {
			resp.Err = w.forgetCutOff(ctx, r.Shard, resp.Tail, resp.Producers)
		}
	}
	if resp.Err == nil && r.Raft {
		resp.Raft, resp.Err = loadRaftDurable(w.cfg.Log, r.Shard)
	}
	return resp
}

// forgetCutOff makes the shard's idempotent producers agree with its
// recovered tail: a batch they remember that ends past it was cut off the
// log (storage truncates a torn or corrupt tail), so it is forgotten (see
// producerState.forgetFrom), in producers and durably, before the shard
// admits anything. Otherwise a re-send of the batch would be answered as a
// duplicate at offsets that do not hold it, and that the shard assigns to
// other batches.
func (w *storageWriter) forgetCutOff(ctx actor.Context, shard storage.ShardKey, tail uint64, producers [][]byte) error {
	var puts []storage.MetaPut
	for i, v := range producers {
		p, err := decodeProducerState(v)
		if err != nil || !p.forgetFrom(tail) {
			continue // a malformed one is skipped, and logged, by the shard
		}
		producers[i] = p.encode()
		puts = append(puts, storage.MetaPut{Key: producerKey(shard, p.id), Value: producers[i]})
		ctx.Logger().Warn("storage writer: an idempotent producer's batches past the recovered tail are forgotten",
			slog.Uint64("stream", shard.Stream), slog.Uint64("shard", uint64(shard.Shard)),
			slog.Uint64("producer", p.id), slog.Uint64("tail", tail), slog.Uint64("next_sequence", p.lastSeq+1))
	}
	if len(puts) == 0 {
		return nil
	}
	if err := w.cfg.Log.Commit(nil, puts); err != nil {
		return fmt.Errorf("%w: forgetting producer batches past the tail: %w", ErrStorageFailed, err)
	}
	return nil
}

// dropData removes a deleted stream's batches (and an ephemeral stream's
// producers) and returns the durable metadata deletes still to commit (the
// stream's config, its producers). It runs in a goroutine the writer owns and
// never commits to the durable log itself.
func (w *storageWriter) dropData(d *DropStreamRequest) ([]storage.MetaPut, error) {
	metas := d.Metas
	for _, prefix := range d.MetaPrefixes {
		if err := w.cfg.Log.ScanMeta(prefix, func(key, _ []byte) error {
			metas = append(metas, storage.MetaPut{Key: append([]byte(nil), key...)})
			return nil
		}); err != nil {
			return nil, err
		}
	}
	for _, k := range d.Shards {
		log := w.cfg.Log
		if !d.Durable && d.Memory != nil {
			log = d.Memory
		}
		if err := log.DropShard(k); err != nil {
			return nil, err
		}
		var keys []storage.MetaPut
		if err := log.ScanMeta(ProducerPrefix(k), func(key, _ []byte) error {
			keys = append(keys, storage.MetaPut{Key: append([]byte(nil), key...)})
			return nil
		}); err != nil {
			return nil, err
		}
		if log != w.cfg.Log {
			if err := log.Commit(nil, keys); err != nil {
				return nil, err
			}
			continue
		}
		metas = append(metas, keys...)
	}
	return metas, nil
}
