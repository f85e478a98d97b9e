package client

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
)

// publishStreamActor owns one QUIC publish stream: it writes the Publish
// frames of the (stream, shard) routes assigned to it, in the order their
// requests arrived (blocking on the write is allowed: it owns that send
// side), keeps at most the node's publish window of acked frames
// unanswered, and resolves each request as its acks arrive. A reader
// goroutine per stream decodes the node's answers and sends them here.
//
// A publish is not written in the Receive that queues it but in the next
// pump, which the actor sends itself: the publishes that reached its
// mailbox meanwhile are queued by then, and the plain ones of one route
// that sit next to each other go out as one frame (publish_coalesce.go).
// Nothing waits for that: the pump message is behind only what was already
// in the mailbox.
//
// The stream is opened on first use. If the node ends it while the
// connection lives, the frames in flight on it fail and the next frame opens
// a new one. When the node allows no more streams on the connection, a
// goroutine waits for one to close and hands the stream over
// (publishStreamOpened); the actor never waits for it in Receive.
//
// When the connection is lost and the client reconnects, the actor keeps
// what it holds and writes it on the new connection's stream once the
// connection actor hands it the new session (sessionStarted); what it had
// in flight is settled as planLoss decides (publish_reconnect.go). Frames the
// node refused with shutting_down go out again there too. Without
// reconnecting, a lost connection fails everything.
//
// When the client closes, a stream with AckNone publishes the node has not
// confirmed (by answering a later publish) is drained first: its send side
// is closed and Close waits, for a bounded time, for the node to end the
// stream, so those publishes are not cut off by the connection's close.
//
// All fields are owned by the actor and touched only in Receive.
type publishStreamActor struct {
	// sh is the client's shared state.
	sh *shared
	// s is the session the actor writes on.
	s *session
	// stream is the current publish stream; nil before the first publish and
	// after it ended.
	stream *quic.Stream
	// gen numbers the streams this actor opened; a reader tags its messages
	// with its stream's gen so late messages of an ended stream are ignored.
	gen int
	// queue holds the frames not yet written, in issue order.
	queue []pendingFrame
	// inflight holds the written acked frames awaiting an answer, by
	// request id.
	inflight map[uint64]pendingFrame
	// lost is set once s failed while reconnecting is on: nothing is
	// written until sessionStarted brings the next session.
	lost bool
	// lastID is the highest request id written on the current stream.
	lastID uint64
	// unconfirmedNone is the id of the last AckNone frame written on the
	// current stream that no later answer has confirmed the node processed
	// (answers come in commit order); 0 when there is none.
	unconfirmedNone uint64
	// draining is set by a drain request (the client is closing): the send
	// side was closed, and nothing more is written.
	draining bool
	// drainWaiters are answered when the node has ended the stream.
	drainWaiters []chan struct{}
	// goAway is set once the node said it is draining: nothing more is
	// written on this session (new publishes fail with it at once, or,
	// reconnecting, wait for the next session), the send side is closed,
	// and goAwayWaiters are answered once every frame in flight has been
	// answered or failed.
	goAway        error
	goAwayWaiters []chan struct{}
	// broken is set once the connection is unusable: every request fails
	// with it.
	broken error
	// pumpSent is set while a publishPump the actor sent itself is in its
	// mailbox.
	pumpSent bool
	// openCancel is set while a goroutine waits for the node to allow one
	// more stream on the connection (max_streams_per_connection), to open
	// the next publish stream, and ends that wait; openSeq names the wait
	// (its answer carries it).
	openSeq    uint64
	openCancel context.CancelFunc
}

// pendingFrame is frame idx of req; id is the request id it was last
// written with (0: never written). In flight, rest holds the frames written
// in the same Publish frame after this one (nil: written alone).
type pendingFrame struct {
	req  *publishRequest
	idx  int
	id   uint64
	rest []pendingFrame
}

// parts returns the frames f's Publish frame carried, in order.
func (f pendingFrame) parts() []pendingFrame {
	rest := f.rest
	f.rest = nil
	return append([]pendingFrame{f}, rest...)
}

// publishPump: write what is queued (see publishStreamActor).
type publishPump struct{}

// newPublishStreamProps returns the props of a publish-stream actor that
// starts on session s.
func newPublishStreamProps(s *session) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &publishStreamActor{sh: s.shared, s: s, inflight: make(map[uint64]pendingFrame)}
	})
}

// Receive dispatches.
func (a *publishStreamActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopped, *actor.Restarting:
		// The stream is opened on first use; nothing to do.
	case *actor.Stopping:
		a.onStopping()
	case *publishRequest:
		a.onPublishRequest(ctx, m)
	case *publishPump:
		a.pumpSent = false
		a.pump(ctx)
	case *publishWithdrawn:
		a.onPublishWithdrawn(m)
	case *publishAcked:
		a.onPublishAcked(ctx, m)
	case *publishRefused:
		a.onPublishRefused(ctx, m)
	case *publishStreamEnded:
		a.onPublishStreamEnded(ctx, m)
	case *publishStreamOpened:
		a.onPublishStreamOpened(ctx, m)
	case *publishStatsRequest:
		a.onPublishStats(m)
	case *goAwayNotice:
		a.onGoAway(m)
	case *publishDrainRequest:
		a.onPublishDrain(ctx, m)
	case *sessionStarted:
		a.onSessionStarted(ctx, m)
	case *connectionEnded:
		a.onConnectionEnded(m)
	default:
		a.s.log.Warn("herald: publish stream actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *publishStreamActor) onPublishRequest(ctx actor.Context, r *publishRequest) {
	if a.broken != nil {
		r.finishUnsent(a.sh, a.broken)
		return
	}
	if a.goAway == nil {
		if e := a.s.goAway.Load(); e != nil {
			// GoAway came after the caller checked, before this stream heard
			// of it (a new route's stream is spawned after the notices went
			// out).
			a.goAway = e
		}
	}
	if a.goAway != nil && !a.sh.reconnect {
		r.finishUnsent(a.sh, a.goAway)
		return
	}
	for i := range r.frames {
		a.queue = append(a.queue, pendingFrame{req: r, idx: i})
	}
	if !a.pumpSent {
		a.pumpSent = true
		ctx.Send(ctx.Self(), &publishPump{})
	}
}

// pump writes queued frames while the window allows: an acked frame needs a
// free window slot; an AckNone frame needs none but waits behind the frames
// before it, so a stream's publishes go out in issue order. Each write
// takes the head of the queue and the frames behind it that merge with it
// (frameCoalescer).
func (a *publishStreamActor) pump(ctx actor.Context) {
	for len(a.queue) > 0 && a.broken == nil && !a.draining && !a.lost && a.goAway == nil {
		f := a.queue[0]
		if f.req.mode != wire.AckNone && len(a.inflight) >= a.s.window {
			return
		}
		if a.stream == nil && !a.open(ctx) {
			return
		}
		co := frameCoalescer{limits: coalesceLimitsFor(a.s.maxSend)}
		n := co.take(a.queue)
		frame := co.encode(a.queue[:n])
		if n > 1 {
			f.rest = slices.Clone(a.queue[1:n])
		}
		clear(a.queue[:n])
		a.queue = a.queue[n:]
		id := a.s.nextID()
		f.id = id
		for i := range f.rest {
			f.rest[i].id = id
		}
		binary.BigEndian.PutUint64(frame[8:16], id)
		stages.MarkRecords(stages.ClientWrite, frame)
		_, err := a.stream.Write(frame)
		if n > 1 {
			frameBuffers.put(frame) // the stream holds no part of it once Write returns
		}
		f.req.written++
		for _, p := range f.rest {
			p.req.written++
		}
		if err != nil {
			if f.req.mode != wire.AckNone {
				// Part of the frame may have left: it is in flight, and a
				// lost connection settles it (planLoss); a failed stream
				// fails it.
				a.inflight[id] = f
			} else {
				for _, p := range f.parts() {
					p.req.frameSettled(a.sh, p.idx, wire.PublishAck{}, outcomeUnknown(fmt.Errorf("herald: publish write: %w", err)))
				}
			}
			a.streamFailed(err)
			continue
		}
		a.lastID = id
		if f.req.mode == wire.AckNone {
			a.unconfirmedNone = id
			f.req.frameSettled(a.sh, f.idx, wire.PublishAck{}, nil)
			for _, p := range f.rest {
				p.req.frameSettled(a.sh, p.idx, wire.PublishAck{}, nil)
			}
		} else {
			a.inflight[id] = f
		}
	}
}

// open opens a new publish stream and starts its reader, and reports
// whether the stream is there to write on. When the node allows no more
// streams on the connection, a goroutine waits for one to close
// (waitForStream) and the actor goes on answering meanwhile: it reports
// false, and publishStreamOpened brings the stream.
func (a *publishStreamActor) open(ctx actor.Context) bool {
	if a.opening() {
		return false
	}
	st, err := a.s.conn.OpenStream()
	switch {
	case err == nil:
		return a.started(ctx, st)
	case streamLimitReached(err):
		a.waitForStream(ctx)
	default:
		a.connectionLost(err)
	}
	return false
}

// waitForStream starts a goroutine that opens a stream once the node
// allows one more, and tells the actor (publishStreamOpened).
func (a *publishStreamActor) waitForStream(ctx actor.Context) {
	octx, cancel := context.WithCancel(a.s.ctx)
	a.openSeq++
	s, root, self, seq := a.s, ctx.ActorSystem().Root, ctx.Self(), a.openSeq
	if !s.goroutines.Go(func() {
		st, err := s.conn.OpenStreamSync(octx)
		root.Send(self, &publishStreamOpened{seq: seq, stream: st, err: err})
	}) {
		cancel()
		a.breakAll(a.s.lost(ErrClosed))
		return
	}
	a.openCancel = cancel
}

// opening reports whether a goroutine waits to open the next stream.
func (a *publishStreamActor) opening() bool { return a.openCancel != nil }

// stopOpening ends a wait for a stream: the session it was for is lost or
// left, the node is draining, or the actor stops. Its answer is then
// ignored (and its stream, if it got one, closed), and a drain that waited
// for the stream is answered: nothing was written.
func (a *publishStreamActor) stopOpening() {
	if !a.opening() {
		return
	}
	a.openCancel()
	a.openCancel = nil
	a.openSeq++
	if len(a.drainWaiters) > 0 {
		a.drain()
	}
}

// onPublishStreamOpened takes the stream a wait opened, writes what is
// queued on it, and drains it if the client asked meanwhile.
func (a *publishStreamActor) onPublishStreamOpened(ctx actor.Context, m *publishStreamOpened) {
	if !a.opening() || m.seq != a.openSeq {
		if m.stream != nil {
			m.stream.CancelRead(0)
			m.stream.CancelWrite(0)
		}
		return
	}
	a.openCancel()
	a.openCancel = nil
	if m.err != nil {
		a.connectionLost(m.err)
		return
	}
	if a.broken != nil || a.lost || a.goAway != nil {
		// Nothing more is written on this session.
		m.stream.CancelRead(0)
		m.stream.CancelWrite(0)
		a.finishGoAway()
		if len(a.drainWaiters) > 0 {
			a.drain()
		}
		return
	}
	if !a.started(ctx, m.stream) {
		return
	}
	a.pump(ctx)
	if len(a.drainWaiters) > 0 {
		a.drain()
	}
}

// started makes st the current publish stream and starts its reader.
func (a *publishStreamActor) started(ctx actor.Context, st *quic.Stream) bool {
	a.gen++
	s, root, self, gen := a.s, ctx.ActorSystem().Root, ctx.Self(), a.gen
	if !s.goroutines.Go(func() { readPublishStream(s, root, self, gen, st) }) {
		st.CancelRead(0)
		st.CancelWrite(0)
		a.breakAll(a.s.lost(ErrClosed))
		return false
	}
	a.stream = st
	a.lastID = 0
	a.unconfirmedNone = 0
	return true
}

// readPublishStream is a publish stream's reader: it decodes the node's
// answers and hands them to the actor, until the stream fails.
func readPublishStream(s *session, root *actor.RootContext, pid *actor.PID, gen int, st *quic.Stream) {
	for {
		f, err := wire.ReadFrame(st, s.maxRecv)
		if err != nil {
			root.Send(pid, &publishStreamEnded{gen: gen, err: err})
			return
		}
		switch f.Header.Type {
		case wire.TypePublishAck:
			ack, err := wire.DecodePublishAck(f.Body)
			if err != nil {
				root.Send(pid, &publishStreamEnded{gen: gen, err: err})
				return
			}
			root.Send(pid, &publishAcked{gen: gen, id: f.Header.RequestID, ack: ack})
		case wire.TypeError:
			e, err := wire.DecodeError(f.Body)
			if err != nil {
				root.Send(pid, &publishStreamEnded{gen: gen, err: err})
				return
			}
			root.Send(pid, &publishRefused{gen: gen, id: f.Header.RequestID, err: e})
		default:
			root.Send(pid, &publishStreamEnded{gen: gen, err: protocolViolation("%v frame on a publish stream", f.Header.Type)})
			return
		}
	}
}

func (a *publishStreamActor) onPublishAcked(ctx actor.Context, m *publishAcked) {
	if m.gen != a.gen || a.broken != nil {
		return
	}
	f, ok := a.inflight[m.id]
	if !ok {
		a.protocolFailure(protocolViolation("publish ack for request id %d, which is not in flight", m.id))
		return
	}
	if f.rest == nil {
		delete(a.inflight, m.id)
		f.req.frameSettled(a.sh, f.idx, m.ack, nil)
	} else {
		parts := f.parts()
		acks, err := frameCoalescer{}.split(m.ack, parts)
		if err != nil {
			a.protocolFailure(err)
			return
		}
		delete(a.inflight, m.id)
		for i, p := range parts {
			p.req.frameSettled(a.sh, p.idx, acks[i], nil)
		}
	}
	a.confirmed(m.id)
	a.pump(ctx)
}

// confirmed records that the node answered request id: every AckNone
// publish written before it was processed.
func (a *publishStreamActor) confirmed(id uint64) {
	if a.unconfirmedNone != 0 && id >= a.unconfirmedNone {
		a.unconfirmedNone = 0
		a.finishDrain()
	}
	a.finishGoAway()
}

func (a *publishStreamActor) onPublishRefused(ctx actor.Context, m *publishRefused) {
	if m.gen != a.gen || a.broken != nil {
		return
	}
	if m.id == 0 {
		// An error about the stream as a whole: what is in flight on it will
		// not be answered.
		a.failInflight(m.err)
		a.pump(ctx)
		return
	}
	if f, ok := a.inflight[m.id]; ok {
		delete(a.inflight, m.id)
		if a.sh.reconnect && isShuttingDown(m.err) {
			// The node is draining and applied nothing of it: it goes out
			// on the next connection. Nothing more is written on this one
			// (the GoAway may not have reached the connection actor yet).
			a.queue = requeue(a.queue, f.parts())
			if a.goAway == nil {
				ctx.Send(ctx.Parent(), &drainingSeen{s: a.s, err: m.err})
			}
			a.stopWriting(m.err)
			a.confirmed(m.id)
			return
		}
		// A merged frame's refusal is about the whole frame: every part
		// gets it, as it would have alone.
		for i, p := range f.parts() {
			err := m.err
			if i > 0 {
				e := *m.err
				err = &e
			}
			p.req.frameRefused(a.sh, p.idx, err)
		}
		a.confirmed(m.id)
		a.pump(ctx)
		return
	}
	if m.id <= a.lastID {
		// An AckNone publish failed; its caller has already returned.
		a.confirmed(m.id)
		a.sh.asyncPublishErrors.Add(1)
		a.s.log.Debug("herald: unacknowledged publish failed", slog.Uint64("request_id", m.id), slog.Any("err", m.err))
		return
	}
	a.protocolFailure(protocolViolation("error for request id %d, which was never sent", m.id))
}

func (a *publishStreamActor) onPublishStreamEnded(ctx actor.Context, m *publishStreamEnded) {
	if m.gen != a.gen || a.broken != nil {
		return
	}
	if a.draining {
		// The node ended the stream after our close: it read everything,
		// and answered what it will answer.
		a.unconfirmedNone = 0
		a.finishDrain()
		if len(a.inflight) > 0 {
			a.failInflight(fmt.Errorf("herald: publish stream ended: %w", m.err))
		}
		a.stream = nil
		a.finishGoAway()
		return
	}
	if fatalFrame(m.err) {
		a.protocolFailure(m.err)
		return
	}
	a.streamFailed(m.err)
	a.pump(ctx)
}

// streamFailed handles a read or write error on the current stream. A stream
// error (reset) or a clean end while the connection lives ends only this
// stream: what is in flight on it fails and the next frame opens a new
// stream. Any other error means the connection is gone.
func (a *publishStreamActor) streamFailed(err error) {
	var se *quic.StreamError
	if a.s.ctx.Err() != nil || (!errors.As(err, &se) && !errors.Is(err, io.EOF)) {
		a.connectionLost(err)
		return
	}
	a.failInflight(fmt.Errorf("herald: publish stream ended: %w", err))
	if a.stream != nil {
		a.stream.CancelRead(0)
		a.stream.CancelWrite(0)
		a.stream = nil
	}
	a.unconfirmedNone = 0
	a.gen++
}

// protocolFailure closes the connection because the node broke the protocol
// on this stream.
func (a *publishStreamActor) protocolFailure(err error) {
	a.s.fail(err)
	a.connectionLost(err)
}

// connectionLost handles the loss of the session the actor writes on (err
// is what showed it). Without reconnecting, everything fails. Otherwise
// what is in flight is settled as planLoss decides, and nothing is written
// until sessionStarted.
func (a *publishStreamActor) connectionLost(err error) {
	a.stopOpening()
	cause := a.s.lost(err)
	if !a.sh.reconnect || errors.Is(cause, ErrClosed) {
		a.breakAll(cause)
		return
	}
	if a.lost {
		return
	}
	a.lost = true
	if a.stream != nil {
		a.stream.CancelRead(0)
		a.stream.CancelWrite(0)
		a.stream = nil
	}
	a.gen++
	a.unconfirmedNone = 0
	inflight := make([]pendingFrame, 0, len(a.inflight))
	for _, f := range a.inflight {
		inflight = append(inflight, f.parts()...)
	}
	clear(a.inflight)
	// Stable: the parts of a merged frame share its id and keep their order.
	slices.SortStableFunc(inflight, func(x, y pendingFrame) int { return cmp.Compare(x.id, y.id) })
	plan := planLoss(inflight, a.queue)
	a.queue = plan.queue
	for _, f := range plan.unknown {
		f.req.frameSettled(a.sh, f.idx, wire.PublishAck{}, outcomeUnknown(cause))
	}
	for _, f := range plan.dropped {
		f.req.frameSettled(a.sh, f.idx, wire.PublishAck{}, f.req.err)
	}
	a.finishDrain()
	a.finishGoAway()
}

// stopWriting stops writing on the current session because the node is
// draining (err): the send side is closed, so the node answers what it
// admitted and ends the stream. With reconnecting, what is queued waits for
// the next session.
func (a *publishStreamActor) stopWriting(err error) {
	a.stopOpening()
	if a.goAway == nil {
		a.goAway = err
	}
	if a.stream != nil && a.broken == nil && !a.draining {
		a.draining = true
		_ = a.stream.Close()
	}
}

// onSessionStarted moves the actor to the client's new session: what
// waited goes out on a new stream there.
func (a *publishStreamActor) onSessionStarted(ctx actor.Context, m *sessionStarted) {
	if a.broken != nil || m.s == a.s {
		return
	}
	a.stopOpening()
	if !a.lost {
		// The old session is gone even if this actor did not notice: what
		// it had in flight there is settled as for a loss.
		a.connectionLost(a.s.failure())
		if a.broken != nil {
			return
		}
	}
	if a.stream != nil {
		a.stream.CancelRead(0)
		a.stream.CancelWrite(0)
		a.stream = nil
	}
	for _, w := range a.goAwayWaiters {
		w <- struct{}{}
	}
	a.goAwayWaiters = nil
	a.s = m.s
	a.lost = false
	a.goAway = nil
	a.draining = false
	a.pump(ctx)
}

// onConnectionEnded fails everything: the client will not connect again.
func (a *publishStreamActor) onConnectionEnded(m *connectionEnded) {
	a.breakAll(m.err)
	if a.stream != nil {
		a.stream.CancelRead(0)
		a.stream.CancelWrite(0)
		a.stream = nil
	}
}

// failInflight fails every frame awaiting an answer: they were written and
// never answered, so whatever ended the stream or the connection, whether
// the node applied them is unknown (*OutcomeUnknownError with err as its
// cause; never a retryable code, which would invite a blind re-send).
func (a *publishStreamActor) failInflight(err error) {
	for id, f := range a.inflight {
		delete(a.inflight, id)
		for _, p := range f.parts() {
			p.req.frameSettled(a.sh, p.idx, wire.PublishAck{}, outcomeUnknown(err))
		}
	}
	a.finishGoAway()
}

// breakAll fails everything, now and later, with err.
func (a *publishStreamActor) breakAll(err error) {
	a.stopOpening()
	if a.broken == nil {
		a.broken = err
	}
	a.unconfirmedNone = 0
	a.finishDrain()
	a.failInflight(a.broken)
	for _, f := range a.queue {
		f.req.frameSettled(a.sh, f.idx, wire.PublishAck{}, a.broken)
	}
	a.queue = nil
}

func (a *publishStreamActor) onPublishWithdrawn(m *publishWithdrawn) {
	r := m.req
	if r.done || r.written > 0 {
		return
	}
	kept := a.queue[:0]
	for _, f := range a.queue {
		if f.req != r {
			kept = append(kept, f)
		}
	}
	clear(a.queue[len(kept):])
	a.queue = kept
	r.finishUnsent(a.sh, m.err)
}

func (a *publishStreamActor) onPublishStats(m *publishStatsRequest) {
	m.reply <- publishStats{queued: len(a.queue), inflight: len(a.inflight)}
}

// onPublishDrain starts draining (see the type's comment) and answers once
// the node confirmed or ended the stream; at once if nothing needs it. What
// is queued for the next pump is written first, as it would have been had
// the pump come before the drain request.
func (a *publishStreamActor) onPublishDrain(ctx actor.Context, m *publishDrainRequest) {
	a.pump(ctx)
	a.drainWaiters = append(a.drainWaiters, m.reply)
	a.drain()
}

// drain answers the drain waiters once the node has confirmed every
// AckNone frame written: at once when none is unconfirmed; else the send
// side is closed and they are answered when the node ends the stream. While
// a stream is being opened for queued frames, they wait for it
// (onPublishStreamOpened drains).
func (a *publishStreamActor) drain() {
	if a.opening() && a.broken == nil && len(a.queue) > 0 {
		return
	}
	if a.stream == nil || a.broken != nil || a.unconfirmedNone == 0 {
		for _, w := range a.drainWaiters {
			w <- struct{}{}
		}
		a.drainWaiters = nil
		return
	}
	if !a.draining {
		a.draining = true
		_ = a.stream.Close()
	}
}

// onGoAway stops the actor's publishing for good: the node is draining.
// Frames not yet written fail with the retryable goaway error (nothing of
// them reached the node); the send side is closed, so the node answers what
// it admitted and ends the stream; m.reply is answered once nothing is in
// flight.
func (a *publishStreamActor) onGoAway(m *goAwayNotice) {
	if a.goAway == nil && !a.sh.reconnect {
		for _, f := range a.queue {
			f.req.frameSettled(a.sh, f.idx, wire.PublishAck{}, m.err)
		}
		a.queue = nil
	}
	a.stopWriting(m.err)
	a.goAwayWaiters = append(a.goAwayWaiters, m.reply)
	a.finishGoAway()
}

// finishGoAway answers the goaway waiters once nothing is in flight: every
// acked frame answered and the stream ended (or never opened, or broken).
func (a *publishStreamActor) finishGoAway() {
	if a.goAway == nil || len(a.inflight) > 0 || (a.stream != nil && a.broken == nil && a.unconfirmedNone != 0) {
		return
	}
	for _, w := range a.goAwayWaiters {
		w <- struct{}{}
	}
	a.goAwayWaiters = nil
}

// finishDrain answers the drain waiters once nothing is unconfirmed.
func (a *publishStreamActor) finishDrain() {
	if a.unconfirmedNone != 0 {
		return
	}
	for _, w := range a.drainWaiters {
		w <- struct{}{}
	}
	a.drainWaiters = nil
}

func (a *publishStreamActor) onStopping() {
	err := a.s.failure()
	if err == nil {
		err = wire.Errorf(wire.CodeInternal, "publish stream actor stopped")
	}
	a.breakAll(err)
	if a.stream != nil {
		a.stream.CancelRead(0)
		a.stream.CancelWrite(0)
		a.stream = nil
	}
}
