package wire_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Every decoder is fuzzed here. Each target checks that the decoder never
// panics, that a refusal is a *wire.Error, and that whatever it accepts
// re-encodes to the same body (the v1 encodings are canonical) which decodes
// to the same value. Checked-in seeds live in testdata/fuzz/<FuzzName>/ and
// run with every `go test`; seeds_test.go builds them with the encoders and
// fails when one is stale. The f.Add seeds below add the valid encodings of
// the round-trip tests and a few broken variants.
//
// OK has no fuzz target of its own: its body is valid exactly when it is
// empty, which TestOKRoundTrip checks; FuzzReadFrame still feeds OK frames
// to checkOK.

// reencode is the property every message decoder shares. canonical says
// whether the re-encoded body must equal body byte for byte.
func reencode[T any](t *testing.T, body []byte, typ wire.Type, decode func([]byte) (T, error), encode func(T) []byte, canonical bool) {
	t.Helper()
	v, err := decode(body)
	if err != nil {
		wantWireError(t, err)
		return
	}
	f := splitFrame(t, encode(v))
	if f.Header.Type != typ {
		t.Fatalf("re-encoded as %v, want %v", f.Header.Type, typ)
	}
	if canonical && !bytes.Equal(f.Body, body) {
		t.Fatalf("re-encoding changed the body:\n in %x\nout %x", body, f.Body)
	}
	v2, err := decode(f.Body)
	if err != nil {
		t.Fatalf("re-encoded body does not decode: %v", err)
	}
	if !sameValue(v, v2) {
		t.Fatalf("re-encoded body decodes to %+v, want %+v", v2, v)
	}
}

func checkHello(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeHello, wire.DecodeHello, func(h wire.Hello) []byte { return wire.AppendHello(nil, 1, h) }, true)
}

func checkWelcome(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeWelcome, wire.DecodeWelcome, func(w wire.Welcome) []byte { return wire.AppendWelcome(nil, 1, w) }, true)
}

func checkError(t *testing.T, body []byte) {
	e, err := wire.DecodeError(body)
	if err != nil {
		wantWireError(t, err)
		return
	}
	// AppendError caps the message at 1024 bytes; below that the encoding is
	// canonical.
	if len(e.Message) <= 1024 {
		reencode(t, body, wire.TypeError, wire.DecodeError, func(e *wire.Error) []byte { return wire.AppendError(nil, 1, e) }, true)
		return
	}
	want := *e
	want.Message = want.Message[:1024]
	f := splitFrame(t, wire.AppendError(nil, 1, e))
	got, err := wire.DecodeError(f.Body)
	if err != nil || *got != want {
		t.Fatalf("re-encoded error %+v, %v; want %+v", got, err, want)
	}
}

func checkGoAway(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGoAway, wire.DecodeGoAway, func(r string) []byte { return wire.AppendGoAway(nil, r) }, true)
}

func checkCreateStream(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeCreateStream, wire.DecodeCreateStream, func(c wire.CreateStream) []byte { return wire.AppendCreateStream(nil, 1, c) }, true)
}

func checkDescribeStream(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeDescribeStream, wire.DecodeDescribeStream, func(n wire.StreamName) []byte { return wire.AppendDescribeStream(nil, 1, n) }, true)
}

func checkListStreams(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeListStreams, wire.DecodeListStreams, func(l wire.ListStreams) []byte { return wire.AppendListStreams(nil, 1, l) }, true)
}

func checkStreamInfo(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeStreamInfo, wire.DecodeStreamInfo, func(i wire.StreamInfo) []byte { return wire.AppendStreamInfo(nil, 1, i) }, true)
}

func checkStreamList(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeStreamList, wire.DecodeStreamList, func(l []wire.StreamInfo) []byte { return wire.AppendStreamList(nil, 1, l) }, true)
}

func checkPublish(t *testing.T, body []byte) {
	p, err := wire.DecodePublish(body)
	if err != nil {
		wantWireError(t, err)
		return
	}
	if len(body) > 0 && len(p.Records) > 0 && &p.Records[len(p.Records)-1] != &body[len(body)-1] {
		t.Fatal("Publish.Records does not share the body")
	}
	reencode(t, body, wire.TypePublish, wire.DecodePublish, func(p wire.Publish) []byte { return wire.AppendPublish(nil, 1, p) }, true)
}

func checkPublishAck(t *testing.T, body []byte) {
	reencode(t, body, wire.TypePublishAck, wire.DecodePublishAck, func(a wire.PublishAck) []byte { return wire.AppendPublishAck(nil, 1, a) }, true)
}

func checkSubscribe(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeSubscribe, wire.DecodeSubscribe, func(s wire.Subscribe) []byte { return wire.AppendSubscribe(nil, 1, s) }, true)
}

func checkSubscribed(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeSubscribed, wire.DecodeSubscribed, func(s wire.Subscribed) []byte { return wire.AppendSubscribed(nil, 1, s) }, true)
}

func checkEventBatch(t *testing.T, body []byte) {
	views, err := wire.DecodeEventBatch(body)
	if err != nil {
		wantWireError(t, err)
		return
	}
	for i, v := range views {
		if _, err := wire.ValidateRecords(v.Records, v.Count); err != nil {
			t.Fatalf("section %d accepted with a bad records block: %v", i, err)
		}
	}
	encode := func(views []wire.BatchView) []byte {
		sections := make([]*wire.Section, len(views))
		for i, v := range views {
			sections[i] = wire.NewSection(v.Shard, v.Base, v.Timestamp, v.Count, v.Records)
		}
		var buf bytes.Buffer
		if err := wire.WriteEventBatch(&buf, 1, sections); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	reencode(t, body, wire.TypeEventBatch, wire.DecodeEventBatch, encode, true)
}

func checkOK(t *testing.T, body []byte) {
	err := wire.DecodeOK(body)
	if len(body) == 0 {
		if err != nil {
			t.Fatalf("empty OK body refused: %v", err)
		}
		return
	}
	wantCode(t, err, wire.CodeMalformedFrame)
}

func checkDeleteStream(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeDeleteStream, wire.DecodeDeleteStream, func(n wire.StreamName) []byte { return wire.AppendDeleteStream(nil, 1, n) }, true)
}

func checkSetReplicas(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeSetReplicas, wire.DecodeSetReplicas, func(r wire.SetReplicas) []byte { return wire.AppendSetReplicas(nil, 1, r) }, true)
}

func checkRead(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeRead, wire.DecodeRead, func(r wire.Read) []byte { return wire.AppendRead(nil, 1, r) }, true)
}

func checkReadResult(t *testing.T, body []byte) {
	r, err := wire.DecodeReadResult(body)
	// The sections are checked as an EventBatch's: for a section count
	// EventBatch allows, the two decoders accept the same sections.
	if len(body) >= 26 {
		if n := int(body[24])<<8 | int(body[25]); n > 0 && n <= wire.MaxSectionsPerFrame {
			views, ebErr := wire.DecodeEventBatch(body[24:])
			if (err == nil) != (ebErr == nil) {
				t.Fatalf("ReadResult decode: %v; the same sections as an EventBatch: %v", err, ebErr)
			}
			if err == nil && !sameValue(views, r.Batches) {
				t.Fatalf("ReadResult batches %+v, EventBatch views %+v", r.Batches, views)
			}
		}
	}
	if err != nil {
		wantWireError(t, err)
		return
	}
	for i, v := range r.Batches {
		if _, err := wire.ValidateRecords(v.Records, v.Count); err != nil {
			t.Fatalf("batch %d accepted with a bad records block: %v", i, err)
		}
	}
	encode := func(r wire.ReadResult) []byte {
		sections := make([]*wire.Section, len(r.Batches))
		for i, v := range r.Batches {
			sections[i] = wire.NewSection(v.Shard, v.Base, v.Timestamp, v.Count, v.Records)
		}
		return wire.AppendReadResult(nil, 1, r.Next, r.First, r.Tail, sections)
	}
	reencode(t, body, wire.TypeReadResult, wire.DecodeReadResult, encode, true)
}

func checkGroupPoll(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupPoll, wire.DecodeGroupPoll, func(p wire.GroupPoll) []byte { return wire.AppendGroupPoll(nil, 1, p) }, true)
}

func checkGroupRecords(t *testing.T, body []byte) {
	g, err := wire.DecodeGroupRecords(body)
	if err != nil {
		wantWireError(t, err)
		return
	}
	if len(g.Cursor) > wire.MaxCursorBytes {
		t.Fatalf("cursor of %d bytes accepted", len(g.Cursor))
	}
	for i, r := range g.Records {
		if _, err := wire.ValidateRecords(r.Record, 1); err != nil {
			t.Fatalf("record %d accepted with bad record bytes: %v", i, err)
		}
	}
	reencode(t, body, wire.TypeGroupRecords, wire.DecodeGroupRecords, func(g wire.GroupRecords) []byte { return wire.AppendGroupRecords(nil, 1, g) }, true)
}

// checkGroupAck returns the property of GroupAck (nack false) or GroupNack
// bodies: the two share a decoder and a layout.
func checkGroupAck(nack bool) func(*testing.T, []byte) {
	typ := wire.TypeGroupAck
	if nack {
		typ = wire.TypeGroupNack
	}
	return func(t *testing.T, body []byte) {
		a, err := wire.DecodeGroupAck(body)
		if err == nil && len(a.Offsets) > wire.MaxGroupAckOffsets {
			t.Fatalf("%d offsets accepted", len(a.Offsets))
		}
		reencode(t, body, typ, wire.DecodeGroupAck, func(a wire.GroupAck) []byte { return wire.AppendGroupAck(nil, 1, nack, a) }, true)
	}
}

func checkGroupDeadLetters(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupDeadLetters, wire.DecodeGroupDeadLetters, func(g wire.GroupDeadLetters) []byte { return wire.AppendGroupDeadLetters(nil, 1, g) }, true)
}

func checkGroupDeadList(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupDeadList, wire.DecodeGroupDeadList, func(l wire.GroupDeadList) []byte { return wire.AppendGroupDeadList(nil, 1, l) }, true)
}

// checkGroupSelect returns the property of GroupRedrive (discard false) or
// GroupDiscard bodies.
func checkGroupSelect(discard bool) func(*testing.T, []byte) {
	typ := wire.TypeGroupRedrive
	if discard {
		typ = wire.TypeGroupDiscard
	}
	return func(t *testing.T, body []byte) {
		g, err := wire.DecodeGroupSelect(body)
		if err == nil && (len(g.Offsets) > wire.MaxGroupAckOffsets || g.Shard == wire.AnyShard && len(g.Offsets) > 0) {
			t.Fatalf("accepted %d offsets of shard %#x", len(g.Offsets), g.Shard)
		}
		reencode(t, body, typ, wire.DecodeGroupSelect, func(g wire.GroupSelect) []byte { return wire.AppendGroupSelect(nil, 1, discard, g) }, true)
	}
}

func checkGroupDone(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupDone, wire.DecodeGroupDone, func(n uint64) []byte { return wire.AppendGroupDone(nil, 1, n) }, true)
}

func checkDescribeGroup(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeDescribeGroup, wire.DecodeDescribeGroup, func(g wire.DescribeGroup) []byte { return wire.AppendDescribeGroup(nil, 1, g) }, true)
}

func checkGroupInfo(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupInfo, wire.DecodeGroupInfo, func(g wire.GroupInfo) []byte { return wire.AppendGroupInfo(nil, 1, g) }, true)
}

func checkGroupSubscribe(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupSubscribe, wire.DecodeGroupSubscribe, func(g wire.GroupSubscribe) []byte { return wire.AppendGroupSubscribe(nil, 1, g) }, true)
}

func checkGroupAssignment(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupAssignment, wire.DecodeGroupAssignment, func(g wire.GroupAssignment) []byte { return wire.AppendGroupAssignment(nil, 1, g) }, true)
}

func checkGroupStreamAck(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupStreamAck, wire.DecodeGroupStreamAck, func(a wire.GroupStreamAck) []byte { return wire.AppendGroupStreamAck(nil, 1, a) }, true)
}

func checkOffsetsForTime(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeOffsetsForTime, wire.DecodeOffsetsForTime, func(o wire.OffsetsForTime) []byte { return wire.AppendOffsetsForTime(nil, 1, o) }, true)
}

func checkShardOffsets(t *testing.T, body []byte) {
	offs, err := wire.DecodeShardOffsets(body)
	if err == nil && len(offs) > 1<<16 {
		t.Fatalf("%d shard offsets accepted", len(offs))
	}
	reencode(t, body, wire.TypeShardOffsets, wire.DecodeShardOffsets, func(o []wire.ShardOffset) []byte { return wire.AppendShardOffsets(nil, 1, o) }, true)
}

func checkClusterNodes(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeClusterNodes, func(b []byte) (struct{}, error) { return struct{}{}, wire.DecodeClusterNodes(b) },
		func(struct{}) []byte { return wire.AppendClusterNodes(nil, 1) }, true)
}

func checkNodeList(t *testing.T, body []byte) {
	nodes, err := wire.DecodeNodeList(body)
	for _, n := range nodes {
		if err == nil && n.ID == 0 {
			t.Fatal("node id 0 accepted")
		}
	}
	reencode(t, body, wire.TypeNodeList, wire.DecodeNodeList, func(l []wire.ClusterNode) []byte { return wire.AppendNodeList(nil, 1, l) }, true)
}

func checkListGroups(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeListGroups, wire.DecodeListGroups, func(n wire.StreamName) []byte { return wire.AppendListGroups(nil, 1, n) }, true)
}

func checkGroupList(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeGroupList, wire.DecodeGroupList, func(l []wire.GroupSummary) []byte { return wire.AppendGroupList(nil, 1, l) }, true)
}

func checkDeleteGroup(t *testing.T, body []byte) {
	reencode(t, body, wire.TypeDeleteGroup, wire.DecodeDeleteGroup, func(g wire.DeleteGroup) []byte { return wire.AppendDeleteGroup(nil, 1, g) }, true)
}

func checkGroupSeek(t *testing.T, body []byte) {
	g, err := wire.DecodeGroupSeek(body)
	if err == nil && g.To > wire.SeekToTime {
		t.Fatalf("seek kind %d accepted", g.To)
	}
	if err == nil && (g.To == wire.SeekToOffset && g.UnixNano != 0 || g.To == wire.SeekToTime && g.Offset != 0) {
		t.Fatalf("seek %+v sets the position field its kind does not use", g)
	}
	reencode(t, body, wire.TypeGroupSeek, wire.DecodeGroupSeek, func(g wire.GroupSeek) []byte { return wire.AppendGroupSeek(nil, 1, g) }, true)
}

func checkGroupAcks(t *testing.T, body []byte) {
	a, err := wire.DecodeGroupAcks(body)
	if err == nil {
		total := 0
		for _, e := range a.Entries {
			total += len(e.Offsets)
		}
		if len(a.Entries) > wire.MaxGroupAcksEntries || total > wire.MaxGroupAckOffsets {
			t.Fatalf("%d entries of %d offsets accepted", len(a.Entries), total)
		}
	}
	reencode(t, body, wire.TypeGroupAcks, wire.DecodeGroupAcks, func(a wire.GroupAcks) []byte { return wire.AppendGroupAcks(nil, 1, a) }, true)
}

func checkGroupAcksDone(t *testing.T, body []byte) {
	outs, err := wire.DecodeGroupAcksDone(body)
	if err == nil {
		for i, o := range outs {
			if o.Err != nil && o.Err.Code == 0 {
				t.Fatalf("outcome %d: an error of code 0 accepted", i)
			}
		}
	}
	reencode(t, body, wire.TypeGroupAcksDone, wire.DecodeGroupAcksDone, func(o []wire.GroupAckOutcome) []byte { return wire.AppendGroupAcksDone(nil, 1, o) }, true)
}

// checkByType maps every frame type to its decoder's property.
var checkByType = map[wire.Type]func(*testing.T, []byte){
	wire.TypeHello:          checkHello,
	wire.TypeWelcome:        checkWelcome,
	wire.TypeError:          checkError,
	wire.TypeGoAway:         checkGoAway,
	wire.TypeOK:             checkOK,
	wire.TypeCreateStream:   checkCreateStream,
	wire.TypeDescribeStream: checkDescribeStream,
	wire.TypeListStreams:    checkListStreams,
	wire.TypeStreamInfo:     checkStreamInfo,
	wire.TypeStreamList:     checkStreamList,
	wire.TypeDeleteStream:   checkDeleteStream,
	wire.TypeSetReplicas:    checkSetReplicas,
	wire.TypeClusterNodes:   checkClusterNodes,
	wire.TypeNodeList:       checkNodeList,
	wire.TypeRead:           checkRead,
	wire.TypeReadResult:     checkReadResult,
	wire.TypeOffsetsForTime: checkOffsetsForTime,
	wire.TypeShardOffsets:   checkShardOffsets,
	wire.TypePublish:        checkPublish,
	wire.TypePublishAck:     checkPublishAck,
	wire.TypeSubscribe:      checkSubscribe,
	wire.TypeSubscribed:     checkSubscribed,
	wire.TypeEventBatch:     checkEventBatch,

	wire.TypeGroupPoll:        checkGroupPoll,
	wire.TypeGroupRecords:     checkGroupRecords,
	wire.TypeGroupAck:         checkGroupAck(false),
	wire.TypeGroupNack:        checkGroupAck(true),
	wire.TypeGroupDeadLetters: checkGroupDeadLetters,
	wire.TypeGroupDeadList:    checkGroupDeadList,
	wire.TypeGroupRedrive:     checkGroupSelect(false),
	wire.TypeGroupDiscard:     checkGroupSelect(true),
	wire.TypeGroupDone:        checkGroupDone,
	wire.TypeDescribeGroup:    checkDescribeGroup,
	wire.TypeGroupInfo:        checkGroupInfo,
	wire.TypeGroupSubscribe:   checkGroupSubscribe,
	wire.TypeGroupAssignment:  checkGroupAssignment,
	wire.TypeGroupStreamAck:   checkGroupStreamAck,
	wire.TypeListGroups:       checkListGroups,
	wire.TypeGroupList:        checkGroupList,
	wire.TypeDeleteGroup:      checkDeleteGroup,
	wire.TypeGroupSeek:        checkGroupSeek,
	wire.TypeGroupAcks:        checkGroupAcks,
	wire.TypeGroupAcksDone:    checkGroupAcksDone,
}

func TestCheckByTypeCoversEveryType(t *testing.T) {
	for typ := range knownTypes {
		if checkByType[typ] == nil {
			t.Errorf("no fuzz property for %v", typ)
		}
	}
}

// seedRecords is the records block of the seed Publish and EventBatch.
func seedRecords() []byte {
	return wire.AppendRecords(nil, []wire.Record{
		{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "traceparent", Value: []byte("00-01-02-01")}}, Payload: []byte("hello")},
		{Payload: []byte("world")},
	})
}

// seedSections are the sections of the seed EventBatch and ReadResult.
func seedSections() []*wire.Section {
	return []*wire.Section{
		wire.NewSection(0, 0, 1_700_000_000_000_000_000, 2, seedRecords()),
		wire.NewSection(3, 9, 1_700_000_000_000_000_001, 1, wire.AppendRecords(nil, []wire.Record{{}})),
	}
}

// seedFrames are valid frames of every type, the basis of the seeds, in
// type order.
func seedFrames() [][]byte {
	recs := seedRecords()
	var batch bytes.Buffer
	if err := wire.WriteEventBatch(&batch, 4, seedSections()); err != nil {
		panic(err)
	}
	page := []*wire.Section{
		wire.NewSection(1, 10, 1_700_000_000_000_000_000, 2, recs),
		wire.NewSection(1, 12, 1_700_000_000_000_000_001, 1, wire.AppendRecords(nil, []wire.Record{{}})),
	}
	return [][]byte{
		wire.AppendHello(nil, 1, wire.Hello{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes, Token: "tok", ClientName: "seed"}),
		wire.AppendWelcome(nil, 1, wire.Welcome{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes, PublishWindow: 64, NodeID: "node-1"}),
		wire.AppendError(nil, 2, &wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "beyond tail", Detail: 80}),
		wire.AppendGoAway(nil, "draining"),
		wire.AppendOK(nil, 7),
		wire.AppendCreateStream(nil, 3, wire.CreateStream{Name: nameABC, Config: wire.StreamConfig{Shards: 4, Durable: true,
			Routing: wire.RoutingJump, Overflow: wire.OverflowDropOld, QueueCapacity: 128, QueueMaxBytes: 1 << 20, RetentionAgeMillis: 3_600_000, RetentionBytes: 1 << 30}}),
		wire.AppendDescribeStream(nil, 3, nameABC),
		wire.AppendListStreams(nil, 3, wire.ListStreams{Tenant: "acme", Namespace: "shop"}),
		wire.AppendStreamInfo(nil, 3, infoOne),
		wire.AppendStreamList(nil, 3, []wire.StreamInfo{infoOne, infoMax}),
		wire.AppendStreamInfo(nil, 4, infoReplicated),
		wire.AppendDeleteStream(nil, 7, nameABC),
		wire.AppendSetReplicas(nil, 7, wire.SetReplicas{Name: nameABC, Replicas: 3}),
		wire.AppendClusterNodes(nil, 7),
		wire.AppendNodeList(nil, 7, []wire.ClusterNode{{ID: 1, Addr: "127.0.0.1:7400"}, {ID: 4}}),
		wire.AppendRead(nil, 8, wire.Read{Name: nameABC, Shard: 1, Start: 11, End: wire.NoEnd, MaxRecords: 100, MaxBytes: 1 << 20}),
		wire.AppendReadResult(nil, 8, 13, 0, 13, page),
		wire.AppendOffsetsForTime(nil, 18, wire.OffsetsForTime{Name: nameABC, Shard: wire.AnyShard, UnixNano: 1_700_000_000_000_000_000}),
		wire.AppendShardOffsets(nil, 18, []wire.ShardOffset{{Shard: 0, Offset: 12}, {Shard: 1, Offset: 40}}),
		wire.AppendPublish(nil, 5, wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: []byte("user-1"), Count: 2, Records: recs}),
		wire.AppendPublishAck(nil, 5, wire.PublishAck{Shard: 1, Offset: 100, Count: 2}),
		wire.AppendSubscribe(nil, 6, wire.Subscribe{Name: nameABC, Shard: 1, Start: wire.StartOffset, Offset: 5, QueueCapacity: 32}),
		wire.AppendSubscribed(nil, 6, wire.Subscribed{Shard: 1, Offset: 5, Tail: 7, QueueCapacity: 32}),
		batch.Bytes(),

		wire.AppendGroupPoll(nil, 9, wire.GroupPoll{Name: nameABC, Group: "billing", Shard: 1, Max: 100, WaitMillis: 5_000}),
		wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: []byte("cursor-token-1"), Records: seedGroupRecords()}),
		wire.AppendGroupAck(nil, 10, false, wire.GroupAck{Name: nameABC, Group: "billing", Shard: 1, Offsets: []uint64{10, 11}}),
		wire.AppendGroupAck(nil, 11, true, wire.GroupAck{Name: nameABC, Group: "billing", Shard: 1, Offsets: []uint64{12}}),
		wire.AppendGroupDeadLetters(nil, 12, wire.GroupDeadLetters{Name: nameABC, Group: "billing", Shard: wire.AnyShard, Limit: 100}),
		wire.AppendGroupDeadList(nil, 12, wire.GroupDeadList{More: true, Letters: []wire.DeadLetter{
			{Shard: 1, Offset: 9, Attempts: 5, DeadUnixNano: 1_700_000_000_000_000_000, Reason: "max attempts"}}}),
		wire.AppendGroupSelect(nil, 13, false, wire.GroupSelect{Name: nameABC, Group: "billing", Shard: 1, Offsets: []uint64{9}}),
		wire.AppendGroupSelect(nil, 14, true, wire.GroupSelect{Name: nameABC, Group: "billing", Shard: wire.AnyShard}),
		wire.AppendGroupDone(nil, 10, 2),
		wire.AppendDescribeGroup(nil, 15, wire.DescribeGroup{Name: nameABC, Group: "billing"}),
		wire.AppendGroupInfo(nil, 15, groupInfoFull),
		wire.AppendGroupSubscribe(nil, 16, wire.GroupSubscribe{Name: nameABC, Group: "billing", Member: "worker-1", Window: 64, MaxPerPush: 16}),
		wire.AppendGroupAssignment(nil, 16, wire.GroupAssignment{Member: "worker-1", Generation: 3, Shards: []uint32{0, 1}, Window: 64, MaxPerPush: 16, SessionMillis: 10_000}),
		wire.AppendGroupStreamAck(nil, 17, wire.GroupStreamAck{Cursor: []byte("cursor-token-1"), Count: 2}),
		wire.AppendListGroups(nil, 19, nameABC),
		wire.AppendGroupList(nil, 19, []wire.GroupSummary{{Group: "billing", Members: 2, Lag: 40}, {Group: "fulfilment", Lag: 3}}),
		wire.AppendDeleteGroup(nil, 20, wire.DeleteGroup{Name: nameABC, Group: "billing"}),
		wire.AppendGroupSeek(nil, 21, wire.GroupSeek{Name: nameABC, Group: "billing", Shard: wire.AnyShard, To: wire.SeekToTime, UnixNano: 1_700_000_000_000_000_000}),
		wire.AppendGroupAcks(nil, 22, wire.GroupAcks{Name: nameABC, Group: "billing", Entries: []wire.GroupAckEntry{
			{Shard: 1, Offsets: []uint64{10, 11}}, {Shard: 0, Offsets: []uint64{4}}}}),
		wire.AppendGroupAcksDone(nil, 22, []wire.GroupAckOutcome{{Count: 2},
			{Err: &wire.Error{Code: wire.CodeNotDelivered, Detail: 4, Message: "shard 0 offset 4 has not been delivered"}}}),
	}
}

// seedGroupRecords are the records of the seed GroupRecords frame.
func seedGroupRecords() []wire.GroupRecord {
	return []wire.GroupRecord{
		{Shard: 0, Offset: 10, Attempts: 1, Timestamp: 1_700_000_000_000_000_000, Record: tracedRecord},
		{Shard: 1, Offset: 4, Attempts: 3, Timestamp: 1_700_000_000_000_000_001, Record: oneRecord},
	}
}

// seedBody returns the body of the seed frame of type typ.
func seedBody(typ wire.Type) []byte {
	for _, fr := range seedFrames() {
		if wire.Type(fr[4]) == typ {
			return fr[wire.HeaderSize:]
		}
	}
	panic("no seed for " + typ.String())
}

// addBodySeeds adds the valid body of typ and broken variants of it.
func addBodySeeds(f *testing.F, typ wire.Type) {
	body := seedBody(typ)
	f.Add(body)
	f.Add(body[:len(body)/2])
	if len(body) > 0 {
		f.Add(body[:len(body)-1])
	}
	f.Add(append(bytes.Clone(body), 0xff))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, len(body)))
}

// withByte returns a copy of body with body[at] = v.
func withByte(body []byte, at int, v byte) []byte {
	b := bytes.Clone(body)
	b[at] = v
	return b
}

func FuzzDecodeHello(f *testing.F) {
	addBodySeeds(f, wire.TypeHello)
	f.Fuzz(checkHello)
}

func FuzzDecodeWelcome(f *testing.F) {
	addBodySeeds(f, wire.TypeWelcome)
	f.Fuzz(checkWelcome)
}

func FuzzDecodeGoAway(f *testing.F) {
	addBodySeeds(f, wire.TypeGoAway)
	f.Fuzz(checkGoAway)
}

func FuzzDecodeCreateStream(f *testing.F) {
	addBodySeeds(f, wire.TypeCreateStream)
	body := seedBody(wire.TypeCreateStream)
	flagsAt := nameLen + 4
	for _, v := range []byte{0, 2, 0xff} {
		f.Add(withByte(body, flagsAt, v))   // config flags
		f.Add(withByte(body, flagsAt+1, v)) // routing
		f.Add(withByte(body, flagsAt+2, v)) // overflow
	}
	f.Add(splitFrame(f, wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameLong, Config: cfgMax})).Body)
	f.Fuzz(checkCreateStream)
}

func FuzzDecodeDescribeStream(f *testing.F) {
	addBodySeeds(f, wire.TypeDescribeStream)
	f.Fuzz(checkDescribeStream)
}

func FuzzDecodeListStreams(f *testing.F) {
	addBodySeeds(f, wire.TypeListStreams)
	f.Fuzz(checkListStreams)
}

func FuzzDecodeStreamInfo(f *testing.F) {
	addBodySeeds(f, wire.TypeStreamInfo)
	f.Add(splitFrame(f, wire.AppendStreamInfo(nil, 1, infoReplicatedDetail)).Body)
	f.Fuzz(checkStreamInfo)
}

func FuzzDecodeStreamList(f *testing.F) {
	addBodySeeds(f, wire.TypeStreamList)
	f.Fuzz(checkStreamList)
}

func FuzzDecodePublishAck(f *testing.F) {
	addBodySeeds(f, wire.TypePublishAck)
	body := seedBody(wire.TypePublishAck)
	for _, v := range []byte{1, 2, 0x80} {
		f.Add(withByte(body, 16, v))
	}
	f.Fuzz(checkPublishAck)
}

func FuzzDecodeSetReplicas(f *testing.F) {
	addBodySeeds(f, wire.TypeSetReplicas)
	f.Add(splitFrame(f, wire.AppendSetReplicas(nil, 1, wire.SetReplicas{Name: nameLong, Replicas: 3})).Body)
	f.Add([]byte{0, 0, 0, 0})
	f.Add(splitFrame(f, wire.AppendSetReplicas(nil, 1, wire.SetReplicas{Name: nameABC})).Body)
	f.Fuzz(checkSetReplicas)
}

func FuzzDecodeDeleteStream(f *testing.F) {
	addBodySeeds(f, wire.TypeDeleteStream)
	f.Add(splitFrame(f, wire.AppendDeleteStream(nil, 1, nameLong)).Body)
	f.Add([]byte{0, 0, 0})
	f.Fuzz(checkDeleteStream)
}

func FuzzDecodeRead(f *testing.F) {
	addBodySeeds(f, wire.TypeRead)
	f.Add(splitFrame(f, wire.AppendRead(nil, 1, wire.Read{Name: nameLong, Shard: wire.AnyShard, Start: 1, End: 2})).Body)
	f.Add(splitFrame(f, wire.AppendRead(nil, 1, wire.Read{Name: nameABC, Start: 1, End: 2, Replica: wire.ReplicaLeader})).Body)
	f.Fuzz(checkRead)
}

func FuzzDecodeReadResult(f *testing.F) {
	addBodySeeds(f, wire.TypeReadResult)
	f.Add(splitFrame(f, wire.AppendReadResult(nil, 1, 5, 0, 5, nil)).Body) // an empty page
	f.Add(readResultBody(eventBody(1, goodRaw)))
	f.Add(readResultBody(eventBody(1, rawSection{count: 2, length: uint32(len(oneRecord)), recs: oneRecord})))
	f.Add(readResultBody(eventBody(1, rawSection{count: 1, length: 100, recs: oneRecord})))
	f.Add(readResultBody(eventBody(1, rawSection{count: 0})))
	f.Add(readResultBody(eventBody(0, goodRaw)))
	f.Add(readResultBody(eventBody(math.MaxUint16)))
	f.Fuzz(checkReadResult)
}

func FuzzDecodeSubscribed(f *testing.F) {
	addBodySeeds(f, wire.TypeSubscribed)
	f.Fuzz(checkSubscribed)
}

func FuzzDecodeError(f *testing.F) {
	addBodySeeds(f, wire.TypeError)
	f.Add(splitFrame(f, wire.AppendError(nil, 1, &wire.Error{Code: 999, Message: strings.Repeat("m", 1024)})).Body)
	// A message longer than AppendError's cap.
	f.Add(append([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x01}, bytes.Repeat([]byte("m"), 1025)...))
	f.Fuzz(checkError)
}

func FuzzDecodePublish(f *testing.F) {
	addBodySeeds(f, wire.TypePublish)
	body := seedBody(wire.TypePublish)
	ackAt := nameLen
	for _, ack := range []byte{0, 1, 3} {
		f.Add(withByte(body, ackAt, ack))
	}
	// Flags: each defined one with its fields, unknown ones, and defined ones
	// without their fields.
	for _, p := range seedPublishes() {
		f.Add(splitFrame(f, wire.AppendPublish(nil, 1, p)).Body)
	}
	for _, flags := range []byte{1, 2, 3, 4, 0x80} {
		f.Add(withByte(body, ackAt+1, flags))
	}
	f.Fuzz(checkPublish)
}

// seedPublishes are Publish frames using the optional fields.
func seedPublishes() map[string]wire.Publish {
	recs := seedRecords()
	return map[string]wire.Publish{
		"explicit_shard": {Name: nameABC, Ack: wire.AckPerBatch, Shard: 2, Key: []byte("user-1"), Count: 2, Records: recs},
		"conditional":    {Name: nameABC, Ack: wire.AckPerBatch, Shard: 1, Conditional: true, ExpectedOffset: 41, Count: 2, Records: recs},
		"idempotent": {Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: []byte("user-1"),
			Idempotent: true, ProducerID: 0xfeedface, Sequence: 1, Count: 2, Records: recs},
		"conditional_idempotent": {Name: nameABC, Ack: wire.AckPerBatch, Shard: 1, Key: []byte("user-1"),
			Conditional: true, ExpectedOffset: 41, Idempotent: true, ProducerID: 0xfeedface, Sequence: 7, Count: 2, Records: recs},
	}
}

func FuzzDecodeSubscribe(f *testing.F) {
	addBodySeeds(f, wire.TypeSubscribe)
	body := seedBody(wire.TypeSubscribe)
	for _, k := range []byte{0, 1, 3} {
		f.Add(withByte(body, nameLen+4, k))
	}
	for _, r := range []byte{0, 1, 2} {
		f.Add(append(bytes.Clone(body), r)) // the replica byte
	}
	f.Fuzz(checkSubscribe)
}

func FuzzDecodeEventBatch(f *testing.F) {
	addBodySeeds(f, wire.TypeEventBatch)
	one := oneRecord
	f.Add(eventBody(1, goodRaw))
	f.Add(eventBody(1, rawSection{count: 2, length: uint32(len(one)), recs: one}))
	f.Add(eventBody(1, rawSection{count: 1, length: 100, recs: one}))
	f.Add(eventBody(1, rawSection{count: 0}))
	f.Fuzz(checkEventBatch)
}

func FuzzDecodeGroupPoll(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupPoll)
	f.Add(splitFrame(f, wire.AppendGroupPoll(nil, 1, wire.GroupPoll{Name: nameLong, Group: repeatString('g', 64), Shard: wire.AnyShard})).Body)
	f.Fuzz(checkGroupPoll)
}

func FuzzDecodeGroupRecords(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupRecords)
	f.Add(splitFrame(f, wire.AppendGroupRecords(nil, 1, wire.GroupRecords{Records: seedGroupRecords()})).Body) // a poll answer
	f.Add(splitFrame(f, wire.AppendGroupRecords(nil, 1, wire.GroupRecords{})).Body)
	two := wire.AppendRecords(nil, []wire.Record{{}, {}})
	f.Add(bcat(be16(0), be32(1), groupEntry(uint32(len(two)), two)))
	f.Add(bcat(be16(0), be32(1), groupEntry(0, nil)))
	f.Add(bcat(be16(0), be32(1), groupEntry(2, []byte{0x05, 'a'})))
	f.Add(bcat(be16(0), be32(1), groupEntry(100, oneRecord)))
	f.Add(bcat(be16(0), be32(math.MaxUint32), goodEntry))
	f.Fuzz(checkGroupRecords)
}

func FuzzDecodeGroupAck(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupAck)
	f.Add(offsetsBody(1, 0, nil))
	f.Add(offsetsBody(1, 2, be64(1)))
	f.Add(offsetsBody(1, wire.MaxGroupAckOffsets+1, be64(1)))
	f.Fuzz(checkGroupAck(false))
}

func FuzzDecodeGroupAcks(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupAcks)
	f.Add(acksBody(0))
	f.Add(acksBody(1, 1, 0))
	f.Add(acksBody(2, 1, 1, 7))
	f.Add(acksBody(wire.MaxGroupAcksEntries+1, 1, 0))
	f.Add(acksBody(1, 1, wire.MaxGroupAckOffsets+1, 7))
	f.Fuzz(checkGroupAcks)
}

func FuzzDecodeGroupAcksDone(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupAcksDone)
	f.Add(be32(0))
	f.Add(bcat(be32(1), be16(0), be64(3), str16("x")))
	f.Add(bcat(be32(2), be16(0), be64(3), str16("")))
	f.Add(bcat(be32(math.MaxUint32), be16(27), be64(3), str16("")))
	f.Fuzz(checkGroupAcksDone)
}

func FuzzDecodeGroupDeadLetters(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupDeadLetters)
	f.Add(splitFrame(f, wire.AppendGroupDeadLetters(nil, 1, wire.GroupDeadLetters{Name: nameABC, Group: "g", Shard: 2, From: 100, Limit: 50})).Body)
	f.Fuzz(checkGroupDeadLetters)
}

func FuzzDecodeGroupDeadList(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupDeadList)
	body := seedBody(wire.TypeGroupDeadList)
	for _, v := range []byte{0, 2, 0xff} {
		f.Add(withByte(body, 0, v)) // the more flag
	}
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Add(bcat([]byte{0}, be32(math.MaxUint32), be32(1), be64(2), be32(3), be64(4), str16("r")))
	f.Fuzz(checkGroupDeadList)
}

func FuzzDecodeGroupSelect(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupRedrive)
	f.Add(seedBody(wire.TypeGroupDiscard))
	f.Add(offsetsBody(wire.AnyShard, 1, be64(9)))
	f.Add(offsetsBody(wire.AnyShard, 1, append(be64(9), 0)))
	f.Add(offsetsBody(1, 2, be64(1)))
	f.Fuzz(checkGroupSelect(false))
}

func FuzzDecodeGroupDone(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupDone)
	f.Fuzz(checkGroupDone)
}

func FuzzDecodeDescribeGroup(f *testing.F) {
	addBodySeeds(f, wire.TypeDescribeGroup)
	f.Add(splitFrame(f, wire.AppendDescribeGroup(nil, 1, wire.DescribeGroup{Name: nameLong})).Body)
	f.Fuzz(checkDescribeGroup)
}

func FuzzDecodeGroupInfo(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupInfo)
	f.Add(splitFrame(f, wire.AppendGroupInfo(nil, 1, wire.GroupInfo{})).Body)
	head := bcat(str16("g"), be64(1), be32(2), be32(3), be32(4))
	f.Add(bcat(head, be32(math.MaxUint32), be32(0)))
	f.Add(bcat(head, be32(0), be32(math.MaxUint32), str16("m"), be32(0), be32(1), be32(2), be32(3)))
	f.Add(bcat(head, be32(0), be32(1), str16("m"), be32(math.MaxUint32), be32(1), be32(2), be32(3)))
	f.Fuzz(checkGroupInfo)
}

func FuzzDecodeGroupSubscribe(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupSubscribe)
	f.Add(splitFrame(f, wire.AppendGroupSubscribe(nil, 1, wire.GroupSubscribe{Name: nameABC, Group: "g", Window: 1})).Body)
	f.Fuzz(checkGroupSubscribe)
}

func FuzzDecodeGroupAssignment(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupAssignment)
	f.Add(splitFrame(f, wire.AppendGroupAssignment(nil, 1, wire.GroupAssignment{Member: "idle", Generation: 1, Window: 8})).Body)
	f.Add(bcat(str16("m"), be64(1), be32(math.MaxUint32), be32(1), be32(2), be32(3), be32(4)))
	f.Fuzz(checkGroupAssignment)
}

func FuzzDecodeGroupStreamAck(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupStreamAck)
	f.Add(splitFrame(f, wire.AppendGroupStreamAck(nil, 1, wire.GroupStreamAck{})).Body) // a heartbeat
	f.Add(bcat(be16(math.MaxUint16), be32(1)))
	f.Fuzz(checkGroupStreamAck)
}

func FuzzDecodeOffsetsForTime(f *testing.F) {
	addBodySeeds(f, wire.TypeOffsetsForTime)
	f.Add(splitFrame(f, wire.AppendOffsetsForTime(nil, 1, wire.OffsetsForTime{Name: nameLong, Shard: 3, UnixNano: math.MinInt64})).Body)
	f.Fuzz(checkOffsetsForTime)
}

func FuzzDecodeShardOffsets(f *testing.F) {
	addBodySeeds(f, wire.TypeShardOffsets)
	f.Add(splitFrame(f, wire.AppendShardOffsets(nil, 1, nil)).Body)
	f.Add(bcat(be32(2), be32(0), be64(1)))
	f.Add(bcat(be32(1<<16+1), be32(0), be64(1)))
	f.Fuzz(checkShardOffsets)
}

func FuzzDecodeClusterNodes(f *testing.F) {
	addBodySeeds(f, wire.TypeClusterNodes)
	f.Fuzz(checkClusterNodes)
}

func FuzzDecodeNodeList(f *testing.F) {
	addBodySeeds(f, wire.TypeNodeList)
	f.Add(splitFrame(f, wire.AppendNodeList(nil, 1, nil)).Body)
	f.Add(bcat(be16(2), be64(1), str16("127.0.0.1:7400"), be64(0), str16("")))
	f.Add(bcat(be16(math.MaxUint16), be64(1), str16("a")))
	f.Fuzz(checkNodeList)
}

func FuzzDecodeListGroups(f *testing.F) {
	addBodySeeds(f, wire.TypeListGroups)
	f.Add(splitFrame(f, wire.AppendListGroups(nil, 1, nameLong)).Body)
	f.Fuzz(checkListGroups)
}

func FuzzDecodeGroupList(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupList)
	f.Add(splitFrame(f, wire.AppendGroupList(nil, 1, nil)).Body)
	f.Add(bcat(be32(math.MaxUint32), str16("g"), be32(1), be64(2)))
	f.Add(bcat(be32(1), be16(9), []byte("g"), be32(1), be64(2)))
	f.Fuzz(checkGroupList)
}

func FuzzDecodeDeleteGroup(f *testing.F) {
	addBodySeeds(f, wire.TypeDeleteGroup)
	f.Add(splitFrame(f, wire.AppendDeleteGroup(nil, 1, wire.DeleteGroup{Name: nameLong, Group: repeatString('g', 64)})).Body)
	f.Fuzz(checkDeleteGroup)
}

func FuzzDecodeGroupSeek(f *testing.F) {
	addBodySeeds(f, wire.TypeGroupSeek)
	body := seedBody(wire.TypeGroupSeek)
	for _, k := range []byte{0, 2, 0xff} {
		f.Add(withByte(body, len(body)-9, k)) // the seek kind
	}
	f.Add(splitFrame(f, wire.AppendGroupSeek(nil, 1, wire.GroupSeek{Name: nameABC, Group: "g", Shard: 1, To: wire.SeekToOffset, Offset: wire.NoEnd})).Body)
	f.Fuzz(checkGroupSeek)
}

// FuzzValidateGroupName checks ValidateGroupName against the stream-name
// rules it shares.
func FuzzValidateGroupName(f *testing.F) {
	for _, s := range []string{"g", "billing", "AZaz09._-", "", "my group", "a/b", "é", strings.Repeat("g", 64), strings.Repeat("g", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := wire.ValidateGroupName("group", s)
		streamErr := wire.StreamName{Tenant: "t", Namespace: "n", Stream: s}.Validate()
		if (err == nil) != (streamErr == nil) {
			t.Fatalf("%q: group name %v, stream name %v", s, err, streamErr)
		}
		if err != nil {
			wantCode(t, err, wire.CodeInvalidRequest)
		}
	})
}

// FuzzReadFrame feeds a byte stream to ReadFrame and every frame it yields to
// its type's decoder property.
func FuzzReadFrame(f *testing.F) {
	var all []byte
	for _, fr := range seedFrames() {
		f.Add(fr)
		f.Add(fr[:len(fr)-1])
		all = append(all, fr...)
	}
	f.Add(all)
	f.Add([]byte{})
	f.Add(wire.AppendHeader(nil, wire.Header{Length: 1 << 20, Type: wire.TypePublish}))
	f.Add(wire.AppendHeader(nil, wire.Header{Type: 0x7f}))
	f.Add([]byte{0, 0, 0, 0, byte(wire.TypeGoAway), 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	const maxBody = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		consumed := 0
		for {
			fr, err := wire.ReadFrame(r, maxBody)
			if err != nil {
				switch {
				case errors.Is(err, io.EOF):
					if consumed != len(data) {
						t.Fatalf("io.EOF after %d of %d bytes", consumed, len(data))
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
					if len(data)-consumed == 0 {
						t.Fatal("io.ErrUnexpectedEOF at a frame boundary")
					}
				default:
					we := wantWireError(t, err)
					// A refused header is refused before its body is read.
					if read := len(data) - r.Len() - consumed; read != wire.HeaderSize {
						t.Fatalf("%v after reading %d bytes of the frame", we.Code, read)
					}
					if we.Code == wire.CodeFrameTooLarge && fr.Header.Length <= maxBody {
						t.Fatalf("frame_too_large for a %d-byte body", fr.Header.Length)
					}
				}
				return
			}
			n := wire.HeaderSize + len(fr.Body)
			if got := wire.AppendFrame(nil, fr.Header.Type, fr.Header.Flags, fr.Header.RequestID, fr.Body); !bytes.Equal(got, data[consumed:consumed+n]) {
				t.Fatalf("frame re-encodes to %x, read from %x", got, data[consumed:consumed+n])
			}
			consumed += n
			checkByType[fr.Header.Type](t, fr.Body)
		}
	})
}

// FuzzRecordIter walks a records block and checks it against ValidateRecords
// and a re-encoding of what it yielded.
func FuzzRecordIter(f *testing.F) {
	f.Add(wire.AppendRecords(nil, []wire.Record{{}}))
	f.Add(wire.AppendRecords(nil, []wire.Record{
		{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}, {Key: "traceparent", Value: []byte("00-01")}}, Payload: []byte("p")},
		{Payload: bytes.Repeat([]byte("x"), 200)},
	}))
	for _, b := range badBlocks {
		f.Add(b.block)
	}
	f.Add([]byte{0x80, 0x00, 0x00, 0x00}) // a non-minimal varint is accepted
	f.Fuzz(func(t *testing.T, block []byte) {
		recs, err := collect(block)
		n := uint32(len(recs))
		if err != nil {
			wantCode(t, err, wire.CodeMalformedFrame)
			for _, count := range []uint32{n, n + 1} {
				if count > 0 {
					_, err := wire.ValidateRecords(block, count)
					wantCode(t, err, wire.CodeMalformedFrame)
				}
			}
			return
		}
		payload := 0
		for _, r := range recs {
			payload += len(r.Payload)
			if len(r.Key) > wire.MaxKeyBytes || len(r.Headers) > wire.MaxHeaders {
				t.Fatalf("limits not enforced: key %d, headers %d", len(r.Key), len(r.Headers))
			}
			for _, h := range r.Headers {
				if len(h.Key) > wire.MaxHeaderKeyBytes {
					t.Fatalf("header name of %d bytes accepted", len(h.Key))
				}
			}
		}
		again := wire.AppendRecords(nil, recs)
		if wire.RecordsSize(recs) != len(again) || len(again) > len(block) {
			t.Fatalf("re-encoding is %d bytes (RecordsSize %d), the block %d", len(again), wire.RecordsSize(recs), len(block))
		}
		recs2, err := collect(again)
		if err != nil || !sameValue(recs, recs2) {
			t.Fatalf("re-encoded block decodes differently: %v", err)
		}
		if n == 0 {
			return
		}
		got, err := wire.ValidateRecords(block, n)
		if err != nil || got != payload {
			t.Fatalf("ValidateRecords(block, %d) = %d, %v; want %d", n, got, err, payload)
		}
		_, err = wire.ValidateRecords(block, n+1)
		wantCode(t, err, wire.CodeMalformedFrame)
		if n > 1 {
			_, err = wire.ValidateRecords(block, n-1)
			wantCode(t, err, wire.CodeMalformedFrame)
		}
	})
}

// FuzzValidateRecords checks ValidateRecords against a model built on the
// iterator.
func FuzzValidateRecords(f *testing.F) {
	two := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("ab")}, {Key: []byte("k")}})
	f.Add(two, uint32(2))
	f.Add(two, uint32(1))
	f.Add(two, uint32(0))
	f.Add(two, uint32(wire.MaxRecordsInBatch+1))
	f.Add([]byte{0x05, 'a'}, uint32(1))
	f.Fuzz(func(t *testing.T, block []byte, count uint32) {
		got, err := wire.ValidateRecords(block, count)
		switch {
		case count == 0:
			wantCode(t, err, wire.CodeInvalidRequest)
			return
		case count > wire.MaxRecordsInBatch:
			wantCode(t, err, wire.CodeBatchTooLarge)
			return
		}
		recs, iterErr := collect(block)
		if iterErr != nil || uint32(len(recs)) != count {
			wantCode(t, err, wire.CodeMalformedFrame)
			return
		}
		want := 0
		for _, r := range recs {
			want += len(r.Payload)
		}
		if err != nil || got != want {
			t.Fatalf("ValidateRecords = %d, %v; want %d", got, err, want)
		}
	})
}

func FuzzParseStreamName(f *testing.F) {
	for _, s := range []string{"orders", "shop/orders", "acme/shop/orders", "", "a/b/c/d", "a//b", "é/x", strings.Repeat("s", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := wire.ParseStreamName(s)
		if err != nil {
			wantCode(t, err, wire.CodeInvalidStreamName)
			return
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("parsed %q to an invalid name: %v", s, err)
		}
		if !strings.HasSuffix(n.String(), s) || strings.Count(s, "/") > 2 {
			t.Fatalf("%q parsed to %q", s, n)
		}
		again, err := wire.ParseStreamName(n.String())
		if err != nil || again != n {
			t.Fatalf("%q does not parse back: %+v, %v", n.String(), again, err)
		}
		// A valid name survives the wire.
		got, err := wire.DecodeDescribeStream(splitFrame(t, wire.AppendDescribeStream(nil, 1, n)).Body)
		if err != nil || got != n {
			t.Fatalf("name %+v crosses the wire as %+v, %v", n, got, err)
		}
	})
}
