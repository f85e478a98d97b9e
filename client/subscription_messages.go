package client

import (
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

// subscriptionInit is what a subscription actor starts with: an opened
// subscription stream on which Subscribe was already written.
type subscriptionInit struct {
	// shard is the subscribed shard.
	shard uint32
	// reqID is the Subscribe frame's request id.
	reqID uint64
	// stream is the subscription stream; the actor owns it.
	stream *quic.Stream
	// stopped is closed by the connection actor once the subscription actor
	// has stopped; the Subscription waits on it besides replies.
	stopped chan struct{}
}

// subscribeAwait asks for the node's answer to Subscribe.
type subscribeAwait struct {
	reply chan subscribeAnswer // capacity 1
}

// subscribeAnswer is the node's Subscribed, or the error that ended the
// subscription before it.
type subscribeAnswer struct {
	sub wire.Subscribed
	err error
}

// nextRequest asks for the next event.
type nextRequest struct {
	reply chan nextResult // capacity 1
}

// nextResult answers nextRequest.
type nextResult struct {
	ev  Event
	err error
}

// nextCancelled: the caller of req gave up; drop it if it is still waiting
// and then signal ack.
type nextCancelled struct {
	req *nextRequest
	ack chan struct{} // capacity 1
}

// unsubscribeRequest asks the actor to end the subscription: close the send
// side, cancel reading, fail waiting calls, and stop once the reader exited.
type unsubscribeRequest struct{}

// subscribedReceived: the reader decoded the node's Subscribed.
type subscribedReceived struct {
	sub wire.Subscribed
}

// eventsReceived: the reader decoded an EventBatch frame. It holds one of
// the reader's frame slots until the actor releases it.
type eventsReceived struct {
	sections []wire.BatchView
}

// subscriptionEnded is the reader's last message, sent as it exits. fromNode
// says err is the node's Error frame; quit says the actor asked it to stop;
// otherwise err is a read error or a *wire.Error for a frame the reader
// could not accept.
type subscriptionEnded struct {
	err      error
	fromNode bool
	quit     bool
}
