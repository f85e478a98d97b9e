package client

import (
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// Messages of the group subscription actor. Every message is sent as a
// pointer.

// The requests the GroupMember's methods send, and the heartbeat
// goroutine's ticks, race with shutdown: one that reaches a stopped actor is
// dropped quietly (the caller also waits on the actor's stopped channel), so
// they skip the dead-letter log.
func (*groupJoinAwait) IgnoreDeadLetterLogging()          {}
func (*groupNextRequest) IgnoreDeadLetterLogging()        {}
func (*groupNextCancelled) IgnoreDeadLetterLogging()      {}
func (*groupAckRequest) IgnoreDeadLetterLogging()         {}
func (*groupUnsubscribeRequest) IgnoreDeadLetterLogging() {}
func (*heartbeatDue) IgnoreDeadLetterLogging()            {}

// groupSubscriptionInit is what a group subscription actor starts with.
type groupSubscriptionInit struct {
	// join is the GroupSubscribe to send (its request id is set when sent).
	join wire.GroupSubscribe
	// heartbeat is the asked heartbeat interval (WithHeartbeat; 0: default,
	// negative: none).
	heartbeat time.Duration
	// clock times the heartbeats.
	clock clock
	// assignment holds the latest assignment; the actor stores, the
	// GroupMember loads.
	assignment *atomic.Pointer[GroupAssignment]
	// waitingStream counts the readers waiting for QUIC stream credit to
	// open the group stream (openStream); Subscribe reads it when its
	// context ends.
	waitingStream *atomic.Int32
	// stopped is closed by the connection actor once the group subscription
	// actor has stopped; the GroupMember waits on it besides replies.
	stopped chan struct{}
}

// groupJoinAwait asks for the node's answer to GroupSubscribe.
type groupJoinAwait struct {
	// reply receives nil once the node accepted the join, or the error
	// that ended the group subscription before; capacity 1.
	reply chan error
}

// groupNextRequest asks for the next delivery.
type groupNextRequest struct {
	reply chan groupNextResult // capacity 1
}

// groupNextResult answers groupNextRequest.
type groupNextResult struct {
	d   Delivery
	err error
}

// groupNextCancelled: the caller of req gave up; drop it if it is still
// waiting and then signal ack.
type groupNextCancelled struct {
	req *groupNextRequest
	ack chan struct{} // capacity 1
}

// groupAckRequest asks the actor to send a GroupStreamAck and to route the
// node's answer to reply.
type groupAckRequest struct {
	cursor []byte
	count  uint32
	// join is the membership the acked delivery was pushed in (0: not
	// known, as for a heartbeat).
	join  uint64
	reply chan error // capacity 1
}

// groupUnsubscribeRequest asks the actor to end the group subscription:
// close the stream both ways, fail waiting calls, and stop once its
// goroutines exited.
type groupUnsubscribeRequest struct{}

// The reader's messages, in the order it sends them: groupStreamOpened,
// then any of groupAnswerReceived, groupErrorReceived and
// groupPushReceived, and last groupStreamEnded. Each carries the
// generation of its stream (the actor opens a new one to rejoin after a lost
// connection): messages of an earlier stream are stale.

// groupStreamOpened: the reader opened the group stream. The actor owns its
// send side from here on and writes GroupSubscribe.
type groupStreamOpened struct {
	gen    int
	stream *quic.Stream
}

// groupAnswerReceived: the node's GroupAssignment answering request id.
type groupAnswerReceived struct {
	gen        int
	id         uint64
	assignment wire.GroupAssignment
}

// groupErrorReceived: the node's Error answering request id (not 0); the
// stream goes on, unless id is the GroupSubscribe's.
type groupErrorReceived struct {
	gen int
	id  uint64
	err *wire.Error
}

// groupPushReceived: the node pushed records; cursor acks them.
type groupPushReceived struct {
	gen      int
	delivery Delivery
}

// groupStreamEnded is the reader's last message, sent as it exits.
// fromNode says err is the node's Error frame with request id 0; otherwise
// err is an open or read error, or a *wire.Error for a frame the reader
// could not accept.
type groupStreamEnded struct {
	gen      int
	err      error
	fromNode bool
}

// rejoinDue: the pause after a not_leader is over; the member of stream
// generation gen joins again.
type rejoinDue struct{ gen int }

// heartbeatDue: a due time the actor gave the heartbeat goroutine passed.
type heartbeatDue struct{}

// heartbeaterExited is the heartbeat goroutine's last message.
type heartbeaterExited struct{}
