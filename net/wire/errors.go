package wire

import (
	"errors"
	"fmt"
)

// Code is a stable error code carried by Error frames. Codes are never
// renumbered; new ones are appended.
type Code uint16

// Error codes. docs/protocol.md lists them with their retry classes.
const (
	CodeMalformedFrame      Code = 1  // the frame could not be decoded; the connection is closed
	CodeFrameTooLarge       Code = 2  // the frame body exceeds the negotiated maximum
	CodeUnsupportedVersion  Code = 3  // the peer speaks a protocol version this side does not
	CodeUnknownFrameType    Code = 4  // the frame type is not defined in this version
	CodeInvalidStreamName   Code = 5  // a stream name part is empty, too long or has bad characters
	CodeStreamNotFound      Code = 6  // the stream does not exist (and auto-create is off)
	CodeStreamExists        Code = 7  // create of a stream that exists with another config
	CodeInvalidConfig       Code = 8  // a stream config value is out of range
	CodeInvalidShard        Code = 9  // the shard index is not below the stream's shard count
	CodeOffsetOutOfRange    Code = 10 // the offset is beyond the tail or below what is retained
	CodeStorageFailure      Code = 11 // the node could not make the write durable; outcome unknown
	CodeOverloaded          Code = 12 // the node is shedding load; retry after a delay
	CodeShuttingDown        Code = 13 // the node is draining; retry on another node or later
	CodeUnauthenticated     Code = 14 // missing or wrong credentials
	CodePermissionDenied    Code = 15 // the credentials do not allow this operation
	CodeInternal            Code = 16 // an internal failure; outcome unknown
	CodeBatchTooLarge       Code = 17 // the batch has too many records or bytes
	CodeProtocolViolation   Code = 18 // a valid frame arrived where it is not allowed
	CodeSubscriptionAborted Code = 19 // the node ended the subscription; resubscribe to continue
	CodeInvalidRequest      Code = 20 // a field value is not acceptable (e.g. unknown ack mode)
	CodeConditionFailed     Code = 21 // a conditional publish expected another tail; Detail is the tail
	CodeSequenceGap         Code = 22 // an idempotent publish skipped sequence numbers; Detail is the next expected
	CodeLagged              Code = 23 // the subscription fell behind its queue; Detail is the offset to resume from
	CodeDuplicateSequence   Code = 24 // an idempotent re-send of a batch written too long ago to answer with its offsets
	CodeInvalidCursor       Code = 25 // a group cursor that this node did not mint for this stream and group
	CodeStaleCursor         Code = 26 // a group cursor from a membership that has ended; its records are redelivered
	CodeNotDelivered        Code = 27 // a group ack or nack for an offset the group has not delivered
	CodeTooManyClaims       Code = 28 // the group holds its maximum of in-flight claims; retry after some are settled
	CodeSessionExpired      Code = 29 // the group member was silent past the session timeout; join again
	CodeGroupNotFound       Code = 30 // the group has never been used on this stream
	CodeStreamNotDurable    Code = 31 // the operation needs a durable stream (consumer groups do)
	CodeQuotaExceeded       Code = 32 // the tenant has its maximum of streams, or the stream of groups; delete some first
	CodeGroupInUse          Code = 33 // a group delete or seek while the group has push members (a seek: or claims in flight)
	CodeNotLeader           Code = 34 // the node does not lead the shard (or the cluster's metadata); Detail is the leader's node id (0: none known yet)
	CodeReplicationTimeout  Code = 35 // a replicated write was not committed in time (no quorum); outcome unknown
	CodeReplicaBehind       Code = 36 // a follower is behind its leader (cut off, or lagging) and does not serve the read; Detail is the leader's node id (0: none known)
)

// RetryClass says what a caller should do about an error.
type RetryClass uint8

// Retry classes.
const (
	// RetryFatal: the request is wrong; fix it, do not retry as is.
	RetryFatal RetryClass = iota
	// RetryNow: transient; the request was not applied and may be retried.
	RetryNow
	// RetryAfter: the node is overloaded; retry after a delay.
	RetryAfter
	// RetryOutcomeUnknown: the request may have been applied. A publish must not
	// be blindly re-sent unless it is idempotent; read to find out.
	RetryOutcomeUnknown
)

type codeInfo struct {
	name  string
	retry RetryClass
}

var codes = map[Code]codeInfo{
	CodeMalformedFrame:      {"malformed_frame", RetryFatal},
	CodeFrameTooLarge:       {"frame_too_large", RetryFatal},
	CodeUnsupportedVersion:  {"unsupported_version", RetryFatal},
	CodeUnknownFrameType:    {"unknown_frame_type", RetryFatal},
	CodeInvalidStreamName:   {"invalid_stream_name", RetryFatal},
	CodeStreamNotFound:      {"stream_not_found", RetryFatal},
	CodeStreamExists:        {"stream_exists", RetryFatal},
	CodeInvalidConfig:       {"invalid_config", RetryFatal},
	CodeInvalidShard:        {"invalid_shard", RetryFatal},
	CodeOffsetOutOfRange:    {"offset_out_of_range", RetryFatal},
	CodeStorageFailure:      {"storage_failure", RetryOutcomeUnknown},
	CodeOverloaded:          {"overloaded", RetryAfter},
	CodeShuttingDown:        {"shutting_down", RetryNow},
	CodeUnauthenticated:     {"unauthenticated", RetryFatal},
	CodePermissionDenied:    {"permission_denied", RetryFatal},
	CodeInternal:            {"internal", RetryOutcomeUnknown},
	CodeBatchTooLarge:       {"batch_too_large", RetryFatal},
	CodeProtocolViolation:   {"protocol_violation", RetryFatal},
	CodeSubscriptionAborted: {"subscription_aborted", RetryNow},
	CodeInvalidRequest:      {"invalid_request", RetryFatal},
	CodeConditionFailed:     {"condition_failed", RetryFatal},
	CodeSequenceGap:         {"sequence_gap", RetryFatal},
	CodeLagged:              {"lagged", RetryNow},
	CodeDuplicateSequence:   {"duplicate_sequence", RetryFatal},
	CodeInvalidCursor:       {"invalid_cursor", RetryFatal},
	CodeStaleCursor:         {"stale_cursor", RetryFatal},
	CodeNotDelivered:        {"not_delivered", RetryFatal},
	CodeTooManyClaims:       {"too_many_claims", RetryAfter},
	CodeSessionExpired:      {"session_expired", RetryNow},
	CodeGroupNotFound:       {"group_not_found", RetryFatal},
	CodeStreamNotDurable:    {"stream_not_durable", RetryFatal},
	CodeQuotaExceeded:       {"quota_exceeded", RetryFatal},
	CodeGroupInUse:          {"group_in_use", RetryFatal},
	CodeNotLeader:           {"not_leader", RetryNow},
	CodeReplicationTimeout:  {"replication_timeout", RetryOutcomeUnknown},
	CodeReplicaBehind:       {"replica_behind", RetryNow},
}

// String returns the code's stable snake_case name.
func (c Code) String() string {
	if info, ok := codes[c]; ok {
		return info.name
	}
	return fmt.Sprintf("code_%d", uint16(c))
}

// Retry returns the code's retry class; unknown codes are treated as
// outcome-unknown, the safest reading.
func (c Code) Retry() RetryClass {
	if info, ok := codes[c]; ok {
		return info.retry
	}
	return RetryOutcomeUnknown
}

// Framing reports whether c is a framing error: the peer is broken or
// hostile, the frames after it cannot be trusted, and the connection is
// closed. Any other code refuses one request and the connection stays up
// (docs/protocol.md, "Malformed input").
func (c Code) Framing() bool {
	switch c {
	case CodeMalformedFrame, CodeFrameTooLarge, CodeUnknownFrameType, CodeProtocolViolation:
		return true
	}
	return false
}

// RequestError returns err's *Error when err is a request error (a protocol
// error whose code is not a framing one), else nil.
func RequestError(err error) *Error {
	var werr *Error
	if errors.As(err, &werr) && !werr.Code.Framing() {
		return werr
	}
	return nil
}

// Codes returns every defined code in numeric order (for docs and tests).
func Codes() []Code {
	out := make([]Code, 0, len(codes))
	for c := Code(1); int(c) <= len(codes)+64; c++ {
		if _, ok := codes[c]; ok {
			out = append(out, c)
		}
	}
	return out
}

// Error is a protocol error: a code, a message for humans, and an optional
// detail whose meaning depends on the code (for CodeOffsetOutOfRange it is
// the shard's tail, or its first retained offset when the request was below
// retention; docs/protocol.md lists them). It is what decoders return and what Error frames carry.
type Error struct {
	Code    Code
	Message string
	Detail  uint64
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return "herald: " + e.Code.String()
	}
	return "herald: " + e.Code.String() + ": " + e.Message
}

// Is reports whether target is an *Error with the same code, so
// errors.Is(err, &wire.Error{Code: wire.CodeStreamNotFound}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) && t != nil {
		return t.Code == e.Code
	}
	return false
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ShardOutOfRange is the invalid_shard error for a request naming shard of
// stream name, which has shards shards: it says which shards there are.
func ShardOutOfRange(name fmt.Stringer, shard uint64, shards int) *Error {
	if shards == 1 {
		return Errorf(CodeInvalidShard, "shard %d of stream %s: it has one shard, 0", shard, name)
	}
	return Errorf(CodeInvalidShard, "shard %d of stream %s: it has %d shards, 0 to %d", shard, name, shards, shards-1)
}

func malformed(format string, args ...any) *Error {
	return Errorf(CodeMalformedFrame, format, args...)
}
