package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// WriteFrame asks a lane to write one encoded frame.
type WriteFrame struct {
	Frame []byte
	// Push marks a frame no request asked for whose number is bounded
	// otherwise (a group push, by credit): a lane's AnswerMeter leaves it
	// out, so a member reading slowly is still read (its heartbeats too).
	Push bool
	// Dispatched marks the answer to a request the control loop handed to
	// another actor (a group coordinator): it ends that request's count in
	// the lane's AnswerMeter.
	Dispatched bool
}

// WriteSections asks a lane to deliver sections to its subscriber. The lane
// coalesces whatever is queued into EventBatch frames and answers its parent
// with SectionsWritten once they are written.
type WriteSections struct {
	Sections []*wire.Section
}

// SectionsWritten tells a subscription how many batches (and records bytes)
// its lane has written: that much credit can go back to the shard.
type SectionsWritten struct {
	Entries int
	Bytes   int64
}

// CloseLane asks a lane to write Err (if any) as an Error frame with request
// id ReqID, then close its send side. The lane stops writing after it.
type CloseLane struct {
	ReqID uint64
	Err   *wire.Error
}

// LaneFailed tells a lane's parent that writing failed (the peer reset the
// stream or the connection is gone). The lane drops everything after it.
// Lane names the lane: it is sent with Send, which carries no sender.
type LaneFailed struct {
	Lane *actor.PID
	Err  error
}

// flushLane is a lane's marker to itself: queued behind whatever arrived
// before it, so when it is processed the lane writes everything it gathered
// in as few frames as possible and flushes. No timer is involved.
type flushLane struct{}

// LaneSyncRequest asks a lane to write and flush everything queued before
// it, then answers LaneSyncResponse. The node uses it while draining.
type LaneSyncRequest struct{}

// LaneSyncResponse answers LaneSyncRequest.
type LaneSyncResponse struct{}

// delayElapsed is a lane's timer message: the wait for a fuller frame is
// over.
type delayElapsed struct {
	seq uint64
}
