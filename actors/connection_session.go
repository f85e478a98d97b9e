package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// connSession is the program that serves one QUIC connection's receive
// sides for its connection actor: the handshake and the control stream
// (serve, controlLoop), and each data stream (acceptStreams, serveStream,
// publishLoop, groupStream). Its goroutines turn frames into messages to the
// actor, its children and the node's actors; they block on the QUIC
// connection and on futures, which the actor never does.
//
// Concurrency contract:
//   - Every goroutine is started through cfg.Goroutines and ends once ctx
//     is cancelled or conn is closed (the actor does both when it stops);
//     the node waits for them in Close, the actor never does.
//   - The fields above principal are set by newConnSession, before the
//     first goroutine starts, and never reassigned.
//   - principal and features are written once by the handshake goroutine,
//     before it starts the goroutines that read them (the go statement
//     orders the write before their reads); the actor never reads them.
//   - draining, welcomed and place are shared with the actor and touched
//     only through their atomics; their comments say who writes them.
//   - conn is shared too: quic.Conn is safe for concurrent use, and the
//     session and the actor may both close it (the first close wins).
//   - Everything else a goroutine uses (a stream, its lane, its window) is
//     its own, local to the function it runs.
type connSession struct {
	// cfg is the part of the actor's config the goroutines read.
	cfg sessionConfig
	// conn is the QUIC connection served.
	conn *quic.Conn
	// ctx is cancelled (cancel) by the actor when it stops; the goroutines'
	// blocking calls take it or a context derived from it.
	ctx    context.Context
	cancel context.CancelFunc
	// root sends the goroutines' messages and futures.
	root *actor.RootContext
	// self is the connection actor.
	self *actor.PID
	// logger is the actor's.
	logger *slog.Logger

	// principal is who the connection acts for, set by the handshake
	// before any request is served and never changed after; token is the
	// Hello's, kept for the group relays (connection_relay.go), which
	// pass it on to a node that does not trust the principal they state.
	principal Principal
	token     string
	// features are the features both sides announced, set by the
	// handshake with principal (and under the same contract).
	features uint64

	// relayAccept is set when the connection is another node's relay: it
	// opens with a RelayHello, and its group requests are served here or
	// refused, never relayed again. Set before the first goroutine.
	relayAccept *RelayAccept
	// relays are the connection's relays to the nodes that coordinate the
	// groups it uses, by node id; the session's goroutines share them.
	relays struct {
		sync.Mutex
		m map[uint64]*relayConn
	}

	// draining is set by the actor (Drain); the goroutines read it and
	// refuse new work.
	draining atomic.Bool
	// welcomed is set by the handshake once Welcome is on its way; the
	// actor reads it to know it may send GoAway itself.
	welcomed atomic.Bool
	// place is the connection's place among MaxConnections (placeFree,
	// placeHeld, placeReleased). The handshake holds one (keepPlace), the
	// actor's Stopped gives it back (releasePlace); whichever of the two
	// comes second gives it back, so it is given back exactly once.
	place atomic.Int32
}

// The states of connSession.place.
const (
	// placeFree: the connection holds no place (yet).
	placeFree int32 = iota
	// placeHeld: the handshake took a place that is still held.
	placeHeld
	// placeReleased: the actor stopped; a held place was given back.
	placeReleased
)

// sessionConfig is the part of ConnectionConfig that a connSession reads,
// with the same names and meanings (see ConnectionConfig), defaults
// applied.
type sessionConfig struct {
	// Catalog and Groups answer the session's lookups and group requests.
	Catalog, Groups *actor.PID
	// NodeID goes into Welcome.
	NodeID string
	// AutoCreate creates a missing stream on its first publish.
	AutoCreate bool
	// MaxFrameBytes bounds a frame body the node accepts and sends.
	MaxFrameBytes uint32
	// PublishWindow bounds unanswered publishes per publish stream.
	PublishWindow int
	// HandshakeTimeout bounds the wait for the control stream, the Hello
	// and a data stream's first frame; RequestTimeout the internal requests.
	HandshakeTimeout, RequestTimeout time.Duration
	// ReadMaxRecords and ReadMaxBytes cap one range-read page.
	ReadMaxRecords, ReadMaxBytes int
	// Stats counts limits, refusals and failures.
	Stats *Stats
	// Tracer traces publishes that carry trace context.
	Tracer *Tracer
	// Auth authenticates the Hello.
	Auth *Authenticator
	// MaxConnections bounds the authenticated connections, counted node-wide
	// by Authenticated.
	MaxConnections int
	Authenticated  *atomic.Int64
	// Goroutines starts the session's goroutines.
	Goroutines *Goroutines
	// Relay dials the group relays (nil on a single node).
	Relay *GroupRelay
	// ClusterNodes lists the cluster's nodes (nil on a single node).
	ClusterNodes func() []wire.ClusterNode
}

// newConnSession returns the session of the connection actor self for
// conn. It starts nothing: the actor starts run.
func newConnSession(conn *quic.Conn, cfg ConnectionConfig, root *actor.RootContext, self *actor.PID, logger *slog.Logger) *connSession {
	cs := &connSession{
		cfg: sessionConfig{
			Catalog: cfg.Catalog, Groups: cfg.Groups, NodeID: cfg.NodeID, AutoCreate: cfg.AutoCreate,
			MaxFrameBytes: cfg.MaxFrameBytes, PublishWindow: cfg.PublishWindow,
			HandshakeTimeout: cfg.HandshakeTimeout, RequestTimeout: cfg.RequestTimeout,
			ReadMaxRecords: cfg.ReadMaxRecords, ReadMaxBytes: cfg.ReadMaxBytes,
			Stats: cfg.Stats, Tracer: cfg.Tracer, Auth: cfg.Auth,
			MaxConnections: cfg.MaxConnections, Authenticated: cfg.Authenticated,
			Goroutines: cfg.Goroutines, Relay: cfg.Relay, ClusterNodes: cfg.ClusterNodes,
		},
		conn: conn, root: root, self: self, logger: logger, relayAccept: cfg.relayAccept,
	}
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	return cs
}

// run serves the connection until it ends, then tells the actor. It is the
// session's first goroutine.
func (cs *connSession) run() {
	err := cs.serve()
	cs.root.Send(cs.self, &connectionDone{err: err})
}

// serve runs the handshake and the control stream, and accepts the other
// streams. It returns when the connection ends.
func (cs *connSession) serve() error {
	hctx, cancel := context.WithTimeout(cs.ctx, cs.cfg.HandshakeTimeout)
	control, err := cs.conn.AcceptStream(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			cs.cfg.Stats.Limits.Handshake.Add(1)
		}
		_ = cs.conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeProtocolViolation), "no control stream")
		return err
	}
	_ = control.SetReadDeadline(time.Now().Add(cs.cfg.HandshakeTimeout))
	if cs.relayAccept != nil {
		return cs.serveRelay(control)
	}
	f, err := wire.ReadFrame(control, cs.cfg.MaxFrameBytes)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			cs.cfg.Stats.Limits.Handshake.Add(1)
			return cs.closeWith(wire.Errorf(wire.CodeProtocolViolation, "no hello within the handshake timeout of %s", cs.cfg.HandshakeTimeout))
		}
		return cs.closeWith(err)
	}
	if f.Header.Type != wire.TypeHello {
		return cs.closeWith(wire.Errorf(wire.CodeProtocolViolation, "first frame must be hello, got %s", f.Header.Type))
	}
	hello, err := wire.DecodeHello(f.Body)
	if err != nil {
		return cs.closeWith(err)
	}
	_ = control.SetReadDeadline(time.Time{})
	answers := NewAnswerMeter(answerBacklogBytes)
	lane := cs.openLane(control, nil, nil, answers)
	if lane == nil {
		return cs.ctx.Err()
	}
	// refuse answers the Hello with werr and closes the connection:
	// answered here, before the close, or the lane would lose the race.
	refuse := func(werr *wire.Error) error {
		cs.root.Send(lane, &CloseLane{ReqID: f.Header.RequestID, Err: werr})
		_, _ = cs.root.RequestFuture(lane, &LaneSyncRequest{}, cs.cfg.HandshakeTimeout).Result()
		return cs.closeWith(werr)
	}
	if hello.Version != wire.Version {
		return refuse(&wire.Error{Code: wire.CodeUnsupportedVersion,
			Message: fmt.Sprintf("node speaks version %d", wire.Version), Detail: uint64(wire.Version)})
	}
	// Every frame the node sends is within its own limit: a client that
	// accepts less could be sent a record it cannot receive, and would fail
	// on it again each time it came back for it. Refuse it now, plainly.
	if accepts := cmp.Or(hello.MaxFrameBytes, wire.DefaultMaxFrameBytes); accepts < cs.cfg.MaxFrameBytes {
		return refuse(&wire.Error{Code: wire.CodeFrameTooLarge, Detail: uint64(cs.cfg.MaxFrameBytes), Message: fmt.Sprintf(
			"the client accepts frames up to %d bytes and this node sends up to %d (max_frame_bytes): raise the client's limit", accepts, cs.cfg.MaxFrameBytes)})
	}
	principal, werr := cs.cfg.Auth.Authenticate(hello.Token, cs.conn.ConnectionState().TLS.PeerCertificates)
	if werr != nil {
		cs.cfg.Stats.AuthFailures.Add(1)
		// The token is never logged, only that it was refused and why.
		cs.logger.Warn("connection refused: authentication failed",
			slog.String("client", hello.ClientName), slog.String("reason", werr.Message))
		return refuse(werr)
	}
	cs.principal, cs.token = principal, hello.Token
	cs.features = wire.Features & hello.Features
	// Only a connection that authenticated takes one of max_connections:
	// ones still in their handshake cannot crowd out real clients.
	if max := cs.cfg.MaxConnections; max > 0 {
		if cs.cfg.Authenticated.Add(1) > int64(max) {
			cs.cfg.Authenticated.Add(-1)
			cs.cfg.Stats.Limits.Connections.Add(1)
			return refuse(wire.Errorf(wire.CodeOverloaded, "the node has its maximum of %d connections (max_connections)", max))
		}
		if !cs.keepPlace() {
			return cs.ctx.Err() // the actor has stopped: the connection is closed
		}
	}
	return cs.welcome(lane, control, answers, f.Header.RequestID)
}

// welcome answers an accepted Hello (or RelayHello) and serves the
// connection: its control stream here, its other streams on a goroutine.
func (cs *connSession) welcome(lane *actor.PID, control *quic.Stream, answers *AnswerMeter, reqID uint64) error {
	cs.root.Send(lane, &WriteFrame{Frame: wire.AppendWelcome(nil, reqID, wire.Welcome{
		Version: wire.Version, Features: cs.features, MaxFrameBytes: cs.cfg.MaxFrameBytes,
		PublishWindow: uint32(cs.cfg.PublishWindow), NodeID: cs.cfg.NodeID})})
	// A drain that began during the handshake did not send GoAway (see
	// onDrain): send it now, so this client finishes too. Both may send it
	// in a race; the client takes the first.
	cs.welcomed.Store(true)
	if cs.draining.Load() {
		cs.root.Send(lane, &WriteFrame{Frame: wire.AppendGoAway(nil, "node shutting down")})
	}

	if !cs.cfg.Goroutines.Go(cs.acceptStreams) {
		return cs.closeWith(errSessionShutdown)
	}
	return cs.controlLoop(lane, control, answers)
}

// errSessionShutdown closes a connection whose goroutine Goroutines
// refused: the node is closing.
var errSessionShutdown = wire.Errorf(wire.CodeShuttingDown, "node shutting down")

// keepPlace records that the connection holds the place it took among
// MaxConnections (Authenticated counts it). It reports false, having given
// the place back, when the actor has already stopped: the actor gives back
// nothing after it stopped.
func (cs *connSession) keepPlace() bool {
	if cs.place.CompareAndSwap(placeFree, placeHeld) {
		return true
	}
	cs.cfg.Authenticated.Add(-1)
	return false
}

// releasePlace gives back the connection's place among MaxConnections, if
// it holds one, and makes a later keepPlace give its place back at once.
// The actor calls it once, in Stopped.
func (cs *connSession) releasePlace() {
	if cs.place.Swap(placeReleased) == placeHeld {
		cs.cfg.Authenticated.Add(-1)
	}
}

// openLane asks the actor for a lane on stream and waits for it.
func (cs *connSession) openLane(s *quic.Stream, window chan struct{}, cancel context.CancelFunc, meter *AnswerMeter) *actor.PID {
	reply := make(chan *actor.PID, 1)
	cs.root.Send(cs.self, &openLane{stream: s, window: window, cancel: cancel, meter: meter, reply: reply})
	select {
	case pid, ok := <-reply:
		if !ok {
			return nil
		}
		return pid
	case <-cs.ctx.Done():
		return nil
	}
}

// allow checks the connection's principal for perm on name, counting
// refusals.
func (cs *connSession) allow(perm Permission, name wire.StreamName) *wire.Error {
	werr := cs.principal.Allow(perm, name)
	if werr != nil {
		cs.cfg.Stats.AuthDenied.Add(1)
	}
	return werr
}

// closeWith closes the connection with a protocol error: its code becomes
// the QUIC application error code, so the client learns what was wrong.
func (cs *connSession) closeWith(err error) error {
	var werr *wire.Error
	if !errors.As(err, &werr) {
		werr = &wire.Error{Code: wire.CodeMalformedFrame, Message: err.Error()}
	}
	if werr.Code == wire.CodeFrameTooLarge {
		cs.cfg.Stats.Limits.FrameBytes.Add(1)
	}
	_ = cs.conn.CloseWithError(quic.ApplicationErrorCode(werr.Code), werr.Message)
	return werr
}
