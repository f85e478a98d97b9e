package client

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// Messages of the connection actor. Every message is sent as a pointer.

// The requests the Client's methods send race with Close: one that reaches a
// stopped actor is dropped quietly (the caller also waits on the actor's
// stopped channel), so they skip the dead-letter log.
func (*controlRequest) IgnoreDeadLetterLogging()                {}
func (*subscriptionSpawnRequest) IgnoreDeadLetterLogging()      {}
func (*groupSubscriptionSpawnRequest) IgnoreDeadLetterLogging() {}

// controlRequest asks the connection actor to send one request on the
// control stream and to route its answer to reply.
type controlRequest struct {
	// build appends the request frame with request id id to dst.
	build func(dst []byte, id uint64) []byte
	// want is the frame type that answers the request.
	want wire.Type
	// safe says the request changes nothing at the node: sent and not
	// answered when its connection is lost, it is sent again on the next
	// one. Any other fails then, its outcome unknown.
	safe bool
	// abandoned is set by the caller once it gave up (its context ended):
	// a request still waiting for a connection is then not sent.
	abandoned atomic.Bool
	// reply receives exactly one response; it has capacity 1, so the actor
	// never blocks on it even if the caller has gone.
	reply chan controlResponse
}

// controlResponse is the answer to a controlRequest: value is a
// wire.StreamInfo (TypeStreamInfo), a []wire.StreamInfo (TypeStreamList), a
// wire.ReadResult (TypeReadResult), struct{}{} (TypeOK), a
// wire.GroupRecords (TypeGroupRecords), a uint64 (TypeGroupDone), a
// wire.GroupDeadList (TypeGroupDeadList), a wire.GroupInfo
// (TypeGroupInfo), a []wire.GroupAckOutcome (TypeGroupAcksDone), a
// []wire.ShardOffset (TypeShardOffsets) or a
// []wire.GroupSummary (TypeGroupList).
type controlResponse struct {
	value any
	err   error
}

// controlFrameReceived: the control reader decoded a frame from the node.
type controlFrameReceived struct {
	// s is the session whose control stream it came on.
	s *session
	// id is the frame's request id.
	id uint64
	// typ is the frame's type.
	typ wire.Type
	// value is the decoded body: wire.StreamInfo, []wire.StreamInfo,
	// wire.ReadResult, struct{}{} (OK), wire.GroupRecords, uint64
	// (GroupDone), wire.GroupDeadList, wire.GroupInfo, []wire.ShardOffset,
	// []wire.GroupSummary, *wire.Error, or the GoAway reason (string).
	value any
}

// controlStreamEnded: the control reader of session s stopped with err (a
// read error, or a *wire.Error for a frame it could not accept).
type controlStreamEnded struct {
	s   *session
	err error
}

// reconnected: the reconnect loop connected again, after attempts.
type reconnected struct {
	d        dialed
	seed     int
	attempts int
}

// reconnectGaveUp: the reconnect loop made attempts and got no connection;
// last is the last attempt's error (nil if none was allowed).
type reconnectGaveUp struct {
	attempts int
	last     error
}

// The reconnect loop's messages race with Close.
func (*reconnected) IgnoreDeadLetterLogging()     {}
func (*reconnectGaveUp) IgnoreDeadLetterLogging() {}

// subscriptionSpawnRequest asks the connection actor to start a
// subscription actor.
type subscriptionSpawnRequest struct {
	init  *subscriptionInit
	reply chan subscriptionSpawned // capacity 1
	// mu hands the request over between the caller and the connection
	// actor: a caller that gives up (its context ended) sets abandoned under
	// mu, and the actor spawns only under mu and if it is not set, so the
	// caller then finds the reply of a spawn that did happen in reply.
	mu        sync.Mutex
	abandoned bool
}

// groupSubscriptionSpawnRequest asks the connection actor to start a group
// subscription actor; mu and abandoned work as in subscriptionSpawnRequest.
type groupSubscriptionSpawnRequest struct {
	init      *groupSubscriptionInit
	reply     chan subscriptionSpawned // capacity 1
	mu        sync.Mutex
	abandoned bool
}

// subscriptionSpawned answers subscriptionSpawnRequest and
// groupSubscriptionSpawnRequest.
type subscriptionSpawned struct {
	pid *actor.PID
	err error
}

// drainingSeen: a child got shutting_down from the node on session s (a
// refused publish, an ended subscription or group stream): the node is
// draining, as if it had sent GoAway (which it does, on the control stream,
// but that may come later). The connection is then drained and closed, and
// the client reconnects.
type drainingSeen struct {
	s   *session
	err error
}

// goAwayPublishersDrained: after GoAway on session s, every publish stream
// has the node's answers to what it had in flight.
type goAwayPublishersDrained struct {
	s *session
}
