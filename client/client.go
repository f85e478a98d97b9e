package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// QUIC settings of a client connection.
const (
	keepAlivePeriod    = 10 * time.Second
	maxIdleTimeout     = 30 * time.Second
	maxIncomingStreams = 1000
	// helloRequestID is the request id of Hello, the first request.
	helloRequestID = 1
)

// Client is one QUIC connection to a Herald node. Its methods are safe for
// concurrent use. Close it to release the connection, its actors and its
// goroutines.
type Client struct {
	// s is the connection state shared with the actors.
	s *session
	// sys is this client's actor system.
	sys *actor.ActorSystem
	// conn is the connection actor.
	conn *actor.PID
	// connStopped is closed when the connection actor, and so every
	// publish-stream and subscription actor, has stopped.
	connStopped chan struct{}
	// done is closed when Close starts.
	done      chan struct{}
	closeOnce sync.Once
	mu        struct {
		sync.Mutex
		// closing is set by Close; Subscription.Close then leaves the
		// stopping to it.
		closing bool
	}
	// routes caches the shard count and routing of the streams this client
	// publishes to.
	routes *routeTable
	// subscriptionCloses counts Subscription.Close calls in progress; Close
	// waits for them before stopping the actors, so that no actor is asked
	// to stop twice (the second Stop would be a dead letter).
	subscriptionCloses sync.WaitGroup
	// tracer starts the client's spans.
	tracer clientTracer
}

// beginSubscriptionClose registers a Subscription.Close in progress; it
// returns false when the client is closing.
func (c *Client) beginSubscriptionClose() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closing {
		return false
	}
	c.subscriptionCloses.Add(1)
	return true
}

// Dial connects to the node at addr ("host:port"), performs the Hello /
// Welcome handshake and returns the connected Client. ctx bounds the dial and
// the handshake only. A node that refuses the Hello returns its *Error (for
// example ErrUnauthenticated).
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	tlsConf, err := o.clientTLS(addr)
	if err != nil {
		return nil, fmt.Errorf("herald: tls: %w", err)
	}
	// A subscription the application stops reading pauses its own QUIC
	// stream: each stream may hold at most streamReceiveWindow unread, and
	// the connection's window is far larger than that, so paused
	// subscriptions (up to about connectionReceiveWindow/streamReceiveWindow
	// of them) never starve the control stream, publish acks or the other
	// subscriptions.
	qconf := &quic.Config{
		KeepAlivePeriod:                keepAlivePeriod,
		MaxIdleTimeout:                 maxIdleTimeout,
		MaxIncomingStreams:             maxIncomingStreams,
		InitialStreamReceiveWindow:     streamReceiveWindow / 2,
		MaxStreamReceiveWindow:         streamReceiveWindow,
		InitialConnectionReceiveWindow: connectionReceiveWindow / 8,
		MaxConnectionReceiveWindow:     connectionReceiveWindow,
	}
	conn, err := quic.DialAddr(ctx, addr, tlsConf, qconf)
	if err != nil {
		return nil, fmt.Errorf("herald: dial %s: %w", addr, err)
	}
	ctl, welcome, err := handshake(ctx, conn, &o)
	if err != nil {
		code, msg := quic.ApplicationErrorCode(0), "handshake failed"
		var we *wire.Error
		if errors.As(err, &we) && we.Code.Retry() == wire.RetryFatal && isLocalDecodeCode(we.Code) {
			code, msg = quic.ApplicationErrorCode(we.Code), we.Error()
		}
		_ = conn.CloseWithError(code, msg)
		return nil, err
	}
	return newClient(conn, ctl, welcome, &o), nil
}

// isLocalDecodeCode reports whether code is one the client's own decoding
// produces (and so closes the connection with).
// Receive windows: see Dial.
const (
	streamReceiveWindow     = 1 << 20
	connectionReceiveWindow = 96 << 20
)

func isLocalDecodeCode(c wire.Code) bool {
	switch c {
	case wire.CodeMalformedFrame, wire.CodeFrameTooLarge, wire.CodeUnknownFrameType,
		wire.CodeProtocolViolation, wire.CodeUnsupportedVersion:
		return true
	}
	return false
}

// handshake opens the control stream, sends Hello and reads the answer.
func handshake(ctx context.Context, conn *quic.Conn, o *options) (*quic.Stream, wire.Welcome, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(0, "dial cancelled") })
	defer stop()
	fail := func(err error) (*quic.Stream, wire.Welcome, error) {
		if ctx.Err() != nil {
			return nil, wire.Welcome{}, ctx.Err()
		}
		return nil, wire.Welcome{}, err
	}

	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(fmt.Errorf("herald: open control stream: %w", err))
	}
	hello := wire.Hello{
		Version:       wire.Version,
		Features:      wire.Features,
		MaxFrameBytes: o.maxFrameBytes,
		Token:         o.token,
		ClientName:    o.name,
	}
	if _, err := ctl.Write(wire.AppendHello(nil, helloRequestID, hello)); err != nil {
		return fail(fmt.Errorf("herald: send hello: %w", connCause(err)))
	}
	f, err := wire.ReadFrame(ctl, o.maxFrameBytes)
	if err != nil {
		if fatalFrame(err) {
			return fail(err)
		}
		return fail(fmt.Errorf("herald: read welcome: %w", connCause(err)))
	}
	if f.Header.RequestID != helloRequestID {
		return fail(protocolViolation("answer to hello has request id %d", f.Header.RequestID))
	}
	switch f.Header.Type {
	case wire.TypeWelcome:
		w, err := wire.DecodeWelcome(f.Body)
		if err != nil {
			return fail(err)
		}
		if w.Version != wire.Version {
			return fail(wire.Errorf(wire.CodeUnsupportedVersion, "node speaks version %d, client %d", w.Version, wire.Version))
		}
		if !stop() {
			// ctx ended and the connection is being closed.
			return nil, wire.Welcome{}, ctx.Err()
		}
		return ctl, w, nil
	case wire.TypeError:
		e, err := wire.DecodeError(f.Body)
		if err != nil {
			return fail(err)
		}
		return fail(e)
	default:
		return fail(protocolViolation("%v frame in answer to hello", f.Header.Type))
	}
}

// newClient starts the actor system and the connection actor over a
// handshaken connection.
func newClient(conn *quic.Conn, ctl *quic.Stream, w wire.Welcome, o *options) *Client {
	sctx, cancel := context.WithCancelCause(context.Background())
	s := &session{
		conn:           conn,
		ctx:            sctx,
		cancel:         cancel,
		welcome:        w,
		window:         1,
		maxSend:        w.MaxFrameBytes,
		maxRecv:        o.maxFrameBytes,
		subscribeQueue: w.Features&wire.FeatureSubscribeQueue != 0,
		budget:         newByteBudget(o.inflightBytes),
		publishStreams: o.publishStreams,
		goroutines:     &goroutineGroup{},
		log:            o.logger,
	}
	s.ids.Store(helloRequestID)
	if w.Features&wire.FeaturePublishPipeline != 0 && w.PublishWindow > 0 {
		s.window = int(w.PublishWindow)
	}
	if s.maxSend == 0 {
		s.maxSend = wire.DefaultMaxFrameBytes
	}

	logger := o.logger
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger.With("component", "protoactor") }),
		actor.WithDeadLetterRequestLogging(false),
		actor.WithDeveloperSupervisionLogging(false),
	)
	c := &Client{
		s:           s,
		sys:         sys,
		connStopped: make(chan struct{}),
		done:        make(chan struct{}),
		routes:      newRouteTable(),
		tracer:      newClientTracer(o.tracerProvider),
	}
	// A panic in the connection actor stops it (failing the connection)
	// rather than restarting it with its pending calls forgotten.
	root := sys.Root.WithGuardian(actor.NewOneForOneStrategy(0, 0, stopOnPanic))
	c.conn = root.Spawn(newConnectionProps(s, ctl, c.connStopped))
	o.logger.Debug("herald: connected", slog.String("node", w.NodeID), slog.Int("publish_window", s.window))
	return c
}

// stopOnPanic is the supervisor decider of the client's actors: an actor
// that panics is stopped, and its stop fails what it had pending.
func stopOnPanic(reason any) actor.Directive { return actor.StopDirective }

// NodeID returns the id the node gave in its Welcome.
func (c *Client) NodeID() string { return c.s.welcome.NodeID }

// Close closes the connection, fails every pending call with ErrClosed, and
// stops the client's actors and goroutines; it waits for them. It is
// idempotent and always returns nil.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		c.mu.closing = true
		c.mu.Unlock()
		c.drainPublishStreams()
		// Closing the connection ends every stream reader; their last
		// messages reach actors that are still alive.
		c.s.fail(ErrClosed)
		c.s.goroutines.closeAndWait()
		c.subscriptionCloses.Wait()
		// Stopping the connection actor stops its children first; each fails
		// what it still holds.
		_ = c.sys.Root.StopFuture(c.conn).Wait()
		select {
		case <-c.connStopped:
		case <-time.After(10 * time.Second):
			c.s.log.Warn("herald: connection actor did not stop in time")
		}
		c.sys.Shutdown()
	})
	return nil
}

// closeLinger bounds how long Close waits for the node to confirm AckNone
// publishes it may not have read yet.
const closeLinger = time.Second

// drainPublishStreams gives AckNone publishes already handed to QUIC a
// chance to reach the node before the connection is closed (closing a QUIC
// connection discards unsent stream data): publish streams with unconfirmed
// AckNone publishes close their send side, and this waits, at most
// closeLinger, for the node to confirm or end them.
func (c *Client) drainPublishStreams() {
	if c.s.ctx.Err() != nil {
		return
	}
	deadline := time.NewTimer(closeLinger)
	defer deadline.Stop()
	req := &publishersRequest{reply: make(chan []*actor.PID, 1)}
	c.send(c.conn, req)
	var pids []*actor.PID
	select {
	case pids = <-req.reply:
	case <-c.connStopped:
		return
	case <-deadline.C:
		return
	}
	waits := make([]chan struct{}, len(pids))
	for i, pid := range pids {
		d := &publishDrainRequest{reply: make(chan struct{}, 1)}
		c.send(pid, d)
		waits[i] = d.reply
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-c.connStopped:
			return
		case <-deadline.C:
			c.s.log.Debug("herald: close: the node did not confirm unacknowledged publishes in time")
			return
		}
	}
}

// usable returns the error a new call fails with at once, or nil.
func (c *Client) usable() error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	if e := c.s.goAway.Load(); e != nil {
		return e
	}
	return c.s.failure()
}

// stoppedErr is the error of a call whose actor stopped without answering.
func (c *Client) stoppedErr() error {
	if err := c.usable(); err != nil {
		return err
	}
	return wire.Errorf(wire.CodeInternal, "client actor stopped")
}

// send delivers msg to an actor of this client.
func (c *Client) send(pid *actor.PID, msg any) { c.sys.Root.Send(pid, msg) }

// call sends one control request and waits for its answer of type want.
func (c *Client) call(ctx context.Context, want wire.Type, build func(dst []byte, id uint64) []byte) (any, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	req := &controlRequest{build: build, want: want, reply: make(chan controlResponse, 1)}
	c.send(c.conn, req)
	select {
	case r := <-req.reply:
		return r.value, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.connStopped:
		select {
		case r := <-req.reply:
			return r.value, r.err
		default:
			return nil, c.stoppedErr()
		}
	}
}
