package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
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
// When the connection is lost (or the node, draining, ends the stream with
// shutting_down) and the client reconnects, the member rejoins on the new
// session (sessionStarted) with the same member id (the one given, or the
// one the node named it at the first join), on a new stream. Deliveries not
// yet taken are dropped and acks in flight fail in doubt: the group
// delivers their records again as its rules say. Each Delivery carries the
// membership (join) it was pushed in, and an Ack of one from before the
// rejoin fails at once with ErrStaleCursor. Next waits through the rejoin.
//
// The actor outlives its goroutines: each sends a last message as it exits.
// Once the GroupMember's Close asked to end and both have exited, the
// actor stops itself; otherwise its parent stops it when the client closes.
//
// All fields are owned by the actor and touched only in Receive.
type groupSubscriptionActor struct {
	// s is the current session: the stream is opened there.
	s *session
	// in is what the group subscription was asked for.
	in *groupSubscriptionInit
	// ctx bounds the heartbeat goroutine, across rejoins; cancel is called
	// when the subscription ends.
	ctx    context.Context
	cancel context.CancelFunc
	// openCtx bounds the current stream's open; openCancel ends it.
	openCtx    context.Context
	openCancel context.CancelFunc
	// gen numbers the streams opened; reader messages of another are stale.
	gen int
	// stream is the group stream from its opening until this side closes
	// it.
	stream *quic.Stream
	// goroutines counts the reader and heartbeat goroutines that have not
	// yet sent their last message.
	goroutines int
	// root and parent tell the connection actor when the node is draining
	// the member's stream (drainingSeen).
	root   *actor.RootContext
	parent *actor.PID

	// member is the member id to join as: the one asked for, or, once the
	// node named the member, that name.
	member string
	// joinID is GroupSubscribe's request id (0 until sent).
	joinID uint64
	// join counts the joins sent: the membership deliveries are pushed in.
	join uint64
	// joined is set once the node accepted the current join.
	joined bool
	// rejoining is set from a lost connection until the rejoin is accepted.
	rejoining bool
	// pending holds the sent acks (and heartbeats, as nil) awaiting the
	// node's answer, by request id.
	pending map[uint64]*groupAckRequest
	// waitingAcks are heartbeats and acks with no membership of their own,
	// made while rejoining: they are sent once the rejoin is accepted.
	waitingAcks []*groupAckRequest
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

	// movedPause is the wait before the next join after the node answered
	// not_leader (the group's coordinator moved, or none is known yet: a
	// cluster failing over), doubling up to groupRetryMax and reset by an
	// accepted join; stopRejoin stops the timer of the join to come.
	movedPause time.Duration
	stopRejoin func() bool
}

// newGroupSubscriptionProps returns the props of a group subscription actor.
func newGroupSubscriptionProps(s *session, in *groupSubscriptionInit) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &groupSubscriptionActor{s: s, in: in, member: in.join.Member, pending: make(map[uint64]*groupAckRequest)}
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
		a.onNodeError(ctx, m)
	case *rejoinDue:
		a.onRejoinDue(ctx, m)
	case *groupPushReceived:
		a.onPush(m)
	case *groupStreamEnded:
		a.onStreamEnded(ctx, m)
	case *heartbeatDue:
		a.onHeartbeatDue()
	case *heartbeaterExited:
		a.onHeartbeaterExited(ctx)
	case *sessionStarted:
		a.onSessionStarted(ctx, m)
	case *connectionEnded:
		a.fail(m.err)
	default:
		a.s.log.Warn("herald: group subscription actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *groupSubscriptionActor) onStarted(ctx actor.Context) {
	if a.ctx != nil {
		return
	}
	a.ctx, a.cancel = context.WithCancel(a.s.life)
	a.root, a.parent = ctx.ActorSystem().Root, ctx.Parent()
	if !a.startStream(ctx) {
		// The client is closing and will stop this actor.
		a.unsubscribe(ErrClosed)
	}
}

// startStream starts a reader that opens a new group stream on the current
// session (the actor then joins on it). It reports false when the client is
// closing.
func (a *groupSubscriptionActor) startStream(ctx actor.Context) bool {
	if a.openCancel != nil {
		a.openCancel()
	}
	a.gen++
	a.joined, a.joinID = false, 0
	a.openCtx, a.openCancel = context.WithCancel(a.s.ctx)
	s, root, self, rctx, gen, waiting := a.s, ctx.ActorSystem().Root, ctx.Self(), a.openCtx, a.gen, a.in.waitingStream
	if !s.goroutines.Go(func() { readGroupStream(s, root, self, rctx, gen, waiting) }) {
		return false
	}
	a.goroutines++
	return true
}

// readGroupStream is the group stream's reader: it opens the stream, hands
// it to the actor (which writes GroupSubscribe), and decodes the node's
// frames until the stream ends or the node ends it with an Error of request
// id 0. Its messages carry gen.
func readGroupStream(s *session, root *actor.RootContext, pid *actor.PID, ctx context.Context, gen int, waiting *atomic.Int32) {
	st, err := openStream(ctx, s.conn, waiting)
	if err != nil {
		root.Send(pid, &groupStreamEnded{gen: gen, err: err})
		return
	}
	root.Send(pid, &groupStreamOpened{gen: gen, stream: st})
	for {
		f, err := wire.ReadTrustedFrame(st, s.maxRecv) // the node this client dialed
		if err != nil {
			root.Send(pid, &groupStreamEnded{gen: gen, err: err})
			return
		}
		m, err := decodeGroupFrame(f)
		if err != nil {
			root.Send(pid, &groupStreamEnded{gen: gen, err: err})
			return
		}
		root.Send(pid, withGen(m, gen))
		if _, ok := m.(*groupStreamEnded); ok {
			return
		}
	}
}

// withGen tags a decoded reader message with its stream's generation.
func withGen(m any, gen int) any {
	switch m := m.(type) {
	case *groupAnswerReceived:
		m.gen = gen
	case *groupErrorReceived:
		m.gen = gen
	case *groupPushReceived:
		m.gen = gen
	case *groupStreamEnded:
		m.gen = gen
	}
	return m
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

// write writes frame on the group stream and notes when. On an error the
// stream (or the connection) is gone: it returns the error the request of
// the frame fails with, having ended the subscription or, if the
// connection was lost and the client reconnects, started the rejoin.
func (a *groupSubscriptionActor) write(frame []byte) error {
	if _, err := a.stream.Write(frame); err != nil {
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote && a.s.ctx.Err() == nil {
			// The node stopped reading the stream (STOP_SENDING): it is
			// ending it, and says why on the read side, an Error frame or
			// the stream's end, which onStreamEnded acts on (a relaying
			// node whose coordinator moved sends not_leader, then stops
			// reading). Ending the member here, on whichever came first,
			// lost that rejoin. The request's outcome is unknown.
			return outcomeUnknown(fmt.Errorf("herald: the node stopped reading the group stream: %w", err))
		}
		cause, lost := a.streamError(connCause(err), false)
		if lost {
			a.connectionLost()
			// Part of the frame may have left.
			return outcomeUnknown(cause)
		}
		a.fail(cause)
		return a.endErr
	}
	a.lastSent = a.in.clock.Now()
	return nil
}

// streamError turns what ended the group stream into the error the
// subscription ends with; lost says the stream ended with its connection
// (or the node is draining it) and, reconnecting, the member rejoins
// instead.
func (a *groupSubscriptionActor) streamError(err error, fromNode bool) (cause error, lost bool) {
	var se *quic.StreamError
	switch {
	case fromNode:
		return err, a.s.reconnect && isShuttingDown(err)
	case fatalFrame(err):
		// The node broke the protocol on this stream: the member ends (a
		// rejoin would likely meet the same), and the connection is closed
		// with the error.
		a.s.fail(err)
		return a.s.failure(), false
	case a.s.ctx.Err() != nil:
		return a.s.failure(), a.s.reconnect
	case errors.Is(err, io.EOF):
		return &wire.Error{Code: wire.CodeSubscriptionAborted, Message: "the node ended the group stream"}, false
	case errors.As(err, &se):
		if se.Remote && se.ErrorCode != 0 {
			// The node resets a group stream with a wire code.
			we := &wire.Error{Code: wire.Code(se.ErrorCode), Message: "the node reset the group stream"}
			return we, a.s.reconnect && isShuttingDown(we)
		}
		return fmt.Errorf("herald: group stream reset: %w", err), false
	default:
		return a.s.lost(err), a.s.reconnect
	}
}

// violation fails the connection: the node broke the protocol. The member
// ends (a rejoin would likely meet the same).
func (a *groupSubscriptionActor) violation(format string, args ...any) {
	a.s.fail(protocolViolation(format, args...))
	a.fail(a.s.failure())
}

func (a *groupSubscriptionActor) onStreamOpened(m *groupStreamOpened) {
	if a.endErr != nil || m.gen != a.gen {
		closeStream(m.stream)
		return
	}
	a.stream = m.stream
	a.join++
	a.joinID = a.s.nextID()
	join := a.in.join
	join.Member = a.member
	_ = a.write(wire.AppendGroupSubscribe(nil, a.joinID, join))
}

func (a *groupSubscriptionActor) onAnswer(ctx actor.Context, m *groupAnswerReceived) {
	if a.endErr != nil || m.gen != a.gen {
		return
	}
	if !a.joined {
		if m.id != a.joinID {
			a.violation("group assignment answers request id %d before the join (%d) was answered", m.id, a.joinID)
			return
		}
		a.joined, a.rejoining = true, false
		a.movedPause = 0
		if a.member == "" {
			a.member = m.assignment.Member
		}
		a.setAssignment(m.assignment)
		if a.hbDue == nil {
			a.startHeartbeats(ctx, m.assignment.SessionMillis)
		}
		for _, w := range a.awaiting {
			w.reply <- nil
		}
		a.awaiting = nil
		waiting := a.waitingAcks
		a.waitingAcks = nil
		for _, req := range waiting {
			a.onAck(req)
		}
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

func (a *groupSubscriptionActor) onNodeError(ctx actor.Context, m *groupErrorReceived) {
	if a.endErr != nil || m.gen != a.gen {
		return
	}
	if !a.joined {
		if m.id != a.joinID {
			a.violation("group error answers request id %d before the join (%d) was answered", m.id, a.joinID)
			return
		}
		// The node refused the join and closes the stream.
		if isNotLeader(m.err) {
			a.coordinatorMoved(ctx, m.err)
			return
		}
		if a.s.reconnect && isShuttingDown(m.err) {
			// It is draining: join on the next connection.
			a.connectionLost()
			return
		}
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
	if a.endErr != nil || m.gen != a.gen {
		return
	}
	if !a.joined {
		a.violation("group push before the join was answered")
		return
	}
	d := m.delivery
	d.join = a.join
	a.deliveries = append(a.deliveries, d)
	a.serve()
}

func (a *groupSubscriptionActor) onStreamEnded(ctx actor.Context, m *groupStreamEnded) {
	a.goroutines--
	if a.endErr == nil && m.gen == a.gen && a.rejoining && a.stopRejoin == nil && a.joinID != 0 && a.s.ctx.Err() == nil {
		// The stream of a join made to a moved coordinator ended before the
		// join was answered, its connection alive: join again, later.
		a.coordinatorMoved(ctx, m.err)
	}
	if a.endErr == nil && m.gen == a.gen && !a.rejoining {
		if m.fromNode && isNotLeader(m.err) {
			a.coordinatorMoved(ctx, m.err)
			a.maybeStop(ctx)
			return
		}
		if cause, lost := a.streamError(m.err, m.fromNode); lost {
			a.connectionLost()
		} else {
			a.fail(cause)
		}
	}
	a.maybeStop(ctx)
}

// connectionLost handles the end of the member's stream with its
// connection (or the node's drain): the member rejoins once the next
// session starts. Deliveries not taken are dropped (their cursors are
// stale; the group delivers their records again) and acks awaiting an
// answer fail in doubt.
func (a *groupSubscriptionActor) connectionLost() {
	if a.endErr != nil || a.rejoining {
		return
	}
	a.rejoining, a.joined = true, false
	if a.openCancel != nil {
		a.openCancel()
	}
	if a.stream != nil {
		closeStream(a.stream)
		a.stream = nil
	}
	cause := a.s.failure()
	if cause == nil {
		// The connection lives: the node is draining it, and closes it
		// once drained.
		cause = ErrShuttingDown
		a.root.Send(a.parent, &drainingSeen{s: a.s, err: ErrShuttingDown})
	}
	for id, req := range a.pending {
		if req != nil {
			req.reply <- outcomeUnknown(fmt.Errorf("herald: the group stream ended before the node answered the ack: %w", cause))
		}
		delete(a.pending, id)
	}
	a.deliveries = nil
	a.s.log.Debug("herald: group member lost its stream; it rejoins on the next connection",
		slog.String("group", a.in.join.Group), slog.String("member", a.member), slog.Any("cause", cause))
}

// coordinatorMoved handles a node's not_leader on the member's stream: the
// group's coordinator moved (a cluster's failover or handover), or none is
// known yet. The member joins again on the same connection, as the same
// member, after a pause (movedPause); deliveries not taken are dropped and
// acks in flight fail in doubt, as when the connection is lost.
func (a *groupSubscriptionActor) coordinatorMoved(ctx actor.Context, cause error) {
	if a.endErr != nil {
		return
	}
	// A join refused while rejoining (the next coordinator is not known
	// yet) comes here again: the member joins again after a longer pause.
	a.rejoining, a.joined = true, false
	if a.openCancel != nil {
		a.openCancel()
	}
	if a.stream != nil {
		closeStream(a.stream)
		a.stream = nil
	}
	for id, req := range a.pending {
		if req != nil {
			req.reply <- outcomeUnknown(fmt.Errorf("herald: the group's coordinator moved before it answered the ack: %w", cause))
		}
		delete(a.pending, id)
	}
	a.deliveries = nil
	a.movedPause = min(max(2*a.movedPause, groupRetryMin), groupRetryMax)
	gen, root, self := a.gen, ctx.ActorSystem().Root, ctx.Self()
	if a.stopRejoin != nil {
		a.stopRejoin()
	}
	a.stopRejoin = time.AfterFunc(a.movedPause, func() { root.Send(self, &rejoinDue{gen: gen}) }).Stop
	a.s.log.Debug("herald: the group's coordinator moved; the member joins again",
		slog.String("group", a.in.join.Group), slog.String("member", a.member), slog.Duration("after", a.movedPause), slog.Any("cause", cause))
}

// onRejoinDue joins again after coordinatorMoved's pause, unless the
// member ended or rejoined another way meanwhile.
func (a *groupSubscriptionActor) onRejoinDue(ctx actor.Context, m *rejoinDue) {
	a.stopRejoin = nil
	if a.endErr != nil || !a.rejoining || m.gen != a.gen {
		return
	}
	if !a.startStream(ctx) {
		a.unsubscribe(ErrClosed)
	}
}

// onSessionStarted rejoins the group on the client's new session, as the
// same member.
func (a *groupSubscriptionActor) onSessionStarted(ctx actor.Context, m *sessionStarted) {
	if a.endErr != nil || m.s == a.s {
		return
	}
	a.connectionLost()
	a.s = m.s
	if !a.startStream(ctx) {
		a.unsubscribe(ErrClosed)
	}
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
			a.deliveries = popFront(a.deliveries)
		case a.endErr != nil:
			r.err = a.endErr
		default:
			return
		}
		a.waiters[0].reply <- r
		a.waiters = popFront(a.waiters)
	}
}

func (a *groupSubscriptionActor) onAck(m *groupAckRequest) {
	switch {
	case a.endErr != nil:
		m.reply <- a.endErr
		return
	case m.join != 0 && (m.join != a.join || !a.joined):
		// Pushed in a membership that ended when the connection was
		// lost: the node would refuse it, and might not know it did (a
		// restarted node can reuse the membership's generation).
		m.reply <- &wire.Error{Code: wire.CodeStaleCursor,
			Message: "the delivery was pushed before the member rejoined the group (its connection was lost): its records are delivered again"}
		return
	case !a.joined && a.rejoining:
		a.waitingAcks = append(a.waitingAcks, m)
		return
	case !a.joined:
		m.reply <- wire.Errorf(wire.CodeInternal, "group ack before the join was answered")
		return
	}
	id := a.s.nextID()
	if err := a.write(wire.AppendGroupStreamAck(nil, id, wire.GroupStreamAck{Cursor: m.cursor, Count: m.count})); err != nil {
		m.reply <- err
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
	if send && !a.joined {
		// Rejoining: the join, when it goes, is the heartbeat.
		send, next = false, a.in.clock.Now().Add(a.every)
	}
	if send {
		id := a.s.nextID()
		if err := a.write(wire.AppendGroupStreamAck(nil, id, wire.GroupStreamAck{})); err != nil {
			if a.endErr != nil {
				return
			}
		} else {
			a.pending[id] = nil
		}
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
	if a.openCancel != nil {
		a.openCancel()
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
	for _, req := range a.waitingAcks {
		req.reply <- err
	}
	a.waitingAcks = nil
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
	if a.stopRejoin != nil {
		a.stopRejoin()
		a.stopRejoin = nil
	}
	err := a.s.failure()
	if err == nil {
		err = ErrSubscriptionClosed
	}
	a.unsubscribe(err)
}
