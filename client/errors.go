package client

import (
	"errors"
	"fmt"
	"sync/atomic"

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
	// retained; the *Error's Detail is the shard's tail, or its first
	// retained offset (see OffsetOutOfRangeError).
	ErrOffsetOutOfRange error = &wire.Error{Code: wire.CodeOffsetOutOfRange}
	// ErrStorageFailure: the node could not make a write durable; the outcome
	// is unknown.
	ErrStorageFailure error = &wire.Error{Code: wire.CodeStorageFailure}
	// ErrOverloaded: the node is shedding load; retry after a delay.
	ErrOverloaded error = &wire.Error{Code: wire.CodeOverloaded}
	// ErrShuttingDown: the node is draining (it sent GoAway); retry on
	// another node or later, on a new connection.
	ErrShuttingDown error = &wire.Error{Code: wire.CodeShuttingDown}
	// ErrUnauthenticated: the token is missing or wrong, or the token and
	// the client certificate name different tenants. (A certificate the
	// node does not accept fails the TLS handshake itself: Dial returns
	// that TLS error.)
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
	// ErrInvalidRequest: a request field is not acceptable (for example a
	// conditional publish to an ephemeral stream).
	ErrInvalidRequest error = &wire.Error{Code: wire.CodeInvalidRequest}
	// ErrConditionFailed: a conditional publish expected another tail; the
	// *Error's Detail is the tail. PublishIf reports it as a refusal, not an
	// error.
	ErrConditionFailed error = &wire.Error{Code: wire.CodeConditionFailed}
	// ErrSequenceGap: an idempotent publish skipped sequence numbers; the
	// *Error's Detail is the sequence the node expects next. Nothing was
	// written.
	ErrSequenceGap error = &wire.Error{Code: wire.CodeSequenceGap}
	// ErrLagged: a subscription fell behind its queue and the node ended it;
	// the *Error's Detail is the offset to resume from. Subscription.Next
	// returns it wrapped in a *LaggedError.
	ErrLagged error = &wire.Error{Code: wire.CodeLagged}
	// ErrDuplicateSequence: an idempotent re-send of a batch written too long
	// ago for the node to answer with its offsets. It was written once;
	// nothing was written again.
	ErrDuplicateSequence error = &wire.Error{Code: wire.CodeDuplicateSequence}
	// ErrInvalidCursor: a GroupMember.Ack cursor the node did not mint
	// for this stream and group (corrupt, or from another group). The group
	// stream goes on.
	ErrInvalidCursor error = &wire.Error{Code: wire.CodeInvalidCursor}
	// ErrStaleCursor: a GroupMember.Ack cursor from a membership that
	// has ended (the member left, expired or was rebalanced away from the
	// cursor's shard); its records are redelivered, to this member or
	// another. The group stream goes on.
	ErrStaleCursor error = &wire.Error{Code: wire.CodeStaleCursor}
	// ErrNotDelivered: a Group.Ack or Group.Nack names an offset the group has
	// not delivered yet; nothing was changed. The *Error's Detail is the
	// shard's first offset never delivered.
	ErrNotDelivered error = &wire.Error{Code: wire.CodeNotDelivered}
	// ErrTooManyClaims: the group holds its maximum of in-flight claims;
	// poll again after some are acked, nacked or expired.
	ErrTooManyClaims error = &wire.Error{Code: wire.CodeTooManyClaims}
	// ErrSessionExpired: the group member was silent (no ack, no heartbeat)
	// past the group's session timeout and the node removed it; its
	// GroupMember has ended. Subscribe to the group again.
	ErrSessionExpired error = &wire.Error{Code: wire.CodeSessionExpired}
	// ErrGroupNotFound: the group has never been used on this stream (or
	// was deleted since: Group.Delete).
	ErrGroupNotFound error = &wire.Error{Code: wire.CodeGroupNotFound}
	// ErrStreamNotDurable: the operation needs a durable stream; consumer
	// groups do.
	ErrStreamNotDurable error = &wire.Error{Code: wire.CodeStreamNotDurable}
	// ErrQuotaExceeded: the tenant has the node's maximum of streams
	// (max_streams_per_tenant), or the stream its maximum of consumer groups
	// (group_max_per_stream); waiting does not help.
	ErrQuotaExceeded error = &wire.Error{Code: wire.CodeQuotaExceeded}
	// ErrGroupInUse: a Group.Delete or Group.Seek refused because of what
	// the group is doing: it has push members (GroupMembers), or, for a
	// seek, a shard it moves has records claimed (polled and not yet acked,
	// nacked or expired); the message says which. Nothing was changed. Stop
	// the members or let the claims settle, then try again.
	ErrGroupInUse error = &wire.Error{Code: wire.CodeGroupInUse}
	// ErrNotLeader: the node does not lead the shard of a replicated
	// stream (or cannot reach the cluster's metadata leader for a create).
	// The error's Detail is the leader's node id (0: none known yet); a
	// client dialled with that node's address sends the request there.
	ErrNotLeader error = &wire.Error{Code: wire.CodeNotLeader}
	// ErrReplicationTimeout: a write to a replicated stream was not
	// committed by a quorum in time. It may still commit: re-send it only
	// as an idempotent producer (which then finds its first offsets).
	ErrReplicationTimeout error = &wire.Error{Code: wire.CodeReplicationTimeout}
	// ErrReplicaBehind: a follower of a replicated shard is behind its
	// leader (it has not heard from one for an election timeout, knows
	// none, or has applied too few of the entries its leader committed)
	// and does not serve the read or subscription. The error's Detail is
	// the leader's node id as the follower knows it (0: none). Read from
	// another replica, or ask for the leader (WithReplica).
	ErrReplicaBehind error = &wire.Error{Code: wire.CodeReplicaBehind}
)

// UnsupportedError is the error of a call the node cannot serve because it
// does not announce the protocol feature the call needs (an older node).
// Nothing was sent. It matches errors.ErrUnsupported and, as the client's
// other feature checks do, ErrInvalidRequest.
type UnsupportedError struct {
	// Feature is the feature's name in the protocol ("offsets_for_time",
	// "group_admin").
	Feature string
	// What says what the feature provides, for the message.
	What string
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("herald: the node does not support %s (no %s feature in its welcome)", e.What, e.Feature)
}

// Is matches errors.ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }

// Unwrap returns an invalid_request *Error, so that errors.Is(err,
// ErrInvalidRequest) holds.
func (e *UnsupportedError) Unwrap() error {
	return wire.Errorf(wire.CodeInvalidRequest, "the node does not support %s", e.What)
}

// ErrOutcomeUnknown matches the error of a publish that was written to the
// node but never answered: the stream or the connection ended first (the
// node crashed, shut down, or became unreachable; the client was closed).
// The node may or may not have applied it. Read the shard to find out, or
// re-send it with an idempotent Producer, which the node answers with the
// original offsets if the first attempt landed. Use errors.As for the
// *OutcomeUnknownError and its Cause.
var ErrOutcomeUnknown = errors.New("herald: outcome unknown")

// OutcomeUnknownError is the failure of a publish whose outcome is unknown
// (see ErrOutcomeUnknown). It unwraps to Cause unless Cause is a node error
// code: a code's retry advice (shutting_down says "retry now") is about
// requests the node refused, not about this one.
type OutcomeUnknownError struct {
	// Cause is what ended the stream or the connection.
	Cause error
}

// Error implements error.
func (e *OutcomeUnknownError) Error() string {
	return "herald: outcome unknown: the request was sent but not answered: " + e.Cause.Error()
}

// Is matches ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns Cause, unless it carries a node error code.
func (e *OutcomeUnknownError) Unwrap() error {
	var we *wire.Error
	if errors.As(e.Cause, &we) {
		return nil
	}
	return e.Cause
}

// outcomeUnknown wraps err in an *OutcomeUnknownError (once).
func outcomeUnknown(err error) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &OutcomeUnknownError{Cause: err}
}

// ErrClosed is returned by calls on a Client after Close, and by calls that
// were pending when Close was called.
var ErrClosed = errors.New("herald: client closed")

// ErrSubscriptionClosed is returned by Next after the Subscription's Close,
// and by GroupMember's Next and Ack after its Close.
var ErrSubscriptionClosed = errors.New("herald: subscription closed")

// ErrNoStreamCredit is matched (errors.Is) by the error of a Subscribe or a
// group member's Subscribe whose context ended while it waited for a QUIC
// stream: the connection had as many streams open as the node allows
// (max_streams_per_connection: the control stream, publish streams,
// subscriptions and group members all count). The error matches the
// context's error too. Close a subscription, or subscribe on another
// Client (another connection).
var ErrNoStreamCredit = errors.New("herald: waited for a QUIC stream: the connection has as many open as the node allows (max_streams_per_connection)")

// streamWait wraps err, the context's error of a Subscribe, in
// ErrNoStreamCredit when a reader of it was waiting for stream credit.
func streamWait(waiting *atomic.Int32, err error) error {
	if waiting.Load() > 0 {
		return fmt.Errorf("%w: %w", ErrNoStreamCredit, err)
	}
	return err
}

// LaggedError is returned by Subscription.Next when the node ended a shard's
// subscription because it fell behind its queue (the stream's overflow
// policy dropped a batch for it, on a durable stream). The events before
// ResumeFrom were delivered; subscribe to Shard again from ResumeFrom to
// continue without a gap, or use WithAutoResume to have the subscription do it.
// It unwraps to the node's *Error (ErrLagged).
type LaggedError struct {
	// Shard is the shard whose subscription ended.
	Shard uint32
	// ResumeFrom is the first offset not delivered.
	ResumeFrom uint64
	// Err is the node's error.
	Err *Error
}

// Error implements error.
func (e *LaggedError) Error() string {
	return fmt.Sprintf("herald: shard %d lagged: resume from offset %d", e.Shard, e.ResumeFrom)
}

// Unwrap returns the node's error.
func (e *LaggedError) Unwrap() error { return e.Err }

// OffsetOutOfRangeError is the node's refusal of a subscription's start
// offset, for one shard. Detail is the shard's first retained offset when
// Offset was below it (BelowRetention), the shard's tail when Offset was
// beyond it. It unwraps to the node's *Error (ErrOffsetOutOfRange).
type OffsetOutOfRangeError struct {
	// Shard is the refused shard.
	Shard uint32
	// Offset is the offset asked for.
	Offset uint64
	// Detail is the first retained offset or the tail (see above).
	Detail uint64
	// Err is the node's error.
	Err *Error
}

// BelowRetention reports whether Offset was below the first retained
// offset, which Detail then is.
func (e *OffsetOutOfRangeError) BelowRetention() bool { return e.Offset < e.Detail }

// Error implements error.
func (e *OffsetOutOfRangeError) Error() string {
	if e.BelowRetention() {
		return fmt.Sprintf("herald: shard %d: offset %d is no longer retained; the first retained offset is %d", e.Shard, e.Offset, e.Detail)
	}
	return fmt.Sprintf("herald: shard %d: offset %d is beyond the tail %d", e.Shard, e.Offset, e.Detail)
}

// Unwrap returns the node's error.
func (e *OffsetOutOfRangeError) Unwrap() error { return e.Err }

// ShardError is another error that ended or refused one shard of a
// subscription (for example ErrSubscriptionAborted, or ErrStreamNotFound
// after the stream was deleted). It unwraps to Err.
type ShardError struct {
	// Shard is the shard concerned.
	Shard uint32
	// Err is the cause, usually the node's *Error.
	Err error
}

// Error implements error.
func (e *ShardError) Error() string { return fmt.Sprintf("herald: shard %d: %v", e.Shard, e.Err) }

// Unwrap returns the cause.
func (e *ShardError) Unwrap() error { return e.Err }

// ProducerError is the failure of an idempotent producer's publish: the
// batch carried Sequence on Shard. If Err's outcome is unknown (a connection
// failure, the context ending after the publish was sent, or a code whose
// Retry is wire.RetryOutcomeUnknown), re-send the same payloads with
// Producer.PublishSequence and this Sequence: the node writes it if the first
// attempt did not land, and answers with the original offsets
// (PublishAck.Duplicate) if it did. It unwraps to Err.
type ProducerError struct {
	// Shard is the batch's shard.
	Shard uint32
	// Sequence is the batch's sequence number on Shard.
	Sequence uint64
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *ProducerError) Error() string {
	return fmt.Sprintf("herald: idempotent publish of sequence %d on shard %d: %v", e.Sequence, e.Shard, e.Err)
}

// Unwrap returns the cause.
func (e *ProducerError) Unwrap() error { return e.Err }

// GapError is returned by Subscription.Next, once, where a shard's records
// could not all be delivered across a lost connection: the subscription
// resumed the shard after reconnecting, and the node no longer had the
// records from From on (an ephemeral shard lost them when its node
// restarted, or evicted them; on a durable stream, retention deleted them
// meanwhile). Delivery of the shard goes on at To: call Next again. The
// events before it were delivered; From is the first offset not delivered.
//
// To below From means the shard's offsets restarted (an ephemeral shard
// starts again at 0 when its node restarts): the records from From on of
// the shard as it was are lost, and the events after the GapError are new
// records, numbered from To.
//
// A GapError does not end the subscription: it is the only error Next
// returns that the next Next call follows with more events.
type GapError struct {
	// Shard is the shard concerned.
	Shard uint32
	// From is the first offset not delivered.
	From uint64
	// To is the offset delivery goes on at.
	To uint64
}

// Error implements error.
func (e *GapError) Error() string {
	if e.To < e.From {
		return fmt.Sprintf("herald: shard %d: records from offset %d were lost (the shard's offsets restarted); delivery goes on at offset %d", e.Shard, e.From, e.To)
	}
	return fmt.Sprintf("herald: shard %d: records %d to %d were lost; delivery goes on at offset %d", e.Shard, e.From, e.To-1, e.To)
}

// Reset reports whether the shard's offsets restarted (To < From).
func (e *GapError) Reset() bool { return e.To < e.From }
