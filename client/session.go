package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// shared is what every actor of one Client shares for the client's whole
// life, across reconnects: the client's own bounds and goroutines, the
// request id counter, how to dial again, and the current session. Its
// fields are set before any actor starts and never reassigned; the mutable
// ones are goroutine-safe.
type shared struct {
	// life is done once Close began; its cause is ErrClosed. Every
	// session's context derives from it, so ending it closes every
	// connection.
	life       context.Context
	cancelLife context.CancelCauseFunc

	// ids is the last request id issued (Hello is always 1). Ids are
	// client-wide and increasing, so they also increase on every
	// connection and every stream.
	ids atomic.Uint64
	// maxRecv is the largest frame body this client accepts.
	maxRecv uint32
	// budget bounds the bytes of publishes not yet answered (acked
	// publishes) or not yet written (AckNone publishes), across reconnects.
	budget *byteBudget
	// publishStreams is the most QUIC publish streams to open.
	publishStreams int
	// goroutines owns every goroutine the client starts.
	goroutines *goroutineGroup
	// log receives the client's own logs.
	log *slog.Logger
	// asyncPublishErrors counts Error frames for AckNone publishes, whose
	// callers had already returned.
	asyncPublishErrors atomic.Uint64

	// reconnect is set unless WithoutReconnect: a lost connection is dialed
	// again (policy) and the actors resume on the new session instead of
	// failing what they hold.
	reconnect bool
	// policy bounds and paces the reconnect attempts after one loss.
	policy Reconnect
	// clock times the reconnect attempts (tests inject a fake one).
	clock clock
	// jitter returns a number in [0, 1) for the backoff's jitter.
	jitter func() float64
	// dialer dials the seeds.
	dialer *dialer
	// replica is which replica serves subscriptions and reads
	// (WithReplica).
	replica Replica
	// events delivers ConnectionEvents to the application (nil: none).
	events *eventDispatcher

	// cur is the current session: the connected one, or the last one while
	// the client reconnects. The connection actor stores it; callers load
	// it for what the node negotiated.
	cur atomic.Pointer[session]
	// final is set once the client will not connect again (reconnecting
	// gave up, or the connection was lost WithoutReconnect): every call
	// fails with it.
	final atomic.Pointer[error]
}

// nextID returns a new request id.
func (s *shared) nextID() uint64 { return s.ids.Add(1) }

// finalErr returns the error every call fails with once the client will
// not connect again, or nil.
func (s *shared) finalErr() error {
	if p := s.final.Load(); p != nil {
		return *p
	}
	return nil
}

// session is one QUIC connection of a Client: the connection, what its
// handshake negotiated and its failure cause. A Client has one session at a
// time; a reconnect makes a new one, and the connection actor hands it to
// every actor (sessionStarted). Its fields are set before it is handed out
// and never reassigned; the mutable ones are goroutine-safe.
//
// The connection actor owns the control stream. The quic.Conn itself is
// shared: publish-stream actors and subscriptions open streams on it, and
// fail is the one door that closes it (also when the client's life ends:
// the session's context derives from it).
type session struct {
	*shared

	// conn is the QUIC connection.
	conn *quic.Conn
	// addr is the address dialed.
	addr string
	// ctx is done once the connection failed or the client closed;
	// context.Cause(ctx) is the first cause given to fail (ErrClosed after
	// Close).
	ctx    context.Context
	cancel context.CancelCauseFunc
	// closeOnce guards conn.CloseWithError.
	closeOnce sync.Once
	// since is when the session was connected.
	since time.Time

	// welcome is the node's answer to Hello.
	welcome wire.Welcome
	// window is how many acked publishes may be unanswered per publish
	// stream (the node's publish window, or 1 without pipelining).
	window int
	// maxSend is the largest frame body the node accepts.
	maxSend uint32
	// subscribeQueue reports whether the node takes a subscriber's queue
	// capacity (FeatureSubscribeQueue).
	subscribeQueue bool

	// goAway is set when the node sent GoAway: nothing new goes on this
	// connection (new calls wait for the next one, or, WithoutReconnect,
	// fail with it).
	goAway atomic.Pointer[wire.Error]
}

// newSession makes the session of a handshaken connection to addr. Its
// context derives from the client's life, so Close closes it whoever holds
// it.
func newSession(sh *shared, conn *quic.Conn, addr string, w wire.Welcome) *session {
	ctx, cancel := context.WithCancelCause(sh.life)
	s := &session{
		shared:         sh,
		conn:           conn,
		addr:           addr,
		ctx:            ctx,
		cancel:         cancel,
		since:          time.Now(),
		welcome:        w,
		window:         1,
		maxSend:        w.MaxFrameBytes,
		subscribeQueue: w.Features&wire.FeatureSubscribeQueue != 0,
	}
	if w.Features&wire.FeaturePublishPipeline != 0 && w.PublishWindow > 0 {
		s.window = int(w.PublishWindow)
	}
	if s.maxSend == 0 {
		s.maxSend = wire.DefaultMaxFrameBytes
	}
	// The client's Close ends life: close the connection then too.
	context.AfterFunc(ctx, func() { s.fail(context.Cause(ctx)) })
	return s
}

// fail records cause as the reason the connection is unusable (the first
// cause wins) and closes the QUIC connection, with cause's code when it is a
// *wire.Error. It is safe from any goroutine and does not block for long.
func (s *session) fail(cause error) {
	s.cancel(cause)
	s.closeOnce.Do(func() {
		cause := context.Cause(s.ctx)
		code, msg := quic.ApplicationErrorCode(0), "client closed"
		var we *wire.Error
		if errors.As(cause, &we) {
			code, msg = quic.ApplicationErrorCode(we.Code), we.Error()
		} else if !errors.Is(cause, ErrClosed) {
			msg = cause.Error()
		}
		_ = s.conn.CloseWithError(code, msg)
	})
}

// failure returns the error calls fail with once the connection is unusable:
// ErrClosed after Close, otherwise the first cause, wrapped. It returns nil
// while the connection is healthy.
func (s *session) failure() error {
	cause := context.Cause(s.ctx)
	if cause == nil {
		return nil
	}
	if errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("herald: connection failed: %w", cause)
}

// lost reports that a read or write on the connection failed with err: it
// fails the connection (unless it already failed) with err translated, and
// returns the error for callers.
func (s *session) lost(err error) error {
	if s.ctx.Err() == nil {
		s.fail(connCause(err))
	}
	return s.failure()
}

// connCause turns a QUIC error into the cause a connection failed with: a
// node's application close carrying a wire code becomes a *wire.Error, so
// errors.Is(err, ErrShuttingDown) works after the node closed a draining
// connection.
func connCause(err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode != 0 {
		return &wire.Error{Code: wire.Code(ae.ErrorCode), Message: ae.ErrorMessage}
	}
	return err
}

// fatalFrame reports whether err, from reading or decoding a frame the node
// sent, means the node broke the protocol, so the connection must be closed
// with the error's code.
func fatalFrame(err error) bool {
	var we *wire.Error
	return errors.As(err, &we)
}

// protocolViolation returns a CodeProtocolViolation error.
func protocolViolation(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeProtocolViolation, format, args...)
}

// isShuttingDown reports whether err is the node's shutting_down: it is
// draining and applied nothing of the request; with reconnect, what it
// refused goes to the next connection.
// isNotLeader reports whether err is the node's not_leader.
func isNotLeader(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeNotLeader
}

func isShuttingDown(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeShuttingDown
}

// openStream opens a bidirectional stream on conn. When the node allows no
// more streams on the connection (max_streams_per_connection) it waits for
// one to close, until ctx ends, counted in waiting meanwhile (nil: not
// counted), so that a Subscribe that gives up can say why.
func openStream(ctx context.Context, conn *quic.Conn, waiting *atomic.Int32) (*quic.Stream, error) {
	st, err := conn.OpenStream()
	if err == nil || !streamLimitReached(err) {
		return st, err
	}
	if waiting != nil {
		waiting.Add(1)
		defer waiting.Add(-1)
	}
	return conn.OpenStreamSync(ctx)
}

// streamLimitReached reports whether err is quic-go's refusal to open a
// stream beyond the peer's limit (a *StreamLimitReachedError).
func streamLimitReached(err error) bool {
	var limit *quic.StreamLimitReachedError
	return errors.As(err, &limit)
}
