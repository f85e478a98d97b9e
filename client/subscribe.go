package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeOptions)

// subscribeOptions is what the SubscribeOptions set.
type subscribeOptions struct {
	start  wire.StartKind
	offset uint64
	shard  uint32
	queue  uint32
}

// FromEarliest starts the subscription at the shard's first retained record
// (the default).
func FromEarliest() SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartEarliest, 0 }
}

// FromLatest starts the subscription at the shard's tail: only records
// published from now on.
func FromLatest() SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartLatest, 0 }
}

// FromOffset starts the subscription at offset (at most the tail; past it
// the node answers ErrOffsetOutOfRange).
func FromOffset(offset uint64) SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset = wire.StartOffset, offset }
}

// OnShard subscribes to shard n (default 0).
func OnShard(n uint32) SubscribeOption { return func(o *subscribeOptions) { o.shard = n } }

// QueueCapacity asks the node for a subscription queue of n batches (0: the
// stream's default). The node clamps it; Subscription.QueueCapacity returns
// the grant.
func QueueCapacity(n uint32) SubscribeOption { return func(o *subscribeOptions) { o.queue = n } }

// Subscription receives one shard's records, pushed by the node. Next
// returns them in offset order, each offset at most once. Its methods are
// safe for concurrent use; Close it when done.
type Subscription struct {
	c   *Client
	pid *actor.PID
	// stopped is closed when the subscription's actor has stopped.
	stopped chan struct{}
	// granted is the node's Subscribed.
	granted wire.Subscribed
	// closed is closed by Close.
	closed    chan struct{}
	closeOnce sync.Once
}

// Subscribe subscribes to a shard of name and returns once the node has
// accepted the subscription (or refused it: ErrStreamNotFound,
// ErrInvalidShard, ErrOffsetOutOfRange, ...). ctx bounds only that wait.
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
	if !c.s.subscribeQueue {
		o.queue = 0
	}
	st, err := c.s.conn.OpenStreamSync(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.s.lost(err)
	}
	id := c.s.nextID()
	frame := wire.AppendSubscribe(nil, id, wire.Subscribe{
		Name: name, Shard: o.shard, Start: o.start, Offset: o.offset, QueueCapacity: o.queue,
	})
	if _, err := st.Write(frame); err != nil {
		st.CancelRead(0)
		st.CancelWrite(0)
		return nil, fmt.Errorf("herald: subscribe: %w", connCause(err))
	}

	stopped := make(chan struct{})
	spawn := &subscriptionSpawnRequest{
		init:  &subscriptionInit{shard: o.shard, reqID: id, stream: st, stopped: stopped},
		reply: make(chan subscriptionSpawned, 1),
	}
	c.send(c.conn, spawn)
	var spawned subscriptionSpawned
	select {
	case spawned = <-spawn.reply:
	case <-ctx.Done():
		spawned.err = ctx.Err()
	case <-c.connStopped:
		select {
		case spawned = <-spawn.reply:
		default:
			spawned.err = c.stoppedErr()
		}
	}
	if spawned.err != nil {
		// If the actor is spawned after all, its reader fails at once.
		st.CancelRead(0)
		st.CancelWrite(0)
		return nil, spawned.err
	}

	sub := &Subscription{c: c, pid: spawned.pid, stopped: stopped, closed: make(chan struct{})}
	await := &subscribeAwait{reply: make(chan subscribeAnswer, 1)}
	c.send(sub.pid, await)
	var ans subscribeAnswer
	select {
	case ans = <-await.reply:
	case <-ctx.Done():
		ans.err = ctx.Err()
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
	sub.granted = ans.sub
	return sub, nil
}

// Shard returns the subscribed shard.
func (sub *Subscription) Shard() uint32 { return sub.granted.Shard }

// StartOffset returns the offset delivery started at (the node resolved
// FromEarliest and FromLatest to it).
func (sub *Subscription) StartOffset() uint64 { return sub.granted.Offset }

// QueueCapacity returns the queue capacity, in batches, the node granted.
func (sub *Subscription) QueueCapacity() uint32 { return sub.granted.QueueCapacity }

// Next returns the next event, waiting for one until ctx ends. Events come in
// offset order, each offset at most once. When the node ends the
// subscription, Next returns the events still held and then the node's
// *Error (ErrSubscriptionAborted, ...); after Close it returns
// ErrSubscriptionClosed, after the client's Close ErrClosed.
func (sub *Subscription) Next(ctx context.Context) (Event, error) {
	select {
	case <-sub.closed:
		return Event{}, ErrSubscriptionClosed
	default:
	}
	req := &nextRequest{reply: make(chan nextResult, 1)}
	sub.c.send(sub.pid, req)
	select {
	case r := <-req.reply:
		return r.ev, r.err
	case <-sub.stopped:
		select {
		case r := <-req.reply:
			return r.ev, r.err
		default:
			return Event{}, sub.stoppedErr()
		}
	case <-ctx.Done():
	}
	// Withdraw the request; an event the actor sent meanwhile is returned
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
			return r.ev, nil
		}
	default:
	}
	return Event{}, ctx.Err()
}

// stoppedErr is the error of a Next whose actor stopped.
func (sub *Subscription) stoppedErr() error {
	select {
	case <-sub.closed:
		return ErrSubscriptionClosed
	default:
	}
	if err := sub.c.usable(); err != nil {
		return err
	}
	return ErrSubscriptionClosed
}

// Close ends the subscription: it closes the stream's send side (the node's
// signal to unsubscribe), stops reading, and stops the subscription's actor
// and reader, waiting for them. Pending and later Next calls return
// ErrSubscriptionClosed. It is idempotent and returns nil.
func (sub *Subscription) Close() error {
	sub.closeOnce.Do(func() {
		close(sub.closed)
		if !sub.c.beginSubscriptionClose() {
			// The client is closing: it stops every actor.
			<-sub.stopped
			return
		}
		defer sub.c.subscriptionCloses.Done()
		select {
		case <-sub.stopped:
			return
		default:
		}
		// The actor stops itself once its reader has exited.
		sub.c.send(sub.pid, &unsubscribeRequest{})
		<-sub.stopped
	})
	return nil
}
