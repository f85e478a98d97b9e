package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// session is what every actor of one Client shares about its connection:
// the QUIC connection, what the handshake negotiated, the request id counter
// and the failure cause. Its fields are set before any actor starts and never
// reassigned; the mutable ones are goroutine-safe.
//
// The connection actor owns the control stream. The quic.Conn itself is
// shared: publish-stream actors and Subscribe open streams on it, and fail is
// the one door that closes it.
type session struct {
	// conn is the QUIC connection.
	conn *quic.Conn
	// ctx is done once the connection failed or the client closed;
	// context.Cause(ctx) is the first cause given to fail.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// closeOnce guards conn.CloseWithError.
	closeOnce sync.Once

	// ids is the last request id issued on the connection (Hello was 1).
	// Ids are connection-wide and increasing, so they also increase on every
	// stream.
	ids atomic.Uint64

	// welcome is the node's answer to Hello.
	welcome wire.Welcome
	// window is how many acked publishes may be unanswered per publish
	// stream (the node's publish window, or 1 without pipelining).
	window int
	// maxSend is the largest frame body the node accepts.
	maxSend uint32
	// maxRecv is the largest frame body this client accepts.
	maxRecv uint32
	// subscribeQueue reports whether the node takes a subscriber's queue
	// capacity (FeatureSubscribeQueue).
	subscribeQueue bool

	// goAway is set when the node sent GoAway: new calls fail with it.
	goAway atomic.Pointer[wire.Error]
	// budget bounds the bytes of acked publishes in flight.
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
}

// nextID returns a new request id.
func (s *session) nextID() uint64 { return s.ids.Add(1) }

// fail records cause as the reason the connection is unusable (the first
// cause wins) and closes the QUIC connection, with cause's code when it is a
// *wire.Error. It is safe from any goroutine and does not block for long.
func (s *session) fail(cause error) {
	s.cancel(cause)
	s.closeOnce.Do(func() {
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
