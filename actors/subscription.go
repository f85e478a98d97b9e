package actors

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// SubscriberStream is what a subscription needs of its QUIC stream: the
// client's side to notice it leaving, the send side for its lane, and a way
// to abort both.
type SubscriberStream interface {
	io.Reader
	io.WriteCloser
	// Abort resets both directions with code (the client sees a stream
	// error carrying it).
	Abort(code wire.Code)
	// StopReading cancels the receive side, unblocking a pending Read.
	StopReading(code wire.Code)
}

// SubscriptionConfig configures a subscription actor.
type SubscriptionConfig struct {
	// Catalog finds the stream.
	Catalog *actor.PID
	// Request is the client's Subscribe frame, ReqID its request id.
	Request wire.Subscribe
	ReqID   uint64
	// Stream is the subscription's QUIC stream; the subscription owns it.
	Stream SubscriberStream
	// Capacity is the subscriber's requested queue capacity in batches (0:
	// the stream's, else the node's default); it is clamped to
	// [1, CapacityMax]. MaxBytes is the node's default records-bytes bound
	// (0: none), overridden by the stream's.
	Capacity, DefaultCapacity, CapacityMax int
	MaxBytes                               int64
	// Lane configures the subscription's writer lane (its W is Stream).
	Lane LaneConfig
	// ReadMaxBytes bounds one storage read (default 4 MiB).
	ReadMaxBytes int
	// Stats is the node's, for metrics (may be nil).
	Stats *Stats
	// EgressPool, under subscriber_lane_queue_policy block, is the
	// connection's egress bound as one pool shared by its subscriptions
	// (instead of equal shares): one whose stream stalls can take it all,
	// and then every subscription of the connection waits.
	EgressPool *Budget
	// EgressShare, when the connection's egress bound is split in equal
	// shares (the default policy), holds this subscription's share: the
	// bound divided by the connection's subscriptions, updated by the
	// connection as they come and go (nil or 0: no bound). It is read at
	// each drain rather than sent: a message to every subscription at every
	// subscribe and unsubscribe made O(n²) messages on a connection of n.
	EgressShare *atomic.Int64
	// QueueTotal is the node-wide budget this subscription's queued and
	// in-lane bytes count against until written (nil: none). The shard
	// takes it for what it pushes; the subscription gives it back.
	QueueTotal *Budget
	// Goroutines starts the subscription's goroutines (nil: untracked).
	Goroutines *Goroutines
	// Client and Principal say who subscribed (the connection's remote
	// address, its credentials' name), for the dashboard.
	Client, Principal string
}

// subscription pushes one shard's records to one client. It registers with
// the shard and returns credit as its lane writes; when it falls behind the
// shard's ring it reads history from storage for itself, at the pace its
// credit allows, then resumes live delivery with no gap and no duplicate.
// It never blocks: storage reads run in a goroutine it owns.
type subscription struct {
	cfg   SubscriptionConfig
	lane  *actor.PID
	shard *actor.PID
	log   storage.Log
	key   storage.ShardKey
	// durable is the stream's durability: history missing from a durable
	// log was deleted by retention and ends the subscription.
	durable bool
	// next is the next offset to send.
	next uint64
	// subscribed is true once the Subscribed frame was sent.
	subscribed bool
	// reading is true between ReadHistory and ResumeLive; readBusy while a
	// storage read runs; readTail is the tail the shard reported.
	reading, readBusy bool
	readTail          uint64
	// queue holds batches received and not yet handed to the lane: the
	// subscription's bounded queue (capacity batches, MaxBytes records
	// bytes), which is what its credit with the shard stands for.
	queue []*wire.Section
	// queueBytes sums queue's records bytes.
	queueBytes int64
	// laneEntries and laneBytes are batches handed to the lane and not yet
	// written: they count against the connection's egress bound.
	laneEntries int
	laneBytes   int64
	// closed is set once the subscription ended itself.
	closed bool
	// stopping is set when the actor stops; its goroutines then send
	// nothing. They are started through cfg.Goroutines: the subscription
	// never waits for them (Stopping unblocks the stream reader; a history
	// read ends on its own), the node does at Close.
	stopping *atomic.Bool
	logger   *slog.Logger
	// figures are its counters for the dashboard (subscription_stats.go).
	figures subscriptionFigures
}

// NewSubscriptionProps returns the props of a subscription actor.
func NewSubscriptionProps(cfg SubscriptionConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.ReadMaxBytes <= 0 {
		cfg.ReadMaxBytes = 4 << 20
	}
	// A failing lane is stopped, not restarted: its stream state is lost, and
	// its Terminated ends the subscription.
	return actor.PropsFromProducer(func() actor.Actor { return &subscription{cfg: cfg, stopping: &atomic.Bool{}} }, actor.WithDispatcher(cfg.Goroutines.Dispatcher()),
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
			return actor.StopDirective
		})))
}

// Receive dispatches.
func (s *subscription) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.onStarted(ctx)
	case *LookupStreamResponse:
		s.onLookup(ctx, m)
	case *SubscribeShardResponse:
		s.onSubscribed(ctx, m)
	case *SectionsPushed:
		s.onPushed(ctx, m)
	case *SectionsWritten:
		s.onWritten(ctx, m)
	case *egressAvailable:
		s.onEgressAvailable(ctx)
	case *ReadHistory:
		s.onReadHistory(ctx, m)
	case *historyRead:
		s.onHistory(ctx, m)
	case *StreamGone:
		s.onStreamGone(ctx)
	case *SubscriptionLagged:
		s.onLagged(ctx, m)
	case *SubscriptionEnded:
		s.onEnded(ctx, m)
	case *ShardRestarted:
		s.onShardRestarted(ctx)
	case *actor.DeadLetterResponse:
		s.onDeadLetter(ctx)
	case *LaneFailed:
		s.onLaneFailed(ctx)
	case *subscriberLeft:
		s.onSubscriberLeft(ctx)
	case *SubscriptionStatsRequest:
		s.onStatsRequest(ctx)
	case *actor.Terminated:
		s.onTerminated(ctx, m)
	case *actor.Stopping:
		s.onStopping(ctx)
	case *actor.Stopped:
		s.onStopped()
	case *actor.Restarting:
		// Never: the connection stops a failed subscription.
	default:
		s.log_(ctx).Warn("subscription: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (s *subscription) log_(ctx actor.Context) *slog.Logger {
	if s.logger == nil {
		s.logger = ctx.Logger().With(slog.String("stream", s.cfg.Request.Name.String()),
			slog.Uint64("shard", uint64(s.cfg.Request.Shard)))
	}
	return s.logger
}

func (s *subscription) onStarted(ctx actor.Context) {
	s.cfg.Stats.gauge(&s.cfg.Stats.Subscriptions, 1)
	s.figures.started = time.Now()
	laneCfg := s.cfg.Lane
	laneCfg.W = s.cfg.Stream
	laneCfg.EventReqID = s.cfg.ReqID
	laneCfg.Dispatcher = s.cfg.Goroutines.Dispatcher()
	lane, err := ctx.SpawnNamed(NewLaneProps(laneCfg), "lane")
	if err != nil {
		panic(fmt.Errorf("subscription: spawn lane: %w", err))
	}
	s.lane = lane
	// The client sends nothing after Subscribe: any read result ends the
	// subscription (EOF is the client unsubscribing).
	self, root := ctx.Self(), ctx.ActorSystem().Root
	stopping := s.stopping
	if !s.cfg.Goroutines.Go(func() {
		var b [1]byte
		_, err := s.cfg.Stream.Read(b[:])
		if !stopping.Load() {
			root.Send(self, &subscriberLeft{err: err})
		}
	}) {
		s.end(ctx, wire.Errorf(wire.CodeShuttingDown, "the node is stopping"))
		return
	}
	ctx.Request(s.cfg.Catalog, &LookupStreamRequest{Name: s.cfg.Request.Name})
}

func (s *subscription) onLookup(ctx actor.Context, m *LookupStreamResponse) {
	if m.Err != nil {
		s.end(ctx, m.Err)
		return
	}
	h := m.Stream
	if s.cfg.Request.Shard >= uint32(len(h.Shards)) {
		s.end(ctx, wire.ShardOutOfRange(h.Name, uint64(s.cfg.Request.Shard), len(h.Shards)))
		return
	}
	s.shard = h.Shards[s.cfg.Request.Shard]
	s.log = h.Log
	s.durable = h.Config.Durable
	s.key = h.ShardKey(s.cfg.Request.Shard)
	// The subscriber's own ask wins, then the stream's, then the node's.
	if s.cfg.Capacity == 0 {
		s.cfg.Capacity = int(h.Config.QueueCapacity)
	}
	if s.cfg.Capacity == 0 {
		s.cfg.Capacity = s.cfg.DefaultCapacity
	}
	s.cfg.Capacity = min(max(s.cfg.Capacity, 1), max(s.cfg.CapacityMax, 1))
	if h.Config.QueueMaxBytes > 0 {
		s.cfg.MaxBytes = int64(min(h.Config.QueueMaxBytes, 1<<62))
	}
	ctx.Watch(s.shard)
	ctx.Request(s.shard, &SubscribeShardRequest{Start: s.cfg.Request.Start, Offset: s.cfg.Request.Offset,
		Capacity: s.cfg.Capacity, MaxBytes: s.cfg.MaxBytes, Replica: s.cfg.Request.Replica})
}

func (s *subscription) onSubscribed(ctx actor.Context, m *SubscribeShardResponse) {
	if m.Err != nil {
		s.end(ctx, m.Err)
		return
	}
	if s.subscribed {
		// Registered again after a shard restart, with our account.
		return
	}
	s.subscribed = true
	s.countSubscribed()
	s.next = m.Next
	ctx.Send(s.lane, &WriteFrame{Frame: wire.AppendSubscribed(nil, s.cfg.ReqID, wire.Subscribed{
		Shard: s.cfg.Request.Shard, Offset: m.Next, Tail: m.Tail, QueueCapacity: uint32(s.cfg.Capacity)})})
}

func (s *subscription) onPushed(ctx actor.Context, m *SectionsPushed) {
	if n := len(m.Sections); stages.Enabled && n > 0 {
		stages.MarkRecords(stages.Subscription, m.Sections[n-1].Records)
	}
	if s.closed {
		return
	}
	for i, sec := range m.Sections {
		evict := i >= m.EvictFrom
		size := int64(len(sec.Records))
		if sec.End() <= s.next {
			// Already sent (a shard that restarted during a history read may
			// push what storage just gave us): give its credit back.
			if !evict {
				s.returnCredit(ctx, 1, size)
			}
			continue
		}
		if evict {
			// drop_old: the newest batch takes the place of as many of the
			// oldest queued ones as it needs, by count and by bytes. The
			// shard did not count it: the credit returned is the evicted
			// batches less the one that came in.
			entries, bytes := 0, int64(0)
			for len(s.queue) > 0 && (len(s.queue) >= s.cfg.Capacity ||
				(s.cfg.MaxBytes > 0 && s.queueBytes+size > s.cfg.MaxBytes)) {
				old := s.queue[0]
				s.queue[0] = nil
				s.queue = s.queue[1:]
				n := int64(len(old.Records))
				s.queueBytes -= n
				s.cfg.QueueTotal.Release(n)
				s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBatches, -1)
				s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBytes, -n)
				s.cfg.Stats.add(&s.cfg.Stats.DropEvicted, 1)
				s.figures.evicted++
				entries++
				bytes += n
			}
			s.returnCredit(ctx, entries-1, bytes-size)
		}
		s.enqueue(sec)
	}
	s.drain(ctx)
}

// enqueue adds a batch to the queue.
func (s *subscription) enqueue(sec *wire.Section) {
	s.queue = append(s.queue, sec)
	s.queueBytes += int64(len(sec.Records))
	// Queued and in-lane bytes count against the node's total until written.
	s.cfg.QueueTotal.Acquire(int64(len(sec.Records)))
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBatches, 1)
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBytes, int64(len(sec.Records)))
	s.next = max(s.next, sec.End())
}

// drain hands queued batches to the lane while the subscription's egress
// share has room, and returns their credit: they have left the queue.
func (s *subscription) drain(ctx actor.Context) {
	var out []*wire.Section
	var entries int
	var bytes int64
	// A batch larger than the share still goes when the lane is empty. A
	// share that grew (a subscription left) is seen at the next drain, which
	// comes when the lane writes what holds this one back.
	var share int64
	if s.cfg.EgressShare != nil {
		share = s.cfg.EgressShare.Load()
	}
	taken := 0
	for taken < len(s.queue) {
		size := int64(len(s.queue[taken].Records))
		if pool := s.cfg.EgressPool; pool != nil {
			if pool.Used() == 0 {
				pool.Acquire(size) // a batch larger than the pool goes when the pool is empty
			} else if !pool.TryAcquire(size) {
				ctx.Request(ctx.Parent(), &egressWaiting{Size: size}) // Request: the connection needs the sender
				break
			}
		} else if share > 0 && s.laneEntries > 0 && s.laneBytes+size > share {
			break
		}
		out = append(out, s.queue[taken])
		taken++
		s.queueBytes -= size
		s.laneEntries++
		s.laneBytes += size
		entries++
		bytes += size
	}
	s.takeQueued(taken)
	if len(out) == 0 {
		return
	}
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBatches, -int64(entries))
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBytes, -bytes)
	s.cfg.Stats.gauge(&s.cfg.Stats.EgressBytes, bytes)
	ctx.Send(s.lane, &WriteSections{Sections: out})
	s.returnCredit(ctx, entries, bytes)
}

// keptQueueCap is the largest queue array a subscription keeps once its
// queue is empty: a subscription that drains every batch as it comes (the
// usual case) reuses its array instead of making one per batch, and one
// that once held a long backlog gives the memory back.
const keptQueueCap = 64

// takeQueued removes the first n batches from the queue.
func (s *subscription) takeQueued(n int) {
	clear(s.queue[:n])
	switch {
	case n < len(s.queue):
		s.queue = s.queue[n:]
	case cap(s.queue) > keptQueueCap:
		s.queue = nil
	default:
		s.queue = s.queue[:0]
	}
}

// returnCredit tells the shard that batches left the queue. While the
// subscription reads history the shard keeps no account of it, and
// ResumeLive hands the account back.
func (s *subscription) returnCredit(ctx actor.Context, entries int, bytes int64) {
	if s.reading || s.shard == nil || (entries == 0 && bytes == 0) {
		return
	}
	ctx.Request(s.shard, &CreditReturned{Entries: entries, Bytes: bytes})
}

// send queues batches read from storage.
func (s *subscription) send(ctx actor.Context, secs []*wire.Section) {
	if s.closed {
		return
	}
	for _, sec := range secs {
		if sec.End() > s.next {
			s.enqueue(sec)
		}
	}
	s.drain(ctx)
}

func (s *subscription) onWritten(ctx actor.Context, m *SectionsWritten) {
	s.laneEntries = max(0, s.laneEntries-m.Entries)
	s.laneBytes = max(0, s.laneBytes-m.Bytes)
	s.cfg.Stats.gauge(&s.cfg.Stats.EgressBytes, -m.Bytes)
	s.cfg.Stats.add(&s.cfg.Stats.DeliveredBatches, uint64(m.Entries))
	s.cfg.Stats.add(&s.cfg.Stats.DeliveredBytes, uint64(m.Bytes))
	s.countWritten(m.Entries, m.Bytes)
	s.cfg.QueueTotal.Release(m.Bytes)
	if s.cfg.EgressPool != nil {
		s.cfg.EgressPool.Release(m.Bytes)
		ctx.Send(ctx.Parent(), &egressFreed{})
	}
	s.drain(ctx)
	s.readMore(ctx)
}

// onEgressAvailable drains the queue now that the connection's egress pool
// has room again.
func (s *subscription) onEgressAvailable(ctx actor.Context) {
	s.drain(ctx)
}

// onReadHistory switches to reading storage: the shard's ring no longer
// holds what comes next.
func (s *subscription) onReadHistory(ctx actor.Context, m *ReadHistory) {
	s.reading, s.readTail = true, m.Tail
	s.next = max(s.next, m.From)
	s.readMore(ctx)
}

// readMore starts a storage read for as many batches as the credit window
// has room for. Nothing is read while the window is full: a slow reader slows
// its replay, it never loses part of it.
func (s *subscription) readMore(ctx actor.Context) {
	if !s.reading || s.readBusy || s.closed {
		return
	}
	room := s.cfg.Capacity - len(s.queue)
	if room <= 0 {
		return
	}
	maxBytes := s.cfg.ReadMaxBytes
	if s.cfg.MaxBytes > 0 {
		maxBytes = int(min(int64(maxBytes), max(s.cfg.MaxBytes-s.queueBytes, 1)))
	}
	s.readBusy = true
	log, key, from := s.log, s.key, s.next
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if !s.cfg.Goroutines.Go(func() {
		batches, err := log.Read(key, from, room, maxBytes)
		var first uint64
		if err == nil && (len(batches) == 0 || batches[len(batches)-1].End() <= from) {
			// Nothing at from: where the log starts now says whether
			// retention took it (read here, off the actor).
			first, err = log.First(key)
		}
		root.Send(self, &historyRead{batches: batches, first: first, err: err})
	}) {
		s.end(ctx, wire.Errorf(wire.CodeShuttingDown, "the node is stopping"))
	}
}

func (s *subscription) onHistory(ctx actor.Context, m *historyRead) {
	s.readBusy = false
	if s.closed {
		return
	}
	if m.err != nil {
		s.log_(ctx).Error("subscription: history read failed", slog.Uint64("from", s.next), slog.Any("error", m.err))
		code := wire.CodeInternal
		if errors.Is(m.err, storage.ErrCorrupt) {
			code = wire.CodeStorageFailure
		}
		s.end(ctx, wire.Errorf(code, "reading history from offset %d failed", s.next))
		return
	}
	if s.durable && len(m.batches) > 0 && m.batches[0].Base > s.next {
		// Retention deleted what this subscriber needed next.
		s.end(ctx, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: m.batches[0].Base,
			Message: fmt.Sprintf("offset %d was deleted by retention; the first retained offset is %d", s.next, m.batches[0].Base)})
		return
	}
	secs := make([]*wire.Section, 0, len(m.batches))
	for _, b := range m.batches {
		if b.End() <= s.next {
			continue
		}
		secs = append(secs, wire.NewSection(s.key.Shard, b.Base, b.Timestamp, b.Count, b.Records))
	}
	s.send(ctx, secs)
	// Let the shard decide: it pushes from its ring if it holds s.next, or
	// sends ReadHistory again. When storage had nothing for a position below
	// the tail, those records are gone (an ephemeral shard's memory cap):
	// skip them.
	skip := len(secs) == 0 && s.next < s.readTail
	if skip && s.durable {
		// Retention deleted everything this subscriber still needed.
		first := m.first
		s.end(ctx, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: first,
			Message: fmt.Sprintf("offset %d was deleted by retention; the first retained offset is %d", s.next, first)})
		return
	}
	s.reading = false
	ctx.Request(s.shard, &ResumeLive{Next: s.next, InEntries: len(s.queue), InBytes: s.queueBytes, Skip: skip})
}

// end finishes the subscription: an Error frame if err is set, then the
// stream is closed and the actor stops.
func (s *subscription) end(ctx actor.Context, err *wire.Error) {
	if s.closed {
		return
	}
	s.closed = true
	if s.lane == nil {
		ctx.Stop(ctx.Self())
		return
	}
	// The lane writes the error and closes the stream, then stops; its
	// Terminated stops us.
	ctx.Send(s.lane, &CloseLane{ReqID: s.cfg.ReqID, Err: err})
	ctx.Poison(s.lane)
}

// onStreamGone ends the subscription: its stream was deleted.
func (s *subscription) onStreamGone(ctx actor.Context) {
	s.end(ctx, errStreamDeleted())
}

// onLagged ends the subscription with lagged: the shard dropped it because
// its queue overflowed.
func (s *subscription) onLagged(ctx actor.Context, m *SubscriptionLagged) {
	// Batches still queued never reach the client: it resumes from the
	// first of them (what the lane already has is written before the
	// error).
	resume := m.ResumeFrom
	if len(s.queue) > 0 {
		resume = s.queue[0].Base()
	}
	s.end(ctx, &wire.Error{Code: wire.CodeLagged, Detail: resume,
		Message: fmt.Sprintf("the subscriber's queue overflowed; resume from offset %d", resume)})
}

// onEnded ends the subscription with the shard's error: its replica fell
// behind its leader, or stopped leading a subscription that asked for the
// leader. What the lane has is written first; the client resumes on
// another replica from the offset after the last record it received.
func (s *subscription) onEnded(ctx actor.Context, m *SubscriptionEnded) {
	s.end(ctx, m.Err)
}

// onShardRestarted subscribes again to the shard's new instance.
func (s *subscription) onShardRestarted(ctx actor.Context) {
	// The new shard instance forgot us: register again from where we are.
	// It starts the account at what we hold, so nothing is pushed twice.
	// A history read in progress comes back with ResumeLive as usual.
	ctx.Request(s.shard, &SubscribeShardRequest{Start: wire.StartOffset, Offset: s.next,
		Capacity: s.cfg.Capacity, MaxBytes: s.cfg.MaxBytes, InEntries: len(s.queue), InBytes: s.queueBytes, Replica: s.cfg.Request.Replica})
}

// onDeadLetter ends the subscription: a request to the shard came back as a
// dead letter, so the shard is gone (its stream was deleted).
func (s *subscription) onDeadLetter(ctx actor.Context) {
	s.end(ctx, wire.Errorf(wire.CodeStreamNotFound, "the stream was deleted"))
}

// onLaneFailed ends the subscription: its lane could not write.
func (s *subscription) onLaneFailed(ctx actor.Context) {
	s.end(ctx, nil)
}

// onSubscriberLeft ends the subscription: the client unsubscribed (or its
// stream failed).
func (s *subscription) onSubscriberLeft(ctx actor.Context) {
	s.end(ctx, nil)
}

// onTerminated stops the actor once its lane has stopped, and ends the
// subscription when its shard stops.
func (s *subscription) onTerminated(ctx actor.Context, m *actor.Terminated) {
	switch {
	case s.lane != nil && m.Who.Id == s.lane.Id:
		// The lane finished closing the stream (or died): we are done.
		ctx.Stop(ctx.Self())
	case s.shard != nil && m.Who.Id == s.shard.Id:
		s.end(ctx, wire.Errorf(wire.CodeSubscriptionAborted, "the shard stopped (the stream was deleted, or the node is stopping)"))
	}
}

// onStopping stops the stream reader's messages, and resets the stream
// unless the subscription ended on its own.
func (s *subscription) onStopping(ctx actor.Context) {
	s.stopping.Store(true)
	if s.shard != nil {
		ctx.Unwatch(s.shard)
	}
	if !s.closed {
		// Stopped from outside (a failure or the connection closing): the
		// client learns through a stream reset.
		s.cfg.Stream.Abort(wire.CodeSubscriptionAborted)
	} else {
		s.cfg.Stream.StopReading(0)
	}
}

// onStopped gives back what is still queued or in the lane: it goes with
// the subscription.
func (s *subscription) onStopped() {
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBatches, -int64(len(s.queue)))
	s.cfg.Stats.gauge(&s.cfg.Stats.QueuedBytes, -s.queueBytes)
	s.cfg.Stats.gauge(&s.cfg.Stats.EgressBytes, -s.laneBytes)
	s.cfg.Stats.gauge(&s.cfg.Stats.Subscriptions, -1)
	s.uncount()
	s.cfg.QueueTotal.Release(s.queueBytes + s.laneBytes)
	s.cfg.EgressPool.Release(s.laneBytes)
	s.queue, s.queueBytes, s.laneBytes = nil, 0, 0
}
