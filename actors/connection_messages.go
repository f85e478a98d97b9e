package actors

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// Drain tells a connection (through the listener) that the node is shutting
// down: it sends GoAway and refuses new publishes and subscriptions with
// CodeShuttingDown, while what is in flight finishes.
type Drain struct{}

// ConnectionAccepted hands a new QUIC connection to the listener actor.
type ConnectionAccepted struct {
	Conn *quic.Conn
	// Relay is set for a connection another node of the cluster opened
	// to relay its client's group traffic (peerwire.RelayALPN): it opens
	// with a RelayHello instead of a Hello.
	Relay *RelayAccept
}

// openLane asks the connection actor to spawn a writer lane for a stream,
// answering on reply. Sent by the connection's own goroutines.
type openLane struct {
	stream *quic.Stream
	window chan struct{}
	cancel context.CancelFunc
	meter  *AnswerMeter
	reply  chan *actor.PID
}

// openSubscription asks the connection actor to start a subscription on a
// stream whose first frame was Subscribe.
type openSubscription struct {
	stream *quic.Stream
	reqID  uint64
	req    wire.Subscribe
	// principal is the name of the connection's credentials (read by the
	// session, which owns them), for the dashboard.
	principal string
}

// openGroupMember asks the connection actor to start a push member on a
// stream whose first frame was GroupSubscribe; it answers the member's pid
// on reply (closed if the connection is closing), or why it refused on
// refused.
type openGroupMember struct {
	cfg     GroupMemberConfig
	reply   chan *actor.PID
	refused chan *wire.Error
}

// connectionDone tells the connection actor that its serving goroutine has
// ended (the peer left, or the connection was closed for an error).
type connectionDone struct {
	err error
}

// LanesRequest asks a connection for its writer lanes (control and publish
// streams). Answered with LanesResponse. The node uses it while draining.
type LanesRequest struct{}

// LanesResponse answers LanesRequest.
type LanesResponse struct {
	Lanes []*actor.PID
}

// ConnectionsRequest asks the listener for its connection actors. Answered
// with ConnectionsResponse.
type ConnectionsRequest struct{}

// ConnectionsResponse answers ConnectionsRequest.
type ConnectionsResponse struct {
	Connections []*actor.PID
}
