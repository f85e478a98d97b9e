package client

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeOptions)

// subscribeOptions is what the SubscribeOptions set.
type subscribeOptions struct {
	// start and offset say where every shard starts, unless offsets has
	// the shard.
	start  wire.StartKind
	offset uint64
	// startTime is WithStartTime's time, with start startAtTime.
	startTime time.Time
	// offsets are per-shard start offsets (WithStartOffsets).
	offsets map[uint32]uint64
	// oneShard is set by WithShard; shard is then the only shard.
	oneShard bool
	shard    uint32
	queue    uint32
	// autoResume resubscribes a lagged shard by itself.
	autoResume bool
}

// WithStartEarliest starts every subscribed shard at its first retained
// record (the default).
func WithStartEarliest() SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartEarliest, 0 }
}

// WithStartLatest starts every subscribed shard at its tail: only records
// published from now on.
func WithStartLatest() SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartLatest, 0 }
}

// WithStartOffset starts every subscribed shard at offset (which must be
// retained and at most the shard's tail; otherwise Subscribe fails with an
// *OffsetOutOfRangeError). It is meant for one shard (WithShard); for
// several shards use WithStartOffsets.
func WithStartOffset(offset uint64) SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartOffset, offset }
}

// WithStartOffsets starts each shard in offsets at its offset: per-shard
// resume positions, typically each shard's last seen offset plus one.
// Shards not in the map start where WithStartEarliest, WithStartLatest or
// WithStartOffset say (by default at the earliest retained record), so
// WithStartLatest() with WithStartOffsets(m) resumes the shards the
// application knows and starts any other from now on. Offsets of shards not
// subscribed are ignored.
func WithStartOffsets(offsets map[uint32]uint64) SubscribeOption {
	m := maps.Clone(offsets)
	return func(o *subscribeOptions) { o.offsets = m }
}

// WithShard subscribes to shard n only. Without it, Subscribe subscribes to
// every shard of the stream.
func WithShard(n uint32) SubscribeOption {
	return func(o *subscribeOptions) { o.oneShard, o.shard = true, n }
}

// WithQueueCapacity asks the node for a subscription queue of n batches per
// shard (0: the stream's default). The node clamps it;
// Subscription.QueueCapacity returns the grant.
func WithQueueCapacity(n uint32) SubscribeOption {
	return func(o *subscribeOptions) { o.queue = n }
}

// WithAutoResume makes the subscription resubscribe a shard that the node
// ended as lagged (its queue overflowed, on a durable stream) from the
// offset the node gave, by itself: the application sees contiguous offsets
// and never the *LaggedError. Subscription.Resumes counts the
// resubscriptions. If the resume offset is no longer retained, the shard
// ends with an *OffsetOutOfRangeError.
func WithAutoResume() SubscribeOption { return func(o *subscribeOptions) { o.autoResume = true } }

// Subscription receives the records of one or more shards of a stream,
// pushed by the node, each shard on its own QUIC stream. Next returns them
// merged, each shard's in offset order, each offset at most once. It
// survives the client's reconnects (see Next). Its methods are safe for
// concurrent use; Close it when done.
type Subscription struct {
	subscriptionHandle
	// mu guards buf, pos and spare. buf[pos:] are events brought back by a
	// request and not yet returned by Next, in order; buf[:pos] were
	// returned and cleared. spare is an emptied buf, given to the next
	// request to fill, so that a subscription reading a million events
	// allocates no event slices in steady state (they are the bulk of its
	// pointer-holding garbage, and GC time).
	mu    sync.Mutex
	buf   []Event
	pos   int
	spare []Event
	// freeReq is a request whose answer its Next received: the actor is
	// done with it and its reply channel is empty, so the next Next that
	// waits reuses it instead of making a request and a channel. A request
	// whose Next gave up (its context ended) is never put back.
	freeReq atomic.Pointer[nextRequest]
	// stream names the stream in spans.
	stream string
	// shards are the subscribed shards, in ascending order.
	shards []uint32
	// granted holds each shard's Subscribed.
	granted map[uint32]wire.Subscribed
	// resumes counts automatic resubscriptions (the actor adds).
	resumes *atomic.Int64
}

// subscriptionHandle is what a Subscription and a GroupMember share:
// the client, the actor behind them, and the closing of both.
type subscriptionHandle struct {
	c   *Client
	pid *actor.PID
	// stopped is closed when the actor has stopped.
	stopped chan struct{}
	// closed is closed by Close.
	closed    chan struct{}
	closeOnce sync.Once
}

func newSubscriptionHandle(c *Client, pid *actor.PID, stopped chan struct{}) subscriptionHandle {
	return subscriptionHandle{c: c, pid: pid, stopped: stopped, closed: make(chan struct{})}
}

// stoppedErr is the error of a call whose actor stopped.
func (h *subscriptionHandle) stoppedErr() error {
	select {
	case <-h.closed:
		return ErrSubscriptionClosed
	default:
	}
	if err := h.c.usable(); err != nil {
		return err
	}
	return ErrSubscriptionClosed
}

// close marks the handle closed and asks the actor to stop with
// unsubscribe (it stops itself once its goroutines have exited), waiting for
// it; if the client is closing, the client stops it instead. Once only.
func (h *subscriptionHandle) close(unsubscribe any) {
	h.closeOnce.Do(func() {
		close(h.closed)
		if !h.c.beginSubscriptionClose() {
			<-h.stopped
			return
		}
		defer h.c.subscriptionCloses.Done()
		select {
		case <-h.stopped:
			return
		default:
		}
		h.c.send(h.pid, unsubscribe)
		<-h.stopped
	})
}

// Subscribe subscribes to name and returns once the node has accepted the
// subscription of every shard (or refused one: ErrStreamNotFound,
// ErrInvalidShard, an *OffsetOutOfRangeError, ...; the error names the
// shard). ctx bounds only that wait.
//
// On a replicated stream each shard is served by the replica WithReplica
// chose (see ReplicaNearest and ReplicaLeader); a follower that falls
// behind its leader ends its shards with ErrReplicaBehind, and a client
// with several addresses then resumes them at the next, after their last
// record.
//
// With WithShard(n) it subscribes to shard n. Without it, it describes the
// stream and subscribes to every shard, one subscription stream each, and
// Next merges them. (If the node does not know the stream, it subscribes to
// shard 0 and lets the node answer: a node that auto-creates streams creates
// it with one shard.)
func (c *Client) Subscribe(ctx context.Context, name StreamName, opts ...SubscribeOption) (*Subscription, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := name.Validate(); err != nil {
		return nil, err
	}
	o := subscribeOptions{start: wire.StartEarliest}
	for _, opt := range opts {
		opt(&o)
	}
	if !c.session().subscribeQueue {
		o.queue = 0
	}
	replica, err := c.replica()
	if err != nil {
		return nil, err
	}
	shards := []uint32{o.shard}
	if !o.oneShard {
		info, err := c.describe(ctx, name)
		switch {
		case err == nil:
			shards = make([]uint32, max(info.Config.Shards, 1))
			for i := range shards {
				shards[i] = uint32(i)
			}
		case errors.Is(err, ErrStreamNotFound):
		default:
			return nil, err
		}
	}
	if o.start == startAtTime {
		if err := c.resolveStartTime(ctx, name, &o, shards); err != nil {
			return nil, err
		}
	}
	starts := make([]shardStart, len(shards))
	for i, n := range shards {
		starts[i] = shardStart{shard: n, start: o.start, offset: o.offset}
		if off, ok := o.offsets[n]; ok {
			starts[i].start, starts[i].offset = wire.StartOffset, off
		}
	}

	stopped := make(chan struct{})
	resumes, waiting := new(atomic.Int64), new(atomic.Int32)
	spawn := &subscriptionSpawnRequest{
		init: &subscriptionInit{name: name, shards: starts, queue: o.queue, autoResume: o.autoResume,
			replica: replica, resumes: resumes, waitingStream: waiting, stopped: stopped},
		reply: make(chan subscriptionSpawned, 1),
	}
	c.send(c.conn, spawn)
	var spawned subscriptionSpawned
	select {
	case spawned = <-spawn.reply:
	case <-ctx.Done():
		spawned.err = ctx.Err()
	case <-c.connStopped:
		spawned.err = c.stoppedErr()
	}
	if spawned.err != nil && spawned.pid == nil {
		spawn.mu.Lock()
		spawn.abandoned = true
		spawn.mu.Unlock()
		select {
		case r := <-spawn.reply:
			if r.pid != nil {
				// Spawned after all: end its subscriptions.
				sub := &Subscription{subscriptionHandle: newSubscriptionHandle(c, r.pid, stopped)}
				_ = sub.Close()
			}
		default:
		}
		return nil, spawned.err
	}

	sub := &Subscription{subscriptionHandle: newSubscriptionHandle(c, spawned.pid, stopped), shards: shards, resumes: resumes, stream: name.String()}
	await := &subscribeAwait{reply: make(chan subscribeAnswer, 1)}
	c.send(sub.pid, await)
	var ans subscribeAnswer
	select {
	case ans = <-await.reply:
	case <-ctx.Done():
		ans.err = streamWait(waiting, ctx.Err())
	case <-stopped:
		select {
		case ans = <-await.reply:
		default:
			ans.err = c.stoppedErr()
		}
	}
	if ans.err != nil {
		_ = sub.Close()
		return nil, ans.err
	}
	sub.granted = ans.granted
	return sub, nil
}

// Shard returns the subscribed shard; with several, the first (see Shards).
func (sub *Subscription) Shard() uint32 { return sub.shards[0] }

// Shards returns the subscribed shards, in ascending order.
func (sub *Subscription) Shards() []uint32 { return append([]uint32(nil), sub.shards...) }

// StartOffset returns the offset delivery started at (the node resolved
// WithStartEarliest and WithStartLatest to it); with several shards, the first
// shard's (see StartOffsets).
func (sub *Subscription) StartOffset() uint64 { return sub.granted[sub.shards[0]].Offset }

// StartOffsets returns, per subscribed shard, the offset delivery started at.
func (sub *Subscription) StartOffsets() map[uint32]uint64 {
	out := make(map[uint32]uint64, len(sub.granted))
	for n, g := range sub.granted {
		out[n] = g.Offset
	}
	return out
}

// QueueCapacity returns the queue capacity, in batches, the node granted
// (the first shard's, with several).
func (sub *Subscription) QueueCapacity() uint32 { return sub.granted[sub.shards[0]].QueueCapacity }

// Resumes returns how many times WithAutoResume resubscribed a lagged
// shard.
func (sub *Subscription) Resumes() int { return int(sub.resumes.Load()) }

// Next returns the next event of any subscribed shard, waiting for one until
// ctx ends. Each shard's events come in offset order, each offset at most
// once; the shards take turns.
//
// When the node ends a shard's subscription, Next returns that shard's held
// events and then its error, once: a *LaggedError (the shard fell behind;
// resume it from ResumeFrom, or use WithAutoResume), an *OffsetOutOfRangeError,
// or a *ShardError (ErrSubscriptionAborted, ErrStreamNotFound, ...); the
// other shards go on. Once every shard has ended, Next returns the last of
// those errors on every call.
//
// A lost connection does not end the subscription: Next goes on returning
// the events received, then waits while the client reconnects, and each
// shard is subscribed again on the new connection one past the last record
// it received, so on a durable stream the events go on with no gap and no
// duplicate. Where the node no longer has those records (an ephemeral
// shard, which loses them when its node restarts and whose offsets start
// again at 0, or records retention deleted meanwhile), the shard goes on
// from the first offset the node has, or its tail, and Next returns a
// *GapError in their place, once, and then the shard's next events: the
// only error after which Next goes on. If the client gives up reconnecting
// (or WithoutReconnect), Next returns the held events, then the connection's
// error. After Close it returns ErrSubscriptionClosed, after the client's
// Close ErrClosed.
func (sub *Subscription) Next(ctx context.Context) (ev Event, err error) {
	select {
	case <-sub.closed:
		return Event{}, ErrSubscriptionClosed
	default:
	}
	// The event is written in place: an Event is about 180 bytes, and each
	// copy of it on the way out was a tenth of a replaying client's CPU.
	if sub.buffered(&ev) {
		return ev, nil
	}
	req := sub.freeReq.Swap(nil)
	if req == nil {
		req = &nextRequest{reply: make(chan nextResult, 1), max: nextBatch}
	}
	req.buf = sub.takeSpare()
	sub.c.send(sub.pid, req)
	select {
	case r := <-req.reply:
		sub.putRequest(req)
		return sub.take(r)
	case <-sub.stopped:
		select {
		case r := <-req.reply:
			sub.putRequest(req)
			return sub.take(r)
		default:
			return Event{}, sub.stoppedErr()
		}
	case <-ctx.Done():
	}
	// Withdraw the request; events the actor sent meanwhile are returned
	// rather than lost.
	cancel := &nextCancelled{req: req, ack: make(chan struct{}, 1)}
	sub.c.send(sub.pid, cancel)
	select {
	case <-cancel.ack:
	case <-sub.stopped:
	}
	select {
	case r := <-req.reply:
		if r.err == nil {
			return sub.take(r)
		}
	default:
	}
	return Event{}, ctx.Err()
}

// putRequest keeps req, whose answer was received, for the next Next.
func (sub *Subscription) putRequest(req *nextRequest) {
	req.buf = nil
	sub.freeReq.Store(req)
}

// nextBatch is the most events one request to the subscription actor
// brings back; Next hands them out one at a time.
const nextBatch = 256

// buffered pops an event an earlier request brought back into *ev.
func (sub *Subscription) buffered(ev *Event) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.pos == len(sub.buf) {
		return false
	}
	sub.pop(ev)
	sub.trace(ev)
	return true
}

// pop moves buf's next event to *ev, clearing its slot (the slice is reused: it
// must not keep the event's bytes alive), and keeps buf as the spare once
// it is empty. Called with mu held and an event in buf.
func (sub *Subscription) pop(ev *Event) {
	*ev = sub.buf[sub.pos]
	sub.buf[sub.pos] = Event{}
	if sub.pos++; sub.pos == len(sub.buf) {
		if cap(sub.buf) > cap(sub.spare) {
			sub.spare = sub.buf[:0]
		}
		sub.buf, sub.pos = nil, 0
	}
}

// takeSpare returns the spare event slice (nil if another request has it).
func (sub *Subscription) takeSpare() []Event {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	s := sub.spare
	sub.spare = nil
	return s
}

// take returns the first event of an answer and keeps the rest for the
// next calls (or returns its error).
func (sub *Subscription) take(r nextResult) (ev Event, err error) {
	if r.err != nil || len(r.evs) == 0 {
		return Event{}, r.err
	}
	sub.mu.Lock()
	if sub.pos == len(sub.buf) {
		sub.buf, sub.pos = r.evs, 0 // the answer's slice is ours: no copy
	} else {
		// Another Next's answer is still being handed out: queue behind it.
		sub.buf = append(sub.buf, r.evs...)
	}
	sub.pop(&ev)
	sub.mu.Unlock()
	sub.trace(&ev)
	return ev, nil
}

// trace records the consumer span of an event that carries trace context.
func (sub *Subscription) trace(ev *Event) {
	if ev.Headers != nil {
		ev.Trace = sub.c.tracer.receive(sub.stream, ev.Shard, ev.Offset, ev.Headers)
	}
}

// Close ends the subscription: it closes each stream's send side (the
// node's signal to unsubscribe), stops reading, and stops the subscription's
// actor and readers, waiting for them. Pending and later Next calls return
// ErrSubscriptionClosed. It is idempotent and returns nil.
func (sub *Subscription) Close() error {
	sub.close(&unsubscribeRequest{})
	return nil
}
