package client

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// connectionActor owns the control stream of a connection: it writes control
// requests (blocking on the write is allowed: it owns that send side), keeps
// the pending ones by request id and routes each answer to its caller. It
// also routes publishes to publish-stream actors (its children) and spawns
// subscription and group subscription actors (its children too).
//
// All fields are owned by the actor and touched only in Receive.
type connectionActor struct {
	// s is the shared connection state.
	s *session
	// ctl is the control stream; the control reader owns its receive side.
	ctl *quic.Stream
	// stopped is closed when the actor has stopped (after its children).
	stopped chan struct{}
	// started is set once onStarted ran (the actor is never restarted, but
	// be safe if it ever is).
	started bool

	// pending holds the sent control requests awaiting an answer.
	pending map[uint64]*controlRequest
	// failed is the error calls fail with once the connection is unusable.
	failed error

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
	// goAwayErr is set once the node sent GoAway; goAwayDrained once every
	// publish stream has its answers. Then the connection closes as soon as
	// no control request awaits an answer.
	goAwayErr     *wire.Error
	goAwayDrained bool
}

// newConnectionProps returns the props of a connection actor.
func newConnectionProps(s *session, ctl *quic.Stream, stopped chan struct{}) *actor.Props {
	a := &connectionActor{
		s:       s,
		ctl:     ctl,
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
		a.onStopping()
	case *actor.Stopped:
		a.onStopped()
	case *actor.Restarting:
		a.onRestarting()
	case *actor.Terminated:
		a.onTerminated(m)
	case *controlRequest:
		a.onControlRequest(m)
	case *controlFrameReceived:
		a.onControlFrame(ctx, m)
	case *controlStreamEnded:
		a.onControlStreamEnded(m)
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
		a.onGoAwayPublishersDrained()
	default:
		a.s.log.Warn("herald: connection actor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *connectionActor) onStarted(ctx actor.Context) {
	if a.started {
		return
	}
	a.started = true
	root, self, s, ctl := ctx.ActorSystem().Root, ctx.Self(), a.s, a.ctl
	if !s.goroutines.Go(func() { readControl(s, root, self, ctl) }) {
		a.fail(ErrClosed)
	}
}

// readControl is the control stream's reader: it decodes each frame and
// hands it to the connection actor, until the stream fails.
func readControl(s *session, root *actor.RootContext, pid *actor.PID, ctl *quic.Stream) {
	for {
		f, err := wire.ReadFrame(ctl, s.maxRecv)
		if err != nil {
			root.Send(pid, &controlStreamEnded{err: err})
			return
		}
		m, err := decodeControlFrame(f)
		if err != nil {
			root.Send(pid, &controlStreamEnded{err: err})
			return
		}
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
	case wire.TypeGroupDeadList:
		m.value, err = wire.DecodeGroupDeadList(f.Body)
	case wire.TypeGroupInfo:
		m.value, err = wire.DecodeGroupInfo(f.Body)
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

func (a *connectionActor) onControlRequest(m *controlRequest) {
	if a.failed != nil {
		m.reply <- controlResponse{err: a.failed}
		return
	}
	if e := a.s.goAway.Load(); e != nil {
		m.reply <- controlResponse{err: e}
		return
	}
	id := a.s.nextID()
	frame := m.build(nil, id)
	if n := len(frame) - wire.HeaderSize; n > int(a.s.maxSend) {
		m.reply <- controlResponse{err: &wire.Error{Code: wire.CodeFrameTooLarge,
			Message: fmt.Sprintf("request of %d bytes exceeds the node's maximum of %d", n, a.s.maxSend), Detail: uint64(a.s.maxSend)}}
		return
	}
	if _, err := a.ctl.Write(frame); err != nil {
		a.fail(connCause(err))
		m.reply <- controlResponse{err: a.failed}
		return
	}
	a.pending[id] = m
}

func (a *connectionActor) onControlFrame(ctx actor.Context, m *controlFrameReceived) {
	switch m.typ {
	case wire.TypeGoAway:
		reason, _ := m.value.(string)
		err := &wire.Error{Code: wire.CodeShuttingDown, Message: "node is draining: " + reason}
		if a.s.goAway.CompareAndSwap(nil, err) {
			a.s.log.Info("herald: node sent goaway", slog.String("reason", reason))
			a.drainAfterGoAway(ctx, err)
		}
		return
	case wire.TypeError:
		if m.id == 0 {
			// An error about the connection as a whole.
			a.fail(m.value.(*wire.Error))
			return
		}
	}
	req, ok := a.pending[m.id]
	if !ok {
		a.fail(protocolViolation("%v answers unknown request id %d", m.typ, m.id))
		return
	}
	delete(a.pending, m.id)
	switch {
	case m.typ == wire.TypeError:
		req.reply <- controlResponse{err: m.value.(*wire.Error)}
	case m.typ != req.want:
		a.fail(protocolViolation("%v answers a request that expects %v", m.typ, req.want))
		req.reply <- controlResponse{err: a.failed}
	default:
		req.reply <- controlResponse{value: m.value}
	}
	a.closeIfDrained()
}

// closeIfDrained closes the connection the node is draining once the
// publish streams have their answers and no control request awaits one.
func (a *connectionActor) closeIfDrained() {
	if a.goAwayErr != nil && a.goAwayDrained && len(a.pending) == 0 {
		a.s.fail(a.goAwayErr)
	}
}

func (a *connectionActor) onControlStreamEnded(m *controlStreamEnded) {
	switch {
	case fatalFrame(m.err):
		a.fail(m.err)
	case errors.Is(m.err, io.EOF):
		a.fail(protocolViolation("the node closed the control stream"))
	default:
		a.fail(connCause(m.err))
	}
}

// fail makes the connection unusable because of cause: it closes the QUIC
// connection (once) and fails every pending control call.
func (a *connectionActor) fail(cause error) {
	if a.failed != nil {
		return
	}
	a.s.fail(cause)
	a.failed = a.s.failure()
	if a.failed == nil {
		a.failed = cause
	}
	if !errors.Is(a.failed, ErrClosed) {
		a.s.log.Warn("herald: connection failed", slog.Any("err", a.failed))
	}
	for id, req := range a.pending {
		req.reply <- controlResponse{err: a.failed}
		delete(a.pending, id)
	}
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
		root.Send(self, &goAwayPublishersDrained{})
		select {
		case <-timer.C:
			s.fail(err)
		case <-s.ctx.Done():
		}
	})
}

// onGoAwayPublishersDrained notes that every publish stream has its
// answers after GoAway, and closes the connection if nothing else waits.
func (a *connectionActor) onGoAwayPublishersDrained() {
	a.goAwayDrained = true
	a.closeIfDrained()
}

func (a *connectionActor) onStopping() {
	a.fail(ErrClosed)
	a.ctl.CancelRead(0)
	_ = a.ctl.Close()
}

// onRestarting is not expected (the guardian stops on panic): it fails
// rather than go on with state a panic may have broken.
func (a *connectionActor) onRestarting() {
	a.fail(wire.Errorf(wire.CodeInternal, "connection actor restarted"))
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
		m.finishUnsent(a.s, a.failed)
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
