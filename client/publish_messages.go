package client

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/net/wire"
)

// Messages of the publish-stream actor. Every message is sent as a pointer.

// The requests the Client's methods send race with Close: one that reaches a
// stopped actor is dropped quietly (the caller also waits on the connection
// actor's stopped channel), so they skip the dead-letter log.
func (*publishRequest) IgnoreDeadLetterLogging()      {}
func (*publishWithdrawn) IgnoreDeadLetterLogging()    {}
func (*publishStatsRequest) IgnoreDeadLetterLogging() {}
func (*publishDrainRequest) IgnoreDeadLetterLogging() {}
func (*publishersRequest) IgnoreDeadLetterLogging()   {}
func (*publishPump) IgnoreDeadLetterLogging()         {}

// The connection actor's notices to its children race with their stop (a
// Subscription's Close).
func (*sessionStarted) IgnoreDeadLetterLogging()  {}
func (*connectionEnded) IgnoreDeadLetterLogging() {}
func (*drainingSeen) IgnoreDeadLetterLogging()    {}

// publishRoute is what a publish is routed by to a publish-stream actor:
// each (stream, shard) the client publishes to has one.
type publishRoute struct {
	name  wire.StreamName
	shard uint32
}

// publishRequest is one publish call: its encoded frames, in order. The
// caller builds it, sends it to the connection actor (which routes it by
// route) and then touches only settled and, once settled is closed, res;
// from then on the fields below settled are owned by the publish-stream
// actor. The request is also its caller's future (fut), so a publish is one
// allocation for both.
type publishRequest struct {
	// route is the stream and shard the frames publish to (shard 0 for an
	// AnyShard publish).
	route publishRoute
	// mode is the ack mode of every frame.
	mode wire.AckMode
	// resend marks an idempotent publish: written and not answered when its
	// connection is lost, it is sent again on the next one (the node
	// recognises a batch it wrote already), instead of failing with an
	// unknown outcome.
	resend bool
	// frames are complete Publish frames encoded with request id 0; the
	// actor patches the id in just before writing each.
	frames [][]byte
	// count is the publish's number of records.
	count uint32
	// recBytes, set only for a publish whose frame may be merged with
	// others (publish_coalesce.go), is the size of the records block that
	// ends its one frame.
	recBytes int
	// held is the budget bytes the caller acquired; the actor releases each
	// frame's share when it is answered or failed (AckNone: written).
	held int64
	// fut is the future PublishAsync returns for this request.
	fut PublishFuture
	// span and target, for a publish made by publishAsync (fut.c set), are
	// its trace span, ended when it settles, and the route it was sent by,
	// told of the outcome (publishSettled).
	span   trace.Span
	target publishTarget
	// settled is closed by finish once res holds the result.
	settled chan struct{}
	res     publishResult

	// written is how many frames were written.
	written int
	// answered is how many frames reached a final state (acked, refused,
	// failed, or written for AckNone).
	answered int
	// acked is how many frames the node acknowledged.
	acked int
	// acks holds each frame's ack, by frame index.
	acks []wire.PublishAck
	// oneFrame and oneAck back frames and acks for a publish of one frame
	// (most publishes), so that neither slice is an allocation of its own.
	oneFrame [1][]byte
	oneAck   [1]wire.PublishAck
	// err is the first failure.
	err error
	// refused is set when err is the node's answer to one of the frames (an
	// Error frame with its request id), not a local or connection failure.
	refused bool
	// done is set once reply was sent.
	done bool
}

// publishResult is what a publishRequest resolves to.
type publishResult struct {
	ack PublishAck
	err error
	// refused: err is the node's answer to the publish (see
	// publishRequest.refused).
	refused bool
	// shard is the shard the publish was routed to.
	shard uint32
}

// finish resolves the request with res (once).
func (r *publishRequest) finish(res publishResult) {
	if r.done {
		return
	}
	r.done = true
	res.shard = r.route.shard
	if r.fut.c != nil {
		r.fut.c.publishSettled(r, res)
	}
	r.res = res
	close(r.settled)
}

// finishUnsent fails a request none of whose frames were written, giving
// its budget back.
func (r *publishRequest) finishUnsent(s *shared, err error) {
	if r.done {
		return
	}
	s.budget.release(r.held)
	r.held = 0
	r.finish(publishResult{err: err})
}

// frameRefused records that the node answered frame i with err.
func (r *publishRequest) frameRefused(s *shared, i int, err *wire.Error) {
	if r.err == nil {
		r.refused = true
	}
	r.frameSettled(s, i, wire.PublishAck{}, err)
}

// frameSettled records that frame i reached a final state, with its ack or
// err, releases its budget share and resolves the request once every frame
// has settled.
func (r *publishRequest) frameSettled(s *shared, i int, ack wire.PublishAck, err error) {
	if r.done {
		return
	}
	n := int64(len(r.frames[i]))
	s.budget.release(n)
	r.held -= n
	switch {
	case err == nil:
		if r.mode != wire.AckNone {
			r.acked++
		}
	case r.err == nil:
		r.err = err
	case errors.Is(err, ErrOutcomeUnknown) && !errors.Is(r.err, ErrOutcomeUnknown):
		// A frame in doubt outweighs another frame's refusal: the caller
		// must not take the publish as not written.
		r.err, r.refused = err, false
	}
	if r.acks == nil && r.mode != wire.AckNone {
		if len(r.frames) == 1 {
			r.acks = r.oneAck[:]
		} else {
			r.acks = make([]wire.PublishAck, len(r.frames))
		}
	}
	if r.acks != nil {
		r.acks[i] = ack
	}
	r.answered++
	if r.answered < len(r.frames) {
		return
	}
	if r.err != nil {
		if r.acked > 0 && !errors.Is(r.err, ErrOutcomeUnknown) {
			// Part of the publish was written: an error alone, retryable or
			// not, would have the caller write that part again.
			r.err = outcomeUnknown(fmt.Errorf("%d of the publish's %d frames were written: %w", r.acked, len(r.frames), r.err))
			r.refused = false
		}
		r.finish(publishResult{err: r.err, refused: r.refused})
		return
	}
	res := publishResult{ack: r.result()}
	// Every frame was written and answered: nothing holds them any more
	// (a publish that failed keeps its frames; the collector takes them).
	for _, f := range r.frames {
		frameBuffers.put(f)
	}
	r.frames, r.oneFrame[0] = nil, nil
	r.finish(res)
}

// result builds the caller's PublishAck from the frames' acks.
func (r *publishRequest) result() PublishAck {
	switch r.mode {
	case wire.AckPerBatch:
		a := r.acks[0]
		return PublishAck{Shard: a.Shard, Offset: a.Offset, Count: int(a.Count), Duplicate: a.Duplicate}
	case wire.AckPerMessage:
		out := PublishAck{Shard: r.acks[0].Shard, Offset: r.acks[0].Offset, Offsets: make([]uint64, len(r.acks))}
		for i, a := range r.acks {
			out.Offsets[i] = a.Offset
			out.Count += int(a.Count)
		}
		return out
	default:
		return PublishAck{}
	}
}

// publishWithdrawn: the caller of req gave up (its context ended). Frames not
// yet written are dropped; written ones stay in flight.
type publishWithdrawn struct {
	req *publishRequest
	err error
}

// publishAcked: the reader decoded a PublishAck.
type publishAcked struct {
	// gen is the stream generation the reader belongs to.
	gen int
	id  uint64
	ack wire.PublishAck
}

// publishRefused: the reader decoded an Error frame.
type publishRefused struct {
	gen int
	id  uint64
	err *wire.Error
}

// publishStreamEnded: the reader stopped with err (a read error, or a
// *wire.Error for a frame it could not accept).
type publishStreamEnded struct {
	gen int
	err error
}

// publishStatsRequest asks the publish-stream actor carrying route how many
// frames it holds (for tests and debugging).
type publishStatsRequest struct {
	route publishRoute
	reply chan publishStats // capacity 1
}

// publishStats answers publishStatsRequest.
type publishStats struct {
	// queued is the frames waiting to be written.
	queued int
	// inflight is the acked frames written and not yet answered.
	inflight int
}

// publishersRequest asks the connection actor for its publish-stream actors.
type publishersRequest struct {
	reply chan []*actor.PID // capacity 1
}

// publishDrainRequest asks a publish-stream actor to drain before the
// client closes: reply is signalled once the node has confirmed or ended the
// stream (see publishStreamActor).
type publishDrainRequest struct {
	reply chan struct{} // capacity 1
}

// sessionStarted tells a child of the connection actor that the client
// connected again: s is the new session. What was waiting for a connection
// goes out on it.
type sessionStarted struct {
	s *session
}

// connectionEnded tells a child of the connection actor that the client
// will not connect again (reconnecting gave up, or was off): everything it
// holds and everything later fails with err.
type connectionEnded struct {
	err error
}

// goAwayNotice tells a publish-stream actor that the node sent GoAway (err
// is the shutting_down error new publishes get); reply is signalled once
// nothing it wrote is in flight.
type goAwayNotice struct {
	err   error
	reply chan struct{} // capacity 1
}

// publishStreamOpened answers a publish-stream actor's wait for the node to
// allow one more stream (waitForStream): the stream, or why there is none.
// seq names the wait.
type publishStreamOpened struct {
	seq    uint64
	stream *quic.Stream
	err    error
}
