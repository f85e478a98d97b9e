package wire_test

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// codeTable is the error code table as clients rely on it: numbers, names and
// retry classes are part of the protocol and may never change.
var codeTable = []struct {
	code  wire.Code
	num   uint16
	name  string
	retry wire.RetryClass
}{
	{wire.CodeMalformedFrame, 1, "malformed_frame", wire.RetryFatal},
	{wire.CodeFrameTooLarge, 2, "frame_too_large", wire.RetryFatal},
	{wire.CodeUnsupportedVersion, 3, "unsupported_version", wire.RetryFatal},
	{wire.CodeUnknownFrameType, 4, "unknown_frame_type", wire.RetryFatal},
	{wire.CodeInvalidStreamName, 5, "invalid_stream_name", wire.RetryFatal},
	{wire.CodeStreamNotFound, 6, "stream_not_found", wire.RetryFatal},
	{wire.CodeStreamExists, 7, "stream_exists", wire.RetryFatal},
	{wire.CodeInvalidConfig, 8, "invalid_config", wire.RetryFatal},
	{wire.CodeInvalidShard, 9, "invalid_shard", wire.RetryFatal},
	{wire.CodeOffsetOutOfRange, 10, "offset_out_of_range", wire.RetryFatal},
	{wire.CodeStorageFailure, 11, "storage_failure", wire.RetryOutcomeUnknown},
	{wire.CodeOverloaded, 12, "overloaded", wire.RetryAfter},
	{wire.CodeShuttingDown, 13, "shutting_down", wire.RetryNow},
	{wire.CodeUnauthenticated, 14, "unauthenticated", wire.RetryFatal},
	{wire.CodePermissionDenied, 15, "permission_denied", wire.RetryFatal},
	{wire.CodeInternal, 16, "internal", wire.RetryOutcomeUnknown},
	{wire.CodeBatchTooLarge, 17, "batch_too_large", wire.RetryFatal},
	{wire.CodeProtocolViolation, 18, "protocol_violation", wire.RetryFatal},
	{wire.CodeSubscriptionAborted, 19, "subscription_aborted", wire.RetryNow},
	{wire.CodeInvalidRequest, 20, "invalid_request", wire.RetryFatal},
	{wire.CodeConditionFailed, 21, "condition_failed", wire.RetryFatal},
	{wire.CodeSequenceGap, 22, "sequence_gap", wire.RetryFatal},
	{wire.CodeLagged, 23, "lagged", wire.RetryNow},
	{wire.CodeDuplicateSequence, 24, "duplicate_sequence", wire.RetryFatal},
	{wire.CodeInvalidCursor, 25, "invalid_cursor", wire.RetryFatal},
	{wire.CodeStaleCursor, 26, "stale_cursor", wire.RetryFatal},
	{wire.CodeNotDelivered, 27, "not_delivered", wire.RetryFatal},
	{wire.CodeTooManyClaims, 28, "too_many_claims", wire.RetryAfter},
	{wire.CodeSessionExpired, 29, "session_expired", wire.RetryNow},
	{wire.CodeGroupNotFound, 30, "group_not_found", wire.RetryFatal},
	{wire.CodeStreamNotDurable, 31, "stream_not_durable", wire.RetryFatal},
	{wire.CodeQuotaExceeded, 32, "quota_exceeded", wire.RetryFatal},
	{wire.CodeGroupInUse, 33, "group_in_use", wire.RetryFatal},
	{wire.CodeNotLeader, 34, "not_leader", wire.RetryNow},
	{wire.CodeReplicationTimeout, 35, "replication_timeout", wire.RetryOutcomeUnknown},
	{wire.CodeReplicaBehind, 36, "replica_behind", wire.RetryNow},
}

func TestCodesTable(t *testing.T) {
	codes := wire.Codes()
	if len(codes) != len(codeTable) {
		t.Fatalf("Codes() has %d codes, the table %d: add the new code to codeTable and docs/protocol.md", len(codes), len(codeTable))
	}
	for i, tc := range codeTable {
		t.Run(tc.name, func(t *testing.T) {
			if uint16(tc.code) != tc.num {
				t.Errorf("%s is %d, want %d: codes are never renumbered", tc.name, uint16(tc.code), tc.num)
			}
			if codes[i] != tc.code {
				t.Errorf("Codes()[%d] = %d, want %d", i, codes[i], tc.code)
			}
			if got := tc.code.String(); got != tc.name {
				t.Errorf("String() = %q, want %q", got, tc.name)
			}
			if got := tc.code.Retry(); got != tc.retry {
				t.Errorf("Retry() = %d, want %d", got, tc.retry)
			}
		})
	}
}

func TestCodesOrderedAndNamed(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]wire.Code{}
	codes := wire.Codes()
	for i, c := range codes {
		if i > 0 && codes[i-1] >= c {
			t.Errorf("Codes() not strictly increasing at %d: %d then %d", i, codes[i-1], c)
		}
		name := c.String()
		if !snake.MatchString(name) {
			t.Errorf("code %d name %q is not snake_case", c, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("codes %d and %d share the name %q", other, c, name)
		}
		seen[name] = c
	}
}

func TestUnknownCode(t *testing.T) {
	// The first code past the table is the next one to be assigned.
	next := codeTable[len(codeTable)-1].code + 1
	for _, c := range []wire.Code{0, next, 999, 0xffff} {
		if got, want := c.String(), fmt.Sprintf("code_%d", uint16(c)); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", c, got, want)
		}
		if got := c.Retry(); got != wire.RetryOutcomeUnknown {
			t.Errorf("Code(%d).Retry() = %d, want RetryOutcomeUnknown", c, got)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		err  *wire.Error
		want string
	}{
		{&wire.Error{Code: wire.CodeStreamNotFound}, "herald: stream_not_found"},
		{&wire.Error{Code: wire.CodeStreamNotFound, Message: "a/b/c"}, "herald: stream_not_found: a/b/c"},
		{wire.Errorf(wire.CodeInvalidShard, "shard %d of %d", 4, 4), "herald: invalid_shard: shard 4 of 4"},
		{&wire.Error{Code: 77}, "herald: code_77"},
	}
	for _, tc := range tests {
		// Error() is the human text; it is checked here once, and never used
		// to classify errors anywhere else.
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := error(&wire.Error{Code: wire.CodeStreamNotFound, Message: "x", Detail: 3})
	wrapped := fmt.Errorf("describe: %w", err)
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same code", err, &wire.Error{Code: wire.CodeStreamNotFound}, true},
		{"same code other message", err, wire.Errorf(wire.CodeStreamNotFound, "other"), true},
		{"other code", err, &wire.Error{Code: wire.CodeStreamExists}, false},
		{"wrapped", wrapped, &wire.Error{Code: wire.CodeStreamNotFound}, true},
		{"wrapped other code", wrapped, &wire.Error{Code: wire.CodeInternal}, false},
		{"not a wire error", err, io.EOF, false},
		{"typed nil target", err, (*wire.Error)(nil), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, tc.target); got != tc.want {
				t.Errorf("errors.Is = %v, want %v", got, tc.want)
			}
		})
	}
	var we *wire.Error
	if !errors.As(wrapped, &we) || we.Detail != 3 || we.Code != wire.CodeStreamNotFound {
		t.Errorf("errors.As(wrapped) = %+v", we)
	}
}

// Exactly the framing codes close a connection; every decoder error of
// another code refuses one request (docs/protocol.md, "Malformed input").
func TestFramingAndRequestErrors(t *testing.T) {
	framing := map[wire.Code]bool{wire.CodeMalformedFrame: true, wire.CodeFrameTooLarge: true, wire.CodeUnknownFrameType: true, wire.CodeProtocolViolation: true}
	for _, c := range wire.Codes() {
		if c.Framing() != framing[c] {
			t.Errorf("%v.Framing() = %v, want %v", c, c.Framing(), framing[c])
		}
		err := fmt.Errorf("wrapped: %w", wire.Errorf(c, "x"))
		if got := wire.RequestError(err); (got != nil) == framing[c] {
			t.Errorf("wire.RequestError(%v) = %v", c, got)
		}
	}
	if wire.RequestError(io.ErrUnexpectedEOF) != nil {
		t.Error("RequestError of a non-protocol error is not nil")
	}
	// The decoders' request errors.
	if _, err := wire.DecodeSubscribe(wire.AppendSubscribe(nil, 1, wire.Subscribe{Name: wire.StreamName{"t", "n", "s"}, Start: wire.StartKind(5)})[wire.HeaderSize:]); wire.RequestError(err) == nil {
		t.Errorf("unknown start kind: %v, want a request error", err)
	}
}

// ShardOutOfRange names the shard asked for and the shards there are.
func TestShardOutOfRange(t *testing.T) {
	name := wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	for _, c := range []struct {
		shard  uint64
		shards int
		want   string
	}{
		{3, 1, "shard 3 of stream t/n/s: it has one shard, 0"},
		{4, 4, "shard 4 of stream t/n/s: it has 4 shards, 0 to 3"},
	} {
		e := wire.ShardOutOfRange(name, c.shard, c.shards)
		if e.Code != wire.CodeInvalidShard || e.Message != c.want {
			t.Errorf("ShardOutOfRange(%d, %d) = %s %q, want invalid_shard %q", c.shard, c.shards, e.Code, e.Message, c.want)
		}
	}
}
