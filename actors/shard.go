package actors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// ShardConfig configures a shard actor.
type ShardConfig struct {
	// Key names the shard's log.
	Key storage.ShardKey
	// Stream is the stream's name, for logs.
	Stream wire.StreamName
	// Durable shards commit through Writer; ephemeral ones append to Log
	// (a MemoryLog) directly.
	Durable bool
	// Log is the shard's log: the Badger log for durable streams, a memory
	// log for ephemeral ones. Subscriptions read history from it.
	Log storage.Log
	// Writer is the storage writer (durable shards only).
	Writer *actor.PID
	// RingBatches and RingBytes bound the replay ring.
	RingBatches int
	RingBytes   int64
	// Now returns the time stamped on batches; nil means time.Now.
	Now func() time.Time
}

// shard is the single writer of one shard's log: it assigns offsets, hands
// batches to storage without waiting, and when they are durable acks them
// and pushes them to every subscription within its credit. It never blocks.
type shard struct {
	cfg  ShardConfig
	core *shardCore
	// ready is false until the tail is known (durable shards ask the storage
	// writer, so no offset still on its way to disk is reused).
	ready bool
	// stash holds messages that arrived before ready, with their senders.
	stash []stashed
	// failed is set once storage failed; every publish is refused after it.
	failed error
	log    *slog.Logger
}

type stashed struct {
	msg    any
	sender *actor.PID
}

// NewShardProps returns the props of a shard actor.
func NewShardProps(cfg ShardConfig) *actor.Props {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return actor.PropsFromProducer(func() actor.Actor { return &shard{cfg: cfg} })
}

// Receive dispatches.
func (s *shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.onStarted(ctx)
	case *PublishRequest:
		if !s.ready {
			s.stash = append(s.stash, stashed{msg: m, sender: ctx.Sender()})
			return
		}
		s.onPublish(ctx, m)
	case *SubscribeShardRequest:
		if !s.ready {
			s.stash = append(s.stash, stashed{msg: m, sender: ctx.Sender()})
			return
		}
		s.onSubscribe(ctx, ctx.Sender(), m)
	case *AppendsCommitted:
		s.onCommitted(ctx, m)
	case *AppendFailed:
		s.onAppendFailed(ctx, m)
	case *CreditReturned:
		s.onCredit(ctx, ctx.Sender(), m)
	case *ResumeLive:
		s.onResumeLive(ctx, ctx.Sender(), m)
	case *ShardInfoRequest:
		ctx.Respond(&ShardInfoResponse{Shard: s.cfg.Key.Shard, Tail: s.committedTail()})
	case *actor.Terminated:
		if s.core != nil {
			delete(s.core.subs, m.Who.Id)
		}
	case *actor.Restarting:
		s.onRestarting(ctx)
	case *actor.Stopping:
		s.onStopping(ctx)
	case *actor.Stopped:
	default:
		s.logger(ctx).Warn("shard: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (s *shard) logger(ctx actor.Context) *slog.Logger {
	if s.log == nil {
		s.log = ctx.Logger().With(slog.String("stream", s.cfg.Stream.String()), slog.Uint64("shard", uint64(s.cfg.Key.Shard)))
	}
	return s.log
}

func (s *shard) committedTail() uint64 {
	if s.core == nil {
		return 0
	}
	return s.core.committed
}

func (s *shard) onStarted(ctx actor.Context) {
	if !s.cfg.Durable {
		tail, err := s.cfg.Log.Tail(s.cfg.Key)
		if err != nil {
			panic(fmt.Errorf("shard %s/%d: memory tail: %w", s.cfg.Stream, s.cfg.Key.Shard, err))
		}
		s.becomeReady(ctx, tail)
		return
	}
	f := ctx.RequestFuture(s.cfg.Writer, &TailRequest{Shard: s.cfg.Key}, 30*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		if err == nil {
			if r, ok := res.(*TailResponse); ok {
				err = r.Err
				if err == nil {
					s.becomeReady(ctx, r.Tail)
					return
				}
			} else {
				err = fmt.Errorf("unexpected tail response %T", res)
			}
		}
		// Without a tail the shard cannot assign offsets; it refuses
		// publishes with a storage failure until restarted.
		s.logger(ctx).Error("shard: cannot recover tail", slog.Any("error", err))
		s.failed = err
		s.becomeReady(ctx, 0)
	})
}

func (s *shard) becomeReady(ctx actor.Context, tail uint64) {
	s.core = newShardCore(s.cfg.Key.Shard, tail, s.cfg.RingBatches, s.cfg.RingBytes)
	s.ready = true
	stash := s.stash
	s.stash = nil
	for _, st := range stash {
		switch m := st.msg.(type) {
		case *PublishRequest:
			s.onPublish(ctx, m)
		case *SubscribeShardRequest:
			s.onSubscribe(ctx, st.sender, m)
		}
	}
}

func (s *shard) onPublish(ctx actor.Context, m *PublishRequest) {
	if s.failed != nil {
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: storageError(s.failed)})
		return
	}
	b := s.core.admit(pendingPublish{
		batch:   storage.Batch{Count: m.Count, Timestamp: s.cfg.Now().UnixNano(), Records: m.Records},
		reqID:   m.ReqID,
		ack:     m.Ack,
		replyTo: m.ReplyTo,
	})
	if !s.cfg.Durable {
		if err := s.cfg.Log.Commit([]storage.Append{{Shard: s.cfg.Key, Batch: b}}, nil); err != nil {
			s.onAppendFailed(ctx, &AppendFailed{Shard: s.cfg.Key, From: b.Base, Err: err})
			return
		}
		s.onCommitted(ctx, &AppendsCommitted{Shard: s.cfg.Key, Through: b.End()})
		return
	}
	ctx.Request(s.cfg.Writer, &AppendRequest{Shard: s.cfg.Key, Batch: b})
}

func (s *shard) onCommitted(ctx actor.Context, m *AppendsCommitted) {
	if s.core == nil {
		return
	}
	done := s.core.commitThrough(m.Through)
	for _, p := range done {
		if p.ack != wire.AckNone && p.replyTo != nil {
			ctx.Send(p.replyTo, &PublishAcked{ReqID: p.reqID, Shard: s.cfg.Key.Shard, Offset: p.batch.Base, Count: p.batch.Count})
		}
	}
	if len(done) > 0 {
		for _, sub := range s.core.subs {
			s.pump(ctx, sub)
		}
	}
}

func (s *shard) onAppendFailed(ctx actor.Context, m *AppendFailed) {
	if s.core == nil {
		return
	}
	s.failed = m.Err
	s.logger(ctx).Error("shard: append failed; refusing publishes", slog.Any("error", m.Err))
	for _, p := range s.core.failPending() {
		if p.replyTo != nil {
			ctx.Send(p.replyTo, &PublishRejected{ReqID: p.reqID, Ack: p.ack, Err: storageError(m.Err)})
		}
	}
}

func storageError(err error) *wire.Error {
	return &wire.Error{Code: wire.CodeStorageFailure, Message: err.Error()}
}

func (s *shard) onSubscribe(ctx actor.Context, from *actor.PID, m *SubscribeShardRequest) {
	if from == nil {
		return
	}
	next, werr := s.core.resolveStart(m.Start, m.Offset)
	if werr != nil {
		ctx.Send(from, &SubscribeShardResponse{Err: werr, Tail: s.core.committed})
		return
	}
	sub := s.core.addSub(from, next, m.Capacity, m.MaxBytes)
	ctx.Watch(from)
	ctx.Send(from, &SubscribeShardResponse{Next: next, Tail: s.core.committed})
	s.pump(ctx, sub)
}

func (s *shard) onCredit(ctx actor.Context, from *actor.PID, m *CreditReturned) {
	if s.core == nil || from == nil {
		return
	}
	sub, ok := s.core.subs[from.Id]
	if !ok || sub.reading {
		return
	}
	s.core.credit(sub, m.Entries, m.Bytes)
	s.pump(ctx, sub)
}

func (s *shard) onResumeLive(ctx actor.Context, from *actor.PID, m *ResumeLive) {
	if s.core == nil || from == nil {
		return
	}
	sub, ok := s.core.subs[from.Id]
	if !ok {
		return
	}
	sub.reading = false
	sub.next = m.Next
	sub.inEntries, sub.inBytes = m.InEntries, m.InBytes
	if m.Skip {
		s.core.skipMissing(sub)
	}
	s.pump(ctx, sub)
}

func (s *shard) pump(ctx actor.Context, sub *subState) {
	secs, read := s.core.pump(sub)
	if len(secs) > 0 {
		ctx.Send(sub.pid, &SectionsPushed{Sections: secs})
	}
	if read {
		ctx.Send(sub.pid, &ReadHistory{From: sub.next, Tail: s.core.committed})
		sub.inEntries, sub.inBytes = 0, 0
	}
}

// onRestarting runs on the failed instance: it tells its publishers their
// outcome is unknown and its subscriptions to subscribe again.
func (s *shard) onRestarting(ctx actor.Context) {
	if s.core == nil {
		return
	}
	for _, p := range s.core.pending {
		if p.replyTo != nil {
			ctx.Send(p.replyTo, &PublishRejected{ReqID: p.reqID, Ack: p.ack,
				Err: &wire.Error{Code: wire.CodeInternal, Message: "shard restarted; the publish may or may not have been written"}})
		}
	}
	for _, sub := range s.core.subs {
		ctx.Send(sub.pid, &ShardRestarted{})
	}
}

// onStopping answers what is pending: the node stops shards only after the
// listener, so no new publish arrives; a durable batch still pending has been
// sent to the storage writer, which commits it before it stops, but its ack
// can no longer be delivered.
func (s *shard) onStopping(ctx actor.Context) {
	if s.core == nil {
		return
	}
	for _, p := range s.core.pending {
		if p.replyTo != nil {
			ctx.Send(p.replyTo, &PublishRejected{ReqID: p.reqID, Ack: p.ack,
				Err: &wire.Error{Code: wire.CodeInternal, Message: "node shutting down; the publish may or may not have been written"}})
		}
	}
}
