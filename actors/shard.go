package actors

import (
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// ShardConfig configures a shard actor.
type ShardConfig struct {
	// Dispatcher runs the shard's mailbox (nil: protoactor's default; the
	// node's is Goroutines.Dispatcher).
	Dispatcher actor.Dispatcher
	// Key names the shard's log.
	Key storage.ShardKey
	// Tracer traces publishes that arrive with trace context (nil: none).
	Tracer *Tracer
	// Counters are the stream's publish counters (nil: none).
	Counters *StreamCounters
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
	// Overflow is the stream's overflow policy.
	Overflow wire.Overflow
	// RingRecords and RingBytes bound the replay ring.
	RingRecords int
	RingBytes   int64
	// MaxPending bounds admitted-but-uncommitted publishes (pub_queue_depth,
	// default 1024); a publish that finds it full, or finds the shard
	// blocked by a subscriber under the block policy, waits up to
	// PendingWait and is then refused with CodeOverloaded.
	MaxPending  int
	PendingWait time.Duration
	// Stats is the node's, for metrics (may be nil).
	Stats *Stats
	// QueueTotal and RingTotal are the node-wide byte budgets of subscriber
	// queues and replay rings (nil: none).
	QueueTotal, RingTotal *Budget
	// Now returns the time stamped on batches; nil means time.Now.
	Now func() time.Time
	// Deleted, shared by every instance of the shard, is set when its stream
	// is deleted: a tombstone that restarts stays a tombstone.
	Deleted *atomic.Bool
	// Progress is where the shard publishes its committed tail and first
	// retained offset (nil: nowhere).
	Progress *ShardProgress
	// Raft makes the shard a replica of its raft group (a replicated
	// stream's shard; shard_raft.go). Nil: the node's own shard.
	Raft *ShardRaft
	// Groups is the groups registry: shard 0 of a cluster stream tells it
	// when its replica starts or stops leading (GroupLeadership), since the
	// stream's group coordinators run on that leader (nil: nobody).
	Groups *actor.PID
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
	// deleted is set when the stream is deleted: the shard is a tombstone.
	deleted bool
	// tombstoneTimer stops a tombstone after its grace period.
	tombstoneTimer *time.Timer
	// watchers wait for the tail to pass what they know (WatchTail).
	watchers map[string]tailWatcher
	// held are publishes waiting for admission, oldest first.
	held []heldPublish
	// heldTimer fires when the oldest held publish's wait is over.
	heldTimer *time.Timer
	// handling is the publish being handled: if handling it panics, the
	// supervisor strategy answers it, so the failed instance must not
	// answer it again as pending.
	handling *PublishRequest
	log      *slog.Logger

	// A replicated shard's replica (shard_raft.go).
	replica *raftReplica
	// proposals are the publishes this leader proposed, by proposal id,
	// and proposalOrder their ids oldest first; proposalTimer fires for
	// the oldest's deadline.
	proposals     map[uint64]*proposalWait
	proposalOrder []uint64
	nextProposal  uint64
	proposalTimer func() bool
	// lead is the leader the replica knows of; stoppingRaft is set once
	// a failed replica stopped the shard.
	lead         uint64
	stoppingRaft bool
	// ticks counts raft ticks; ledSince is the tick this replica last
	// became leader at.
	ticks, ledSince int
	// compactTo is the last compaction index that applied; compaction is
	// one not carried out yet.
	compactTo  uint64
	compaction *pendingCompaction
	// install is a snapshot being installed (shard_snapshot.go).
	install *shardInstall
	// reads are linearizable info requests waiting for the replica, by
	// read id (shard_reads.go).
	reads    map[uint64]*tailRead
	nextRead uint64
	// heard is the tick each peer was last heard from at.
	heard map[uint64]int
	// confUntil is the tick until which this leader waits for the
	// configuration change it proposed last, in term confTerm, to apply
	// (0: none); members are the group's replicas as of the last change
	// applied, and notifyRemoved the replicas a change removed, by the
	// tick until which this leader tells them so (shard_reconfig.go).
	confUntil     int
	confTerm      uint64
	members0      []uint64
	notifyRemoved map[uint64]int
	toldAt        map[uint64]int
	// confChecked is set once a restart's snapshot was checked against the
	// configuration (checkRestartSnapshot).
	confChecked bool
	// leaving is set when the replica was removed from its group and the
	// shard stops once its last batches are stored (maybeLeave);
	// replacing once it asked the catalog to start it again.
	leaving, replacing bool
	// raftGauges are the replica's per-group metrics (nil: no replica).
	raftGauges *RaftGauges
	// follow is the follower-read bookkeeping (shard_follower.go).
	follow followerState
	// removed is set once the replica left its group (leaveGroup);
	// handingOff once its node asked it to hand leadership over for good
	// (shard_handoff.go).
	removed, handingOff bool
	// A stub's view of its replicas' tail (shard_remote.go): a question is
	// out (remotePolling), the timer of the next (remoteTimer), and which
	// replica to ask (remoteAttempt, turning on a failure).
	remotePolling bool
	remoteTimer   func() bool
	remoteAttempt int
}

type stashed struct {
	msg    any
	sender *actor.PID
}

// heldPublish is a publish waiting for admission.
type heldPublish struct {
	m        *PublishRequest
	deadline time.Time
}

// heldExpired is the shard's timer message: the oldest held publish may
// have waited too long.
type heldExpired struct{}

// NewShardProps returns the props of a shard actor.
func NewShardProps(cfg ShardConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1024
	}
	if cfg.Deleted == nil {
		cfg.Deleted = &atomic.Bool{}
	}
	if cfg.PendingWait <= 0 {
		cfg.PendingWait = 2 * time.Second
	}
	// A shard started again takes its old name: its mailbox holds what is
	// sent to that name until protoactor has set it up (guardedMailbox).
	return actor.PropsFromProducer(func() actor.Actor { return &shard{cfg: cfg} }, actor.WithDispatcher(cfg.Dispatcher),
		actor.WithMailbox(guardedMailboxes(actor.Unbounded())))
}

// Receive dispatches.
func (s *shard) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*MetaWriteResponse); ok && s.install != nil && m.Token != 0 &&
		(m.Token == s.install.markToken || m.Token == s.install.finishToken) {
		s.onInstallWritten(ctx, m) // a snapshot install's own writes
		s.afterRaft(ctx)
		return
	}
	if s.replica != nil {
		if in, ok := ctx.Message().(*RaftInbound); ok {
			s.heard[in.From] = s.ticks // the peer is alive (leadership handover)
		}
		if s.replica.receive(ctx, ctx.Message()) {
			s.afterRaft(ctx)
			s.answerReads(ctx)
			if len(s.held) > 0 && !s.stoppingRaft {
				// Proposals that ended without a batch (refused, duplicates,
				// answered on a step-down) made room: admit what waits.
				s.admitHeld(ctx)
			}
			return
		}
	}
	switch m := ctx.Message().(type) {
	case *MetaWriteResponse:
		// For a replica that is not running.
	case *raftTick, *RaftInbound, *PeerUndelivered:
		// For a replica that is not running (yet, or any more).
	case *ShardInbound:
		s.onShardInbound(ctx, m)
		s.afterRaft(ctx)
	case *installTimeout:
		s.onInstallTimeout(ctx, m)
		s.afterRaft(ctx)
	case *PeerSuspect:
		// For a replica that is not running.
	case *ShardReplicasChanged:
		s.onReplicasChanged(ctx)
	case *ShardHandOff:
		s.onHandOff(ctx)
	case *GroupStateWrite:
		s.onGroupStateWrite(ctx, m)
	case *remoteTailRead:
		s.onRemoteTailRead(ctx, m)
	case *remoteTailPoll:
		s.onRemoteTailPoll(ctx)
	case *proposalsExpired:
		if s.replica != nil {
			s.onProposalsExpired(ctx)
		}
	case *actor.Started:
		s.onStarted(ctx)
	case *PublishRequest:
		s.onPublishRequest(ctx, m)
	case *StreamDeletedRequest:
		s.onDeleted(ctx)
	case *tombstoneExpired:
		s.onTombstoneExpired(ctx)
	case *heldExpired:
		s.onHeldExpired(ctx)
	case *SubscribeShardRequest:
		s.onSubscribeRequest(ctx, m)
	case *AppendsCommitted:
		s.onCommitted(ctx, m)
		s.maybeLeave(ctx)
	case *AppendFailed:
		s.onAppendFailed(ctx, m)
		s.maybeLeave(ctx)
	case *CreditReturned:
		s.onCredit(ctx, ctx.Sender(), m)
	case *ResumeLive:
		s.onResumeLive(ctx, ctx.Sender(), m)
	case *WatchTail:
		s.onWatchTail(ctx, ctx.Sender(), m)
	case *ShardInfoRequest:
		s.onShardInfo(ctx, m)
	case *ShardStatsRequest:
		s.onStatsRequest(ctx, m)
	case *RetentionApplied:
		s.onRetentionApplied(m)
	case *actor.Terminated:
		s.onTerminated(ctx, m)
	case *actor.Restarting:
		s.onRestarting(ctx)
	case *actor.Stopping:
		s.onStopping(ctx)
	case *actor.Stopped:
		// Nothing left to do: Stopping answered what was pending.
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

func (s *shard) onStarted(ctx actor.Context) {
	if s.cfg.Deleted.Load() {
		s.onDeleted(ctx) // a tombstone that restarted
		return
	}
	if !s.cfg.Durable {
		tail, err := s.cfg.Log.Tail(s.cfg.Key)
		if err != nil {
			panic(fmt.Errorf("shard %s/%d: memory tail: %w", s.cfg.Stream, s.cfg.Key.Shard, err))
		}
		first, err := s.cfg.Log.First(s.cfg.Key)
		if err != nil {
			panic(fmt.Errorf("shard %s/%d: memory first: %w", s.cfg.Stream, s.cfg.Key.Shard, err))
		}
		r := &TailResponse{Tail: tail, First: first}
		// Producers live beside the batches, in memory too.
		if err := s.cfg.Log.ScanMeta(ProducerPrefix(s.cfg.Key), func(_, v []byte) error {
			r.Producers = append(r.Producers, append([]byte(nil), v...))
			return nil
		}); err != nil {
			panic(fmt.Errorf("shard %s/%d: memory producers: %w", s.cfg.Stream, s.cfg.Key.Shard, err))
		}
		s.becomeReady(ctx, r)
		return
	}
	if s.cfg.Raft != nil && !s.cfg.Raft.hosted() {
		s.becomeReady(ctx, &TailResponse{}) // it refuses everything, naming a replica
		return
	}
	f := ctx.RequestFuture(s.cfg.Writer, &TailRequest{Shard: s.cfg.Key, ProducerPrefix: ProducerPrefix(s.cfg.Key), Raft: s.cfg.Raft != nil}, 30*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		if err == nil {
			if r, ok := res.(*TailResponse); ok {
				err = r.Err
				if err == nil {
					s.becomeReady(ctx, r)
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
		s.becomeReady(ctx, &TailResponse{})
	})
}

func (s *shard) becomeReady(ctx actor.Context, r *TailResponse) {
	s.core = newShardCore(s.cfg.Key.Shard, r.First, r.Tail, s.cfg.RingRecords, s.cfg.RingBytes)
	s.core.durable, s.core.overflow, s.core.stats = s.cfg.Durable, s.cfg.Overflow, s.cfg.Stats
	s.core.queueTotal, s.core.ring.total = s.cfg.QueueTotal, s.cfg.RingTotal
	for _, v := range r.Producers {
		p, err := decodeProducerState(v)
		if err != nil {
			s.logger(ctx).Error("shard: skipping a malformed producer record", slog.Any("error", err))
			continue
		}
		s.core.producers[p.id] = p
	}
	s.ready = true
	if s.cfg.Raft != nil && s.cfg.Raft.hosted() {
		if s.failed == nil {
			s.startReplica(ctx, r.Raft)
		} else {
			s.wakePeers(ctx) // no replica here: a quiet group must elect without it
		}
	}
	if s.cfg.Raft != nil && s.failed == nil && s.install == nil {
		// An instance restarted in place runs the placement it was
		// spawned with; the stream's may have changed since.
		s.reconcileHosting(ctx)
	}
	s.publishProgress()
	s.notifyWatchers(ctx, false)
	stash := s.stash
	s.stash = nil
	for _, st := range stash {
		switch m := st.msg.(type) {
		case *PublishRequest:
			s.admitOrHold(ctx, m)
		case *SubscribeShardRequest:
			s.onSubscribe(ctx, st.sender, m)
		case *ShardInfoRequest:
			s.answerInfo(ctx, st.sender, m)
		case *GroupStateWrite:
			ctx.RequestWithCustomSender(ctx.Self(), m, st.sender) // behind the replica's start
		}
	}
}

// publishProgress publishes the committed tail and first retained offset
// for readers outside the actor (a group's lag).
func (s *shard) publishProgress() {
	if p := s.cfg.Progress; p != nil {
		p.Tail.Store(s.core.committed)
		p.First.Store(s.core.first)
	}
}

// info describes the shard (zeros for what it does not know).
func (s *shard) info() *ShardInfoResponse {
	resp := &ShardInfoResponse{Shard: s.cfg.Key.Shard}
	if s.core != nil {
		resp.First, resp.Tail = s.core.first, s.core.committed
		resp.Blocked, resp.Held, resp.Drops = s.core.blocked, len(s.held), s.core.drops
	}
	s.raftInfo(resp)
	return resp
}

// onShardInfo answers a ShardInfoRequest, or stashes it until the shard is
// ready.
func (s *shard) onShardInfo(ctx actor.Context, m *ShardInfoRequest) {
	if !s.ready && !s.deleted {
		// Its tail is not known yet: answered once it is, rather than
		// with a tail of 0 while the shard holds records.
		s.stash = append(s.stash, stashed{msg: m, sender: ctx.Sender()})
		return
	}
	s.answerInfo(ctx, ctx.Sender(), m)
}

// answerInfo answers an info request: at once, or for a linearizable one
// on a replicated shard once its replica confirmed the tail (shard_reads.go).
func (s *shard) answerInfo(ctx actor.Context, to *actor.PID, m *ShardInfoRequest) {
	if to == nil {
		return
	}
	if m.Linearizable && s.cfg.Raft != nil {
		s.linearizableInfo(ctx, to, m.Replica)
		return
	}
	ctx.Send(to, s.info())
}

// onRetentionApplied moves the first retained offset up to what retention
// kept (never past the committed tail).
func (s *shard) onRetentionApplied(m *RetentionApplied) {
	if s.core != nil {
		s.core.first = max(s.core.first, min(m.First, s.core.committed))
		s.publishProgress()
	}
}

// onPublishRequest refuses a publish to a deleted stream, stashes it until
// the shard is ready, or admits or holds it.
func (s *shard) onPublishRequest(ctx actor.Context, m *PublishRequest) {
	switch {
	case s.deleted:
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: errStreamDeleted()})
	case !s.ready:
		s.stash = append(s.stash, stashed{msg: m, sender: ctx.Sender()})
	default:
		s.admitOrHold(ctx, m)
	}
}

func (s *shard) onPublish(ctx actor.Context, m *PublishRequest) {
	stages.MarkRecords(stages.Shard, m.Records)
	// handling stays set if publish panics: onRestarting leaves that one to
	// the supervisor strategy, which answers it (a deferred reset would run
	// while the panic unwinds, and the publish would be answered twice).
	s.handling = m
	s.publish(ctx, m)
	s.handling = nil
}

func (s *shard) publish(ctx actor.Context, m *PublishRequest) {
	if s.cfg.Raft != nil && !s.cfg.Raft.hosted() {
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: s.notHosted()})
		return
	}
	if s.failed != nil {
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: storageError(s.failed)})
		return
	}
	if s.replica != nil {
		s.proposePublish(ctx, m)
		return
	}
	if s.cfg.Raft != nil {
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: s.installing()})
		return
	}
	decision, werr, dup, dupOf := s.core.checkPublish(m)
	switch decision {
	case decideRefuse:
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: werr})
		return
	case decideDuplicate:
		if dupOf >= 0 {
			p := &s.core.pending[dupOf]
			p.dups = append(p.dups, dupReply{reqID: m.ReqID, ack: m.Ack, replyTo: m.ReplyTo})
			return
		}
		ctx.Send(m.ReplyTo, &PublishAcked{ReqID: m.ReqID, Ack: m.Ack, Shard: s.cfg.Key.Shard, Offset: dup.base, Count: dup.count, Duplicate: true})
		return
	}
	b := s.core.admit(pendingPublish{
		batch:    storage.Batch{Count: m.Count, Timestamp: s.cfg.Now().UnixNano(), Records: m.Records},
		reqID:    m.ReqID,
		ack:      m.Ack,
		replyTo:  m.ReplyTo,
		received: m.Received,
	})
	var trace string
	if s.cfg.Tracer.Enabled() {
		trace = s.traceAppend(ctx, m, b)
	}
	var metas []storage.MetaPut
	if m.Idempotent {
		p := s.core.admitProducer(m.ProducerID, m.Sequence, b)
		metas = []storage.MetaPut{{Key: producerKey(s.cfg.Key, p.id), Value: p.encode()}}
	}
	if !s.cfg.Durable {
		if err := s.cfg.Log.Commit([]storage.Append{{Shard: s.cfg.Key, Batch: b, Metas: metas}}, nil); err != nil {
			s.onAppendFailed(ctx, &AppendFailed{Shard: s.cfg.Key, From: b.Base, Err: err})
			return
		}
		s.onCommitted(ctx, &AppendsCommitted{Shard: s.cfg.Key, From: b.Base, Through: b.End()})
		return
	}
	ctx.Request(s.cfg.Writer, &AppendRequest{Shard: s.cfg.Key, Batch: b, Metas: metas, Trace: trace})
}

// traceAppend starts the append span of the batch just admitted (the last
// pending one), if its publish is traced; the span ends when the batch is
// committed. It returns the span's traceparent for the storage writer.
func (s *shard) traceAppend(ctx actor.Context, m *PublishRequest, b storage.Batch) string {
	// The parent is the actor span of this publish's arrival, unless it
	// waited (held, or stashed before the shard was ready) and is admitted
	// while another message is handled: then the connection's span.
	parent := m.Trace
	if ctx.Message() == m {
		if tp := currentTrace(ctx); tp != "" {
			parent = tp
		}
	}
	span := s.cfg.Tracer.Start(parent, "herald.shard.append", oteltrace.SpanKindInternal,
		attribute.String("herald.stream", s.cfg.Stream.String()), attribute.Int("herald.shard", int(s.cfg.Key.Shard)),
		attribute.Int64("herald.offset", int64(b.Base)), attribute.Int("herald.batch.records", int(b.Count)),
		attribute.Int("herald.batch.bytes", len(b.Records)), attribute.Int("herald.shard.pending", len(s.core.pending)-1))
	if span == nil {
		return ""
	}
	s.core.pending[len(s.core.pending)-1].span = span
	return Traceparent(span.SpanContext())
}

func (s *shard) onCommitted(ctx actor.Context, m *AppendsCommitted) {
	if s.core == nil || s.failed != nil {
		return
	}
	if len(s.core.pending) == 0 || s.core.pending[0].batch.Base != m.From {
		// Commits come back in the order batches were sent: one that does not
		// start at the oldest pending batch means a batch went missing (a
		// storage writer that restarted mid-commit). Acking past it would ack
		// a record that may not be stored.
		s.onAppendFailed(ctx, &AppendFailed{Shard: s.cfg.Key, Err: fmt.Errorf(
			"%w: commit notice from offset %d does not follow the pending batches", ErrStorageFailed, m.From)})
		return
	}
	done := s.core.commitThrough(m.Through)
	s.publishProgress() // before the acks: who learns of a record from its ack sees it in the tail
	for _, p := range done {
		if p.span != nil {
			p.span.End()
		}
		s.cfg.Stats.add(&s.cfg.Stats.PublishedBatches, 1)
		s.cfg.Stats.add(&s.cfg.Stats.PublishedRecords, uint64(p.batch.Count))
		s.cfg.Stats.add(&s.cfg.Stats.PublishedBytes, uint64(len(p.batch.Records)))
		if c := s.cfg.Counters; c != nil {
			c.Batches.Add(1)
			c.Records.Add(uint64(p.batch.Count))
			c.Bytes.Add(uint64(len(p.batch.Records)))
		}
		if !p.received.IsZero() {
			record(s.cfg.Stats.Hist.PublishAckSeconds, time.Since(p.received).Seconds())
		}
		// AckNone publishes are answered too: the lane writes nothing for
		// them but frees their window slot, so unacked publishes are bounded
		// like acked ones.
		if p.replyTo != nil {
			ack := &PublishAcked{ReqID: p.reqID, Ack: p.ack, Shard: s.cfg.Key.Shard, Offset: p.batch.Base, Count: p.batch.Count}
			if p.span != nil {
				ack.Trace = Traceparent(p.span.SpanContext())
			}
			ctx.Send(p.replyTo, ack)
		}
		for _, d := range p.dups {
			ctx.Send(d.replyTo, &PublishAcked{ReqID: d.reqID, Ack: d.ack, Shard: s.cfg.Key.Shard, Offset: p.batch.Base, Count: p.batch.Count, Duplicate: true})
		}
	}
	if len(done) > 0 {
		for _, sub := range s.core.subs {
			s.pump(ctx, sub)
		}
		s.admitHeld(ctx)
		s.notifyWatchers(ctx, false)
	}
	if s.install != nil {
		s.continueInstall(ctx) // the page is written: the next one
		s.afterRaft(ctx)
	}
	s.answerReads(ctx)
}

// onWatchTail answers a tail watcher at once if the tail is past what it
// knows, else remembers it until a commit moves the tail.
func (s *shard) onWatchTail(ctx actor.Context, from *actor.PID, m *WatchTail) {
	if from == nil {
		return
	}
	if s.deleted {
		ctx.Send(from, &TailAdvanced{Shard: s.cfg.Key.Shard})
		return
	}
	if s.ready && s.core != nil && s.core.committed > m.After {
		ctx.Send(from, &TailAdvanced{Shard: s.cfg.Key.Shard, Tail: s.core.committed, First: s.core.first})
		return
	}
	if s.watchers == nil {
		s.watchers = map[string]tailWatcher{}
	}
	s.watchers[from.Id] = tailWatcher{pid: from, after: m.After}
	s.pollRemoteTail(ctx) // a stub learns the tail from a replica
}

type tailWatcher struct {
	pid   *actor.PID
	after uint64
}

// notifyWatchers tells every tail watcher whose tail moved (all of them
// with force) the tail, once.
func (s *shard) notifyWatchers(ctx actor.Context, force bool) {
	if len(s.watchers) == 0 {
		return
	}
	var tail, first uint64
	if s.core != nil {
		tail, first = s.core.committed, s.core.first
	}
	for id, w := range s.watchers {
		if force || tail > w.after {
			ctx.Send(w.pid, &TailAdvanced{Shard: s.cfg.Key.Shard, Tail: tail, First: first})
			delete(s.watchers, id)
		}
	}
}

// admitOrHold admits a publish, or holds it while the shard is blocked or
// has MaxPending publishes uncommitted. Held publishes keep their order.
func (s *shard) admitOrHold(ctx actor.Context, m *PublishRequest) {
	if len(s.held) == 0 && !s.core.blocked && s.inFlight() < s.cfg.MaxPending {
		s.onPublish(ctx, m)
		return
	}
	s.held = append(s.held, heldPublish{m: m, deadline: s.cfg.Now().Add(s.cfg.PendingWait)})
	s.armHeldTimer(ctx)
}

// admitHeld admits held publishes while the shard can take them.
func (s *shard) admitHeld(ctx actor.Context) {
	if !s.core.unblock() {
		return
	}
	for len(s.held) > 0 && s.inFlight() < s.cfg.MaxPending && !s.core.blocked {
		m := s.held[0].m
		s.held[0] = heldPublish{}
		s.held = s.held[1:]
		s.onPublish(ctx, m)
	}
	if len(s.held) == 0 {
		s.held = nil
	}
}

// onHeldExpired refuses the held publishes whose wait is over with
// CodeOverloaded, and re-arms the timer for the next.
func (s *shard) onHeldExpired(ctx actor.Context) {
	s.heldTimer = nil
	now := s.cfg.Now()
	for len(s.held) > 0 && !s.held[0].deadline.After(now) {
		m := s.held[0].m
		s.held[0] = heldPublish{}
		s.held = s.held[1:]
		ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: &wire.Error{Code: wire.CodeOverloaded,
			Message: fmt.Sprintf("the shard's publish queue stayed full for %s", s.cfg.PendingWait)}})
		s.core.drops.Overloaded++
		s.cfg.Stats.add(&s.cfg.Stats.Overloaded, 1)
	}
	s.armHeldTimer(ctx)
}

// armHeldTimer makes sure a timer will wake the shard when the oldest held
// publish's wait is over. The timer only sends a message; the deadline is
// checked against the shard's clock.
func (s *shard) armHeldTimer(ctx actor.Context) {
	if s.heldTimer != nil || len(s.held) == 0 {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.heldTimer = time.AfterFunc(max(s.held[0].deadline.Sub(s.cfg.Now()), time.Millisecond), func() {
		root.Send(self, &heldExpired{})
	})
}

// tombstoneGrace is how long a deleted stream's shard keeps refusing
// publishes before it stops: connections drop their cached route when they
// see the stream deleted, so by then nothing is sent to it.
const tombstoneGrace = 30 * time.Second

func errStreamDeleted() *wire.Error {
	return wire.Errorf(wire.CodeStreamNotFound, "the stream was deleted")
}

// onDeleted turns the shard into a tombstone: what waits for admission is
// refused, subscriptions end, and nothing more goes to storage. Publishes
// already admitted are still answered when their commit comes back (their
// records are then dropped with the stream).
func (s *shard) onDeleted(ctx actor.Context) {
	s.cfg.Deleted.Store(true)
	s.deleted = true
	s.rejectUnadmitted(ctx, errStreamDeleted())
	if s.core != nil {
		for _, sub := range s.core.subs {
			ctx.Unwatch(sub.pid)
			ctx.Send(sub.pid, &StreamGone{})
		}
		clear(s.core.subs)
	}
	s.notifyWatchers(ctx, true)
	if ctx.Sender() != nil {
		ctx.Respond(&StreamDeletedResponse{})
	}
	if s.tombstoneTimer == nil {
		self, root := ctx.Self(), ctx.ActorSystem().Root
		s.tombstoneTimer = time.AfterFunc(tombstoneGrace, func() { root.Send(self, &tombstoneExpired{}) })
	}
}

// onTombstoneExpired stops the tombstone once its grace is over.
func (s *shard) onTombstoneExpired(ctx actor.Context) {
	ctx.Stop(ctx.Self())
}

// rejectUnadmitted answers the publishes stashed before the shard was ready
// or held for admission: none of them was admitted. (The publish whose
// handling failed is answered by the supervisor strategy, which is handed
// the message.)
func (s *shard) rejectUnadmitted(ctx actor.Context, err *wire.Error) {
	if s.heldTimer != nil {
		s.heldTimer.Stop()
		s.heldTimer = nil
	}
	for _, h := range s.held {
		if h.m.ReplyTo != nil {
			ctx.Send(h.m.ReplyTo, &PublishRejected{ReqID: h.m.ReqID, Ack: h.m.Ack, Err: err})
		}
	}
	s.held = nil
	for _, st := range s.stash {
		switch m := st.msg.(type) {
		case *PublishRequest:
			if m.ReplyTo != nil {
				ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: err})
			}
		case *SubscribeShardRequest:
			if st.sender != nil {
				ctx.Send(st.sender, &SubscribeShardResponse{Err: wire.Errorf(wire.CodeSubscriptionAborted, "the shard failed before the subscription started")})
			}
		case *ShardInfoRequest:
			if st.sender != nil {
				ctx.Send(st.sender, s.info()) // what it knows, so no one waits for a timeout
			}
		}
	}
	s.stash = nil
}

// rejectPending answers every pending publish (and its duplicates) with err.
func (s *shard) rejectPending(ctx actor.Context, pending []pendingPublish, err *wire.Error) {
	for _, p := range pending {
		if p.span != nil {
			p.span.SetStatus(codes.Error, err.Error())
			p.span.End()
		}
		if p.replyTo != nil {
			ctx.Send(p.replyTo, &PublishRejected{ReqID: p.reqID, Ack: p.ack, Err: err})
		}
		for _, d := range p.dups {
			ctx.Send(d.replyTo, &PublishRejected{ReqID: d.reqID, Ack: d.ack, Err: err})
		}
	}
}

func (s *shard) onAppendFailed(ctx actor.Context, m *AppendFailed) {
	if s.core == nil {
		return
	}
	s.failed = m.Err
	s.logger(ctx).Error("shard: append failed; refusing publishes", slog.Any("error", m.Err))
	s.rejectPending(ctx, s.core.failPending(), storageError(m.Err))
	s.rejectUnadmitted(ctx, storageError(m.Err))
	if s.replica != nil && !s.stoppingRaft {
		// Applied entries whose batches are not stored: the replica must
		// not go on (nor lead). Its parent starts the shard again, from
		// what storage holds.
		s.stoppingRaft = true
		s.stopReplica(ctx, storageError(m.Err))
		ctx.Stop(ctx.Self())
	}
}

func storageError(err error) *wire.Error {
	return &wire.Error{Code: wire.CodeStorageFailure, Message: err.Error()}
}

// onSubscribeRequest refuses a subscription to a deleted stream, stashes it
// until the shard is ready, or registers it.
func (s *shard) onSubscribeRequest(ctx actor.Context, m *SubscribeShardRequest) {
	if s.deleted {
		ctx.Respond(&SubscribeShardResponse{Err: errStreamDeleted()})
		return
	}
	if !s.ready {
		s.stash = append(s.stash, stashed{msg: m, sender: ctx.Sender()})
		return
	}
	if s.cfg.Raft != nil && !s.cfg.Raft.hosted() {
		ctx.Respond(&SubscribeShardResponse{Err: s.notHosted()})
		return
	}
	s.onSubscribe(ctx, ctx.Sender(), m)
}

func (s *shard) onSubscribe(ctx actor.Context, from *actor.PID, m *SubscribeShardRequest) {
	if from == nil {
		return
	}
	if werr := s.refuseNew(m.Replica, false); werr != nil {
		ctx.Send(from, &SubscribeShardResponse{Err: werr, Tail: s.core.committed})
		return
	}
	next, werr := s.core.resolveStart(m.Start, m.Offset)
	if werr != nil && s.replica != nil && m.Start == wire.StartOffset && m.Offset > s.core.committed {
		// A replica behind the one a subscription read from (it resumes
		// here after a failover): the records up to its offset are
		// committed, and this replica applies them shortly; the
		// subscription waits for them rather than going back.
		next, werr = m.Offset, nil
	}
	if werr != nil {
		ctx.Send(from, &SubscribeShardResponse{Err: werr, Tail: s.core.committed})
		return
	}
	sub := s.core.addSub(from, next, m.Capacity, m.MaxBytes)
	sub.inEntries, sub.inBytes, sub.replica = m.InEntries, m.InBytes, m.Replica
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
	s.admitHeld(ctx)
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
	s.admitHeld(ctx)
}

// onTerminated forgets a subscriber that stopped.
func (s *shard) onTerminated(ctx actor.Context, m *actor.Terminated) {
	if s.core != nil {
		delete(s.core.subs, m.Who.Id)
		s.admitHeld(ctx) // a blocking subscriber that went away releases the publishers
	}
}

func (s *shard) pump(ctx actor.Context, sub *subState) {
	secs, evictFrom, read, lagged := s.core.pump(sub)
	if len(secs) > 0 {
		if evictFrom < 0 {
			evictFrom = len(secs)
		}
		ctx.Send(sub.pid, &SectionsPushed{Sections: secs, EvictFrom: evictFrom})
	}
	if lagged {
		delete(s.core.subs, sub.pid.Id)
		ctx.Unwatch(sub.pid)
		ctx.Send(sub.pid, &SubscriptionLagged{ResumeFrom: sub.next})
		return
	}
	if read {
		ctx.Send(sub.pid, &ReadHistory{From: sub.next, Tail: s.core.committed})
		sub.inEntries, sub.inBytes = 0, 0
	}
}

// onRestarting runs on the failed instance: it tells its publishers their
// outcome is unknown and its subscriptions to subscribe again.
func (s *shard) onRestarting(ctx actor.Context) {
	defer s.releaseRing()
	if s.remoteTimer != nil {
		s.remoteTimer()
	}
	if s.tombstoneTimer != nil {
		s.tombstoneTimer.Stop() // the new instance arms its own
	}
	lost := &wire.Error{Code: wire.CodeInternal, Message: "shard restarted; the publish may or may not have been written"}
	s.stopReplica(ctx, lost)
	s.rejectUnadmitted(ctx, lost)
	if s.core == nil {
		return
	}
	pending := s.core.pending
	if h := s.handling; h != nil && len(pending) > 0 {
		if last := pending[len(pending)-1]; last.reqID == h.ReqID && last.replyTo == h.ReplyTo {
			if last.span != nil {
				last.span.End()
			}
			pending = pending[:len(pending)-1] // the strategy answers it
		}
	}
	s.rejectPending(ctx, pending, lost)
	for _, sub := range s.core.subs {
		ctx.Send(sub.pid, &ShardRestarted{})
	}
	s.notifyWatchers(ctx, true) // they watch again, on the new instance
}

// releaseRing gives the ring's bytes back to the node's total.
func (s *shard) releaseRing() {
	if s.core != nil {
		s.core.ring.release()
	}
}

// onStopping answers what is pending as outcome-unknown: a durable batch
// still pending has been sent to the storage writer and may or may not be
// committed (the writer commits what it has already taken; requests still in
// its mailbox when it is stopped are dropped).
func (s *shard) onStopping(ctx actor.Context) {
	defer s.releaseRing()
	if s.remoteTimer != nil {
		s.remoteTimer()
	}
	if s.tombstoneTimer != nil {
		s.tombstoneTimer.Stop()
	}
	s.stopReplica(ctx, &wire.Error{Code: wire.CodeInternal, Message: "shard stopping; the publish may or may not have been written"})
	s.rejectUnadmitted(ctx, &wire.Error{Code: wire.CodeInternal, Message: "shard stopping; the publish was not written"})
	if s.core == nil {
		return
	}
	s.rejectPending(ctx, s.core.pending,
		&wire.Error{Code: wire.CodeInternal, Message: "shard stopping; the publish may or may not have been written"})
}
