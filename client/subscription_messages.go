package client

import (
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// Messages of the subscription actor. Every message is sent as a pointer.

// The requests the Subscription's methods send race with shutdown: one that
// reaches a stopped actor is dropped quietly (the caller also waits on the
// actor's stopped channel), so they skip the dead-letter log.
func (*subscribeAwait) IgnoreDeadLetterLogging()     {}
func (*nextRequest) IgnoreDeadLetterLogging()        {}
func (*nextCancelled) IgnoreDeadLetterLogging()      {}
func (*unsubscribeRequest) IgnoreDeadLetterLogging() {}

// subscriptionInit is what a subscription actor starts with.
type subscriptionInit struct {
	// name is the subscribed stream.
	name wire.StreamName
	// shards are the subscribed shards and where each starts, in the order
	// the Subscription reports them.
	shards []shardStart
	// queue is the queue capacity to ask the node for (0: the stream's).
	queue uint32
	// autoResume: resubscribe a shard that ended lagged, from its resume
	// offset, instead of ending it.
	autoResume bool
	// replica is the replica asked for (WithReplica).
	replica Replica
	// resumes counts automatic resubscriptions; the actor adds, the
	// Subscription reads.
	resumes *atomic.Int64
	// waitingStream counts the shard readers waiting for QUIC stream
	// credit to open their streams (openStream); Subscribe reads it when
	// its context ends.
	waitingStream *atomic.Int32
	// stopped is closed by the connection actor once the subscription actor
	// has stopped; the Subscription waits on it besides replies.
	stopped chan struct{}
}

// shardStart is one subscribed shard and where it starts.
type shardStart struct {
	shard  uint32
	start  wire.StartKind
	offset uint64
}

// subscribeAwait asks for the node's answers to the Subscribe frames.
type subscribeAwait struct {
	reply chan subscribeAnswer // capacity 1
}

// subscribeAnswer is every shard's Subscribed, or the error that ended the
// subscription before they all came.
type subscribeAnswer struct {
	granted map[uint32]wire.Subscribed
	err     error
}

// nextRequest asks for the next events: at least one, and whatever else is
// ready, up to max (so a fast reader pays one actor round trip per batch of
// events, not per event).
type nextRequest struct {
	reply chan nextResult // capacity 1
	max   int
	// buf, if its capacity allows, is filled with the answer's events
	// (an emptied slice of the subscription's, reused).
	buf []Event
}

// nextResult answers nextRequest: events, or an error (never both).
type nextResult struct {
	evs []Event
	err error
}

// nextCancelled: the caller of req gave up; drop it if it is still waiting
// and then signal ack.
type nextCancelled struct {
	req *nextRequest
	ack chan struct{} // capacity 1
}

// unsubscribeRequest asks the actor to end the subscription: close the send
// sides, cancel reading, fail waiting calls, and stop once the readers
// exited.
type unsubscribeRequest struct{}

// The reader messages below carry the index of their shard in
// subscriptionInit.shards and the generation of the attempt (the actor's
// count of Subscribe frames for that shard) they belong to.

// shardStreamOpened: a reader opened its subscription stream (and is about
// to write Subscribe on it). The actor owns the stream from here on.
type shardStreamOpened struct {
	idx, gen int
	stream   *quic.Stream
}

// subscribedReceived: the reader decoded the node's Subscribed.
type subscribedReceived struct {
	idx, gen int
	sub      wire.Subscribed
}

// eventsReceived: the reader decoded an EventBatch frame. It holds one of
// the shard's frame slots until the actor releases it.
type eventsReceived struct {
	idx, gen int
	sections []wire.BatchView
}

// shardEnded is a reader's last message, sent as it exits. fromNode says
// err is the node's Error frame; otherwise err is a read, open or write
// error, a *wire.Error for a frame the reader could not accept, or the
// subscription's context error once the actor asked the readers to stop.
type shardEnded struct {
	idx, gen int
	err      error
	fromNode bool
}
