package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// QUIC settings of a client connection (the timeouts are options: see
// newDialer).
const (
	maxIncomingStreams = 1000
	// helloRequestID is the request id of Hello, the first request.
	helloRequestID = 1
)

// Client is a connection to a Herald node that survives the node's restarts:
// when the connection is lost (the node restarted, crashed, drained with
// GoAway, or stopped answering for the idle timeout), the client reconnects
// by itself (WithReconnect; on by default), to the addresses given to Dial in
// turn, and resumes its subscriptions, group members and publishes on the
// new connection. Its methods are safe for concurrent use. Close it to
// release the connection, its actors and its goroutines.
//
// While the client is reconnecting, calls wait for the new connection,
// honouring their context: control calls (CreateStream, Read, Group.Poll,
// ...) are sent once it is up, and publishes wait in the in-flight byte
// budget (WithPublishInflightBytes) and are sent then, in order. A call that
// was sent and not answered when the connection was lost fails if resending
// it could apply it twice (a publish or a change fails with an error
// matching ErrOutcomeUnknown; an idempotent Producer's publishes are resent,
// since the node recognises them); a read-only one (DescribeStream,
// ListStreams, Read, Group.Describe, Group.DeadLetters) is sent again. Once
// the client gives up (Reconnect's bounds), every call fails with a
// *ReconnectError. WithConnectionEvents tells the application as the
// connection goes and comes back.
type Client struct {
	// s is what the actors share for the client's life; s.cur is the
	// current connection.
	s *shared
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
	// groupAcks coalesces the pull acks of each group (groups_acks.go).
	groupAcks groupAckers
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

// session returns the current (or, while reconnecting, the last) session.
func (c *Client) session() *session { return c.s.cur.Load() }

// Dial connects to a node, performs the Hello / Welcome handshake and
// returns the connected Client. addr is one address ("host:port") or
// several separated by commas ("a:7400,b:7400"), to which WithSeeds adds
// more; Dial tries them in turn, each within the dial timeout
// (WithDialTimeout, 2 s by default), and connects to the first node that
// answers. ctx bounds the whole dial. Dial itself does not retry: if no
// address answers it fails, with a *DialError per address (joined), each
// naming its address and matching ErrNoNodeAnswered when nothing answered
// there. A node that refuses the Hello returns its *Error (for example
// ErrUnauthenticated), wrapped in a *DialError.
//
// Once connected, the client reconnects by itself when the connection is
// lost, to the same addresses (see Client and WithReconnect).
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	seeds := splitSeeds(addr, o.seeds)
	if len(seeds) == 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "herald: dial: no address given")
	}
	life, cancelLife := context.WithCancelCause(context.Background())
	sh := &shared{
		life:           life,
		cancelLife:     cancelLife,
		maxRecv:        o.maxFrameBytes,
		budget:         newByteBudget(o.inflightBytes),
		publishStreams: o.publishStreams,
		goroutines:     &goroutineGroup{},
		log:            o.logger,
		reconnect:      o.reconnect,
		policy:         o.reconnectPolicy.normalized(),
		clock:          o.clock,
		jitter:         o.jitter,
		dialer:         newDialer(&o, seeds),
		replica:        o.replica,
	}
	sh.ids.Store(helloRequestID)
	d, seed, err := sh.dialer.dialSeeds(ctx, sh, 0)
	if err != nil {
		cancelLife(ErrClosed)
		return nil, err
	}
	return newClient(sh, d, seed, &o), nil
}

// isLocalDecodeCode reports whether code is one the client's own decoding
// produces (and so closes the connection with).
// Receive windows: see newDialer.
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
// handshaken connection to the seed of index seed.
func newClient(sh *shared, d dialed, seed int, o *options) *Client {
	sh.cur.Store(d.s)
	if o.events != nil {
		sh.events = newEventDispatcher(o.events)
		sh.goroutines.Go(sh.events.run)
	}
	logger := o.logger
	sys := newActorSystem(logger)
	c := &Client{
		s:           sh,
		sys:         sys,
		connStopped: make(chan struct{}),
		done:        make(chan struct{}),
		routes:      newRouteTable(),
		tracer:      newClientTracer(o.tracerProvider),
	}
	// A panic in the connection actor stops it (failing the connection)
	// rather than restarting it with its pending calls forgotten.
	root := sys.Root.WithGuardian(actor.NewOneForOneStrategy(0, 0, stopOnPanic))
	c.conn = root.Spawn(newConnectionProps(d, seed, c.connStopped))
	o.logger.Debug("herald: connected", slog.String("addr", d.s.addr), slog.String("node", d.s.welcome.NodeID), slog.Int("publish_window", d.s.window))
	return c
}

// stopOnPanic is the supervisor decider of the client's actors: an actor
// that panics is stopped, and its stop fails what it had pending.
func stopOnPanic(reason any) actor.Directive { return actor.StopDirective }

// NodeID returns the id the node gave in its Welcome: the node connected
// now, or last.
func (c *Client) NodeID() string { return c.session().welcome.NodeID }

// Addr returns the address of the node connected now, or last.
func (c *Client) Addr() string { return c.session().addr }

// Close closes the connection, fails every pending call with ErrClosed, and
// stops the client's actors and goroutines, a reconnect in progress
// included; it waits for them. It delivers ConnectionClosed (unless the
// client gave up before). It is idempotent and always returns nil.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		c.mu.closing = true
		c.mu.Unlock()
		c.drainPublishStreams()
		// Ending the client's life closes every connection (a reconnect
		// in progress stops dialing), which ends every stream reader; their
		// last messages reach actors that are still alive.
		c.s.cancelLife(ErrClosed)
		c.session().fail(ErrClosed)
		c.s.events.emit(ConnectionEvent{Kind: ConnectionClosed})
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
	if c.session().ctx.Err() != nil {
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

// usable returns the error a new call fails with at once, or nil. While the
// client reconnects (or the node is draining) calls do not fail: they wait
// for the next connection.
func (c *Client) usable() error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	if err := c.s.finalErr(); err != nil {
		return err
	}
	if c.s.reconnect {
		return nil
	}
	s := c.session()
	if e := s.goAway.Load(); e != nil {
		return e
	}
	return s.failure()
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

// Whether a control request may be sent again after the connection it was
// sent on was lost unanswered (see controlRequest.safe).
const (
	readOnly = true
	changes  = false
)

// call sends one control request and waits for its answer of type want.
// safe says the request changes nothing at the node, so it may be sent again
// on a new connection if the one it went out on is lost unanswered;
// otherwise that fails it with an error matching ErrOutcomeUnknown.
func (c *Client) call(ctx context.Context, want wire.Type, safe bool, build func(dst []byte, id uint64) []byte) (any, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	req := &controlRequest{build: build, want: want, safe: safe, reply: make(chan controlResponse, 1)}
	c.send(c.conn, req)
	select {
	case r := <-req.reply:
		return r.value, r.err
	case <-ctx.Done():
		// A request still waiting for a connection is not sent.
		req.abandoned.Store(true)
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
