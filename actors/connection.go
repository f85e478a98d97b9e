package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"os"
	"sync"
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
}

// connection serves one QUIC connection. Its goroutines own the receive
// sides (the control stream, each publish stream) and turn frames into
// messages; its children own the send sides: a writer lane per stream it
// answers on, and a subscription per Subscribe. A child that fails is
// stopped, closing only its own stream; a malformed frame closes the
// connection with the frame's error code.
type connection struct {
	cfg  ConnectionConfig
	conn *quic.Conn
	// ctx is cancelled when the actor stops; goroutines select on it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg tracks the goroutines the connection owns.
	wg *sync.WaitGroup
	// draining is read by the goroutines.
	draining *atomic.Bool
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
	pool    *Budget
	waiting map[string]*actor.PID
	logger  *slog.Logger
	// closing is set once the connection is going away.
	closing bool
	// principal is who the connection acts for, set by the handshake
	// before any request is served and never changed after.
	principal Principal
	// welcomed is set once Welcome is on its way: GoAway may follow it.
	welcomed atomic.Bool
	// counted is set once the connection holds a place among
	// MaxConnections (given back when it stops).
	counted atomic.Bool
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
		return &connection{cfg: cfg, conn: conn, wg: &sync.WaitGroup{}, draining: &atomic.Bool{},
			laneStreams: map[string]context.CancelFunc{}, subs: map[string]*actor.PID{}, members: map[string]*actor.PID{}}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
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
	case *Drain:
		c.onDrain(ctx)
	case *LanesRequest:
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
	case *LaneFailed:
		c.onLaneFailed(ctx, m.Lane)
	case *egressWaiting:
		// The pool may have been freed between the subscription's try and
		// this message (frees are atomic, their notices come later): poke at
		// once if there is room, else wait for the next free.
		if s := ctx.Sender(); s != nil {
			if c.pool != nil && (c.pool.Used() == 0 || c.pool.fits(m.Size)) {
				ctx.Send(s, &egressAvailable{})
			} else {
				c.waiting[s.Id] = s
			}
		}
	case *egressFreed:
		for id, pid := range c.waiting {
			ctx.Send(pid, &egressAvailable{})
			delete(c.waiting, id)
		}
	case *connectionDone:
		var idle *quic.IdleTimeoutError
		if errors.As(m.err, &idle) {
			c.cfg.Stats.Limits.Idle.Add(1)
		}
		c.closing = true
		ctx.Stop(ctx.Self())
	case *actor.Terminated:
		c.onChildTerminated(ctx, m)
	case *actor.Stopping:
		c.closing = true
		c.cancel()
		if c.draining.Load() {
			_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeShuttingDown), "node shutting down")
		} else {
			_ = c.conn.CloseWithError(0, "connection closed")
		}
	case *actor.Stopped:
		c.cfg.Stats.gauge(&c.cfg.Stats.Connections, -1)
		c.wg.Wait()
		if c.counted.Load() {
			c.cfg.Authenticated.Add(-1)
		}
	case *actor.Restarting:
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

func (c *connection) onStarted(ctx actor.Context) {
	if c.cfg.LaneBlock {
		c.pool = NewBudget(c.cfg.EgressMaxBytes)
	}
	c.waiting = map[string]*actor.PID{}
	c.cfg.Stats.gauge(&c.cfg.Stats.Connections, 1)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	self, root := ctx.Self(), ctx.ActorSystem().Root
	c.log(ctx) // fix the logger before goroutines start
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := c.serve(root, self)
		root.Send(self, &connectionDone{err: err})
	}()
}

func (c *connection) onOpenLane(ctx actor.Context, m *openLane) {
	if c.closing {
		close(m.reply)
		return
	}
	pid := ctx.Spawn(NewLaneProps(LaneConfig{W: m.stream, Window: m.window, Meter: m.meter}))
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
		_, _ = m.stream.Write(wire.AppendError(nil, m.reqID, werr))
		_ = m.stream.Close()
		m.stream.CancelRead(quic.StreamErrorCode(werr.Code))
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
		Stats:           c.cfg.Stats,
		QueueTotal:      c.cfg.QueueTotal,
		Lane:            LaneConfig{MaxEvents: c.cfg.EventBatchMaxEvents, MaxBytes: c.cfg.EventBatchMaxBytes, MaxDelay: c.cfg.EventBatchMaxDelay},
	})
	if c.cfg.SubscriptionProps != nil {
		props = c.cfg.SubscriptionProps(props)
	}
	pid := ctx.Spawn(props)
	c.subs[pid.Id] = pid
	c.shareEgress(ctx)
}

// shareEgress splits the egress bound equally among the subscriptions
// (under lane policy block they share one pool instead).
func (c *connection) shareEgress(ctx actor.Context) {
	if c.cfg.EgressMaxBytes <= 0 || len(c.subs) == 0 || c.pool != nil {
		return
	}
	share := &EgressShare{Bytes: max(c.cfg.EgressMaxBytes/int64(len(c.subs)), 1)}
	for _, pid := range c.subs {
		ctx.Send(pid, share)
	}
}

func (c *connection) onDrain(ctx actor.Context) {
	if c.draining.Swap(true) {
		return
	}
	// Before Welcome is sent the handshake sends GoAway itself, after it
	// (the client expects Welcome first).
	if c.welcomed.Load() && c.control != nil {
		ctx.Send(c.control, &WriteFrame{Frame: wire.AppendGoAway(nil, "node shutting down")})
	}
}

// onLaneFailed handles a lane whose stream write failed: a publish stream is
// cancelled (its reader ends), the control stream's failure closes the
// connection.
func (c *connection) onLaneFailed(ctx actor.Context, lane *actor.PID) {
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

func (c *connection) onChildTerminated(ctx actor.Context, m *actor.Terminated) {
	if _, ok := c.members[m.Who.Id]; ok {
		delete(c.members, m.Who.Id)
		return
	}
	if _, ok := c.subs[m.Who.Id]; ok {
		delete(c.subs, m.Who.Id)
		delete(c.waiting, m.Who.Id)
		// Its lane's bytes went back to the pool when it stopped.
		for id, pid := range c.waiting {
			ctx.Send(pid, &egressAvailable{})
			delete(c.waiting, id)
		}
		c.shareEgress(ctx)
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

// quicSubStream adapts a QUIC stream to SubscriberStream.
type quicSubStream struct{ *quic.Stream }

func (s quicSubStream) Abort(code wire.Code) {
	s.CancelRead(quic.StreamErrorCode(code))
	s.CancelWrite(quic.StreamErrorCode(code))
}

func (s quicSubStream) StopReading(code wire.Code) { s.CancelRead(quic.StreamErrorCode(code)) }

// allow checks the connection's principal for perm on name, counting
// refusals.
func (c *connection) allow(perm Permission, name wire.StreamName) *wire.Error {
	werr := c.principal.Allow(perm, name)
	if werr != nil {
		c.cfg.Stats.AuthDenied.Add(1)
	}
	return werr
}

// closeWith closes the connection with a protocol error: its code becomes
// the QUIC application error code, so the client learns what was wrong.
func (c *connection) closeWith(err error) error {
	var werr *wire.Error
	if !errors.As(err, &werr) {
		werr = &wire.Error{Code: wire.CodeMalformedFrame, Message: err.Error()}
	}
	if werr.Code == wire.CodeFrameTooLarge {
		c.cfg.Stats.Limits.FrameBytes.Add(1)
	}
	_ = c.conn.CloseWithError(quic.ApplicationErrorCode(werr.Code), werr.Message)
	return werr
}

// serve runs the handshake and the control stream, and accepts the other
// streams. It returns when the connection ends.
func (c *connection) serve(root *actor.RootContext, self *actor.PID) error {
	hctx, cancel := context.WithTimeout(c.ctx, c.cfg.HandshakeTimeout)
	control, err := c.conn.AcceptStream(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			c.cfg.Stats.Limits.Handshake.Add(1)
		}
		_ = c.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeProtocolViolation), "no control stream")
		return err
	}
	_ = control.SetReadDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	f, err := wire.ReadFrame(control, c.cfg.MaxFrameBytes)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.cfg.Stats.Limits.Handshake.Add(1)
			return c.closeWith(wire.Errorf(wire.CodeProtocolViolation, "no hello within the handshake timeout of %s", c.cfg.HandshakeTimeout))
		}
		return c.closeWith(err)
	}
	if f.Header.Type != wire.TypeHello {
		return c.closeWith(wire.Errorf(wire.CodeProtocolViolation, "first frame must be hello, got %s", f.Header.Type))
	}
	hello, err := wire.DecodeHello(f.Body)
	if err != nil {
		return c.closeWith(err)
	}
	_ = control.SetReadDeadline(time.Time{})
	answers := NewAnswerMeter(answerBacklogBytes)
	lane := c.openLane(root, self, control, nil, nil, answers)
	if lane == nil {
		return c.ctx.Err()
	}
	// refuse answers the Hello with werr and closes the connection:
	// answered here, before the close, or the lane would lose the race.
	refuse := func(werr *wire.Error) error {
		root.Send(lane, &CloseLane{ReqID: f.Header.RequestID, Err: werr})
		_, _ = root.RequestFuture(lane, &LaneSyncRequest{}, c.cfg.HandshakeTimeout).Result()
		return c.closeWith(werr)
	}
	if hello.Version != wire.Version {
		return refuse(&wire.Error{Code: wire.CodeUnsupportedVersion,
			Message: fmt.Sprintf("node speaks version %d", wire.Version), Detail: uint64(wire.Version)})
	}
	// Every frame the node sends is within its own limit: a client that
	// accepts less could be sent a record it cannot receive, and would fail
	// on it again each time it came back for it. Refuse it now, plainly.
	if accepts := cmp.Or(hello.MaxFrameBytes, wire.DefaultMaxFrameBytes); accepts < c.cfg.MaxFrameBytes {
		return refuse(&wire.Error{Code: wire.CodeFrameTooLarge, Detail: uint64(c.cfg.MaxFrameBytes), Message: fmt.Sprintf(
			"the client accepts frames up to %d bytes and this node sends up to %d (max_frame_bytes): raise the client's limit", accepts, c.cfg.MaxFrameBytes)})
	}
	principal, werr := c.cfg.Auth.Authenticate(hello.Token, c.conn.ConnectionState().TLS.PeerCertificates)
	if werr != nil {
		c.cfg.Stats.AuthFailures.Add(1)
		// The token is never logged, only that it was refused and why.
		c.logger.Warn("connection refused: authentication failed",
			slog.String("client", hello.ClientName), slog.String("reason", werr.Message))
		return refuse(werr)
	}
	c.principal = principal
	// Only a connection that authenticated takes one of max_connections:
	// ones still in their handshake cannot crowd out real clients.
	if max := c.cfg.MaxConnections; max > 0 {
		if c.cfg.Authenticated.Add(1) > int64(max) {
			c.cfg.Authenticated.Add(-1)
			c.cfg.Stats.Limits.Connections.Add(1)
			return refuse(wire.Errorf(wire.CodeOverloaded, "the node has its maximum of %d connections (max_connections)", max))
		}
		c.counted.Store(true)
	}
	root.Send(lane, &WriteFrame{Frame: wire.AppendWelcome(nil, f.Header.RequestID, wire.Welcome{
		Version: wire.Version, Features: wire.Features & hello.Features, MaxFrameBytes: c.cfg.MaxFrameBytes,
		PublishWindow: uint32(c.cfg.PublishWindow), NodeID: c.cfg.NodeID})})
	// A drain that began during the handshake did not send GoAway (see
	// onDrain): send it now, so this client finishes too. Both may send it
	// in a race; the client takes the first.
	c.welcomed.Store(true)
	if c.draining.Load() {
		root.Send(lane, &WriteFrame{Frame: wire.AppendGoAway(nil, "node shutting down")})
	}

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.acceptStreams(root, self)
	}()
	return c.controlLoop(root, lane, control, answers)
}

// openLane asks the actor for a lane on stream and waits for it.
func (c *connection) openLane(root *actor.RootContext, self *actor.PID, s *quic.Stream, window chan struct{}, cancel context.CancelFunc, meter *AnswerMeter) *actor.PID {
	reply := make(chan *actor.PID, 1)
	root.Send(self, &openLane{stream: s, window: window, cancel: cancel, meter: meter, reply: reply})
	select {
	case pid, ok := <-reply:
		if !ok {
			return nil
		}
		return pid
	case <-c.ctx.Done():
		return nil
	}
}

// controlLoop reads and serves the control stream's requests. It reads the
// next only while answers is within its limit: a client that does not read
// its answers is not read either.
func (c *connection) controlLoop(root *actor.RootContext, lane *actor.PID, control *quic.Stream, answers *AnswerMeter) error {
	for {
		if err := answers.Wait(c.ctx); err != nil {
			return err
		}
		f, err := wire.ReadFrame(control, c.cfg.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, io.EOF) || c.ctx.Err() != nil {
				return err
			}
			var werr *wire.Error
			if errors.As(err, &werr) {
				return c.closeWith(err)
			}
			return err
		}
		resp, err := c.controlRequest(root, lane, answers, f)
		if err != nil {
			werr := wire.RequestError(err)
			if werr == nil {
				return c.closeWith(err)
			}
			// A well-framed request with a value the node does not
			// accept fails alone.
			resp = wire.AppendError(nil, f.Header.RequestID, werr)
		}
		if resp != nil { // nil: a group coordinator answers on the lane itself
			root.Send(lane, &WriteFrame{Frame: resp})
		}
	}
}

// controlRequest answers one control frame. A frame that cannot be decoded
// returns its error: a framing error closes the connection, a request error
// is answered with an Error frame, as is a request the node refuses.
func (c *connection) controlRequest(root *actor.RootContext, lane *actor.PID, answers *AnswerMeter, f wire.Frame) ([]byte, error) {
	id := f.Header.RequestID
	switch f.Header.Type {
	case wire.TypeGroupPoll, wire.TypeGroupAck, wire.TypeGroupNack, wire.TypeGroupDeadLetters,
		wire.TypeGroupRedrive, wire.TypeGroupDiscard, wire.TypeDescribeGroup:
		return c.groupRequest(root, lane, answers, f)
	case wire.TypeCreateStream:
		req, err := wire.DecodeCreateStream(f.Body)
		if err != nil {
			return nil, err
		}
		if werr := c.allow(PermManage, req.Name); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		if c.draining.Load() {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeShuttingDown, "node is draining")), nil
		}
		h, werr := c.lookup(root, &CreateStreamRequest{Name: req.Name, Config: req.Config})
		if werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		return wire.AppendStreamInfo(nil, id, c.info(root, h)), nil
	case wire.TypeDescribeStream:
		name, err := wire.DecodeDescribeStream(f.Body)
		if err != nil {
			return nil, err
		}
		// Publishers and subscribers describe the streams they use, so any
		// permission on the stream allows it.
		if werr := c.allow(PermAll, name); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		h, werr := c.lookup(root, &LookupStreamRequest{Name: name})
		if werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		return wire.AppendStreamInfo(nil, id, c.info(root, h)), nil
	case wire.TypeListStreams:
		req, err := wire.DecodeListStreams(f.Body)
		if err != nil {
			return nil, err
		}
		tenant, werr := c.principal.AllowList(req.Tenant, req.Namespace)
		if werr != nil {
			c.cfg.Stats.AuthDenied.Add(1)
			return wire.AppendError(nil, id, werr), nil
		}
		res, err := root.RequestFuture(c.cfg.Catalog, &ListStreamsRequest{Tenant: tenant, Namespace: req.Namespace}, c.cfg.RequestTimeout).Result()
		if err != nil {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "catalog: %v", err)), nil
		}
		list, _ := res.(*ListStreamsResponse)
		var infos []wire.StreamInfo
		if list != nil {
			for _, h := range list.Streams {
				if c.principal.Sees(h.Name) {
					infos = append(infos, c.info(root, h))
				}
			}
		}
		return wire.AppendStreamList(nil, id, infos), nil
	case wire.TypeDeleteStream:
		name, err := wire.DecodeDeleteStream(f.Body)
		if err != nil {
			return nil, err
		}
		if werr := c.allow(PermManage, name); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		if c.draining.Load() {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeShuttingDown, "node is draining")), nil
		}
		res, err := root.RequestFuture(c.cfg.Catalog, &DeleteStreamRequest{Name: name}, c.cfg.RequestTimeout).Result()
		if err != nil {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "catalog: %v", err)), nil
		}
		if r, ok := res.(*DeleteStreamResponse); ok && r.Err != nil {
			return wire.AppendError(nil, id, r.Err), nil
		}
		return wire.AppendOK(nil, id), nil
	case wire.TypeRead:
		req, err := wire.DecodeRead(f.Body)
		if err != nil {
			return nil, err
		}
		return c.read(root, id, req), nil
	default:
		return nil, wire.Errorf(wire.CodeProtocolViolation, "%s frame on the control stream", f.Header.Type)
	}
}

// readResultHead is a ReadResult body's size before its sections.
const readResultHead = 8 + 8 + 8 + 2

// read answers a range read: one page of committed records, from storage,
// never waiting and registering nothing with the shard.
func (c *connection) read(root *actor.RootContext, id uint64, req wire.Read) []byte {
	if werr := c.allow(PermSubscribe, req.Name); werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	h, werr := c.lookup(root, &LookupStreamRequest{Name: req.Name})
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	if req.Shard >= uint32(len(h.Shards)) {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeInvalidShard, "stream %s has %d shards", h.Name, len(h.Shards)))
	}
	res, err := root.RequestFuture(h.Shards[req.Shard], &ShardInfoRequest{}, c.cfg.RequestTimeout).Result()
	if err != nil {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "shard: %v", err))
	}
	info := res.(*ShardInfoResponse)
	switch {
	case req.Start > info.Tail:
		return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: info.Tail,
			Message: fmt.Sprintf("offset %d is past the shard's tail %d", req.Start, info.Tail)})
	case req.Start < info.First:
		return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: info.First,
			Message: fmt.Sprintf("offset %d is below the first retained offset %d", req.Start, info.First)})
	}
	maxRecords := uint64(c.cfg.ReadMaxRecords)
	if req.MaxRecords > 0 {
		maxRecords = min(maxRecords, uint64(req.MaxRecords))
	}
	maxBytes := c.cfg.ReadMaxBytes
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(req.MaxBytes))
	}
	end := min(req.End, info.Tail, req.Start+maxRecords)
	if end <= req.Start {
		return wire.AppendReadResult(nil, id, req.Start, info.First, info.Tail, nil)
	}
	batches, err := h.Log.Read(h.ShardKey(req.Shard), req.Start, int(end-req.Start), maxBytes)
	if err != nil {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeStorageFailure, "reading shard %d: %v", req.Shard, err))
	}
	next := req.Start
	var secs []*wire.Section
	size := readResultHead
	for _, b := range batches {
		if b.Base >= end || len(secs) == wire.MaxSectionsPerFrame {
			break
		}
		if size += wire.SectionHeaderSize + len(b.Records); len(secs) > 0 && size > int(c.cfg.MaxFrameBytes) {
			break // the page ends where the frame would
		}
		if h.Config.Durable && b.Base > next {
			// Retention deleted the page's start while we read.
			return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: b.Base,
				Message: fmt.Sprintf("offset %d was deleted by retention; the first retained offset is %d", next, b.Base)})
		}
		secs = append(secs, wire.NewSection(req.Shard, b.Base, b.Timestamp, b.Count, b.Records))
		next = min(b.End(), end)
	}
	return wire.AppendReadResult(nil, id, next, info.First, info.Tail, secs)
}

// lookup asks the catalog and waits (from a goroutine, never an actor).
func (c *connection) lookup(root *actor.RootContext, req any) (*StreamHandle, *wire.Error) {
	res, err := root.RequestFuture(c.cfg.Catalog, req, c.cfg.RequestTimeout).Result()
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "catalog: %v", err)
	}
	r, ok := res.(*LookupStreamResponse)
	if !ok {
		return nil, wire.Errorf(wire.CodeInternal, "catalog answered %T", res)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Stream, nil
}

// info describes a stream with each shard's committed tail.
func (c *connection) info(root *actor.RootContext, h *StreamHandle) wire.StreamInfo {
	info := wire.StreamInfo{Name: h.Name, Config: h.Config, CreatedUnixNano: h.CreatedUnixNano, Tails: make([]uint64, len(h.Shards))}
	futures := make([]*actor.Future, len(h.Shards))
	for i, pid := range h.Shards {
		futures[i] = root.RequestFuture(pid, &ShardInfoRequest{}, c.cfg.RequestTimeout)
	}
	for i, f := range futures {
		if res, err := f.Result(); err == nil {
			if r, ok := res.(*ShardInfoResponse); ok {
				info.Tails[i] = r.Tail
			}
		}
	}
	return info
}

func (c *connection) acceptStreams(root *actor.RootContext, self *actor.PID) {
	for {
		s, err := c.conn.AcceptStream(c.ctx)
		if err != nil {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := c.serveStream(root, self, s); err != nil {
				_ = c.closeWith(err)
			}
		}()
	}
}

// serveStream reads a data stream's first frame: a Publish makes it a
// publish stream, a Subscribe a subscription stream.
func (c *connection) serveStream(root *actor.RootContext, self *actor.PID, s *quic.Stream) error {
	// A stream that never says what it is for holds a goroutine: bound it.
	_ = s.SetReadDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	f, err := wire.ReadFrame(s, c.cfg.MaxFrameBytes)
	_ = s.SetReadDeadline(time.Time{})
	if err != nil {
		var werr *wire.Error
		if errors.As(err, &werr) {
			return err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.cfg.Stats.Limits.Handshake.Add(1)
		}
		s.CancelRead(quic.StreamErrorCode(wire.CodeProtocolViolation))
		s.CancelWrite(quic.StreamErrorCode(wire.CodeProtocolViolation))
		return nil // the stream ended or idled before a whole frame: nothing to answer
	}
	switch f.Header.Type {
	case wire.TypeSubscribe:
		refuse := func(werr *wire.Error) error {
			_, _ = s.Write(wire.AppendError(nil, f.Header.RequestID, werr))
			_ = s.Close()
			s.CancelRead(quic.StreamErrorCode(werr.Code))
			return nil
		}
		req, err := wire.DecodeSubscribe(f.Body)
		if err != nil {
			if werr := wire.RequestError(err); werr != nil {
				return refuse(werr)
			}
			return err
		}
		if werr := c.allow(PermSubscribe, req.Name); werr != nil {
			return refuse(werr)
		}
		if c.draining.Load() {
			return refuse(wire.Errorf(wire.CodeShuttingDown, "node is draining"))
		}
		root.Send(self, &openSubscription{stream: s, reqID: f.Header.RequestID, req: req})
		return nil
	case wire.TypePublish:
		return c.publishLoop(root, self, s, f)
	case wire.TypeGroupSubscribe:
		return c.groupStream(root, self, s, f)
	default:
		return wire.Errorf(wire.CodeProtocolViolation, "a stream cannot start with a %s frame", f.Header.Type)
	}
}

// publishLoop serves one publish stream: each Publish is validated, routed
// to its shard and answered by the stream's lane. Acked publishes hold a
// window slot until answered, so at most PublishWindow wait per stream.
func (c *connection) publishLoop(root *actor.RootContext, self *actor.PID, s *quic.Stream, first wire.Frame) error {
	sctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	window := make(chan struct{}, c.cfg.PublishWindow)
	// A lane that ends while the loop runs (its stream's write failed)
	// ends the loop and tells the client to stop sending: nothing it sends
	// could be answered.
	var ended atomic.Bool
	lane := c.openLane(root, self, s, window, func() {
		cancel()
		if !ended.Load() {
			s.CancelRead(quic.StreamErrorCode(wire.CodeInternal))
		}
	}, nil)
	if lane == nil {
		return nil
	}
	defer root.Poison(lane)
	defer ended.Store(true) // runs first: the lane's normal end is no failure
	streams := map[wire.StreamName]*StreamHandle{}
	f := first
	for {
		if f.Header.Type != wire.TypePublish {
			return wire.Errorf(wire.CodeProtocolViolation, "%s frame on a publish stream", f.Header.Type)
		}
		p, err := wire.DecodePublish(f.Body)
		var werr *wire.Error
		if err != nil && (!errors.As(err, &werr) || werr.Code.Framing()) {
			return err
		}
		// Every publish holds a window slot until its shard answers (AckNone
		// ones too, though nothing is written for them), so what one stream
		// has in flight inside the node is bounded.
		select {
		case window <- struct{}{}:
		case <-sctx.Done():
			return nil
		}
		if werr == nil {
			werr = c.routePublish(root, lane, streams, f.Header.RequestID, p)
		}
		if werr != nil {
			if werr.Code.Framing() {
				return werr
			}
			root.Send(lane, &PublishRejected{ReqID: f.Header.RequestID, Ack: p.Ack, Err: werr})
		}
		f, err = wire.ReadFrame(s, c.cfg.MaxFrameBytes)
		if err != nil {
			if errors.As(err, &werr) {
				return err
			}
			if errors.Is(err, io.EOF) {
				// The client ended the stream: answer what is outstanding,
				// then end ours.
				c.finishPublishStream(root, sctx, lane, window)
			}
			return nil
		}
	}
}

// finishPublishStream waits (within sctx) until every acked publish on the
// stream has been answered, by taking every window slot, then has the lane
// flush and close its send side.
func (c *connection) finishPublishStream(root *actor.RootContext, sctx context.Context, lane *actor.PID, window chan struct{}) {
	for range cap(window) {
		select {
		case window <- struct{}{}:
		case <-sctx.Done():
			return
		}
	}
	root.Send(lane, &CloseLane{})
}

// routePublish validates one publish and sends it to its shard.
func (c *connection) routePublish(root *actor.RootContext, lane *actor.PID, streams map[wire.StreamName]*StreamHandle, reqID uint64, p wire.Publish) *wire.Error {
	if c.draining.Load() {
		return wire.Errorf(wire.CodeShuttingDown, "node is draining")
	}
	if err := p.Name.Validate(); err != nil {
		return err.(*wire.Error)
	}
	if werr := c.allow(PermPublish, p.Name); werr != nil {
		return werr
	}
	// Delivered, the batch becomes a section of an EventBatch or ReadResult
	// frame, and each of its records one record of a group push: the
	// records must fit the largest of those frames.
	if limit := int(c.cfg.MaxFrameBytes) - maxDeliveryOverhead; len(p.Records) > limit {
		c.cfg.Stats.Limits.BatchBytes.Add(1)
		return &wire.Error{Code: wire.CodeBatchTooLarge, Detail: uint64(limit),
			Message: fmt.Sprintf("the records take %d bytes; at most %d fit a delivery frame", len(p.Records), limit)}
	}
	if _, err := wire.ValidateRecords(p.Records, p.Count); err != nil {
		var werr *wire.Error
		errors.As(err, &werr)
		return werr
	}
	h, ok := streams[p.Name]
	if ok && h.Deleted() {
		delete(streams, p.Name)
		ok = false
	}
	if !ok {
		var werr *wire.Error
		h, werr = c.lookup(root, &LookupStreamRequest{Name: p.Name, AutoCreate: c.cfg.AutoCreate})
		if werr != nil {
			return werr
		}
		if len(streams) > 1024 {
			clear(streams)
		}
		streams[p.Name] = h
	}
	shard := p.Shard
	keyed := wire.ShardFor(p.Key, h.Config.Shards, h.Config.Routing)
	switch {
	case shard == wire.AnyShard:
		shard = keyed
	case len(p.Key) > 0 && shard != keyed:
		// The client routed with a stale view of the stream (it was
		// recreated with other shards or routing): refuse, so it looks again.
		return wire.Errorf(wire.CodeInvalidShard, "key routes to shard %d of %s, not %d", keyed, h.Name, shard)
	}
	if shard >= uint32(len(h.Shards)) {
		return wire.Errorf(wire.CodeInvalidShard, "stream %s has %d shards", h.Name, len(h.Shards))
	}
	req := &PublishRequest{Received: time.Now(), ReqID: reqID, Ack: p.Ack, Count: p.Count, Records: p.Records, ReplyTo: lane,
		Conditional: p.Conditional, ExpectedOffset: p.ExpectedOffset,
		Idempotent: p.Idempotent, ProducerID: p.ProducerID, Sequence: p.Sequence}
	if c.cfg.Tracer.Enabled() {
		if span := c.tracePublish(h, shard, p); span != nil {
			req.Trace = Traceparent(span.SpanContext())
			defer span.End()
			// The root context has no sender middleware: put the context
			// in the envelope header here.
			env := &actor.MessageEnvelope{Message: req}
			env.SetHeader(TraceHeader, req.Trace)
			root.Send(h.Shards[shard], env)
			return nil
		}
	}
	root.Send(h.Shards[shard], req)
	return nil
}

// tracePublish starts the node's receive span of a publish whose first
// record carries trace context (the client's publish span): the span covers
// the connection's part, and the shard's spans are its children.
func (c *connection) tracePublish(h *StreamHandle, shard uint32, p wire.Publish) oteltrace.Span {
	var rec wire.Record
	if !wire.NewRecordIter(p.Records).Next(&rec) {
		return nil
	}
	parent := ""
	for _, hd := range rec.Headers {
		if hd.Key == TraceHeader {
			parent = string(hd.Value)
			break
		}
	}
	return c.cfg.Tracer.Start(parent, "herald.publish.receive", oteltrace.SpanKindServer,
		attribute.String("messaging.system", "herald"), attribute.String("messaging.destination.name", h.Name.String()),
		attribute.Int("herald.shard", int(shard)), attribute.Int("messaging.batch.message_count", int(p.Count)),
		attribute.Int("herald.batch.bytes", len(p.Records)), attribute.Int("herald.ack", int(p.Ack)))
}
