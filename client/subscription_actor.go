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

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
)

// maxHeldFrames is how many received EventBatch frames a subscription holds
// before its readers stop reading their QUIC streams, so that flow control
// pushes back to the node. A subscription of several shards splits it among
// them, each getting at least minHeldFramesPerShard.
const (
	maxHeldFrames         = 64
	minHeldFramesPerShard = 8
)

// subscriptionActor owns the subscription streams of one Subscription, one
// per subscribed shard, and the frames received on them. Per shard, a reader
// goroutine opens the stream, writes Subscribe, and decodes the node's
// frames into messages for the actor; Next asks the actor for the next
// event, which it takes from the shards in turn (each shard's in offset
// order). A reader takes one of its shard's slots before reading each
// EventBatch frame and the actor gives it back when the frame is consumed,
// so each shard holds a bounded number of frames.
//
// A shard the node ends with lagged is, with WithAutoResume, subscribed again
// from the offset the node gave (a new attempt: a new stream and reader);
// the shard's event queue carries over, so the application sees contiguous
// offsets. Otherwise the shard ends: Next reports its error once, after the
// shard's held events, while the other shards go on.
//
// When the connection is lost (or the node, draining, ends a shard with
// shutting_down) and the client reconnects, each shard waits for the new
// session (sessionStarted) and is subscribed again there, from one past the
// last record it received (shardResume); its queue carries over, and what
// the node could no longer give is reported as a *GapError in line.
//
// The actor outlives its readers: each reader's last message is shardEnded.
// Once the Subscription's Close asked to end the subscription and every
// reader has exited, the actor stops itself; otherwise its parent stops it
// when the client closes.
//
// All fields are owned by the actor and touched only in Receive.
type subscriptionActor struct {
	// s is the current session: new attempts go there.
	s *session
	// in is what the subscription was asked for.
	in *subscriptionInit
	// ctx bounds the readers' opens and reads on s; cancel is called when
	// the subscription is ended from this side.
	ctx    context.Context
	cancel context.CancelFunc
	// shards holds each subscribed shard's state, in in.shards order.
	shards []*shardState
	// readers is how many reader goroutines have not yet sent shardEnded.
	readers int

	// unsubscribed is set once the subscription was ended from this side.
	unsubscribed bool
	// closeRequested is set when the Subscription's Close asked to end the
	// subscription: the actor then stops itself once its readers exited.
	// Without it the actor is stopped by its parent, when the client closes.
	closeRequested bool
	// stopping is set once the actor is stopping (then it must not ask to
	// stop again: that Stop would reach a dead actor).
	stopping bool

	// awaiting are calls waiting for every shard's answer to Subscribe.
	awaiting []*subscribeAwait
	// waiters are Next calls waiting for an event, oldest first.
	waiters []*nextRequest
	// held is an error next() gave while a batch of events was gathered:
	// it answers the following request.
	held *nextResult
	// turn is the index of the shard Next looks at first.
	turn int
	// endErr ends the whole subscription (a local or connection failure, or
	// a shard's refusal before every shard answered): Next returns it once
	// no event is held.
	endErr error
	// lastErr is the last shard error Next reported; once every shard has
	// ended, Next returns it on every call.
	lastErr error
}

// shardState is one subscribed shard.
type shardState struct {
	// start is the shard and where the subscription started it.
	start shardStart
	// gen counts the shard's attempts (Subscribe frames); reader messages of
	// another attempt are stale.
	gen int
	// asked is the offset the current attempt asked for (StartOffset).
	asked uint64
	// stream is the current attempt's stream once its reader opened it.
	stream *quic.Stream
	// slots holds the shard readers' frame slots.
	slots chan struct{}
	// answered is set once the node's first Subscribed arrived; granted is
	// that answer.
	answered bool
	granted  wire.Subscribed
	// q holds the received frames; nil until answered. It carries over
	// automatic resumes.
	q *eventQueue
	// err is set once the shard ended for good; reported once Next
	// returned it.
	err      error
	reported bool
	// s is the session of the current attempt.
	s *session
	// waiting is set once the current attempt ended with its connection:
	// the shard resumes when the next session starts.
	waiting bool
	// resume is the shard's resume after a lost connection.
	resume shardResume
	// behind counts the attempts in a row a node ended or refused with
	// replica_behind: the next attempt waits behindDelay(behind) first.
	behind int
}

// behindDelay is how long a shard's next attempt waits after n attempts
// in a row ended with replica_behind: none after the first (the client
// moves to another node at once), then 100 ms, doubling up to 2 s, so
// that a client that finds only followers cut off from their leaders
// (every node it can reach) does not spin.
func behindDelay(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return min(100*time.Millisecond<<min(n-2, 5), 2*time.Second)
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
		a.onStopping()
	case *actor.Stopped, *actor.Restarting:
		// Nothing to do: Stopping ended the subscription, and the
		// connection actor stops a child that panics (stopOnPanic).
	case *subscribeAwait:
		a.onSubscribeAwait(m)
	case *nextRequest:
		a.onNext(m)
	case *nextCancelled:
		a.onNextCancelled(m)
	case *unsubscribeRequest:
		a.onUnsubscribe(ctx)
	case *shardStreamOpened:
		a.onStreamOpened(m)
	case *subscribedReceived:
		a.onSubscribed(m)
	case *eventsReceived:
		a.onEvents(m)
	case *shardEnded:
		a.onShardEnded(ctx, m)
	case *sessionStarted:
		a.onSessionStarted(ctx, m)
	case *connectionEnded:
		a.fail(m.err)
	default:
		a.s.log.Warn("herald: subscription actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *subscriptionActor) onStarted(ctx actor.Context) {
	if a.shards != nil {
		return
	}
	a.ctx, a.cancel = context.WithCancel(a.s.ctx)
	perShard := max(minHeldFramesPerShard, maxHeldFrames/max(len(a.in.shards), 1))
	a.shards = make([]*shardState, len(a.in.shards))
	for i, st := range a.in.shards {
		sh := &shardState{start: st, slots: make(chan struct{}, perShard)}
		for range perShard {
			sh.slots <- struct{}{}
		}
		a.shards[i] = sh
	}
	for i, sh := range a.shards {
		if !a.startAttempt(ctx, i, sh.start.start, sh.start.offset) {
			// The client is closing and will stop this actor.
			a.unsubscribe(ErrClosed)
			return
		}
	}
}

// shardAttempt is what a reader needs for one Subscribe on one shard.
type shardAttempt struct {
	// idx and gen identify the shard and the attempt in the reader's
	// messages.
	idx, gen int
	// sub is the Subscribe to send (its request id is set when sent).
	sub wire.Subscribe
	// slots are the shard's frame slots.
	slots chan struct{}
	// ctx ends the attempt when the subscription is ended from this side
	// (or the connection fails).
	ctx context.Context
	// delay is how long the reader waits before it subscribes.
	delay time.Duration
	// waiting counts the subscription's readers waiting for stream credit.
	waiting *atomic.Int32
}

// startAttempt starts a reader that subscribes shard idx from start/offset.
// It reports false when the client is closing.
func (a *subscriptionActor) startAttempt(ctx actor.Context, idx int, start wire.StartKind, offset uint64) bool {
	sh := a.shards[idx]
	sh.gen++
	sh.stream = nil
	sh.asked = offset
	sh.s, sh.waiting = a.s, false
	at := shardAttempt{
		idx: idx, gen: sh.gen, slots: sh.slots, ctx: a.ctx, delay: behindDelay(sh.behind), waiting: a.in.waitingStream,
		sub: wire.Subscribe{Name: a.in.name, Shard: sh.start.shard, Start: start, Offset: offset, QueueCapacity: a.in.queue},
	}
	if a.s.welcome.Features&wire.FeatureFollowerReads != 0 {
		// A node of an older version (reconnected to in a mixed cluster)
		// serves the nearest replica: it knows no other choice.
		at.sub.Replica = a.in.replica
	}
	s, root, self := a.s, ctx.ActorSystem().Root, ctx.Self()
	if !s.goroutines.Go(func() { readShard(s, root, self, at) }) {
		return false
	}
	a.readers++
	return true
}

// readShard is one attempt's reader: it opens a subscription stream, writes
// Subscribe, reads the node's answer, then EventBatch frames, each after
// taking a slot, until the stream ends, the node sends an Error, or the
// attempt's context ends.
func readShard(s *session, root *actor.RootContext, pid *actor.PID, at shardAttempt) {
	end := func(err error, fromNode bool) {
		root.Send(pid, &shardEnded{idx: at.idx, gen: at.gen, err: err, fromNode: fromNode})
	}
	if at.delay > 0 {
		timer, stop := s.clock.NewTimer(at.delay)
		select {
		case <-timer:
		case <-at.ctx.Done():
			stop()
			end(at.ctx.Err(), false)
			return
		}
	}
	st, err := openStream(at.ctx, s.conn, at.waiting)
	if err != nil {
		end(err, false)
		return
	}
	root.Send(pid, &shardStreamOpened{idx: at.idx, gen: at.gen, stream: st})
	id := s.nextID()
	if _, err := st.Write(wire.AppendSubscribe(nil, id, at.sub)); err != nil {
		end(connCause(err), false)
		return
	}

	f, err := wire.ReadFrame(st, s.maxRecv)
	if err != nil {
		end(err, false)
		return
	}
	switch f.Header.Type {
	case wire.TypeSubscribed:
		if f.Header.RequestID != id {
			end(protocolViolation("subscribed with request id %d, want %d", f.Header.RequestID, id), false)
			return
		}
		sub, err := wire.DecodeSubscribed(f.Body)
		if err != nil {
			end(err, false)
			return
		}
		if sub.Shard != at.sub.Shard {
			end(protocolViolation("subscribed to shard %d, asked for %d", sub.Shard, at.sub.Shard), false)
			return
		}
		root.Send(pid, &subscribedReceived{idx: at.idx, gen: at.gen, sub: sub})
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
		case <-at.slots:
		case <-at.ctx.Done():
			end(at.ctx.Err(), false)
			return
		}
		f, err := wire.ReadTrustedFrame(st, s.maxRecv) // the node this client dialed
		if err != nil {
			// The slot taken carries no frame: give it back, or the shard's
			// next attempt would have one fewer.
			releaseSlots(at.slots, 1)
			end(err, false)
			return
		}
		switch f.Header.Type {
		case wire.TypeEventBatch:
			sections, err := wire.DecodeEventBatch(f.Body)
			if err != nil {
				releaseSlots(at.slots, 1)
				end(err, false)
				return
			}
			for _, v := range sections {
				if v.Shard != at.sub.Shard {
					releaseSlots(at.slots, 1)
					end(protocolViolation("event batch for shard %d on a subscription to shard %d", v.Shard, at.sub.Shard), false)
					return
				}
			}
			if n := len(sections); stages.Enabled && n > 0 {
				stages.MarkRecords(stages.ClientRead, sections[n-1].Records)
			}
			root.Send(pid, &eventsReceived{idx: at.idx, gen: at.gen, sections: sections})
		case wire.TypeError:
			releaseSlots(at.slots, 1)
			e, err := wire.DecodeError(f.Body)
			if err != nil {
				end(err, false)
				return
			}
			end(e, true)
			return
		default:
			releaseSlots(at.slots, 1)
			end(protocolViolation("%v frame on a subscription stream", f.Header.Type), false)
			return
		}
	}
}

// closeStream closes st's send side (the node's signal to unsubscribe) and
// stops reading it.
func closeStream(st *quic.Stream) {
	_ = st.Close()
	st.CancelRead(0)
}

func (a *subscriptionActor) onStreamOpened(m *shardStreamOpened) {
	sh := a.shards[m.idx]
	if a.unsubscribed || m.gen != sh.gen {
		closeStream(m.stream)
		return
	}
	sh.stream = m.stream
}

func (a *subscriptionActor) onSubscribed(m *subscribedReceived) {
	sh := a.shards[m.idx]
	if a.unsubscribed || a.endErr != nil || m.gen != sh.gen {
		return
	}
	sh.behind = 0
	if sh.answered {
		// A resume (after a lag or a lost connection): the queue carries
		// over and drops what was delivered already; what the node could
		// not give is reported in line.
		if gap, watch := sh.resume.subscribed(sh.start.shard, m.sub.Offset); gap != nil {
			a.s.log.Info("herald: subscription resumed with a gap", slog.String("stream", a.in.name.String()),
				slog.Uint64("shard", uint64(gap.Shard)), slog.Uint64("from", gap.From), slog.Uint64("to", gap.To))
			sh.q.pushGap(gap)
			a.serve()
		} else if watch {
			sh.q.pushWatch(m.sub.Offset)
		}
		return
	}
	sh.answered, sh.granted = true, m.sub
	sh.q = newEventQueue(m.sub.Offset)
	for _, s := range a.shards {
		if !s.answered {
			return
		}
	}
	ans := a.answer()
	for _, w := range a.awaiting {
		w.reply <- ans
	}
	a.awaiting = nil
}

// answer returns every shard's Subscribed (all have answered).
func (a *subscriptionActor) answer() subscribeAnswer {
	granted := make(map[uint32]wire.Subscribed, len(a.shards))
	for _, sh := range a.shards {
		granted[sh.start.shard] = sh.granted
	}
	return subscribeAnswer{granted: granted}
}

func (a *subscriptionActor) onSubscribeAwait(m *subscribeAwait) {
	if a.endErr != nil {
		m.reply <- subscribeAnswer{err: a.endErr}
		return
	}
	for _, sh := range a.shards {
		if !sh.answered {
			a.awaiting = append(a.awaiting, m)
			return
		}
	}
	m.reply <- a.answer()
}

func (a *subscriptionActor) onEvents(m *eventsReceived) {
	if n := len(m.sections); stages.Enabled && n > 0 {
		stages.MarkRecords(stages.ClientActor, m.sections[n-1].Records)
	}
	sh := a.shards[m.idx]
	if a.unsubscribed || sh.q == nil || m.gen != sh.gen {
		releaseSlots(sh.slots, 1)
		return
	}
	sh.q.push(m.sections)
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

// serve answers waiting Next calls with held events and errors: each gets
// the events ready, up to its max, or an error alone.
func (a *subscriptionActor) serve() {
	for len(a.waiters) > 0 {
		w := a.waiters[0]
		var r nextResult
		if a.held != nil {
			r, a.held = *a.held, nil
		} else {
			// The caller's emptied slice holds the answer if it is big
			// enough, even for one event (a subscription that keeps up
			// gets one at a time).
			switch n := min(a.ready(), max(w.max, 1)); {
			case n > 0 && cap(w.buf) >= n:
				r.evs = w.buf[:0]
			case n > 1:
				r.evs = make([]Event, 0, n)
			}
			for len(r.evs) < max(w.max, 1) {
				// The event is built in its slot (next writes it there).
				r.evs = append(r.evs, Event{})
				err, ok := a.next(&r.evs[len(r.evs)-1])
				if !ok || err != nil {
					r.evs = r.evs[:len(r.evs)-1]
				}
				if !ok {
					break
				}
				if err != nil {
					if len(r.evs) == 0 {
						r.err = err
					} else {
						a.held = &nextResult{err: err} // after the events gathered
					}
					break
				}
			}
			if len(r.evs) == 0 && r.err == nil {
				return
			}
		}
		w.reply <- r
		a.waiters = popFront(a.waiters)
	}
}

// ready returns at most how many events next can still give.
func (a *subscriptionActor) ready() int {
	n := 0
	for _, sh := range a.shards {
		if sh.q != nil {
			n += sh.q.ready()
		}
	}
	return n
}

// next returns what the next Next call gets, if anything is ready (an
// event is written to *ev; an error is returned): the shards take turns,
// and at its turn a shard gives its next held event, or,
// once it has none left and it ended, its error (once). When no shard has
// anything, it is the subscription's end error, or, once every shard ended,
// the last shard error reported.
func (a *subscriptionActor) next(ev *Event) (error, bool) {
	n := len(a.shards)
	for i := range n {
		k := (a.turn + i) % n
		sh := a.shards[k]
		if sh.q != nil {
			gap, ok, finished := sh.q.popInto(ev)
			releaseSlots(sh.slots, finished)
			if ok {
				a.turn = (k + 1) % n
				if gap != nil {
					return gap, true
				}
				return nil, true
			}
		}
		if sh.err != nil && !sh.reported {
			sh.reported = true
			a.lastErr = sh.err
			a.turn = (k + 1) % n
			return sh.err, true
		}
	}
	if a.endErr != nil {
		return a.endErr, true
	}
	for _, sh := range a.shards {
		if sh.err == nil {
			return nil, false
		}
	}
	return a.lastErr, a.lastErr != nil
}

// releaseSlots gives a reader n frame slots back. It never blocks: the
// readers took every slot given back.
func releaseSlots(slots chan struct{}, n int) {
	for range n {
		select {
		case slots <- struct{}{}:
		default:
		}
	}
}

func (a *subscriptionActor) onShardEnded(ctx actor.Context, m *shardEnded) {
	a.readers--
	if a.unsubscribed {
		a.maybeStop(ctx)
		return
	}
	sh := a.shards[m.idx]
	if m.gen != sh.gen {
		return
	}
	st := sh.stream
	sh.stream = nil
	if st != nil {
		// The node is done with the stream, or the stream failed; close
		// this side too.
		closeStream(st)
	}
	if a.endErr != nil {
		return
	}
	var se *quic.StreamError
	switch {
	case m.fromNode:
		we := m.err.(*wire.Error)
		if sh.answered && we.Code == wire.CodeLagged && a.in.autoResume {
			a.in.resumes.Add(1)
			a.s.log.Debug("herald: subscription lagged; resuming", slog.String("stream", a.in.name.String()),
				slog.Uint64("shard", uint64(sh.start.shard)), slog.Uint64("offset", we.Detail))
			if !a.startAttempt(ctx, m.idx, wire.StartOffset, we.Detail) {
				a.fail(ErrClosed)
			}
			return
		}
		if we.Code == wire.CodeOffsetOutOfRange {
			if start, offset, ok := sh.resume.refused(we.Detail); ok {
				a.s.log.Debug("herald: resume offset gone; resuming further on", slog.String("stream", a.in.name.String()),
					slog.Uint64("shard", uint64(sh.start.shard)), slog.Uint64("asked", sh.asked), slog.Uint64("detail", we.Detail))
				if !a.startAttempt(ctx, m.idx, start, offset) {
					a.fail(ErrClosed)
				}
				return
			}
		}
		if we.Code == wire.CodeReplicaBehind && a.s.reconnect {
			sh.behind++
			if len(a.s.dialer.seeds) == 1 {
				// No other node to go to: subscribe again here once the
				// replica may have caught up (behindDelay), from where the
				// shard is.
				start, offset := sh.start.start, sh.start.offset
				if sh.answered {
					start, offset = sh.resume.begin(sh.q.resumeOffset())
				}
				if !a.startAttempt(ctx, m.idx, start, offset) {
					a.fail(ErrClosed)
				}
				return
			}
		}
		if (we.Code == wire.CodeShuttingDown || we.Code == wire.CodeReplicaBehind) && a.s.reconnect {
			// The node is draining, or its replica of the shard is behind
			// its leader: resume on the next connection, at the next
			// address (the connection is drained and closed as if the
			// node had sent GoAway).
			sh.waiting = true
			ctx.Send(ctx.Parent(), &drainingSeen{s: sh.s, err: we})
			return
		}
		a.shardFailed(sh, a.shardError(sh, we))
	case fatalFrame(m.err):
		// The node broke the protocol on this subscription: it ends (a
		// resubscription would likely meet the same), and the connection
		// is closed with the error (the client reconnects for the rest).
		sh.s.fail(m.err)
		a.fail(sh.s.failure())
	case sh.s.ctx.Err() != nil:
		a.connectionLost(sh)
	case errors.Is(m.err, io.EOF):
		a.shardFailed(sh, &ShardError{Shard: sh.start.shard,
			Err: &wire.Error{Code: wire.CodeSubscriptionAborted, Message: "the node ended the subscription stream"}})
	case errors.As(m.err, &se):
		a.shardFailed(sh, &ShardError{Shard: sh.start.shard, Err: fmt.Errorf("herald: subscription stream reset: %w", m.err)})
	default:
		sh.s.lost(m.err)
		a.connectionLost(sh)
	}
}

// connectionLost handles a shard whose attempt ended with its connection:
// it waits for the next session, or, without reconnecting, the whole
// subscription fails.
func (a *subscriptionActor) connectionLost(sh *shardState) {
	if !a.s.reconnect {
		a.fail(sh.s.failure())
		return
	}
	sh.waiting = true
}

// onSessionStarted resumes every shard that is not done on the client's new
// session: from one past its last received record (shardResume), or, if
// the node had not answered its Subscribe, as first asked.
func (a *subscriptionActor) onSessionStarted(ctx actor.Context, m *sessionStarted) {
	if a.unsubscribed || a.endErr != nil || m.s == a.s {
		return
	}
	a.s = m.s
	a.cancel()
	a.ctx, a.cancel = context.WithCancel(m.s.ctx)
	for i, sh := range a.shards {
		if sh.err != nil || sh.s == m.s {
			continue
		}
		if sh.stream != nil {
			// The old attempt's stream, on the lost connection.
			closeStream(sh.stream)
		}
		start, offset := sh.start.start, sh.start.offset
		if sh.answered {
			start, offset = sh.resume.begin(sh.q.resumeOffset())
		}
		if !a.startAttempt(ctx, i, start, offset) {
			a.unsubscribe(ErrClosed)
			return
		}
	}
}

// shardError wraps the node's error that ended or refused sh.
func (a *subscriptionActor) shardError(sh *shardState, we *wire.Error) error {
	switch we.Code {
	case wire.CodeLagged:
		return &LaggedError{Shard: sh.start.shard, ResumeFrom: we.Detail, Err: we}
	case wire.CodeOffsetOutOfRange:
		return &OffsetOutOfRangeError{Shard: sh.start.shard, Offset: sh.asked, Detail: we.Detail, Err: we}
	default:
		return &ShardError{Shard: sh.start.shard, Err: we}
	}
}

// shardFailed ends sh with err. Before every shard has answered, it ends
// the subscription (Subscribe returns err).
func (a *subscriptionActor) shardFailed(sh *shardState, err error) {
	if !sh.answered {
		a.fail(err)
		return
	}
	sh.err = err
	a.serve()
}

// fail ends the whole subscription with err: Subscribe, if waiting, returns
// it, and Next returns it once no event is held.
func (a *subscriptionActor) fail(err error) {
	if a.endErr != nil {
		return
	}
	a.endErr = err
	for _, w := range a.awaiting {
		w.reply <- subscribeAnswer{err: err}
	}
	a.awaiting = nil
	a.serve()
}

// unsubscribe ends the subscription from this side: it stops the readers,
// closes every stream's send side (the node's signal to unsubscribe),
// cancels reading, and fails waiting calls with err.
func (a *subscriptionActor) unsubscribe(err error) {
	if a.unsubscribed {
		return
	}
	a.unsubscribed = true
	if a.endErr == nil {
		a.endErr = err
	}
	if a.cancel != nil {
		a.cancel()
	}
	for _, sh := range a.shards {
		if sh.stream != nil {
			closeStream(sh.stream)
			sh.stream = nil
		}
		sh.q = nil
	}
	for _, w := range a.awaiting {
		w.reply <- subscribeAnswer{err: err}
	}
	a.awaiting = nil
	for _, w := range a.waiters {
		w.reply <- nextResult{err: err}
	}
	a.waiters = nil
}

func (a *subscriptionActor) onUnsubscribe(ctx actor.Context) {
	a.closeRequested = true
	a.unsubscribe(ErrSubscriptionClosed)
	a.maybeStop(ctx)
}

// maybeStop stops the actor once the Subscription's Close asked for it and
// every reader has exited (so no message of a reader can reach a stopped
// actor), unless it is stopping already.
func (a *subscriptionActor) maybeStop(ctx actor.Context) {
	if a.closeRequested && a.readers == 0 && !a.stopping {
		a.stopping = true
		ctx.Stop(ctx.Self())
	}
}

func (a *subscriptionActor) onStopping() {
	a.stopping = true
	err := a.s.failure()
	if err == nil {
		err = ErrSubscriptionClosed
	}
	a.unsubscribe(err)
}
