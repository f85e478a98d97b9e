package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// ConnectionConfig configures a connection actor.
type ConnectionConfig struct {
	// Catalog finds streams.
	Catalog *actor.PID
	// NodeID goes into Welcome.
	NodeID string
	// AutoCreate creates a missing stream on its first publish.
	AutoCreate bool
	// MaxFrameBytes bounds a frame body the node accepts.
	MaxFrameBytes uint32
	// PublishWindow bounds unanswered acked publishes per publish stream.
	PublishWindow int
	// QueueCapacity is a subscription's default capacity in batches;
	// QueueCapacityMax clamps what a subscriber asks for.
	QueueCapacity, QueueCapacityMax int
	// QueueMaxBytes bounds a subscription's records bytes in flight (0: none).
	QueueMaxBytes int64
	// HandshakeTimeout bounds the wait for the control stream and Hello.
	HandshakeTimeout time.Duration
	// RequestTimeout bounds the node's internal requests (default 10 s).
	RequestTimeout time.Duration
	// Stats is the node's, for metrics (may be nil).
	Stats *Stats
	// QueueTotal is the node-wide budget of subscriber queue and egress
	// bytes (nil: none).
	QueueTotal *Budget
	// EgressMaxBytes bounds the records bytes the connection's subscriptions
	// have handed to their lanes and not yet written, split equally among
	// them (subscriber_egress_max_bytes; 0: no bound).
	EgressMaxBytes int64
	// LaneBlock selects subscriber_lane_queue_policy block: the egress bound
	// is one pool shared by the connection's subscriptions, so one whose
	// stream stalls can stop them all (instead of equal shares).
	LaneBlock bool
	// EventBatchMaxEvents and EventBatchMaxBytes bound one EventBatch frame;
	// EventBatchMaxDelay is how long, under load, a frame waits to fill.
	EventBatchMaxEvents, EventBatchMaxBytes int
	EventBatchMaxDelay                      time.Duration
	// Tracer traces publishes that carry trace context (nil: none).
	Tracer *Tracer
	// Auth authenticates the Hello (nil: dev mode, every connection acts
	// as DevPrincipal).
	Auth *Authenticator
	// MaxConnections bounds the authenticated connections (0: none):
	// Authenticated counts them, node-wide. The listener also refuses a
	// connection when MaxConnections more are still in their handshake.
	MaxConnections int
	Authenticated  *atomic.Int64
	// MaxSubscriptions bounds a connection's subscriptions and group push
	// members together (0: none).
	MaxSubscriptions int
	// Groups is the groups registry (nil: consumer groups are refused).
	Groups *actor.PID
	// GroupMaxPoll bounds a poll's max (the coordinator checks it too).
	GroupMaxPoll int
	// ReadMaxRecords and ReadMaxBytes cap one range-read page (defaults
	// 1000 records, 1 MiB).
	ReadMaxRecords int
	ReadMaxBytes   int
	// SubscriptionProps, if set, wraps subscription props (tests add
	// middleware).
	SubscriptionProps func(*actor.Props) *actor.Props
	// ConnectionProps, if set, wraps connection props (tests add
	// middleware).
	ConnectionProps func(*actor.Props) *actor.Props
	// Goroutines starts the connection's goroutines and those of its
	// subscriptions; the node waits for them at Close (nil: untracked).
	Goroutines *Goroutines
	// Relay relays the group requests of cluster streams whose groups
	// another node coordinates (connection_relay.go; nil on a single
	// node).
	Relay *GroupRelay
	// ClusterNodes answers a ClusterNodes request: the cluster's nodes and
	// the client addresses they advertise (nil on a single node).
	ClusterNodes func() []wire.ClusterNode
	// relayAccept is set, by the listener, on a connection that arrived
	// as another node's relay (ConnectionAccepted.Relay).
	relayAccept *RelayAccept
}

// connection is the actor of one QUIC connection. Its children own the send
// sides: a writer lane per stream the node answers on, a subscription per
// Subscribe, a push member per GroupSubscribe. A child that fails is
// stopped, closing only its own stream. The receive sides are served by its
// connSession's goroutines (connection_session.go), which turn frames into
// messages; a malformed frame closes the connection with the frame's error
// code.
//
// Every field is owned by the actor and touched only in Receive. The
// session is shared as its contract says: the actor sets its draining flag,
// reads welcomed, cancels its context and gives back its place.
type connection struct {
	cfg  ConnectionConfig
	conn *quic.Conn
	// session serves the connection's streams; set in Started.
	session *connSession
	// control is the control stream's lane once the handshake is done.
	control *actor.PID
	// laneStreams maps a publish lane to its stream's cancel func.
	laneStreams map[string]context.CancelFunc
	// subs are the connection's subscriptions; they share its egress bound.
	subs map[string]*actor.PID
	// members are the connection's group push members.
	members map[string]*actor.PID
	// pool is the shared egress pool under lane policy block (nil
	// otherwise); waiting are the subscriptions waiting for room in it.
	pool *Budget
	// share is the equal share of the egress bound every subscription
	// reads (nil under policy block, or without a bound).
	share   *atomic.Int64
	waiting map[string]*actor.PID
	// logger is the actor's, with the remote address (see log).
	logger *slog.Logger
	// closing is set once the connection is going away.
	closing bool
}

// NewConnectionProps returns the props of a connection actor for conn. A
// failing child (subscription or lane) is stopped, never restarted: its
// stream is gone with it.
func NewConnectionProps(conn *quic.Conn, cfg ConnectionConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Authenticated == nil {
		cfg.Authenticated = &atomic.Int64{}
	}
	if cfg.ReadMaxRecords <= 0 {
		cfg.ReadMaxRecords = 1000
	}
	if cfg.ReadMaxBytes <= 0 {
		cfg.ReadMaxBytes = 1 << 20
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &connection{cfg: cfg, conn: conn,
			laneStreams: map[string]context.CancelFunc{}, subs: map[string]*actor.PID{}, members: map[string]*actor.PID{}}
	}, actor.WithDispatcher(cfg.Goroutines.Dispatcher()), actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
		return actor.StopDirective
	})))
}

// Receive dispatches.
func (c *connection) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.onStarted(ctx)
	case *openLane:
		c.onOpenLane(ctx, m)
	case *openSubscription:
		c.onOpenSubscription(ctx, m)
	case *openGroupMember:
		c.onOpenGroupMember(ctx, m)
	case *Drain:
		c.onDrain(ctx)
	case *LanesRequest:
		c.onLanesRequest(ctx)
	case *LaneFailed:
		c.onLaneFailed(ctx, m)
	case *egressWaiting:
		c.onEgressWaiting(ctx, m)
	case *egressFreed:
		c.onEgressFreed(ctx)
	case *connectionDone:
		c.onConnectionDone(ctx, m)
	case *actor.Terminated:
		c.onChildTerminated(ctx, m)
	case *actor.Stopping:
		c.onStopping()
	case *actor.Stopped:
		c.onStopped()
	case *actor.Restarting:
		// Never: the listener stops a failed connection.
	default:
		c.log(ctx).Warn("connection: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (c *connection) log(ctx actor.Context) *slog.Logger {
	if c.logger == nil {
		c.logger = ctx.Logger().With(slog.String("remote", c.conn.RemoteAddr().String()))
	}
	return c.logger
}

// onStarted starts the session's handshake goroutine, which serves the
// connection until it ends and then tells the actor (connectionDone).
func (c *connection) onStarted(ctx actor.Context) {
	if c.cfg.LaneBlock {
		c.pool = NewBudget(c.cfg.EgressMaxBytes)
	}
	c.waiting = map[string]*actor.PID{}
	c.cfg.Stats.gauge(&c.cfg.Stats.Connections, 1)
	c.session = newConnSession(c.conn, c.cfg, ctx.ActorSystem().Root, ctx.Self(), c.log(ctx))
	if !c.cfg.Goroutines.Go(c.session.run) {
		// The node is closing: nothing would serve the connection.
		c.closing = true
		_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeShuttingDown), "node shutting down")
		ctx.Stop(ctx.Self())
	}
}

func (c *connection) onOpenLane(ctx actor.Context, m *openLane) {
	if c.closing {
		close(m.reply)
		return
	}
	pid := ctx.Spawn(NewLaneProps(LaneConfig{W: m.stream, Window: m.window, Meter: m.meter, Dispatcher: c.cfg.Goroutines.Dispatcher()}))
	if m.cancel != nil {
		c.laneStreams[pid.Id] = m.cancel
	} else {
		c.control = pid
	}
	m.reply <- pid
}

// subscriptionLimit refuses one more subscription or push member when the
// connection has max_subscriptions_per_connection of them.
func (c *connection) subscriptionLimit() *wire.Error {
	if max := c.cfg.MaxSubscriptions; max > 0 && len(c.subs)+len(c.members) >= max {
		c.cfg.Stats.Limits.Subscriptions.Add(1)
		return wire.Errorf(wire.CodeOverloaded, "the connection has its maximum of %d subscriptions and group members (max_subscriptions_per_connection)", max)
	}
	return nil
}

func (c *connection) onOpenSubscription(ctx actor.Context, m *openSubscription) {
	if c.closing {
		m.stream.CancelRead(quic.StreamErrorCode(wire.CodeShuttingDown))
		m.stream.CancelWrite(quic.StreamErrorCode(wire.CodeShuttingDown))
		return
	}
	if werr := c.subscriptionLimit(); werr != nil {
		// Answered from here, off the stream's reader: the write is to a
		// fresh stream with room, so it does not block.
		refuseStream(m.stream, m.reqID, werr)
		return
	}
	props := NewSubscriptionProps(SubscriptionConfig{
		Catalog:         c.cfg.Catalog,
		Request:         m.req,
		ReqID:           m.reqID,
		Stream:          quicSubStream{m.stream},
		Capacity:        int(min(m.req.QueueCapacity, 1<<30)),
		DefaultCapacity: c.cfg.QueueCapacity,
		CapacityMax:     c.cfg.QueueCapacityMax,
		MaxBytes:        c.cfg.QueueMaxBytes,
		EgressPool:      c.pool,
		EgressShare:     c.egressShareFor(len(c.subs) + 1),
		Stats:           c.cfg.Stats,
		QueueTotal:      c.cfg.QueueTotal,
		Lane:            LaneConfig{MaxEvents: c.cfg.EventBatchMaxEvents, MaxBytes: c.cfg.EventBatchMaxBytes, MaxDelay: c.cfg.EventBatchMaxDelay},
		Goroutines:      c.cfg.Goroutines,
		Client:          c.conn.RemoteAddr().String(),
		Principal:       m.principal,
	})
	if c.cfg.SubscriptionProps != nil {
		props = c.cfg.SubscriptionProps(props)
	}
	pid := ctx.Spawn(props)
	c.subs[pid.Id] = pid
}

func (c *connection) onOpenGroupMember(ctx actor.Context, m *openGroupMember) {
	if c.closing {
		close(m.reply)
		return
	}
	if werr := c.subscriptionLimit(); werr != nil {
		m.refused <- werr
		return
	}
	pid := ctx.Spawn(NewGroupMemberProps(m.cfg))
	c.members[pid.Id] = pid
	m.reply <- pid
}

// egressShareFor sets the share for n subscriptions and returns it: the
// value every subscription of the connection reads (nil under lane policy
// block, where they share one pool, or without an egress bound).
func (c *connection) egressShareFor(n int) *atomic.Int64 {
	if c.cfg.EgressMaxBytes <= 0 || c.pool != nil {
		return nil
	}
	if c.share == nil {
		c.share = new(atomic.Int64)
	}
	c.shareEgress(n)
	return c.share
}

// shareEgress splits the egress bound equally among n subscriptions
// (under lane policy block they share one pool instead): each reads the
// share at its next drain. A subscription is counted before it is spawned,
// so no drain of it ever sees a share not counting it.
func (c *connection) shareEgress(n int) {
	if c.share == nil || n == 0 {
		return
	}
	c.share.Store(max(c.cfg.EgressMaxBytes/int64(n), 1))
}

// onEgressWaiting parks a subscription until the shared pool has room. The
// pool may have been freed between the subscription's try and this message
// (frees are atomic, their notices come later): poke at once if there is
// room, else wait for the next free.
func (c *connection) onEgressWaiting(ctx actor.Context, m *egressWaiting) {
	if s := ctx.Sender(); s != nil {
		if c.pool != nil && (c.pool.Used() == 0 || c.pool.fits(m.Size)) {
			ctx.Send(s, &egressAvailable{})
		} else {
			c.waiting[s.Id] = s
		}
	}
}

// onEgressFreed tells every waiting subscription that the pool has room.
func (c *connection) onEgressFreed(ctx actor.Context) {
	for id, pid := range c.waiting {
		ctx.Send(pid, &egressAvailable{})
		delete(c.waiting, id)
	}
}

func (c *connection) onDrain(ctx actor.Context) {
	if c.session.draining.Swap(true) {
		return
	}
	// Before Welcome is sent the handshake sends GoAway itself, after it
	// (the client expects Welcome first).
	if c.session.welcomed.Load() && c.control != nil {
		ctx.Send(c.control, &WriteFrame{Frame: wire.AppendGoAway(nil, "node shutting down")})
	}
}

func (c *connection) onLanesRequest(ctx actor.Context) {
	lanes := make([]*actor.PID, 0, len(c.laneStreams)+1)
	if c.control != nil {
		lanes = append(lanes, c.control)
	}
	for _, pid := range ctx.Children() {
		if _, ok := c.laneStreams[pid.Id]; ok {
			lanes = append(lanes, pid)
		}
	}
	ctx.Respond(&LanesResponse{Lanes: lanes})
}

// onLaneFailed handles a lane whose stream write failed: a publish stream is
// cancelled (its reader ends), the control stream's failure closes the
// connection.
func (c *connection) onLaneFailed(ctx actor.Context, m *LaneFailed) {
	lane := m.Lane
	if lane == nil {
		return
	}
	if c.control != nil && lane.Id == c.control.Id {
		if !c.closing {
			c.closing = true
			_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeInternal), "control stream write failed")
		}
		return
	}
	ctx.Stop(lane)
}

// onConnectionDone stops the actor once the session's handshake goroutine
// has ended: the connection is over.
func (c *connection) onConnectionDone(ctx actor.Context, m *connectionDone) {
	var idle *quic.IdleTimeoutError
	if errors.As(m.err, &idle) {
		c.cfg.Stats.Limits.Idle.Add(1)
	}
	c.closing = true
	ctx.Stop(ctx.Self())
}

func (c *connection) onChildTerminated(ctx actor.Context, m *actor.Terminated) {
	if _, ok := c.members[m.Who.Id]; ok {
		delete(c.members, m.Who.Id)
		return
	}
	if _, ok := c.subs[m.Who.Id]; ok {
		delete(c.subs, m.Who.Id)
		delete(c.waiting, m.Who.Id)
		// Its lane's bytes went back to the pool when it stopped.
		c.onEgressFreed(ctx)
		c.shareEgress(len(c.subs))
		return
	}
	if cancel, ok := c.laneStreams[m.Who.Id]; ok {
		delete(c.laneStreams, m.Who.Id)
		cancel()
		return
	}
	if c.control != nil && m.Who.Id == c.control.Id && !c.closing {
		// Without its control lane the connection cannot answer: close it.
		c.closing = true
		_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeInternal), "control stream writer failed")
	}
}

// onStopping ends the session: its context is cancelled and the QUIC
// connection closed, which ends every one of its goroutines. The actor does
// not wait for them; the node does, in Close (Goroutines).
func (c *connection) onStopping() {
	c.closing = true
	c.session.cancel()
	if c.session.draining.Load() {
		_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeShuttingDown), "node shutting down")
	} else {
		_ = c.conn.CloseWithError(0, "connection closed")
	}
}

func (c *connection) onStopped() {
	c.cfg.Stats.gauge(&c.cfg.Stats.Connections, -1)
	c.session.releasePlace()
}
