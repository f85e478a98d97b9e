package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// groupSubscriptionActor owns the QUIC stream of one GroupMember: a
// push member of a consumer group. A reader goroutine opens the stream and
// decodes the node's frames into messages for the actor; the actor writes
// every frame this side sends (GroupSubscribe, then GroupStreamAck for each
// Ack and heartbeat), so it alone owns the send side, and it matches the
// node's answers to them by request id (acks may be pipelined). Pushed
// records wait in deliveries until Next takes them; the node's credit window
// bounds how many.
//
// With a heartbeat interval, a heartbeat goroutine wakes the actor at the
// due times the actor gives it, and the actor heartbeats if it has sent
// nothing for the interval (heartbeatPlan).
//
// The actor outlives its goroutines: each sends a last message as it exits.
// Once the GroupMember's Close asked to end and both have exited, the
// actor stops itself; otherwise its parent stops it when the client closes.
//
// All fields are owned by the actor and touched only in Receive.
type groupSubscriptionActor struct {
	// s is the shared connection state.
	s *session
	// in is what the group subscription was asked for.
	in *groupSubscriptionInit
	// ctx bounds the stream's open and the heartbeat goroutine; cancel is
	// called when the subscription ends.
	ctx    context.Context
	cancel context.CancelFunc
	// stream is the group stream from its opening until this side closes
	// it.
	stream *quic.Stream
	// goroutines counts the reader and heartbeat goroutines that have not
	// yet sent their last message.
	goroutines int

	// joinID is GroupSubscribe's request id (0 until sent).
	joinID uint64
	// joined is set once the node accepted the join.
	joined bool
	// pending holds the sent acks (and heartbeats, as nil) awaiting the
	// node's answer, by request id.
	pending map[uint64]*groupAckRequest
	// deliveries are pushes Next has not taken, oldest first.
	deliveries []Delivery
	// waiters are Next calls waiting for a delivery, oldest first.
	waiters []*groupNextRequest
	// awaiting are Group.Subscribe calls waiting for the join's answer.
	awaiting []*groupJoinAwait
	// endErr ends the subscription: Next returns it on every call and Ack
	// fails with it.
	endErr error

	// every is the heartbeat interval (0: none); lastSent is when this side
	// last wrote a frame; hbDue hands the heartbeat goroutine its next due
	// time (capacity 1, nil without heartbeats).
	every    time.Duration
	lastSent time.Time
	hbDue    chan time.Time

	// unsubscribed is set once the subscription was ended from this side.
	unsubscribed bool
	// closeRequested is set when the GroupMember's Close asked to end
	// the subscription: the actor then stops itself once its goroutines
	// exited.
	closeRequested bool
	// stopping is set once the actor is stopping.
	stopping bool
}

// newGroupSubscriptionProps returns the props of a group subscription actor.
func newGroupSubscriptionProps(s *session, in *groupSubscriptionInit) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &groupSubscriptionActor{s: s, in: in, pending: make(map[uint64]*groupAckRequest)}
	})
}

// Receive dispatches.
func (a *groupSubscriptionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopping:
		a.onStopping()
	case *actor.Stopped, *actor.Restarting:
		// Nothing to do: Stopping ended the subscription, and the
		// connection actor stops a child that panics (stopOnPanic).
	case *groupJoinAwait:
		a.onJoinAwait(m)
	case *groupNextRequest:
		a.onNext(m)
	case *groupNextCancelled:
		a.onNextCancelled(m)
	case *groupAckRequest:
		a.onAck(m)
	case *groupUnsubscribeRequest:
		a.onUnsubscribe(ctx)
	case *groupStreamOpened:
		a.onStreamOpened(m)
	case *groupAnswerReceived:
		a.onAnswer(ctx, m)
	case *groupErrorReceived:
		a.onNodeError(m)
	case *groupPushReceived:
		a.onPush(m)
	case *groupStreamEnded:
		a.onStreamEnded(ctx, m)
	case *heartbeatDue:
		a.onHeartbeatDue()
	case *heartbeaterExited:
		a.onHeartbeaterExited(ctx)
	default:
		a.s.log.Warn("herald: group subscription actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *groupSubscriptionActor) onStarted(ctx actor.Context) {
	if a.ctx != nil {
		return
	}
	a.ctx, a.cancel = context.WithCancel(a.s.ctx)
	s, root, self, rctx := a.s, ctx.ActorSystem().Root, ctx.Self(), a.ctx
	if !s.goroutines.Go(func() { readGroupStream(s, root, self, rctx) }) {
		// The client is closing and will stop this actor.
		a.unsubscribe(ErrClosed)
		return
	}
	a.goroutines++
}

// readGroupStream is the group stream's reader: it opens the stream, hands
// it to the actor (which writes GroupSubscribe), and decodes the node's
// frames until the stream ends or the node ends it with an Error of request
// id 0.
func readGroupStream(s *session, root *actor.RootContext, pid *actor.PID, ctx context.Context) {
	st, err := s.conn.OpenStreamSync(ctx)
	if err != nil {
		root.Send(pid, &groupStreamEnded{err: err})
		return
	}
	root.Send(pid, &groupStreamOpened{stream: st})
	for {
		f, err := wire.ReadFrame(st, s.maxRecv)
		if err != nil {
			root.Send(pid, &groupStreamEnded{err: err})
			return
		}
		m, err := decodeGroupFrame(f)
		if err != nil {
			root.Send(pid, &groupStreamEnded{err: err})
			return
		}
		root.Send(pid, m)
		if _, ok := m.(*groupStreamEnded); ok {
			return
		}
	}
}

// decodeGroupFrame decodes a frame the node sent on a group stream into
// the reader's message for it.
func decodeGroupFrame(f wire.Frame) (any, error) {
	id := f.Header.RequestID
	switch f.Header.Type {
	case wire.TypeGroupAssignment:
		if id == 0 {
			return nil, protocolViolation("group assignment with request id 0")
		}
		g, err := wire.DecodeGroupAssignment(f.Body)
		if err != nil {
			return nil, err
		}
		return &groupAnswerReceived{id: id, assignment: g}, nil
	case wire.TypeGroupRecords:
		if id != 0 {
			return nil, protocolViolation("group push with request id %d", id)
		}
		g, err := wire.DecodeGroupRecords(f.Body)
		if err != nil {
			return nil, err
		}
		if len(g.Cursor) == 0 {
			return nil, protocolViolation("group push without a cursor")
		}
		recs, err := groupRecordsOf(g.Records)
		if err != nil {
			return nil, err
		}
		return &groupPushReceived{delivery: Delivery{Records: recs, Cursor: Cursor(g.Cursor)}}, nil
	case wire.TypeError:
		e, err := wire.DecodeError(f.Body)
		if err != nil {
			return nil, err
		}
		if id == 0 {
			return &groupStreamEnded{err: e, fromNode: true}, nil
		}
		return &groupErrorReceived{id: id, err: e}, nil
	default:
		return nil, protocolViolation("%v frame on a group stream", f.Header.Type)
	}
}

// write writes frame on the group stream and notes when.
func (a *groupSubscriptionActor) write(frame []byte) error {
	if _, err := a.stream.Write(frame); err != nil {
		return a.streamError(connCause(err), false)
	}
	a.lastSent = a.in.clock.Now()
	return nil
}

// streamError turns what ended the group stream into the error the
// subscription ends with.
func (a *groupSubscriptionActor) streamError(err error, fromNode bool) error {
	var se *quic.StreamError
	switch {
	case fromNode:
		return err
	case fatalFrame(err):
		a.s.fail(err)
		return a.s.failure()
	case a.s.ctx.Err() != nil:
		return a.s.failure()
	case errors.Is(err, io.EOF):
		return &wire.Error{Code: wire.CodeSubscriptionAborted, Message: "the node ended the group stream"}
	case errors.As(err, &se):
		if se.Remote && se.ErrorCode != 0 {
			// The node resets a group stream with a wire code.
			return &wire.Error{Code: wire.Code(se.ErrorCode), Message: "the node reset the group stream"}
		}
		return fmt.Errorf("herald: group stream reset: %w", err)
	default:
		return a.s.lost(err)
	}
}

// violation fails the connection: the node broke the protocol.
func (a *groupSubscriptionActor) violation(format string, args ...any) {
	a.s.fail(protocolViolation(format, args...))
	a.fail(a.s.failure())
}

func (a *groupSubscriptionActor) onStreamOpened(m *groupStreamOpened) {
	if a.endErr != nil {
		closeStream(m.stream)
		return
	}
	a.stream = m.stream
	a.joinID = a.s.nextID()
	if err := a.write(wire.AppendGroupSubscribe(nil, a.joinID, a.in.join)); err != nil {
		a.fail(err)
	}
}

func (a *groupSubscriptionActor) onAnswer(ctx actor.Context, m *groupAnswerReceived) {
	if a.endErr != nil {
		return
	}
	if !a.joined {
		if m.id != a.joinID {
			a.violation("group assignment answers request id %d before the join (%d) was answered", m.id, a.joinID)
			return
		}
		a.joined = true
		a.setAssignment(m.assignment)
		a.startHeartbeats(ctx, m.assignment.SessionMillis)
		for _, w := range a.awaiting {
			w.reply <- nil
		}
		a.awaiting = nil
		return
	}
	req, ok := a.pending[m.id]
	if !ok {
		a.violation("group assignment answers unknown request id %d", m.id)
		return
	}
	delete(a.pending, m.id)
	a.setAssignment(m.assignment)
	if req != nil {
		req.reply <- nil
	}
}

// setAssignment publishes g as the latest assignment. An answer to an ack
// or heartbeat without a session timeout keeps the one granted before.
func (a *groupSubscriptionActor) setAssignment(g wire.GroupAssignment) {
	session := millis(g.SessionMillis)
	if prev := a.in.assignment.Load(); prev != nil && g.SessionMillis == 0 {
		session = prev.Session
	}
	a.in.assignment.Store(&GroupAssignment{
		Member:     g.Member,
		Generation: g.Generation,
		Shards:     g.Shards,
		Window:     g.Window,
		MaxPerPush: g.MaxPerPush,
		Session:    session,
		InFlight:   g.InFlight,
	})
}

func (a *groupSubscriptionActor) onNodeError(m *groupErrorReceived) {
	if a.endErr != nil {
		return
	}
	if !a.joined {
		if m.id != a.joinID {
			a.violation("group error answers request id %d before the join (%d) was answered", m.id, a.joinID)
			return
		}
		// The node refused the join and closes the stream.
		a.fail(m.err)
		return
	}
	req, ok := a.pending[m.id]
	if !ok {
		a.violation("group error answers unknown request id %d", m.id)
		return
	}
	delete(a.pending, m.id)
	if req == nil {
		a.s.log.Warn("herald: group heartbeat refused", slog.Any("err", m.err))
		return
	}
	req.reply <- m.err
}

func (a *groupSubscriptionActor) onPush(m *groupPushReceived) {
	if a.endErr != nil {
		return
	}
	if !a.joined {
		a.violation("group push before the join was answered")
		return
	}
	a.deliveries = append(a.deliveries, m.delivery)
	a.serve()
}

func (a *groupSubscriptionActor) onStreamEnded(ctx actor.Context, m *groupStreamEnded) {
	a.goroutines--
	if a.endErr == nil {
		a.fail(a.streamError(m.err, m.fromNode))
	}
	a.maybeStop(ctx)
}

func (a *groupSubscriptionActor) onJoinAwait(m *groupJoinAwait) {
	switch {
	case a.endErr != nil:
		m.reply <- a.endErr
	case a.joined:
		m.reply <- nil
	default:
		a.awaiting = append(a.awaiting, m)
	}
}

func (a *groupSubscriptionActor) onNext(m *groupNextRequest) {
	a.waiters = append(a.waiters, m)
	a.serve()
}

func (a *groupSubscriptionActor) onNextCancelled(m *groupNextCancelled) {
	for i, w := range a.waiters {
		if w == m.req {
			a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
			break
		}
	}
	m.ack <- struct{}{}
}

// serve answers waiting Next calls with deliveries, or the end error.
func (a *groupSubscriptionActor) serve() {
	for len(a.waiters) > 0 {
		var r groupNextResult
		switch {
		case len(a.deliveries) > 0:
			r.d = a.deliveries[0]
			a.deliveries[0] = Delivery{}
			a.deliveries = a.deliveries[1:]
		case a.endErr != nil:
			r.err = a.endErr
		default:
			return
		}
		a.waiters[0].reply <- r
		a.waiters[0] = nil
		a.waiters = a.waiters[1:]
	}
}

func (a *groupSubscriptionActor) onAck(m *groupAckRequest) {
	if a.endErr != nil {
		m.reply <- a.endErr
		return
	}
	if !a.joined {
		m.reply <- wire.Errorf(wire.CodeInternal, "group ack before the join was answered")
		return
	}
	id := a.s.nextID()
	if err := a.write(wire.AppendGroupStreamAck(nil, id, wire.GroupStreamAck{Cursor: m.cursor, Count: m.count})); err != nil {
		a.fail(err)
		m.reply <- a.endErr
		return
	}
	a.pending[id] = m
}

// startHeartbeats starts the heartbeat goroutine, if the member heartbeats.
func (a *groupSubscriptionActor) startHeartbeats(ctx actor.Context, sessionMillis uint32) {
	a.every = heartbeatInterval(a.in.heartbeat, sessionMillis)
	if a.every <= 0 {
		return
	}
	a.hbDue = make(chan time.Time, 1)
	s, root, self, hctx, clk, due := a.s, ctx.ActorSystem().Root, ctx.Self(), a.ctx, a.in.clock, a.hbDue
	if !s.goroutines.Go(func() { runHeartbeats(hctx, clk, due, root, self) }) {
		// The client is closing and will stop this actor.
		return
	}
	a.goroutines++
	a.hbDue <- a.lastSent.Add(a.every)
}

func (a *groupSubscriptionActor) onHeartbeatDue() {
	if a.endErr != nil {
		return
	}
	send, next := heartbeatPlan(a.in.clock.Now(), a.lastSent, a.every)
	if send {
		id := a.s.nextID()
		if err := a.write(wire.AppendGroupStreamAck(nil, id, wire.GroupStreamAck{})); err != nil {
			a.fail(err)
			return
		}
		a.pending[id] = nil
		next = a.lastSent.Add(a.every)
	}
	select {
	case a.hbDue <- next:
	default:
	}
}

// onHeartbeaterExited counts the heartbeat goroutine out: the actor may
// now stop (maybeStop).
func (a *groupSubscriptionActor) onHeartbeaterExited(ctx actor.Context) {
	a.goroutines--
	a.maybeStop(ctx)
}

// fail ends the subscription with err: it stops the heartbeats, closes the
// stream both ways (the node then removes the member), and fails the join
// wait, every pending ack and every waiting Next. Held deliveries are
// dropped: their cursors can no longer be acked, and the group delivers
// their records again.
func (a *groupSubscriptionActor) fail(err error) {
	if a.endErr != nil {
		return
	}
	a.endErr = err
	if a.cancel != nil {
		a.cancel()
	}
	if a.stream != nil {
		closeStream(a.stream)
		a.stream = nil
	}
	for id, req := range a.pending {
		if req != nil {
			req.reply <- err
		}
		delete(a.pending, id)
	}
	for _, w := range a.awaiting {
		w.reply <- err
	}
	a.awaiting = nil
	a.deliveries = nil
	a.serve()
}

// unsubscribe ends the subscription from this side with err (unless it
// ended already).
func (a *groupSubscriptionActor) unsubscribe(err error) {
	if a.unsubscribed {
		return
	}
	a.unsubscribed = true
	a.fail(err)
}

func (a *groupSubscriptionActor) onUnsubscribe(ctx actor.Context) {
	a.closeRequested = true
	a.unsubscribe(ErrSubscriptionClosed)
	a.maybeStop(ctx)
}

// maybeStop stops the actor once the GroupMember's Close asked for it
// and its goroutines have exited (so none of their messages can reach a
// stopped actor), unless it is stopping already.
func (a *groupSubscriptionActor) maybeStop(ctx actor.Context) {
	if a.closeRequested && a.goroutines == 0 && !a.stopping {
		a.stopping = true
		ctx.Stop(ctx.Self())
	}
}

func (a *groupSubscriptionActor) onStopping() {
	a.stopping = true
	err := a.s.failure()
	if err == nil {
		err = ErrSubscriptionClosed
	}
	a.unsubscribe(err)
}
