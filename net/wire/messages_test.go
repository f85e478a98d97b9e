package wire_test

import (
	"bytes"
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

func TestCreateStreamRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    wire.CreateStream
	}{
		{"ephemeral", wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 1}}},
		{"durable", wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 16, Durable: true}}},
		{"long names", wire.CreateStream{Name: nameLong, Config: wire.StreamConfig{Shards: math.MaxUint32, Durable: true}}},
		// The codec carries names as given; validating them is the node's job.
		{"empty name", wire.CreateStream{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendCreateStream(nil, 3, tc.c), wire.TypeCreateStream, 3, wire.DecodeCreateStream, tc.c, -1, true)
		})
	}
}

func TestStreamConfigFlags(t *testing.T) {
	frame := wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 2, Durable: true}})
	body := splitFrame(t, frame).Body
	flags := len(body) - 1
	if body[flags] != 1 {
		t.Fatalf("durable flag byte = %#x", body[flags])
	}
	for _, f := range []byte{0x02, 0x80, 0xff} {
		bad := bytes.Clone(body)
		bad[flags] = f
		_, err := wire.DecodeCreateStream(bad)
		wantCode(t, err, wire.CodeMalformedFrame)
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
	infoMax = wire.StreamInfo{Name: nameLong, Config: wire.StreamConfig{Shards: 3, Durable: true}, CreatedUnixNano: math.MinInt64,
		Tails: []uint64{0, math.MaxUint64, 7}}
	infoNoTails = wire.StreamInfo{Name: nameABC, Config: wire.StreamConfig{Shards: 0}, CreatedUnixNano: -1}
)

func TestStreamInfoRoundTrip(t *testing.T) {
	for _, i := range []wire.StreamInfo{infoOne, infoMax, infoNoTails} {
		roundTrip(t, wire.AppendStreamInfo(nil, 6, i), wire.TypeStreamInfo, 6, wire.DecodeStreamInfo, i, -1, true)
	}
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
		// Entries of the smallest size (20 bytes) fill the body exactly.
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
}

func TestPublishRoundTrip(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Key: []byte("k"), Payload: []byte("hello")}, {Payload: []byte("world")}})
	tests := []struct {
		name string
		p    wire.Publish
	}{
		{"no ack", wire.Publish{Name: nameABC, Ack: wire.AckNone, Count: 2, Records: recs}},
		{"per message", wire.Publish{Name: nameABC, Ack: wire.AckPerMessage, Key: []byte("user-1"), Count: 2, Records: recs}},
		{"per batch", wire.Publish{Name: nameLong, Ack: wire.AckPerBatch, Key: repeat(0xff, 65535), Count: math.MaxUint32, Records: recs}},
		// Publish does not look inside the records block (ValidateRecords does).
		{"opaque records", wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Count: 9, Records: []byte{0x80}}},
		{"empty records", wire.Publish{Name: nameABC}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := wire.AppendPublish(nil, 8, tc.p)
			roundTrip(t, frame, wire.TypePublish, 8, wire.DecodePublish, tc.p, len(frame)-wire.HeaderSize-len(tc.p.Records), false)
		})
	}
}

func TestPublishSharesBody(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("p")}})
	body := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Key: []byte("k"), Count: 1, Records: recs})).Body
	p, err := wire.DecodePublish(body)
	if err != nil {
		t.Fatal(err)
	}
	if &p.Records[0] != &body[len(body)-len(recs)] || &p.Key[0] != &body[len(body)-len(recs)-5] {
		t.Fatal("Publish.Records / Key do not share the frame body")
	}
}

func TestPublishAckMode(t *testing.T) {
	body := splitFrame(t, wire.AppendPublish(nil, 1, wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Count: 1, Records: []byte{0, 0, 0}})).Body
	ackAt := 3 + len(nameABC.Tenant) + len(nameABC.Namespace) + len(nameABC.Stream)
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
	for _, a := range []wire.PublishAck{{}, {Shard: 3, Offset: 1000, Count: 64}, {Shard: math.MaxUint32, Offset: math.MaxUint64, Count: math.MaxUint32}} {
		roundTrip(t, wire.AppendPublishAck(nil, 9, a), wire.TypePublishAck, 9, wire.DecodePublishAck, a, -1, true)
	}
}

func TestSubscribeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		s    wire.Subscribe
	}{
		{"earliest", wire.Subscribe{Name: nameABC, Start: wire.StartEarliest}},
		{"latest", wire.Subscribe{Name: nameABC, Shard: 2, Start: wire.StartLatest, QueueCapacity: 128}},
		{"offset", wire.Subscribe{Name: nameLong, Shard: math.MaxUint32, Start: wire.StartOffset, Offset: math.MaxUint64, QueueCapacity: math.MaxUint32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendSubscribe(nil, 10, tc.s), wire.TypeSubscribe, 10, wire.DecodeSubscribe, tc.s, -1, true)
		})
	}
	body := splitFrame(t, wire.AppendSubscribe(nil, 10, wire.Subscribe{Name: nameABC})).Body
	startAt := 3 + len(nameABC.Tenant) + len(nameABC.Namespace) + len(nameABC.Stream) + 4
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
		"hello":           func(b []byte) []byte { return wire.AppendHello(b, 1, wire.Hello{Token: "t"}) },
		"welcome":         func(b []byte) []byte { return wire.AppendWelcome(b, 1, wire.Welcome{NodeID: "n"}) },
		"error":           func(b []byte) []byte { return wire.AppendError(b, 1, &wire.Error{Code: 1}) },
		"goaway":          func(b []byte) []byte { return wire.AppendGoAway(b, "r") },
		"create_stream":   func(b []byte) []byte { return wire.AppendCreateStream(b, 1, wire.CreateStream{Name: nameABC}) },
		"describe_stream": func(b []byte) []byte { return wire.AppendDescribeStream(b, 1, nameABC) },
		"list_streams":    func(b []byte) []byte { return wire.AppendListStreams(b, 1, wire.ListStreams{Tenant: "t"}) },
		"stream_info":     func(b []byte) []byte { return wire.AppendStreamInfo(b, 1, infoOne) },
		"stream_list":     func(b []byte) []byte { return wire.AppendStreamList(b, 1, []wire.StreamInfo{infoOne}) },
		"publish": func(b []byte) []byte {
			return wire.AppendPublish(b, 1, wire.Publish{Name: nameABC, Records: []byte{0, 0, 0}})
		},
		"publish_ack": func(b []byte) []byte { return wire.AppendPublishAck(b, 1, wire.PublishAck{Count: 1}) },
		"subscribe":   func(b []byte) []byte { return wire.AppendSubscribe(b, 1, wire.Subscribe{Name: nameABC}) },
		"subscribed":  func(b []byte) []byte { return wire.AppendSubscribed(b, 1, wire.Subscribed{Tail: 1}) },
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
	bits := []uint64{wire.FeaturePublishPipeline, wire.FeatureEventBatch, wire.FeatureSubscribeQueue}
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
