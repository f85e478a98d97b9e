package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// connectionActor owns the client's connection: the control stream of the
// current session, where it writes control requests (blocking on the write
// is allowed: it owns that send side), keeps the pending ones by request id
// and routes each answer to its caller. It also routes publishes to
// publish-stream actors (its children) and spawns subscription and group
// subscription actors (its children too).
//
// It owns reconnecting. When the connection is lost (its control stream
// ends: the node closed it, crashed or went quiet past the idle timeout,
// or an actor failed the session), it tells the application
// (ConnectionDisconnected) and, unless reconnecting is off, starts the
// reconnect loop on a goroutine (reconnectLoop, paced by backoff). Control
// requests meanwhile wait in queued; those that were pending are sent again
// (read-only ones) or fail in doubt. When the loop connects, the actor makes
// the new session current, hands it to every child (sessionStarted), which
// resume there, and sends what was queued; when the loop gives up, it fails
// everything and tells every child (connectionEnded).
//
// All fields are owned by the actor and touched only in Receive.
type connectionActor struct {
	// sh is the client's shared state.
	sh *shared
	// s is the current session: the connected one, or the lost one while
	// reconnecting.
	s *session
	// ctl is s's control stream; the control reader owns its receive side.
	ctl *quic.Stream
	// seed is the index of s's address among the seeds.
	seed int
	// stopped is closed when the actor has stopped (after its children).
	stopped chan struct{}
	// started is set once onStarted ran (the actor is never restarted, but
	// be safe if it ever is).
	started bool

	// pending holds the sent control requests awaiting an answer.
	pending map[uint64]*controlRequest
	// queued holds control requests waiting for a connection (while
	// reconnecting, or after GoAway), oldest first.
	queued []*controlRequest
	// failed is the error calls fail with once the client will not connect
	// again.
	failed error
	// reconnecting is set from a loss until the reconnect loop's outcome;
	// lostAt is when the loss was seen.
	reconnecting bool
	lostAt       time.Time

	// routes maps a (stream, shard) to the publish-stream actor carrying
	// its publishes.
	routes map[publishRoute]*actor.PID
	// publishers are the publish-stream actors, in spawn order.
	publishers []*actor.PID
	// subscriptions maps each subscription and group subscription actor's
	// id to the channel the Subscription (GroupMember) waits on; it is
	// closed once this actor has seen the child terminate, so a
	// Subscription's Close returns only when its actor is gone from here
	// too.
	subscriptions map[string]chan struct{}
	// nextShared is the index of the publisher the next new route shares
	// once every publish stream is taken (round-robin).
	nextShared int
	// goAwayErr is set once the node sent GoAway on s; goAwayDrained once
	// every publish stream has its answers. Then the connection closes as
	// soon as no control request awaits an answer.
	goAwayErr     *wire.Error
	goAwayDrained bool
}

// newConnectionProps returns the props of a connection actor over the
// dialed connection d, to the seed of index seed.
func newConnectionProps(d dialed, seed int, stopped chan struct{}) *actor.Props {
	a := &connectionActor{
		sh:      d.s.shared,
		s:       d.s,
		ctl:     d.ctl,
		seed:    seed,
		stopped: stopped,
		pending: make(map[uint64]*controlRequest),
		routes:  make(map[publishRoute]*actor.PID),

		subscriptions: make(map[string]chan struct{}),
	}
	return actor.PropsFromProducer(func() actor.Actor { return a },
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, stopOnPanic)))
}

// Receive dispatches.
func (a *connectionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopping:
		a.onStopping(ctx)
	case *actor.Stopped:
		a.onStopped()
	case *actor.Restarting:
		a.onRestarting(ctx)
	case *actor.Terminated:
		a.onTerminated(m)
	case *controlRequest:
		a.onControlRequest(ctx, m)
	case *controlFrameReceived:
		a.onControlFrame(ctx, m)
	case *controlStreamEnded:
		a.onControlStreamEnded(ctx, m)
	case *reconnected:
		a.onReconnected(ctx, m)
	case *reconnectGaveUp:
		a.onReconnectGaveUp(ctx, m)
	case *publishRequest:
		a.onPublishRequest(ctx, m)
	case *publishWithdrawn:
		a.onPublishWithdrawn(ctx, m)
	case *subscriptionSpawnRequest:
		a.onSubscriptionSpawn(ctx, m)
	case *groupSubscriptionSpawnRequest:
		a.onGroupSubscriptionSpawn(ctx, m)
	case *publishStatsRequest:
		a.onPublishStats(ctx, m)
	case *publishersRequest:
		a.onPublishers(m)
	case *goAwayPublishersDrained:
		a.onGoAwayPublishersDrained(m)
	case *drainingSeen:
		a.onDrainingSeen(ctx, m)
	default:
		a.sh.log.Warn("herald: connection actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *connectionActor) onStarted(ctx actor.Context) {
	if a.started {
		return
	}
	a.started = true
	a.startReader(ctx)
}

// startReader starts the control reader of the current session.
func (a *connectionActor) startReader(ctx actor.Context) {
	root, self, s, ctl := ctx.ActorSystem().Root, ctx.Self(), a.s, a.ctl
	if !s.goroutines.Go(func() { readControl(s, root, self, ctl) }) {
		a.lose(ctx, ErrClosed)
	}
}

// readControl is the control stream's reader: it decodes each frame and
// hands it to the connection actor, until the stream fails.
func readControl(s *session, root *actor.RootContext, pid *actor.PID, ctl *quic.Stream) {
	for {
		f, err := wire.ReadFrame(ctl, s.maxRecv)
		if err != nil {
			root.Send(pid, &controlStreamEnded{s: s, err: err})
			return
		}
		m, err := decodeControlFrame(f)
		if err != nil {
			root.Send(pid, &controlStreamEnded{s: s, err: err})
			return
		}
		m.s = s
		root.Send(pid, m)
	}
}

// decodeControlFrame decodes a frame the node sent on the control stream.
func decodeControlFrame(f wire.Frame) (*controlFrameReceived, error) {
	m := &controlFrameReceived{id: f.Header.RequestID, typ: f.Header.Type}
	var err error
	switch f.Header.Type {
	case wire.TypeStreamInfo:
		m.value, err = wire.DecodeStreamInfo(f.Body)
	case wire.TypeStreamList:
		m.value, err = wire.DecodeStreamList(f.Body)
	case wire.TypeReadResult:
		m.value, err = wire.DecodeReadResult(f.Body)
	case wire.TypeOK:
		m.value, err = struct{}{}, wire.DecodeOK(f.Body)
	case wire.TypeGroupRecords:
		m.value, err = wire.DecodeGroupRecords(f.Body)
	case wire.TypeGroupDone:
		m.value, err = wire.DecodeGroupDone(f.Body)
	case wire.TypeGroupAcksDone:
		m.value, err = wire.DecodeGroupAcksDone(f.Body)
	case wire.TypeGroupDeadList:
		m.value, err = wire.DecodeGroupDeadList(f.Body)
	case wire.TypeGroupInfo:
		m.value, err = wire.DecodeGroupInfo(f.Body)
	case wire.TypeShardOffsets:
		m.value, err = wire.DecodeShardOffsets(f.Body)
	case wire.TypeGroupList:
		m.value, err = wire.DecodeGroupList(f.Body)
	case wire.TypeNodeList:
		m.value, err = wire.DecodeNodeList(f.Body)
	case wire.TypeError:
		m.value, err = wire.DecodeError(f.Body)
	case wire.TypeGoAway:
		if f.Header.RequestID != 0 {
			return nil, protocolViolation("goaway with request id %d", f.Header.RequestID)
		}
		m.value, err = wire.DecodeGoAway(f.Body)
	default:
		return nil, protocolViolation("%v frame on the control stream", f.Header.Type)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// waitsForConnection reports whether new control requests must wait for
// the next connection: the client is reconnecting, or the node is draining
// this one and the client will reconnect.
func (a *connectionActor) waitsForConnection() bool {
	return a.reconnecting || (a.goAwayErr != nil && a.sh.reconnect)
}

func (a *connectionActor) onControlRequest(ctx actor.Context, m *controlRequest) {
	switch {
	case a.failed != nil:
		m.reply <- controlResponse{err: a.failed}
		return
	case m.abandoned.Load():
		return
	case a.waitsForConnection():
		a.queued = append(a.queued, m)
		return
	}
	if e := a.s.goAway.Load(); e != nil {
		m.reply <- controlResponse{err: e}
		return
	}
	id := a.sh.nextID()
	frame := m.build(nil, id)
	if n := len(frame) - wire.HeaderSize; n > int(a.s.maxSend) {
		m.reply <- controlResponse{err: &wire.Error{Code: wire.CodeFrameTooLarge,
			Message: fmt.Sprintf("request of %d bytes exceeds the node's maximum of %d", n, a.s.maxSend), Detail: uint64(a.s.maxSend)}}
		return
	}
	a.pending[id] = m
	if _, err := a.ctl.Write(frame); err != nil {
		a.lose(ctx, connCause(err))
	}
}

func (a *connectionActor) onControlFrame(ctx actor.Context, m *controlFrameReceived) {
	if m.s != a.s || a.reconnecting {
		// A late frame of a lost session: what it answers was settled.
		return
	}
	switch m.typ {
	case wire.TypeGoAway:
		reason, _ := m.value.(string)
		err := &wire.Error{Code: wire.CodeShuttingDown, Message: "node is draining: " + reason}
		if a.s.goAway.CompareAndSwap(nil, err) {
			a.sh.log.Info("herald: node sent goaway", slog.String("reason", reason))
			a.drainAfterGoAway(ctx, err)
		}
		return
	case wire.TypeError:
		if m.id == 0 {
			// An error about the connection as a whole.
			a.lose(ctx, m.value.(*wire.Error))
			return
		}
	}
	req, ok := a.pending[m.id]
	if !ok {
		a.lose(ctx, protocolViolation("%v answers unknown request id %d", m.typ, m.id))
		return
	}
	delete(a.pending, m.id)
	switch {
	case m.typ == wire.TypeError:
		req.reply <- controlResponse{err: m.value.(*wire.Error)}
	case m.typ != req.want:
		a.lose(ctx, protocolViolation("%v answers a request that expects %v", m.typ, req.want))
		req.reply <- controlResponse{err: a.s.failure()}
		return
	default:
		req.reply <- controlResponse{value: m.value}
	}
	a.closeIfDrained()
}

// onDrainingSeen takes a child's shutting_down as the node's GoAway.
func (a *connectionActor) onDrainingSeen(ctx actor.Context, m *drainingSeen) {
	if m.s != a.s || a.reconnecting {
		return
	}
	err := &wire.Error{Code: wire.CodeShuttingDown, Message: "node is draining"}
	var we *wire.Error
	if errors.As(m.err, &we) {
		err = we
	}
	if a.s.goAway.CompareAndSwap(nil, err) {
		a.sh.log.Info("herald: leaving the node (it is draining, or its replica of a subscribed shard is behind)", slog.Any("err", m.err))
		a.drainAfterGoAway(ctx, err)
	}
}

// closeIfDrained closes the connection the node is draining once the
// publish streams have their answers and no control request awaits one.
func (a *connectionActor) closeIfDrained() {
	if a.goAwayErr != nil && a.goAwayDrained && len(a.pending) == 0 {
		a.s.fail(a.goAwayErr)
	}
}

func (a *connectionActor) onControlStreamEnded(ctx actor.Context, m *controlStreamEnded) {
	if m.s != a.s {
		return
	}
	switch {
	case fatalFrame(m.err):
		a.lose(ctx, m.err)
	case errors.Is(m.err, io.EOF):
		a.lose(ctx, protocolViolation("the node closed the control stream"))
	default:
		a.lose(ctx, connCause(m.err))
	}
}

// lose handles the loss of the current session because of cause: it
// closes the QUIC connection (once), tells the application, and either
// starts reconnecting (what was pending is sent again or fails in doubt,
// as each request's safe says) or, without reconnecting, fails everything.
func (a *connectionActor) lose(ctx actor.Context, cause error) {
	if a.failed != nil || a.reconnecting {
		return
	}
	a.s.fail(cause)
	err := a.s.failure()
	if err == nil {
		err = cause
	}
	if errors.Is(err, ErrClosed) {
		a.end(ctx, ErrClosed)
		return
	}
	a.sh.log.Warn("herald: connection lost", slog.String("addr", a.s.addr), slog.Any("err", err))
	a.sh.events.emit(ConnectionEvent{Kind: ConnectionDisconnected, Addr: a.s.addr, NodeID: a.s.welcome.NodeID, Err: err})
	if !a.sh.reconnect {
		a.end(ctx, err)
		return
	}
	a.reconnecting = true
	a.lostAt = a.sh.clock.Now()
	a.goAwayErr, a.goAwayDrained = nil, false
	// What was sent and not answered: read-only requests go out again
	// first, in their order (unless the node broke the protocol: it may
	// well do it again), the others may have been applied.
	broke := protocolBroken(cause)
	ids := make([]uint64, 0, len(a.pending))
	for id := range a.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var again []*controlRequest
	for _, id := range ids {
		req := a.pending[id]
		delete(a.pending, id)
		switch {
		case req.safe && !broke:
			again = append(again, req)
		case req.safe:
			req.reply <- controlResponse{err: err}
		default:
			req.reply <- controlResponse{err: outcomeUnknown(err)}
		}
	}
	a.queued = append(again, a.queued...)
	a.startReconnect(ctx, err)
}

// protocolBroken reports whether cause, which ended a connection, says the
// node broke the protocol (or this client's decoder refused its frame).
func protocolBroken(cause error) bool {
	var we *wire.Error
	return errors.As(cause, &we) && isLocalDecodeCode(we.Code)
}

// startReconnect starts the reconnect loop after the loss of the current
// session (cause).
func (a *connectionActor) startReconnect(ctx actor.Context, cause error) {
	sh, root, self := a.sh, ctx.ActorSystem().Root, ctx.Self()
	loop := &reconnectLoop{
		b:      newBackoff(sh.policy, a.lostAt),
		clk:    sh.clock,
		jitter: sh.jitter,
		first:  (a.seed + 1) % len(sh.dialer.seeds),
		dial: func(ctx context.Context, first int) (dialed, int, error) {
			return sh.dialer.dialSeeds(ctx, sh, first)
		},
	}
	a.sh.log.Info("herald: reconnecting", slog.Any("cause", cause), slog.Any("seeds", sh.dialer.seeds))
	if !sh.goroutines.Go(func() {
		out := loop.run(sh.life)
		switch {
		case out.closed:
		case out.d.s != nil:
			root.Send(self, &reconnected{d: out.d, seed: out.seed, attempts: out.attempts})
		default:
			root.Send(self, &reconnectGaveUp{attempts: out.attempts, last: out.err})
		}
	}) {
		a.end(ctx, ErrClosed)
	}
}

// onReconnected makes the new connection current: its reader starts, every
// child resumes on it, and the queued control requests go out.
func (a *connectionActor) onReconnected(ctx actor.Context, m *reconnected) {
	if a.failed != nil || !a.reconnecting {
		m.d.s.fail(ErrClosed)
		return
	}
	down := a.sh.clock.Now().Sub(a.lostAt)
	a.reconnecting = false
	a.s, a.ctl, a.seed = m.d.s, m.d.ctl, m.seed
	a.sh.cur.Store(a.s)
	a.startReader(ctx)
	a.sh.log.Info("herald: reconnected", slog.String("addr", a.s.addr), slog.String("node", a.s.welcome.NodeID),
		slog.Int("attempts", m.attempts), slog.Duration("downtime", down))
	for _, child := range ctx.Children() {
		ctx.Send(child, &sessionStarted{s: a.s})
	}
	a.sh.events.emit(ConnectionEvent{Kind: ConnectionReconnected, Addr: a.s.addr, NodeID: a.s.welcome.NodeID,
		Attempts: m.attempts, Downtime: down})
	queued := a.queued
	a.queued = nil
	for _, req := range queued {
		a.onControlRequest(ctx, req)
	}
}

// onReconnectGaveUp ends the client: it will not connect again.
func (a *connectionActor) onReconnectGaveUp(ctx actor.Context, m *reconnectGaveUp) {
	if a.failed != nil || !a.reconnecting {
		return
	}
	err := &ReconnectError{Attempts: m.attempts, Elapsed: a.sh.clock.Now().Sub(a.lostAt), Cause: context.Cause(a.s.ctx), Last: m.last}
	a.sh.log.Warn("herald: reconnecting gave up", slog.Any("err", err))
	a.reconnecting = false
	a.end(ctx, err)
}

// end makes the client unusable for good with err: every pending, queued
// and later call fails with it, every child is told (connectionEnded), and
// the application hears ConnectionClosed (Close sends its own).
func (a *connectionActor) end(ctx actor.Context, err error) {
	if a.failed != nil {
		return
	}
	a.failed = err
	if !errors.Is(err, ErrClosed) {
		a.sh.final.CompareAndSwap(nil, &err)
		a.sh.events.emit(ConnectionEvent{Kind: ConnectionClosed, Addr: a.s.addr, NodeID: a.s.welcome.NodeID, Err: err})
		for _, child := range ctx.Children() {
			ctx.Send(child, &connectionEnded{err: err})
		}
	}
	for id, req := range a.pending {
		req.reply <- controlResponse{err: err}
		delete(a.pending, id)
	}
	for _, req := range a.queued {
		req.reply <- controlResponse{err: err}
	}
	a.queued = nil
}

// goAwayGrace bounds how long, after GoAway, the client waits for the
// node's answers to the publishes it has in flight before it closes the
// connection anyway (the node closes it too, after its own drain_grace).
const goAwayGrace = 30 * time.Second

// drainAfterGoAway finishes the connection the node is draining: every
// publish stream closes its send side and waits for the node's answers to
// what it has in flight (the node answers everything it admitted before it
// goes), and the control requests sent get their answers; then the client
// closes the connection with err, which tells the node it may stop
// waiting, and ends the subscriptions with the retryable shutting_down
// error. goAwayGrace bounds it all.
func (a *connectionActor) drainAfterGoAway(ctx actor.Context, err *wire.Error) {
	a.goAwayErr = err
	replies := make([]chan struct{}, len(a.publishers))
	for i, p := range a.publishers {
		replies[i] = make(chan struct{}, 1)
		ctx.Send(p, &goAwayNotice{err: err, reply: replies[i]})
	}
	s, root, self := a.s, ctx.ActorSystem().Root, ctx.Self()
	s.goroutines.Go(func() {
		timer := time.NewTimer(goAwayGrace)
		defer timer.Stop()
		for _, r := range replies {
			select {
			case <-r:
			case <-timer.C:
				s.fail(err)
				return
			case <-s.ctx.Done():
				return
			}
		}
		root.Send(self, &goAwayPublishersDrained{s: s})
		select {
		case <-timer.C:
			s.fail(err)
		case <-s.ctx.Done():
		}
	})
}

// onGoAwayPublishersDrained notes that every publish stream has its
// answers after GoAway, and closes the connection if nothing else waits.
func (a *connectionActor) onGoAwayPublishersDrained(m *goAwayPublishersDrained) {
	if m.s != a.s || a.reconnecting {
		return
	}
	a.goAwayDrained = true
	a.closeIfDrained()
}

func (a *connectionActor) onStopping(ctx actor.Context) {
	a.s.fail(ErrClosed)
	a.end(ctx, ErrClosed)
	a.ctl.CancelRead(0)
	_ = a.ctl.Close()
}

// onRestarting is not expected (the guardian stops on panic): it fails
// rather than go on with state a panic may have broken.
func (a *connectionActor) onRestarting(ctx actor.Context) {
	err := wire.Errorf(wire.CodeInternal, "connection actor restarted")
	a.s.fail(err)
	a.end(ctx, err)
}

func (a *connectionActor) onStopped() {
	// Every child has stopped before its parent; close what is left anyway.
	for id, ch := range a.subscriptions {
		close(ch)
		delete(a.subscriptions, id)
	}
	close(a.stopped)
}

// onTerminated handles a child's end: a subscription's Close may return; a
// publish-stream actor that stopped (a panic) is forgotten, so its routes
// get a new one.
func (a *connectionActor) onTerminated(m *actor.Terminated) {
	if ch, ok := a.subscriptions[m.Who.Id]; ok {
		close(ch)
		delete(a.subscriptions, m.Who.Id)
		return
	}
	for i, p := range a.publishers {
		if p.Equal(m.Who) {
			a.publishers = append(a.publishers[:i], a.publishers[i+1:]...)
			break
		}
	}
	for r, p := range a.routes {
		if p.Equal(m.Who) {
			delete(a.routes, r)
		}
	}
}

// route returns the publish-stream actor for r, assigning one if r has
// none: a new publish stream while fewer than publishStreams exist (first
// come first served), otherwise an existing one, round-robin.
func (a *connectionActor) route(ctx actor.Context, r publishRoute) *actor.PID {
	if pid, ok := a.routes[r]; ok {
		return pid
	}
	var pid *actor.PID
	if len(a.publishers) < a.s.publishStreams {
		pid = ctx.SpawnPrefix(newPublishStreamProps(a.s), "publish-")
		a.publishers = append(a.publishers, pid)
	} else {
		pid = a.publishers[a.nextShared%len(a.publishers)]
		a.nextShared++
	}
	a.routes[r] = pid
	return pid
}

func (a *connectionActor) onPublishRequest(ctx actor.Context, m *publishRequest) {
	if a.failed != nil {
		m.finishUnsent(a.sh, a.failed)
		return
	}
	ctx.Send(a.route(ctx, m.route), m)
}

func (a *connectionActor) onPublishWithdrawn(ctx actor.Context, m *publishWithdrawn) {
	if pid, ok := a.routes[m.req.route]; ok {
		ctx.Send(pid, m)
	}
}

func (a *connectionActor) onSubscriptionSpawn(ctx actor.Context, m *subscriptionSpawnRequest) {
	if a.failed != nil {
		m.reply <- subscriptionSpawned{err: a.failed}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.abandoned {
		return
	}
	pid := ctx.SpawnPrefix(newSubscriptionProps(a.s, m.init), "subscription-")
	a.subscriptions[pid.Id] = m.init.stopped
	m.reply <- subscriptionSpawned{pid: pid}
}

func (a *connectionActor) onGroupSubscriptionSpawn(ctx actor.Context, m *groupSubscriptionSpawnRequest) {
	if a.failed != nil {
		m.reply <- subscriptionSpawned{err: a.failed}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.abandoned {
		return
	}
	pid := ctx.SpawnPrefix(newGroupSubscriptionProps(a.s, m.init), "group-subscription-")
	a.subscriptions[pid.Id] = m.init.stopped
	m.reply <- subscriptionSpawned{pid: pid}
}

func (a *connectionActor) onPublishStats(ctx actor.Context, m *publishStatsRequest) {
	if pid, ok := a.routes[m.route]; ok {
		ctx.Send(pid, m)
		return
	}
	m.reply <- publishStats{}
}

// onPublishers answers with the publish-stream actors (a copy: the actor
// keeps changing its own slice).
func (a *connectionActor) onPublishers(m *publishersRequest) {
	m.reply <- append([]*actor.PID(nil), a.publishers...)
}
