package client

import (
	"errors"

	"github.com/heraldmq/herald/net/wire"
)

// Error is the typed error the node sends and the client's decoders return:
// a stable Code, a message and a code-specific Detail (for
// CodeOffsetOutOfRange, the shard's tail). Use errors.As to get one and
// errors.Is with the Err* values below to test its code; Code.Retry says
// whether a call may be retried.
type Error = wire.Error

// Sentinel errors for errors.Is. Each is a *Error that matches any *Error with
// the same code, whatever its message.
var (
	// ErrMalformedFrame: a frame from the node could not be decoded; the
	// connection was closed.
	ErrMalformedFrame error = &wire.Error{Code: wire.CodeMalformedFrame}
	// ErrFrameTooLarge: a frame exceeds the peer's maximum frame size.
	ErrFrameTooLarge error = &wire.Error{Code: wire.CodeFrameTooLarge}
	// ErrUnsupportedVersion: the node does not speak this client's protocol
	// version.
	ErrUnsupportedVersion error = &wire.Error{Code: wire.CodeUnsupportedVersion}
	// ErrInvalidStreamName: a stream name part is empty, too long or has a
	// character outside [A-Za-z0-9._-].
	ErrInvalidStreamName error = &wire.Error{Code: wire.CodeInvalidStreamName}
	// ErrStreamNotFound: the stream does not exist.
	ErrStreamNotFound error = &wire.Error{Code: wire.CodeStreamNotFound}
	// ErrStreamExists: the stream exists with another configuration.
	ErrStreamExists error = &wire.Error{Code: wire.CodeStreamExists}
	// ErrInvalidConfig: a stream configuration value is out of range.
	ErrInvalidConfig error = &wire.Error{Code: wire.CodeInvalidConfig}
	// ErrInvalidShard: the shard index is not below the stream's shard count.
	ErrInvalidShard error = &wire.Error{Code: wire.CodeInvalidShard}
	// ErrOffsetOutOfRange: the offset is beyond the tail or below what is
	// retained; the *Error's Detail is the shard's tail.
	ErrOffsetOutOfRange error = &wire.Error{Code: wire.CodeOffsetOutOfRange}
	// ErrStorageFailure: the node could not make a write durable; the outcome
	// is unknown.
	ErrStorageFailure error = &wire.Error{Code: wire.CodeStorageFailure}
	// ErrOverloaded: the node is shedding load; retry after a delay.
	ErrOverloaded error = &wire.Error{Code: wire.CodeOverloaded}
	// ErrShuttingDown: the node is draining (it sent GoAway); retry on
	// another node or later, on a new connection.
	ErrShuttingDown error = &wire.Error{Code: wire.CodeShuttingDown}
	// ErrUnauthenticated: the token is missing or wrong.
	ErrUnauthenticated error = &wire.Error{Code: wire.CodeUnauthenticated}
	// ErrPermissionDenied: the token does not allow the operation.
	ErrPermissionDenied error = &wire.Error{Code: wire.CodePermissionDenied}
	// ErrBatchTooLarge: the batch has too many records or bytes.
	ErrBatchTooLarge error = &wire.Error{Code: wire.CodeBatchTooLarge}
	// ErrProtocolViolation: a valid frame arrived where it is not allowed;
	// the connection was closed.
	ErrProtocolViolation error = &wire.Error{Code: wire.CodeProtocolViolation}
	// ErrSubscriptionAborted: the node ended the subscription; subscribe
	// again from the next offset to continue.
	ErrSubscriptionAborted error = &wire.Error{Code: wire.CodeSubscriptionAborted}
	// ErrInvalidRequest: a request field is not acceptable.
	ErrInvalidRequest error = &wire.Error{Code: wire.CodeInvalidRequest}
)

// ErrClosed is returned by calls on a Client after Close, and by calls that
// were pending when Close was called.
var ErrClosed = errors.New("herald: client closed")

// ErrSubscriptionClosed is returned by Next after the Subscription's Close.
var ErrSubscriptionClosed = errors.New("herald: subscription closed")
