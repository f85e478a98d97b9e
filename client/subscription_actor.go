package client

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// maxHeldFrames is how many received EventBatch frames a subscription holds
// before its reader stops reading the QUIC stream, so that flow control
// pushes back to the node.
const maxHeldFrames = 64

// subscriptionActor owns one subscription stream and the frames received on
// it. A reader goroutine decodes the node's frames and sends them here; Next
// asks the actor for the next event. The reader takes a slot before reading
// each EventBatch frame and the actor gives it back when the frame is
// consumed, so at most maxHeldFrames frames are held.
//
// The actor outlives its reader: the reader's last message is
// subscriptionEnded. Once the Subscription's Close asked to end the
// subscription and that message arrived, the actor stops itself; otherwise
// its parent stops it when the client closes.
//
// All fields are owned by the actor and touched only in Receive.
type subscriptionActor struct {
	// s is the shared connection state.
	s *session
	// in is the stream, its Subscribe request and the shared handle.
	in *subscriptionInit
	// slots holds the reader's frame slots (capacity maxHeldFrames).
	slots chan struct{}
	// quit is closed to stop the reader waiting for a slot.
	quit chan struct{}
	// unsubscribed is set once the stream was closed from this side.
	unsubscribed bool
	// closeRequested is set when the Subscription's Close asked to end the
	// subscription: the actor then stops itself once its reader exited.
	// Without it the actor is stopped by its parent, when the client closes.
	closeRequested bool
	// stopping is set once the actor is stopping (then it must not ask to
	// stop again: that Stop would reach a dead actor).
	stopping bool
	// readerExited is set once the reader's last message arrived (or it
	// never started).
	readerExited bool

	// answered is set once the node's Subscribed arrived.
	answered bool
	// sub is the node's Subscribed.
	sub wire.Subscribed
	// awaiting are calls waiting for the answer to Subscribe.
	awaiting []*subscribeAwait

	// q holds received frames; nil until Subscribed.
	q *eventQueue
	// waiters are Next calls waiting for an event, oldest first.
	waiters []*nextRequest
	// endErr is set once the subscription ended: Next returns it when no
	// event is left.
	endErr error
}

// newSubscriptionProps returns the props of a subscription actor.
func newSubscriptionProps(s *session, in *subscriptionInit) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &subscriptionActor{s: s, in: in}
	})
}

// Receive dispatches.
func (a *subscriptionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopping:
		a.onStopping(ctx)
	case *actor.Stopped, *actor.Restarting:
	case *subscribeAwait:
		a.onSubscribeAwait(m)
	case *nextRequest:
		a.onNext(m)
	case *nextCancelled:
		a.onNextCancelled(m)
	case *unsubscribeRequest:
		a.onUnsubscribe(ctx)
	case *subscribedReceived:
		a.onSubscribed(m)
	case *eventsReceived:
		a.onEvents(m)
	case *subscriptionEnded:
		a.onEnded(ctx, m)
	default:
		a.s.log.Warn("herald: subscription actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *subscriptionActor) onStarted(ctx actor.Context) {
	a.slots = make(chan struct{}, maxHeldFrames)
	for range maxHeldFrames {
		a.slots <- struct{}{}
	}
	a.quit = make(chan struct{})
	s, root, self, in, slots, quit := a.s, ctx.ActorSystem().Root, ctx.Self(), a.in, a.slots, a.quit
	if !s.goroutines.Go(func() { readSubscription(s, root, self, in, slots, quit) }) {
		// The client is closing and will stop this actor.
		a.readerExited = true
		a.unsubscribe(ErrClosed)
	}
}

// readSubscription is a subscription stream's reader: the node's answer to
// Subscribe, then EventBatch frames, each after taking a slot, until the
// stream ends, the node sends an Error, or quit is closed.
func readSubscription(s *session, root *actor.RootContext, pid *actor.PID, in *subscriptionInit,
	slots <-chan struct{}, quit <-chan struct{}) {
	st := in.stream
	end := func(err error, fromNode bool) { root.Send(pid, &subscriptionEnded{err: err, fromNode: fromNode}) }

	f, err := wire.ReadFrame(st, s.maxRecv)
	if err != nil {
		end(err, false)
		return
	}
	switch f.Header.Type {
	case wire.TypeSubscribed:
		if f.Header.RequestID != in.reqID {
			end(protocolViolation("subscribed with request id %d, want %d", f.Header.RequestID, in.reqID), false)
			return
		}
		sub, err := wire.DecodeSubscribed(f.Body)
		if err != nil {
			end(err, false)
			return
		}
		if sub.Shard != in.shard {
			end(protocolViolation("subscribed to shard %d, asked for %d", sub.Shard, in.shard), false)
			return
		}
		root.Send(pid, &subscribedReceived{sub: sub})
	case wire.TypeError:
		e, err := wire.DecodeError(f.Body)
		if err != nil {
			end(err, false)
			return
		}
		end(e, true)
		return
	default:
		end(protocolViolation("%v frame in answer to subscribe", f.Header.Type), false)
		return
	}

	for {
		select {
		case <-slots:
		case <-quit:
			root.Send(pid, &subscriptionEnded{quit: true})
			return
		case <-s.ctx.Done():
			end(s.ctx.Err(), false)
			return
		}
		f, err := wire.ReadFrame(st, s.maxRecv)
		if err != nil {
			end(err, false)
			return
		}
		switch f.Header.Type {
		case wire.TypeEventBatch:
			sections, err := wire.DecodeEventBatch(f.Body)
			if err != nil {
				end(err, false)
				return
			}
			for _, v := range sections {
				if v.Shard != in.shard {
					end(protocolViolation("event batch for shard %d on a subscription to shard %d", v.Shard, in.shard), false)
					return
				}
			}
			root.Send(pid, &eventsReceived{sections: sections})
		case wire.TypeError:
			e, err := wire.DecodeError(f.Body)
			if err != nil {
				end(err, false)
				return
			}
			end(e, true)
			return
		default:
			end(protocolViolation("%v frame on a subscription stream", f.Header.Type), false)
			return
		}
	}
}

func (a *subscriptionActor) onSubscribed(m *subscribedReceived) {
	if a.endErr != nil {
		return
	}
	a.answered = true
	a.sub = m.sub
	a.q = newEventQueue(m.sub.Offset)
	for _, w := range a.awaiting {
		w.reply <- subscribeAnswer{sub: a.sub}
	}
	a.awaiting = nil
}

func (a *subscriptionActor) onSubscribeAwait(m *subscribeAwait) {
	switch {
	case a.answered:
		m.reply <- subscribeAnswer{sub: a.sub}
	case a.endErr != nil:
		m.reply <- subscribeAnswer{err: a.endErr}
	default:
		a.awaiting = append(a.awaiting, m)
	}
}

func (a *subscriptionActor) onEvents(m *eventsReceived) {
	if a.unsubscribed || a.q == nil {
		a.releaseSlots(1)
		return
	}
	a.q.push(m.sections)
	a.serve()
}

func (a *subscriptionActor) onNext(m *nextRequest) {
	if a.unsubscribed {
		m.reply <- nextResult{err: a.endErr}
		return
	}
	a.waiters = append(a.waiters, m)
	a.serve()
}

func (a *subscriptionActor) onNextCancelled(m *nextCancelled) {
	for i, w := range a.waiters {
		if w == m.req {
			a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
			break
		}
	}
	m.ack <- struct{}{}
}

// serve answers waiting Next calls with held events, and with endErr once
// none is left after the subscription ended.
func (a *subscriptionActor) serve() {
	for len(a.waiters) > 0 {
		var ev Event
		ok := false
		if a.q != nil {
			var finished int
			ev, ok, finished = a.q.pop()
			a.releaseSlots(finished)
		}
		if !ok {
			break
		}
		a.waiters[0].reply <- nextResult{ev: ev}
		a.waiters[0] = nil
		a.waiters = a.waiters[1:]
	}
	if a.endErr != nil {
		for _, w := range a.waiters {
			w.reply <- nextResult{err: a.endErr}
		}
		a.waiters = nil
	}
}

// releaseSlots gives the reader n frame slots back. It never blocks: the
// reader took every slot it gives back.
func (a *subscriptionActor) releaseSlots(n int) {
	for range n {
		select {
		case a.slots <- struct{}{}:
		default:
		}
	}
}

func (a *subscriptionActor) onEnded(ctx actor.Context, m *subscriptionEnded) {
	a.readerExited = true
	if a.unsubscribed {
		a.maybeStop(ctx)
		return
	}
	if a.endErr != nil {
		return
	}
	var err error
	var se *quic.StreamError
	switch {
	case m.fromNode:
		err = m.err
	case fatalFrame(m.err):
		a.s.fail(m.err)
		err = a.s.failure()
	case a.s.ctx.Err() != nil:
		err = a.s.failure()
	case errors.Is(m.err, io.EOF):
		err = &wire.Error{Code: wire.CodeSubscriptionAborted, Message: "the node ended the subscription stream"}
	case errors.As(m.err, &se):
		err = fmt.Errorf("herald: subscription stream reset: %w", m.err)
	default:
		err = a.s.lost(m.err)
	}
	a.endErr = err
	// The node is done with the stream; close this side too.
	a.in.stream.CancelRead(0)
	_ = a.in.stream.Close()
	for _, w := range a.awaiting {
		w.reply <- subscribeAnswer{err: err}
	}
	a.awaiting = nil
	a.serve()
}

// unsubscribe ends the subscription from this side: it closes the send side
// (the node's signal to unsubscribe), cancels reading, stops the reader and
// fails waiting calls with err.
func (a *subscriptionActor) unsubscribe(err error) {
	if a.unsubscribed {
		return
	}
	a.unsubscribed = true
	if a.endErr == nil {
		a.endErr = err
	}
	if a.quit != nil {
		close(a.quit)
	}
	_ = a.in.stream.Close()
	a.in.stream.CancelRead(0)
	for _, w := range a.awaiting {
		w.reply <- subscribeAnswer{err: err}
	}
	a.awaiting = nil
	for _, w := range a.waiters {
		w.reply <- nextResult{err: err}
	}
	a.waiters = nil
	a.q = nil
}

func (a *subscriptionActor) onUnsubscribe(ctx actor.Context) {
	a.closeRequested = true
	a.unsubscribe(ErrSubscriptionClosed)
	a.maybeStop(ctx)
}

// maybeStop stops the actor once the Subscription's Close asked for it and
// the reader has exited (so no message of the reader can reach a stopped
// actor), unless it is stopping already.
func (a *subscriptionActor) maybeStop(ctx actor.Context) {
	if a.closeRequested && a.readerExited && !a.stopping {
		a.stopping = true
		ctx.Stop(ctx.Self())
	}
}

func (a *subscriptionActor) onStopping(ctx actor.Context) {
	a.stopping = true
	err := a.s.failure()
	if err == nil {
		err = ErrSubscriptionClosed
	}
	a.unsubscribe(err)
}
