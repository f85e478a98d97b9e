package client

import (
	"sync"

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
	// reply receives exactly one response; it has capacity 1, so the actor
	// never blocks on it even if the caller has gone.
	reply chan controlResponse
}

// controlResponse is the answer to a controlRequest: value is a
// wire.StreamInfo (TypeStreamInfo), a []wire.StreamInfo (TypeStreamList), a
// wire.ReadResult (TypeReadResult), struct{}{} (TypeOK), a
// wire.GroupRecords (TypeGroupRecords), a uint64 (TypeGroupDone), a
// wire.GroupDeadList (TypeGroupDeadList) or a wire.GroupInfo
// (TypeGroupInfo).
type controlResponse struct {
	value any
	err   error
}

// controlFrameReceived: the control reader decoded a frame from the node.
type controlFrameReceived struct {
	// id is the frame's request id.
	id uint64
	// typ is the frame's type.
	typ wire.Type
	// value is the decoded body: wire.StreamInfo, []wire.StreamInfo,
	// wire.ReadResult, struct{}{} (OK), wire.GroupRecords, uint64
	// (GroupDone), wire.GroupDeadList, wire.GroupInfo, *wire.Error, or the
	// GoAway reason (string).
	value any
}

// controlStreamEnded: the control reader stopped with err (a read error, or
// a *wire.Error for a frame it could not accept).
type controlStreamEnded struct {
	err error
}

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

// goAwayPublishersDrained: after GoAway, every publish stream has the
// node's answers to what it had in flight.
type goAwayPublishersDrained struct{}
