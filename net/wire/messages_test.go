package wire_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// roundTrip checks that frame is one frame of type typ with request id reqID
// whose body decodes to want, that the decoder rejects every prefix of the
// body shorter than fixed bytes and, when strict, any trailing byte.
func roundTrip[T any](t *testing.T, frame []byte, typ wire.Type, reqID uint64, decode func([]byte) (T, error), want T, fixed int, strict bool) {
	t.Helper()
	f := splitFrame(t, frame)
	if f.Header.Type != typ || f.Header.RequestID != reqID || f.Header.Flags != 0 {
		t.Fatalf("header %+v, want type %v request %d flags 0", f.Header, typ, reqID)
	}
	got, err := decode(f.Body)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !sameValue(got, want) {
		t.Fatalf("decoded %+v\nwant     %+v", got, want)
	}
	if fixed < 0 {
		fixed = len(f.Body)
	}
	for n := 0; n < fixed; n++ {
		_, err := decode(f.Body[:n:n])
		wantCode(t, err, wire.CodeMalformedFrame)
	}
	if strict {
		_, err := decode(append(bytes.Clone(f.Body), 0))
		wantCode(t, err, wire.CodeMalformedFrame)
	}
}

var (
	nameABC  = wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	nameLong = wire.StreamName{Tenant: repeatString('t', 64), Namespace: repeatString('n', 64), Stream: repeatString('s', 64)}
)

func TestHelloRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		reqID uint64
		h     wire.Hello
	}{
		{"zero", 0, wire.Hello{}},
		{"typical", 1, wire.Hello{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes, Token: "secret", ClientName: "herald-go/0.1"}},
		{"extremes", math.MaxUint64, wire.Hello{Version: math.MaxUint16, Features: math.MaxUint64, MaxFrameBytes: math.MaxUint32, Token: repeatString('x', 65535), ClientName: "é"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendHello(nil, tc.reqID, tc.h), wire.TypeHello, tc.reqID, wire.DecodeHello, tc.h, -1, true)
		})
	}
}

func TestWelcomeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		w    wire.Welcome
	}{
		{"zero", wire.Welcome{}},
		{"typical", wire.Welcome{Version: wire.Version, Features: wire.FeatureEventBatch, MaxFrameBytes: 1 << 20, PublishWindow: 64, NodeID: "node-1"}},
		{"extremes", wire.Welcome{Version: math.MaxUint16, Features: math.MaxUint64, MaxFrameBytes: math.MaxUint32, PublishWindow: math.MaxUint32, NodeID: repeatString('n', 300)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendWelcome(nil, 1, tc.w), wire.TypeWelcome, 1, wire.DecodeWelcome, tc.w, -1, true)
		})
	}
}

func TestErrorRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		reqID uint64
		in    *wire.Error
		want  *wire.Error
	}{
		{"bare", 0, &wire.Error{Code: wire.CodeInternal}, &wire.Error{Code: wire.CodeInternal}},
		{"detail", 5, &wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "offset 90 beyond tail 80", Detail: 80},
			&wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "offset 90 beyond tail 80", Detail: 80}},
		{"unknown code travels", 6, &wire.Error{Code: 999, Detail: math.MaxUint64}, &wire.Error{Code: 999, Detail: math.MaxUint64}},
		{"message at the cap", 7, &wire.Error{Code: wire.CodeInvalidRequest, Message: repeatString('m', 1024)},
			&wire.Error{Code: wire.CodeInvalidRequest, Message: repeatString('m', 1024)}},
		{"message truncated to 1024 bytes", 8, &wire.Error{Code: wire.CodeInvalidRequest, Message: repeatString('m', 5000)},
			&wire.Error{Code: wire.CodeInvalidRequest, Message: repeatString('m', 1024)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendError(nil, tc.reqID, tc.in), wire.TypeError, tc.reqID, wire.DecodeError, tc.want, -1, true)
		})
	}
	// A decoded Error is an error like any other.
	f := splitFrame(t, wire.AppendError(nil, 1, &wire.Error{Code: wire.CodeOverloaded}))
	e, err := wire.DecodeError(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, e, wire.CodeOverloaded)
	if e.Code.Retry() != wire.RetryAfter {
		t.Errorf("overloaded retry class %d", e.Code.Retry())
	}
}

func TestGoAwayRoundTrip(t *testing.T) {
	for _, reason := range []string{"", "draining for upgrade", repeatString('r', 65535)} {
		roundTrip(t, wire.AppendGoAway(nil, reason), wire.TypeGoAway, 0, wire.DecodeGoAway, reason, -1, true)
	}
}

var (
	// cfgFull sets every config field to a distinct non-zero value.
	cfgFull = wire.StreamConfig{Shards: 8, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowBlock,
		QueueCapacity: 256, QueueMaxBytes: 64 << 20, RetentionAgeMillis: 86_400_000, RetentionBytes: 1 << 30}
	// cfgMax sets every config field to its largest valid value.
	cfgMax = wire.StreamConfig{Shards: math.MaxUint32, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowBlock,
		QueueCapacity: math.MaxUint32, QueueMaxBytes: math.MaxUint64, RetentionAgeMillis: math.MaxUint64, RetentionBytes: math.MaxUint64}
)

func TestCreateStreamRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    wire.CreateStream
	}{
		{"ephemeral", wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 1}}},
		{"durable", wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 16, Durable: true}}},
		{"every field", wire.CreateStream{Name: nameABC, Config: cfgFull}},
		{"long names and extremes", wire.CreateStream{Name: nameLong, Config: cfgMax}},
		// The codec carries names and values as given; validating them is
		// the node's job.
		{"empty name", wire.CreateStream{}},
	}
	for _, r := range []wire.Routing{wire.RoutingHash, wire.RoutingJump} {
		for _, o := range []wire.Overflow{wire.OverflowDropNew, wire.OverflowDropOld, wire.OverflowBlock} {
			tests = append(tests, struct {
				name string
				c    wire.CreateStream
			}{r.String() + "/" + o.String(), wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 4, Routing: r, Overflow: o}}})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendCreateStream(nil, 3, tc.c), wire.TypeCreateStream, 3, wire.DecodeCreateStream, tc.c, -1, true)
		})
	}
}

// nameLen is the encoded size of nameABC.
var nameLen = 3 + len(nameABC.Tenant) + len(nameABC.Namespace) + len(nameABC.Stream)

// configSize is the encoded size of a stream config.
const configSize = 35

func TestStreamConfigLayout(t *testing.T) {
	c := wire.StreamConfig{Shards: 0x01020304, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowBlock,
		QueueCapacity: 0x05060708, QueueMaxBytes: 0x1112131415161718, RetentionAgeMillis: 0x2122232425262728, RetentionBytes: 0x3132333435363738}
	body := splitFrame(t, wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameABC, Config: c})).Body
	want, _ := hex.DecodeString("01020304" + "01" + "01" + "02" + "05060708" + "1112131415161718" + "2122232425262728" + "3132333435363738")
	if len(want) != configSize || len(body) != nameLen+configSize || !bytes.Equal(body[nameLen:], want) {
		t.Fatalf("config encodes as %x, want %x", body[nameLen:], want)
	}
	// The zero config is all zeros: default routing (hash), overflow
	// (drop_new), queue bounds and retention.
	body = splitFrame(t, wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameABC})).Body
	if !bytes.Equal(body[nameLen:], make([]byte, configSize)) {
		t.Fatalf("zero config encodes as %x", body[nameLen:])
	}
}

func TestStreamConfigRefused(t *testing.T) {
	frame := wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 2, Durable: true}})
	body := splitFrame(t, frame).Body
	flagsAt, routingAt, overflowAt := nameLen+4, nameLen+5, nameLen+6
	if body[flagsAt] != 1 || body[routingAt] != 0 || body[overflowAt] != 0 {
		t.Fatalf("flags, routing, overflow bytes = %x", body[flagsAt:overflowAt+1])
	}
	info := splitFrame(t, wire.AppendStreamInfo(nil, 1, wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 1}, Tails: []uint64{0}})).Body
	tests := []struct {
		name string
		at   int
		vals []byte
	}{
		{"unknown config flags", flagsAt, []byte{0x02, 0x03, 0x80, 0xff}},
		{"unknown routing", routingAt, []byte{2, 0x80, 0xff}},
		{"unknown overflow", overflowAt, []byte{3, 0x80, 0xff}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range tc.vals {
				bad := bytes.Clone(body)
				bad[tc.at] = v
				_, err := wire.DecodeCreateStream(bad)
				wantCode(t, err, wire.CodeMalformedFrame)
				// StreamInfo (and so StreamList) carries the same config.
				bad = bytes.Clone(info)
				bad[tc.at] = v
				_, err = wire.DecodeStreamInfo(bad)
				wantCode(t, err, wire.CodeMalformedFrame)
				_, err = wire.DecodeStreamList(append([]byte{0, 0, 0, 1}, bad...))
				wantCode(t, err, wire.CodeMalformedFrame)
			}
		})
	}
	// Every defined value decodes.
	for _, v := range []struct{ at, val int }{{flagsAt, 0}, {flagsAt, 1}, {routingAt, 0}, {routingAt, 1}, {overflowAt, 0}, {overflowAt, 1}, {overflowAt, 2}} {
		ok := bytes.Clone(body)
		ok[v.at] = byte(v.val)
		if _, err := wire.DecodeCreateStream(ok); err != nil {
			t.Errorf("byte %d = %d: %v", v.at, v.val, err)
		}
	}
}

func TestRoutingOverflowString(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{wire.RoutingHash.String(), "hash"},
		{wire.RoutingJump.String(), "jump"},
		{wire.Routing(2).String(), "routing(2)"},
		{wire.OverflowDropNew.String(), "drop_new"},
		{wire.OverflowDropOld.String(), "drop_old"},
		{wire.OverflowBlock.String(), "block"},
		{wire.Overflow(9).String(), "overflow(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
	// The defaults are the zero values.
	if (wire.StreamConfig{}).Routing != wire.RoutingHash || (wire.StreamConfig{}).Overflow != wire.OverflowDropNew {
		t.Error("zero config is not hash routing / drop_new")
	}
}

func TestDescribeStreamRoundTrip(t *testing.T) {
	for _, n := range []wire.StreamName{nameABC, nameLong, {}} {
		roundTrip(t, wire.AppendDescribeStream(nil, 4, n), wire.TypeDescribeStream, 4, wire.DecodeDescribeStream, n, -1, true)
	}
}

func TestListStreamsRoundTrip(t *testing.T) {
	for _, l := range []wire.ListStreams{{}, {Tenant: "acme"}, {Tenant: "acme", Namespace: "shop"}} {
		roundTrip(t, wire.AppendListStreams(nil, 5, l), wire.TypeListStreams, 5, wire.DecodeListStreams, l, -1, true)
	}
}

var (
	infoOne = wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 1}, CreatedUnixNano: 1_700_000_000_000_000_000, Tails: []uint64{42}}
	infoMax = wire.StreamInfo{Name: nameLong, Config: wire.StreamConfig{Shards: 3, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowDropOld,
		QueueCapacity: math.MaxUint32, QueueMaxBytes: math.MaxUint64, RetentionAgeMillis: math.MaxUint64, RetentionBytes: math.MaxUint64},
		CreatedUnixNano: math.MinInt64, Tails: []uint64{0, math.MaxUint64, 7}}
	infoFull    = wire.StreamInfo{Name: nameABC, Config: cfgFull, CreatedUnixNano: 1, Tails: []uint64{1, 2, 3, 4, 5, 6, 7, 8}}
	infoNoTails = wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 0}, CreatedUnixNano: -1}
	// infoReplicated is a replicated stream's: a replicas byte in its
	// config, and each shard's raft group after the tails.
	infoReplicated = wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 2, Durable: true, Replicas: 3}, CreatedUnixNano: 5,
		Tails: []uint64{10, 0}, Replication: []wire.ShardReplication{
			{Leader: 2, Term: 7, Commit: 12, Replicas: []wire.ReplicaState{{Node: 2, Lag: 0}, {Node: 1, Lag: 3}, {Node: 3, Lag: wire.LagUnknown}}},
			{Replicas: []wire.ReplicaState{}},
		}}
	// infoReplicatedDetail is what a node sends a client that announced
	// follower_reads: each replica's lag in records and bytes too.
	infoReplicatedDetail = wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 2, Durable: true, Replicas: 3}, CreatedUnixNano: 5,
		Tails: []uint64{10, 0}, Replication: []wire.ShardReplication{
			{Leader: 2, Term: 7, Commit: 12, LagDetail: true, Replicas: []wire.ReplicaState{{Node: 2}, {Node: 1, Lag: 3, LagRecords: 192, LagBytes: 24576},
				{Node: 3, Lag: wire.LagUnknown, LagRecords: wire.LagUnknown, LagBytes: wire.LagUnknown}}},
			{LagDetail: true, Replicas: []wire.ReplicaState{}},
		}}
)

func TestStreamInfoRoundTrip(t *testing.T) {
	for _, i := range []wire.StreamInfo{infoOne, infoMax, infoFull, infoNoTails, infoReplicated, infoReplicatedDetail} {
		roundTrip(t, wire.AppendStreamInfo(nil, 6, i), wire.TypeStreamInfo, 6, wire.DecodeStreamInfo, i, -1, true)
	}
	// The detail is marked by the top bit of each shard's replica count.
	plain := splitFrame(t, wire.AppendStreamInfo(nil, 6, infoReplicated)).Body
	detail := splitFrame(t, wire.AppendStreamInfo(nil, 6, infoReplicatedDetail)).Body
	if len(detail)-len(plain) != 3*16 {
		t.Fatalf("the detail adds %d bytes, want 48 (16 per replica)", len(detail)-len(plain))
	}
	// A detailed count that runs past the body is refused.
	bad := bytes.Clone(plain)
	at := len(plain) - 1 - 3*16 - 24 - 1 // shard 0's count: before its 3 replicas, shard 1's block and count
	if bad[at] != 3 {
		t.Fatalf("byte %d is %d, want shard 0's replica count 3", at, bad[at])
	}
	bad[at] |= 0x80
	_, err := wire.DecodeStreamInfo(bad)
	wantCode(t, err, wire.CodeMalformedFrame)
}

func TestStreamInfoTailCountBounds(t *testing.T) {
	body := splitFrame(t, wire.AppendStreamInfo(nil, 6, infoNoTails)).Body
	countAt := len(body) - 4
	tests := []struct {
		name  string
		count uint32
		extra int
	}{
		{"count beyond the body", 1, 0},
		{"count over max shards", 1<<16 + 1, (1<<16 + 1) * 8},
		{"huge count", math.MaxUint32, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := append(bytes.Clone(body), make([]byte, tc.extra)...)
			bad[countAt], bad[countAt+1], bad[countAt+2], bad[countAt+3] = byte(tc.count>>24), byte(tc.count>>16), byte(tc.count>>8), byte(tc.count)
			_, err := wire.DecodeStreamInfo(bad)
			wantCode(t, err, wire.CodeMalformedFrame)
		})
	}
	// Exactly 1<<16 tails is the most a StreamInfo can carry.
	most := wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 1 << 16}, Tails: make([]uint64, 1<<16)}
	roundTrip(t, wire.AppendStreamInfo(nil, 1, most), wire.TypeStreamInfo, 1, wire.DecodeStreamInfo, most, 0, true)
}

func TestStreamListRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		list []wire.StreamInfo
	}{
		{"empty", nil},
		{"one", []wire.StreamInfo{infoOne}},
		{"three", []wire.StreamInfo{infoOne, infoMax, infoNoTails}},
		{"every config field", []wire.StreamInfo{infoFull, infoMax}},
		{"replicated", []wire.StreamInfo{infoReplicated, infoOne}},
		// Entries of the smallest size (3+35+8+4 = 50 bytes) fill the body
		// exactly.
		{"smallest entries", make([]wire.StreamInfo, 9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendStreamList(nil, 7, tc.list), wire.TypeStreamList, 7, wire.DecodeStreamList, tc.list, -1, true)
		})
	}
	// A count that the body cannot hold is refused before allocating.
	_, err := wire.DecodeStreamList([]byte{0xff, 0xff, 0xff, 0xff})
	wantCode(t, err, wire.CodeMalformedFrame)
	_, err = wire.DecodeStreamList(append([]byte{0, 0, 0, 2}, make([]byte, 20)...))
	wantCode(t, err, wire.CodeMalformedFrame)
	// Entries are at least 50 bytes: two need 100, the count included.
	smallest := 3 + configSize + 8 + 4
	_, err = wire.DecodeStreamList(append([]byte{0, 0, 0, 2}, make([]byte, 2*smallest-5)...))
	wantCode(t, err, wire.CodeMalformedFrame)
	list, err := wire.DecodeStreamList(append([]byte{0, 0, 0, 2}, make([]byte, 2*smallest)...))
	if err != nil || len(list) != 2 {
		t.Fatalf("two smallest entries: %+v, %v", list, err)
	}
	// The smallest entry of the previous (5-byte config) layout is refused.
	_, err = wire.DecodeStreamList(append([]byte{0, 0, 0, 1}, make([]byte, 20)...))
	wantCode(t, err, wire.CodeMalformedFrame)
}

func TestPublishRoundTrip(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Key: []byte("k"), Payload: []byte("hello")}, {Payload: []byte("world")}})
	tests := []struct {
		name string
		p    wire.Publish
	}{
		{"no ack", wire.Publish{Name: nameABC, Ack: wire.AckNone, Shard: wire.AnyShard, Count: 2, Records: recs}},
		{"per message", wire.Publish{Name: nameABC, Ack: wire.AckPerMessage, Shard: wire.AnyShard, Key: []byte("user-1"), Count: 2, Records: recs}},
		{"per batch", wire.Publish{Name: nameLong, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: repeat(0xff, 65535), Count: math.MaxUint32, Records: recs}},
		{"explicit shard", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 3, Key: []byte("user-1"), Count: 2, Records: recs}},
		{"shard 0", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Count: 2, Records: recs}},
		{"conditional", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 1, Conditional: true, ExpectedOffset: 41, Count: 2, Records: recs}},
		{"conditional on an empty shard", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 0, Conditional: true, Count: 2, Records: recs}},
		{"idempotent", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: []byte("k"),
			Idempotent: true, ProducerID: 0xfeedface, Sequence: 1, Count: 2, Records: recs}},
		{"conditional and idempotent", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 2, Key: []byte("k"),
			Conditional: true, ExpectedOffset: 7, Idempotent: true, ProducerID: 9, Sequence: 3, Count: 2, Records: recs}},
		{"extremes", wire.Publish{Name: nameLong, Ack: wire.AckPerBatch, Shard: math.MaxUint32 - 1, Key: repeat(0x01, 65535),
			Conditional: true, ExpectedOffset: math.MaxUint64, Idempotent: true, ProducerID: math.MaxUint64, Sequence: math.MaxUint64,
			Count: math.MaxUint32, Records: recs}},
		// Publish does not look inside the records block (ValidateRecords does).
		{"opaque records", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Count: 9, Records: []byte{0x80}}},
		{"empty records", wire.Publish{Name: nameABC}},
		{"empty records, every field", wire.Publish{Name: nameABC, Shard: 5, Conditional: true, ExpectedOffset: 1, Idempotent: true, ProducerID: 2, Sequence: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := wire.AppendPublish(nil, 8, tc.p)
			roundTrip(t, frame, wire.TypePublish, 8, wire.DecodePublish, tc.p, len(frame)-wire.HeaderSize-len(tc.p.Records), false)
		})
	}
}

func TestPublishLayout(t *testing.T) {
	recs := []byte{0x00, 0x00, 0x01, 'p'}
	p := wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 0x0a0b0c0d, Key: []byte("kk"),
		Conditional: true, ExpectedOffset: 0x1112131415161718, Idempotent: true, ProducerID: 0x2122232425262728, Sequence: 0x3132333435363738,
		Count: 1, Records: recs}
	name := splitFrame(t, wire.AppendDescribeStream(nil, 1, nameABC)).Body
	h := func(s string) []byte { b, _ := hex.DecodeString(s); return b }
	tests := []struct {
		name  string
		p     wire.Publish
		flags string
		extra string
	}{
		{"plain", wire.Publish{Name: p.Name, Ack: p.Ack, Shard: p.Shard, Key: p.Key, Count: 1, Records: recs}, "00", ""},
		{"conditional", wire.Publish{Name: p.Name, Ack: p.Ack, Shard: p.Shard, Key: p.Key, Conditional: true, ExpectedOffset: p.ExpectedOffset, Count: 1, Records: recs},
			"01", "1112131415161718"},
		{"idempotent", wire.Publish{Name: p.Name, Ack: p.Ack, Shard: p.Shard, Key: p.Key, Idempotent: true, ProducerID: p.ProducerID, Sequence: p.Sequence, Count: 1, Records: recs},
			"02", "2122232425262728" + "3132333435363738"},
		// The expected offset comes before the producer id and sequence.
		{"both", p, "03", "1112131415161718" + "2122232425262728" + "3132333435363738"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := append(bytes.Clone(name), h("02"+tc.flags+"0a0b0c0d"+"0002"+"6b6b"+tc.extra+"00000001")...)
			want = append(want, recs...)
			if got := splitFrame(t, wire.AppendPublish(nil, 1, tc.p)).Body; !bytes.Equal(got, want) {
				t.Fatalf("body %x\nwant %x", got, want)
			}
		})
	}
	// The fields a flag does not announce are not sent: they decode as zero.
	got, err := wire.DecodePublish(splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, ExpectedOffset: 5, ProducerID: 6, Sequence: 7})).Body)
	if err != nil || got.ExpectedOffset != 0 || got.ProducerID != 0 || got.Sequence != 0 {
		t.Fatalf("unflagged fields travelled: %+v, %v", got, err)
	}
}

func TestPublishFlags(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("p")}})
	body := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Count: 1, Records: recs})).Body
	flagsAt := nameLen + 1
	if body[flagsAt] != 0 {
		t.Fatalf("flags byte %#x", body[flagsAt])
	}
	for _, f := range []byte{0x04, 0x05, 0x07, 0x08, 0x80, 0xff} {
		bad := bytes.Clone(body)
		bad[flagsAt] = f
		_, err := wire.DecodePublish(bad)
		wantCode(t, err, wire.CodeMalformedFrame)
	}
	// A flag whose fields are missing: the body ends inside them.
	bare := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Count: 1})).Body
	for _, f := range []byte{0x01, 0x02, 0x03} {
		bad := bytes.Clone(bare)
		bad[flagsAt] = f
		_, err := wire.DecodePublish(bad)
		wantCode(t, err, wire.CodeMalformedFrame)
	}
	// Every truncation inside the optional fields is refused.
	full := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Shard: 1, Key: []byte("k"), Conditional: true, ExpectedOffset: 1,
		Idempotent: true, ProducerID: 2, Sequence: 3, Count: 1})).Body
	for n := nameLen + 9; n < len(full); n++ {
		_, err := wire.DecodePublish(full[:n:n])
		wantCode(t, err, wire.CodeMalformedFrame)
	}
	// An unknown flag is a framing error even when the ack mode is fine, and
	// is found before the ack mode is judged.
	bad := bytes.Clone(body)
	bad[flagsAt], bad[flagsAt-1] = 0x40, 9
	_, err := wire.DecodePublish(bad)
	wantCode(t, err, wire.CodeMalformedFrame)
}

func TestPublishSharesBody(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("p")}})
	for _, p := range []wire.Publish{
		{Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: []byte("k"), Count: 1, Records: recs},
		{Name: nameABC, Ack: wire.AckPerBatch, Shard: 1, Key: []byte("k"), Conditional: true, Idempotent: true, Sequence: 1, Count: 1, Records: recs},
	} {
		body := splitFrame(t, wire.AppendPublish(nil, 1, p)).Body
		got, err := wire.DecodePublish(body)
		if err != nil {
			t.Fatal(err)
		}
		optional := 0
		if p.Conditional {
			optional += 8
		}
		if p.Idempotent {
			optional += 16
		}
		if &got.Records[0] != &body[len(body)-len(recs)] || &got.Key[0] != &body[len(body)-len(recs)-4-optional-1] {
			t.Fatal("Publish.Records / Key do not share the frame body")
		}
	}
}

func TestPublishAckMode(t *testing.T) {
	body := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Count: 1, Records: []byte{0, 0, 0}})).Body
	ackAt := nameLen
	if body[ackAt] != byte(wire.AckPerBatch) {
		t.Fatalf("ack byte %d at %d", body[ackAt], ackAt)
	}
	for _, m := range []byte{3, 0x80, 0xff} {
		bad := bytes.Clone(body)
		bad[ackAt] = m
		_, err := wire.DecodePublish(bad)
		wantCode(t, err, wire.CodeInvalidRequest)
	}
}

func TestPublishAckRoundTrip(t *testing.T) {
	for _, a := range []wire.PublishAck{
		{},
		{Shard: 3, Offset: 1000, Count: 64},
		{Shard: 3, Offset: 1000, Count: 64, Duplicate: true},
		{Shard: math.MaxUint32, Offset: math.MaxUint64, Count: math.MaxUint32, Duplicate: true},
	} {
		roundTrip(t, wire.AppendPublishAck(nil, 9, a), wire.TypePublishAck, 9, wire.DecodePublishAck, a, -1, true)
	}
}

func TestPublishAckFlags(t *testing.T) {
	body := splitFrame(t, wire.AppendPublishAck(nil, 9, wire.PublishAck{Shard: 1, Offset: 2, Count: 3, Duplicate: true})).Body
	want, _ := hex.DecodeString("00000001" + "0000000000000002" + "00000003" + "01")
	if !bytes.Equal(body, want) {
		t.Fatalf("body %x, want %x", body, want)
	}
	for _, f := range []byte{0x02, 0x03, 0x80, 0xff} {
		bad := bytes.Clone(body)
		bad[16] = f
		_, err := wire.DecodePublishAck(bad)
		wantCode(t, err, wire.CodeMalformedFrame)
	}
	// The 16-byte body of the layout before the flags byte is refused.
	_, err := wire.DecodePublishAck(body[:16])
	wantCode(t, err, wire.CodeMalformedFrame)
}

func TestSubscribeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		s    wire.Subscribe
	}{
		{"earliest", wire.Subscribe{Name: nameABC, Start: wire.StartEarliest}},
		{"latest", wire.Subscribe{Name: nameABC, Shard: 2, Start: wire.StartLatest, QueueCapacity: 128}},
		{"offset", wire.Subscribe{Name: nameLong, Shard: math.MaxUint32, Start: wire.StartOffset, Offset: math.MaxUint64, QueueCapacity: math.MaxUint32}},
		{"leader", wire.Subscribe{Name: nameABC, Shard: 1, Start: wire.StartOffset, Offset: 7, Replica: wire.ReplicaLeader}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := wire.AppendSubscribe(nil, 10, tc.s)
			fixed := -1
			if tc.s.Replica != wire.ReplicaNearest {
				// Without its last byte the body is a subscription to the
				// nearest replica.
				fixed = len(frame) - wire.HeaderSize - 1
			}
			roundTrip(t, frame, wire.TypeSubscribe, 10, wire.DecodeSubscribe, tc.s, fixed, true)
		})
	}
	checkReplicaByte(t, splitFrame(t, wire.AppendSubscribe(nil, 10, wire.Subscribe{Name: nameABC, Replica: wire.ReplicaLeader})).Body,
		func(b []byte) (wire.Replica, error) { s, err := wire.DecodeSubscribe(b); return s.Replica, err })
	body := splitFrame(t, wire.AppendSubscribe(nil, 10, wire.Subscribe{Name: nameABC})).Body
	startAt := nameLen + 4
	for _, k := range []byte{3, 0xff} {
		bad := bytes.Clone(body)
		bad[startAt] = k
		_, err := wire.DecodeSubscribe(bad)
		wantCode(t, err, wire.CodeInvalidRequest)
	}
}

func TestSubscribedRoundTrip(t *testing.T) {
	for _, s := range []wire.Subscribed{{}, {Shard: 1, Offset: 10, Tail: 20, QueueCapacity: 256}, {Shard: math.MaxUint32, Offset: math.MaxUint64, Tail: math.MaxUint64, QueueCapacity: math.MaxUint32}} {
		roundTrip(t, wire.AppendSubscribed(nil, 11, s), wire.TypeSubscribed, 11, wire.DecodeSubscribed, s, -1, true)
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	// Every builder appends: what dst held before is kept, and the frame
	// starts right after it.
	prefix := []byte("previous frame bytes")
	frames := map[string]func([]byte) []byte{
		"hello":         func(b []byte) []byte { return wire.AppendHello(b, 1, wire.Hello{Token: "t"}) },
		"welcome":       func(b []byte) []byte { return wire.AppendWelcome(b, 1, wire.Welcome{NodeID: "n"}) },
		"error":         func(b []byte) []byte { return wire.AppendError(b, 1, &wire.Error{Code: 1}) },
		"goaway":        func(b []byte) []byte { return wire.AppendGoAway(b, "r") },
		"ok":            func(b []byte) []byte { return wire.AppendOK(b, 1) },
		"delete_stream": func(b []byte) []byte { return wire.AppendDeleteStream(b, 1, nameABC) },
		"cluster_nodes": func(b []byte) []byte { return wire.AppendClusterNodes(b, 1) },
		"node_list": func(b []byte) []byte {
			return wire.AppendNodeList(b, 1, []wire.ClusterNode{{ID: 2, Addr: "10.0.0.2:7400"}})
		},
		"set_replicas": func(b []byte) []byte {
			return wire.AppendSetReplicas(b, 1, wire.SetReplicas{Name: nameABC, Replicas: 2})
		},
		"read": func(b []byte) []byte { return wire.AppendRead(b, 1, wire.Read{Name: nameABC, End: wire.NoEnd}) },
		"read_result": func(b []byte) []byte {
			return wire.AppendReadResult(b, 1, 1, 0, 1, []*wire.Section{section(0, 0, 1, wire.Record{})})
		},
		"create_stream":   func(b []byte) []byte { return wire.AppendCreateStream(b, 1, wire.CreateStream{Name: nameABC}) },
		"describe_stream": func(b []byte) []byte { return wire.AppendDescribeStream(b, 1, nameABC) },
		"list_streams":    func(b []byte) []byte { return wire.AppendListStreams(b, 1, wire.ListStreams{Tenant: "t"}) },
		"stream_info":     func(b []byte) []byte { return wire.AppendStreamInfo(b, 1, infoOne) },
		"stream_list":     func(b []byte) []byte { return wire.AppendStreamList(b, 1, []wire.StreamInfo{infoOne}) },
		"publish": func(b []byte) []byte {
			return wire.AppendPublish(b, 1, wire.Publish{Name: nameABC, Shard: wire.AnyShard, Conditional: true, Idempotent: true, Records: []byte{0, 0, 0}})
		},
		"publish_ack": func(b []byte) []byte { return wire.AppendPublishAck(b, 1, wire.PublishAck{Count: 1, Duplicate: true}) },
		"subscribe":   func(b []byte) []byte { return wire.AppendSubscribe(b, 1, wire.Subscribe{Name: nameABC}) },
		"subscribed":  func(b []byte) []byte { return wire.AppendSubscribed(b, 1, wire.Subscribed{Tail: 1}) },

		"group_poll": func(b []byte) []byte {
			return wire.AppendGroupPoll(b, 1, wire.GroupPoll{Name: nameABC, Group: "g", Max: 1})
		},
		"group_records": func(b []byte) []byte {
			return wire.AppendGroupRecords(b, 0, wire.GroupRecords{Cursor: []byte("c"), Records: []wire.GroupRecord{{Attempts: 1, Record: oneRecord}}})
		},
		"group_ack": func(b []byte) []byte {
			return wire.AppendGroupAck(b, 1, false, wire.GroupAck{Name: nameABC, Group: "g", Offsets: []uint64{1}})
		},
		"group_nack": func(b []byte) []byte {
			return wire.AppendGroupAck(b, 1, true, wire.GroupAck{Name: nameABC, Group: "g", Offsets: []uint64{1}})
		},
		"group_dead_letters": func(b []byte) []byte {
			return wire.AppendGroupDeadLetters(b, 1, wire.GroupDeadLetters{Name: nameABC, Group: "g"})
		},
		"group_dead_list": func(b []byte) []byte {
			return wire.AppendGroupDeadList(b, 1, wire.GroupDeadList{Letters: []wire.DeadLetter{{Offset: 1, Reason: "r"}}, More: true})
		},
		"group_redrive": func(b []byte) []byte {
			return wire.AppendGroupSelect(b, 1, false, wire.GroupSelect{Name: nameABC, Group: "g"})
		},
		"group_discard": func(b []byte) []byte {
			return wire.AppendGroupSelect(b, 1, true, wire.GroupSelect{Name: nameABC, Group: "g"})
		},
		"group_done": func(b []byte) []byte { return wire.AppendGroupDone(b, 1, 3) },
		"describe_group": func(b []byte) []byte {
			return wire.AppendDescribeGroup(b, 1, wire.DescribeGroup{Name: nameABC, Group: "g"})
		},
		"group_info": func(b []byte) []byte { return wire.AppendGroupInfo(b, 1, groupInfoFull) },
		"group_subscribe": func(b []byte) []byte {
			return wire.AppendGroupSubscribe(b, 1, wire.GroupSubscribe{Name: nameABC, Group: "g", Window: 1})
		},
		"group_assignment": func(b []byte) []byte {
			return wire.AppendGroupAssignment(b, 1, wire.GroupAssignment{Member: "m", Shards: []uint32{0}})
		},
		"group_stream_ack": func(b []byte) []byte {
			return wire.AppendGroupStreamAck(b, 1, wire.GroupStreamAck{Cursor: []byte("c"), Count: 1})
		},

		"offsets_for_time": func(b []byte) []byte {
			return wire.AppendOffsetsForTime(b, 1, wire.OffsetsForTime{Name: nameABC, Shard: wire.AnyShard, UnixNano: 1})
		},
		"shard_offsets": func(b []byte) []byte { return wire.AppendShardOffsets(b, 1, []wire.ShardOffset{{Shard: 1, Offset: 2}}) },
		"list_groups":   func(b []byte) []byte { return wire.AppendListGroups(b, 1, nameABC) },
		"group_list": func(b []byte) []byte {
			return wire.AppendGroupList(b, 1, []wire.GroupSummary{{Group: "g", Members: 1, Lag: 2}})
		},
		"delete_group": func(b []byte) []byte {
			return wire.AppendDeleteGroup(b, 1, wire.DeleteGroup{Name: nameABC, Group: "g"})
		},
		"group_seek": func(b []byte) []byte {
			return wire.AppendGroupSeek(b, 1, wire.GroupSeek{Name: nameABC, Group: "g", Shard: wire.AnyShard, To: wire.SeekToTime, UnixNano: 1})
		},
		"group_acks": func(b []byte) []byte {
			return wire.AppendGroupAcks(b, 1, wire.GroupAcks{Name: nameABC, Group: "g", Entries: []wire.GroupAckEntry{{Offsets: []uint64{1}}}})
		},
		"group_acks_done": func(b []byte) []byte {
			return wire.AppendGroupAcksDone(b, 1, []wire.GroupAckOutcome{{Count: 1}})
		},
	}
	// Every type but EventBatch (WriteEventBatch writes to an io.Writer)
	// has an AppendX builder.
	for typ, name := range knownTypes {
		if _, ok := frames[name]; !ok && typ != wire.TypeEventBatch {
			t.Errorf("no builder listed for %s", name)
		}
	}
	for name, build := range frames {
		t.Run(name, func(t *testing.T) {
			alone := build(nil)
			after := build(bytes.Clone(prefix))
			if !bytes.Equal(after[:len(prefix)], prefix) || !bytes.Equal(after[len(prefix):], alone) {
				t.Fatalf("appending after a prefix changed the frame")
			}
			if got := splitFrame(t, alone).Header.Type.String(); got != name {
				t.Fatalf("frame type %q, want %q", got, name)
			}
		})
	}
}

func TestStreamNameValidate(t *testing.T) {
	tests := []struct {
		name string
		n    wire.StreamName
		ok   bool
	}{
		{"simple", nameABC, true},
		{"all allowed characters", wire.StreamName{Tenant: "AZaz09", Namespace: "a.b_c-d", Stream: "._-"}, true},
		{"64 bytes", nameLong, true},
		{"65-byte tenant", wire.StreamName{Tenant: repeatString('t', 65), Namespace: "n", Stream: "s"}, false},
		{"65-byte namespace", wire.StreamName{Tenant: "t", Namespace: repeatString('n', 65), Stream: "s"}, false},
		{"65-byte stream", wire.StreamName{Tenant: "t", Namespace: "n", Stream: repeatString('s', 65)}, false},
		{"empty tenant", wire.StreamName{Namespace: "n", Stream: "s"}, false},
		{"empty namespace", wire.StreamName{Tenant: "t", Stream: "s"}, false},
		{"empty stream", wire.StreamName{Tenant: "t", Namespace: "n"}, false},
		{"zero", wire.StreamName{}, false},
		{"slash", wire.StreamName{Tenant: "t", Namespace: "n", Stream: "a/b"}, false},
		{"space", wire.StreamName{Tenant: "t", Namespace: "n s", Stream: "s"}, false},
		{"star", wire.StreamName{Tenant: "*", Namespace: "n", Stream: "s"}, false},
		{"non-ascii", wire.StreamName{Tenant: "t", Namespace: "n", Stream: "é"}, false},
		{"nul", wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s\x00"}, false},
		{"colon", wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s:1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.n.Validate()
			if tc.ok {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantCode(t, err, wire.CodeInvalidStreamName)
		})
	}
}

func TestParseStreamName(t *testing.T) {
	tests := []struct {
		in   string
		want wire.StreamName
		ok   bool
	}{
		{"orders", wire.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}, true},
		{"shop/orders", wire.StreamName{Tenant: "default", Namespace: "shop", Stream: "orders"}, true},
		{"acme/shop/orders", nameABC, true},
		{"a.b/c_d/e-f", wire.StreamName{Tenant: "a.b", Namespace: "c_d", Stream: "e-f"}, true},
		{"", wire.StreamName{}, false},
		{"/", wire.StreamName{}, false},
		{"shop/", wire.StreamName{}, false},
		{"/orders", wire.StreamName{}, false},
		{"acme//orders", wire.StreamName{}, false},
		{"a/b/c/d", wire.StreamName{}, false},
		{"acme/shop/or ders", wire.StreamName{}, false},
		{repeatString('s', 65), wire.StreamName{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := wire.ParseStreamName(tc.in)
			if !tc.ok {
				wantCode(t, err, wire.CodeInvalidStreamName)
				return
			}
			if err != nil {
				t.Fatalf("ParseStreamName: %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			again, err := wire.ParseStreamName(got.String())
			if err != nil || again != got {
				t.Fatalf("String() %q does not parse back: %+v, %v", got.String(), again, err)
			}
		})
	}
	if got := nameABC.String(); got != "acme/shop/orders" {
		t.Errorf("String() = %q", got)
	}
}

func TestFeatures(t *testing.T) {
	bits := []uint64{wire.FeaturePublishPipeline, wire.FeatureEventBatch, wire.FeatureSubscribeQueue,
		wire.FeaturePublishConditional, wire.FeatureIdempotentProducer, wire.FeatureRead, wire.FeatureGroups,
		wire.FeatureOffsetsForTime, wire.FeatureGroupAdmin, wire.FeatureListAllTenants, wire.FeatureGroupAcks,
		wire.FeatureFollowerReads, wire.FeatureClusterNodes}
	var all uint64
	for i, b := range bits {
		if b != 1<<i {
			t.Errorf("feature %d is %#x, want bit %d", i, b, i)
		}
		all |= b
	}
	if wire.Features != all {
		t.Errorf("Features = %#x, want %#x", wire.Features, all)
	}
}

// checkReplicaByte checks the optional replica byte that ends body (a
// request for the leader): without it the request is for the nearest
// replica, 0 is malformed (nearest is sent by leaving the byte out), and
// an unknown choice is invalid_request.
func checkReplicaByte(t *testing.T, body []byte, decode func([]byte) (wire.Replica, error)) {
	t.Helper()
	if r, err := decode(body); err != nil || r != wire.ReplicaLeader {
		t.Fatalf("with the byte: %v, %v; want leader", r, err)
	}
	if r, err := decode(body[:len(body)-1]); err != nil || r != wire.ReplicaNearest {
		t.Fatalf("without the byte: %v, %v; want nearest", r, err)
	}
	for _, b := range []byte{0, 2, 0xff} {
		bad := bytes.Clone(body)
		bad[len(bad)-1] = b
		_, err := decode(bad)
		want := wire.CodeInvalidRequest
		if b == 0 {
			want = wire.CodeMalformedFrame
		}
		wantCode(t, err, want)
	}
	if got := wire.ReplicaLeader.String() + " " + wire.ReplicaNearest.String(); got != "leader nearest" {
		t.Fatalf("names %q", got)
	}
}
