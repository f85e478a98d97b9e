package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"runtime"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Tests of the consumer-group frames (FeatureGroups, types 0x40-0x4D):
// round trips, byte layouts (docs/protocol.md shows the same tables),
// malformed bodies and counts that lie.

var (
	// tracedRecord is a records block holding one record with a key, a
	// traceparent header and a payload.
	tracedRecord = wire.AppendRecord(nil, &wire.Record{Key: []byte("k"),
		Headers: []wire.RecordHeader{{Key: "traceparent", Value: []byte("00-01-02-01")}}, Payload: []byte("hello")})

	// groupInfoFull sets every GroupInfo field, with shards and members.
	groupInfoFull = wire.GroupInfo{Group: "billing", Generation: 7, VisibilityMillis: 30_000, SessionMillis: 10_000, MaxAttempts: 5,
		Shards: []wire.GroupShardInfo{
			{Shard: 0, Committed: 10, Delivered: 14, Tail: 20, Claims: 4, Owed: 1, DeadLetters: 2},
			{Shard: 1, Committed: 5, Delivered: 5, Tail: 5},
		},
		Members: []wire.GroupMemberInfo{
			{ID: "m-1", Shards: []uint32{0}, Window: 64, InFlight: 4, IdleMillis: 120},
			{ID: "m-2", Window: 8},
		}}
)

// nameBytes is the encoding of nameABC.
func nameBytes() []byte { return wire.AppendDescribeStream(nil, 1, nameABC)[wire.HeaderSize:] }

// bcat concatenates byte strings.
func bcat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// str16 is a u16-length-prefixed string.
func str16(s string) []byte { return append(be16(uint16(len(s))), s...) }

// groupEntry is one GroupRecords entry written by hand; length may lie.
func groupEntry(length uint32, rec []byte) []byte {
	return bcat(be32(1), be64(2), be32(3), be64(4), be32(length), rec)
}

// goodEntry is a well-formed GroupRecords entry.
var goodEntry = groupEntry(uint32(len(oneRecord)), oneRecord)

// offsetsBody is a GroupAck/GroupSelect body: nameABC, group "g", shard,
// an offset count and then the given offset bytes.
func offsetsBody(shard, count uint32, offsets []byte) []byte {
	return bcat(nameBytes(), str16("g"), be32(shard), be32(count), offsets)
}

// badGroupBody is a body a decoder must refuse with code.
type badGroupBody struct {
	name string
	body []byte
	code wire.Code
}

func refuseAll(t *testing.T, decode func([]byte) error, bad []badGroupBody) {
	t.Helper()
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, decode(tc.body), tc.code)
		})
	}
}

func TestValidateGroupName(t *testing.T) {
	tests := []struct {
		name string
		s    string
		ok   bool
	}{
		{"one byte", "g", true},
		{"all allowed characters", "AZaz09._-", true},
		{"64 bytes", repeatString('g', wire.MaxGroupName), true},
		{"empty", "", false},
		{"65 bytes", repeatString('g', wire.MaxGroupName+1), false},
		{"space", "my group", false},
		{"slash", "a/b", false},
		{"colon", "a:b", false},
		{"star", "*", false},
		{"nul", "g\x00", false},
		{"non-ascii", "é", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := wire.ValidateGroupName("group", tc.s)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateGroupName(%q): %v", tc.s, err)
				}
				return
			}
			wantCode(t, err, wire.CodeInvalidRequest)
		})
	}
	if wire.MaxGroupName != wire.MaxNamePart {
		t.Errorf("MaxGroupName %d, MaxNamePart %d: group names follow the stream-name rules", wire.MaxGroupName, wire.MaxNamePart)
	}
}

func TestGroupPollRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    wire.GroupPoll
	}{
		{"zero", wire.GroupPoll{}},
		{"typical", wire.GroupPoll{Name: nameABC, Group: "billing", Shard: 2, Max: 100, WaitMillis: 5_000}},
		{"no wait", wire.GroupPoll{Name: nameABC, Group: "billing", Max: 1}},
		{"extremes", wire.GroupPoll{Name: nameLong, Group: repeatString('g', 65535), Shard: math.MaxUint32, Max: math.MaxUint32, WaitMillis: math.MaxUint32}},
		// The codec carries names as given; validating them is the node's job.
		{"invalid group name", wire.GroupPoll{Name: nameABC, Group: "not a name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupPoll(nil, 20, tc.p), wire.TypeGroupPoll, 20, wire.DecodeGroupPoll, tc.p, -1, true)
		})
	}
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupPoll(b); return err }, []badGroupBody{
		{"group length lies", bcat(nameBytes(), be16(9), []byte("g"), be32(0), be32(0), be32(0)), wire.CodeMalformedFrame},
		{"name part length lies", []byte{4, 'a', 'c', 'm', 'e', 9, 's'}, wire.CodeMalformedFrame},
	})
}

func TestGroupRecordsRoundTrip(t *testing.T) {
	recs := []wire.GroupRecord{
		{Shard: 0, Offset: 10, Attempts: 1, Timestamp: 1_700_000_000_000_000_000, Record: oneRecord},
		{Shard: 3, Offset: 11, Attempts: 4, Timestamp: 1_700_000_000_000_000_001, Record: tracedRecord},
	}
	tests := []struct {
		name  string
		reqID uint64
		g     wire.GroupRecords
		fixed int
	}{
		{"empty poll answer", 21, wire.GroupRecords{}, -1},
		{"poll answer", 21, wire.GroupRecords{Records: recs}, -1},
		{"push", 0, wire.GroupRecords{Cursor: []byte("opaque-cursor-token"), Records: recs}, -1},
		{"push of one", 0, wire.GroupRecords{Cursor: []byte{0}, Records: recs[:1]}, -1},
		{"extremes", 0, wire.GroupRecords{Cursor: repeat(0xc5, wire.MaxCursorBytes), Records: []wire.GroupRecord{
			{Shard: math.MaxUint32, Offset: math.MaxUint64, Attempts: math.MaxUint32, Timestamp: math.MinInt64, Record: oneRecord},
			{Shard: wire.AnyShard - 1, Offset: 0, Attempts: 0, Timestamp: math.MaxInt64,
				Record: wire.AppendRecord(nil, &wire.Record{Payload: repeat('z', 100_000)})},
		}}, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := wire.AppendGroupRecords(nil, tc.reqID, tc.g)
			roundTrip(t, frame, wire.TypeGroupRecords, tc.reqID, wire.DecodeGroupRecords, tc.g, tc.fixed, true)
			// The size helpers add up to the body.
			size := wire.GroupRecordsHeadSize(len(tc.g.Cursor))
			for i := range tc.g.Records {
				size += wire.GroupRecordSize(&tc.g.Records[i])
			}
			if size != len(frame)-wire.HeaderSize {
				t.Fatalf("GroupRecordsHeadSize + GroupRecordSize = %d, body %d", size, len(frame)-wire.HeaderSize)
			}
			// The frame is sized once: a poll's answer grown by append
			// allocated and copied about twice its size.
			if n := testing.AllocsPerRun(10, func() { wire.AppendGroupRecords(nil, tc.reqID, tc.g) }); n != 1 {
				t.Fatalf("AppendGroupRecords made %v allocations, want 1", n)
			}
		})
	}
}

func TestGroupRecordsSharesBody(t *testing.T) {
	body := splitFrame(t, wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: []byte("cur"),
		Records: []wire.GroupRecord{{Record: oneRecord}, {Record: tracedRecord}}})).Body
	g, err := wire.DecodeGroupRecords(body)
	if err != nil {
		t.Fatal(err)
	}
	if &g.Cursor[0] != &body[2] {
		t.Error("Cursor does not share the body")
	}
	last := g.Records[1].Record
	if &last[len(last)-1] != &body[len(body)-1] {
		t.Error("Record does not share the body")
	}
	// Appending to a decoded record must not scribble over the body.
	_ = append(g.Records[0].Record, 'X')
	_ = append(g.Cursor, 'X')
	if g2, err := wire.DecodeGroupRecords(body); err != nil || !sameValue(g, g2) {
		t.Fatalf("appending to decoded slices changed the body: %v", err)
	}
}

func TestGroupRecordsRefused(t *testing.T) {
	two := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("a")}, {Payload: []byte("b")}})
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupRecords(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"cursor length lies", bcat(be16(5), []byte("ab")), wire.CodeMalformedFrame},
		{"record count missing", be16(0), wire.CodeMalformedFrame},
		{"count lies by one", bcat(be16(0), be32(2), goodEntry), wire.CodeMalformedFrame},
		{"count huge", bcat(be16(0), be32(math.MaxUint32), goodEntry), wire.CodeMalformedFrame},
		{"count with no records", bcat(be16(1), []byte("c"), be32(1)), wire.CodeMalformedFrame},
		{"record head cut", bcat(be16(0), be32(1), goodEntry[:27]), wire.CodeMalformedFrame},
		{"record length lies long", bcat(be16(0), be32(1), groupEntry(100, oneRecord)), wire.CodeMalformedFrame},
		{"record length huge", bcat(be16(0), be32(1), groupEntry(math.MaxUint32, oneRecord)), wire.CodeMalformedFrame},
		{"record length lies short", bcat(be16(0), be32(1), groupEntry(2, oneRecord)), wire.CodeMalformedFrame},
		{"empty record", bcat(be16(0), be32(1), groupEntry(0, nil)), wire.CodeMalformedFrame},
		{"two records in one entry", bcat(be16(0), be32(1), groupEntry(uint32(len(two)), two)), wire.CodeMalformedFrame},
		{"record key length lies", bcat(be16(0), be32(1), groupEntry(2, []byte{0x05, 'a'})), wire.CodeMalformedFrame},
		{"record varint cut", bcat(be16(0), be32(1), groupEntry(1, []byte{0x80})), wire.CodeMalformedFrame},
		{"record too many headers", bcat(be16(0), be32(1), func() []byte {
			r := wire.AppendRecord(nil, &wire.Record{Headers: manyHeaders(wire.MaxHeaders+1, 1)})
			return groupEntry(uint32(len(r)), r)
		}()), wire.CodeMalformedFrame},
		{"garbage after the record", bcat(be16(0), be32(1), groupEntry(uint32(len(oneRecord)+1), append(bytes.Clone(oneRecord), 0x07))), wire.CodeMalformedFrame},
		{"second record bad", bcat(be16(0), be32(2), goodEntry, groupEntry(1, []byte{0x80})), wire.CodeMalformedFrame},
		{"trailing byte", bcat(be16(0), be32(1), goodEntry, []byte{0}), wire.CodeMalformedFrame},
	})
	// The hand-built entries are right: the good one decodes.
	g, err := wire.DecodeGroupRecords(bcat(be16(1), []byte("c"), be32(2), goodEntry, goodEntry))
	want := wire.GroupRecord{Shard: 1, Offset: 2, Attempts: 3, Timestamp: 4, Record: oneRecord}
	if err != nil || len(g.Records) != 2 || !sameValue(g.Records[1], want) || string(g.Cursor) != "c" {
		t.Fatalf("hand-built body decodes to %+v, %v", g, err)
	}
}

func TestGroupAckRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		a    wire.GroupAck
	}{
		{"zero", wire.GroupAck{}},
		{"one", wire.GroupAck{Name: nameABC, Group: "billing", Shard: 1, Offsets: []uint64{42}}},
		{"several", wire.GroupAck{Name: nameABC, Group: "billing", Shard: 3, Offsets: []uint64{7, 3, 9, 9}}},
		{"extremes", wire.GroupAck{Name: nameLong, Group: repeatString('g', 64), Shard: math.MaxUint32, Offsets: []uint64{0, math.MaxUint64}}},
	}
	for _, tc := range tests {
		for _, nack := range []bool{false, true} {
			typ := wire.TypeGroupAck
			if nack {
				typ = wire.TypeGroupNack
			}
			t.Run(typ.String()+"/"+tc.name, func(t *testing.T) {
				roundTrip(t, wire.AppendGroupAck(nil, 22, nack, tc.a), typ, 22, wire.DecodeGroupAck, tc.a, -1, true)
			})
		}
	}
	// Ack and nack bodies are the same; only the frame type differs.
	a := tests[2].a
	if ack, nack := wire.AppendGroupAck(nil, 1, false, a), wire.AppendGroupAck(nil, 1, true, a); !bytes.Equal(ack[wire.HeaderSize:], nack[wire.HeaderSize:]) {
		t.Fatalf("ack body %x, nack body %x", ack[wire.HeaderSize:], nack[wire.HeaderSize:])
	}
	// Exactly MaxGroupAckOffsets offsets is the most one ack carries.
	most := wire.GroupAck{Name: nameABC, Group: "g", Offsets: make([]uint64, wire.MaxGroupAckOffsets)}
	roundTrip(t, wire.AppendGroupAck(nil, 1, false, most), wire.TypeGroupAck, 1, wire.DecodeGroupAck, most, 0, true)
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupAck(b); return err }, offsetCountBodies(1))
}

// offsetCountBodies are GroupAck / GroupSelect bodies (for shard) whose
// offset list does not frame.
func offsetCountBodies(shard uint32) []badGroupBody {
	over := wire.MaxGroupAckOffsets + 1
	return []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"count missing", bcat(nameBytes(), str16("g"), be32(shard)), wire.CodeMalformedFrame},
		{"count lies by one", offsetsBody(shard, 2, be64(1)), wire.CodeMalformedFrame},
		{"count huge", offsetsBody(shard, math.MaxUint32, be64(1)), wire.CodeMalformedFrame},
		{"offset cut", offsetsBody(shard, 1, be64(1)[:7]), wire.CodeMalformedFrame},
		{"count over the limit, bytes present", offsetsBody(shard, uint32(over), make([]byte, 8*over)), wire.CodeMalformedFrame},
		{"trailing byte", offsetsBody(shard, 1, append(be64(1), 0)), wire.CodeMalformedFrame},
		{"group length lies", bcat(nameBytes(), be16(200), []byte("g"), be32(shard), be32(0)), wire.CodeMalformedFrame},
	}
}

func TestGroupDeadLettersRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		g    wire.GroupDeadLetters
	}{
		{"zero", wire.GroupDeadLetters{}},
		{"every shard, node cap", wire.GroupDeadLetters{Name: nameABC, Group: "billing", Shard: wire.AnyShard}},
		{"one shard, paged", wire.GroupDeadLetters{Name: nameABC, Group: "billing", Shard: 2, From: 100, Limit: 50}},
		{"extremes", wire.GroupDeadLetters{Name: nameLong, Group: repeatString('g', 64), Shard: math.MaxUint32, From: math.MaxUint64, Limit: math.MaxUint32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupDeadLetters(nil, 23, tc.g), wire.TypeGroupDeadLetters, 23, wire.DecodeGroupDeadLetters, tc.g, -1, true)
		})
	}
}

func TestGroupDeadListRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		l    wire.GroupDeadList
	}{
		{"empty", wire.GroupDeadList{}},
		{"empty, more", wire.GroupDeadList{More: true}},
		{"two", wire.GroupDeadList{Letters: []wire.DeadLetter{
			{Shard: 0, Offset: 3, Attempts: 5, DeadUnixNano: 1_700_000_000_000_000_000, Reason: "max attempts"},
			{Shard: 1, Offset: 9, Attempts: 1, DeadUnixNano: 1_700_000_000_000_000_001},
		}}},
		{"extremes", wire.GroupDeadList{More: true, Letters: []wire.DeadLetter{
			{Shard: math.MaxUint32, Offset: math.MaxUint64, Attempts: math.MaxUint32, DeadUnixNano: math.MinInt64, Reason: repeatString('r', 65535)},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupDeadList(nil, 23, tc.l), wire.TypeGroupDeadList, 23, wire.DecodeGroupDeadList, tc.l, -1, true)
		})
	}
	entry := bcat(be32(1), be64(2), be32(3), be64(4), str16("r"))
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupDeadList(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"more flag 2", bcat([]byte{2}, be32(0)), wire.CodeMalformedFrame},
		{"more flag 0xff", bcat([]byte{0xff}, be32(1), entry), wire.CodeMalformedFrame},
		{"count missing", []byte{0}, wire.CodeMalformedFrame},
		{"count lies by one", bcat([]byte{0}, be32(2), entry), wire.CodeMalformedFrame},
		{"count huge", bcat([]byte{1}, be32(math.MaxUint32), entry), wire.CodeMalformedFrame},
		{"reason length lies", bcat([]byte{0}, be32(1), be32(1), be64(2), be32(3), be64(4), be16(9), []byte("r")), wire.CodeMalformedFrame},
		{"trailing byte", bcat([]byte{0}, be32(1), entry, []byte{0}), wire.CodeMalformedFrame},
	})
	l, err := wire.DecodeGroupDeadList(bcat([]byte{1}, be32(1), entry))
	want := wire.GroupDeadList{More: true, Letters: []wire.DeadLetter{{Shard: 1, Offset: 2, Attempts: 3, DeadUnixNano: 4, Reason: "r"}}}
	if err != nil || !sameValue(l, want) {
		t.Fatalf("hand-built body decodes to %+v, %v", l, err)
	}
}

func TestGroupSelectRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		g    wire.GroupSelect
	}{
		{"zero", wire.GroupSelect{}},
		{"listed offsets", wire.GroupSelect{Name: nameABC, Group: "billing", Shard: 2, Offsets: []uint64{4, 8, 15}}},
		{"every dead letter of a shard", wire.GroupSelect{Name: nameABC, Group: "billing", Shard: 2}},
		{"every dead letter", wire.GroupSelect{Name: nameABC, Group: "billing", Shard: wire.AnyShard}},
		{"extremes", wire.GroupSelect{Name: nameLong, Group: repeatString('g', 64), Shard: wire.AnyShard - 1, Offsets: []uint64{math.MaxUint64}}},
	}
	for _, tc := range tests {
		for _, discard := range []bool{false, true} {
			typ := wire.TypeGroupRedrive
			if discard {
				typ = wire.TypeGroupDiscard
			}
			t.Run(typ.String()+"/"+tc.name, func(t *testing.T) {
				roundTrip(t, wire.AppendGroupSelect(nil, 24, discard, tc.g), typ, 24, wire.DecodeGroupSelect, tc.g, -1, true)
			})
		}
	}
	// Redrive, discard, ack and nack share one body layout.
	s := tests[1].g
	redrive := wire.AppendGroupSelect(nil, 1, false, s)[wire.HeaderSize:]
	discard := wire.AppendGroupSelect(nil, 1, true, s)[wire.HeaderSize:]
	ack := wire.AppendGroupAck(nil, 1, false, wire.GroupAck(s))[wire.HeaderSize:]
	if !bytes.Equal(redrive, discard) || !bytes.Equal(redrive, ack) {
		t.Fatalf("redrive %x, discard %x, ack %x", redrive, discard, ack)
	}
	most := wire.GroupSelect{Name: nameABC, Group: "g", Offsets: make([]uint64, wire.MaxGroupAckOffsets)}
	roundTrip(t, wire.AppendGroupSelect(nil, 1, true, most), wire.TypeGroupDiscard, 1, wire.DecodeGroupSelect, most, 0, true)

	decode := func(b []byte) error { _, err := wire.DecodeGroupSelect(b); return err }
	refuseAll(t, decode, offsetCountBodies(2))
	refuseAll(t, decode, offsetCountBodies(wire.AnyShard))
	// Offsets name records of one shard: with AnyShard they are refused as
	// a request error, once the body frames.
	refuseAll(t, decode, []badGroupBody{
		{"AnyShard with offsets", splitFrame(t, wire.AppendGroupSelect(nil, 1, false, wire.GroupSelect{Name: nameABC, Group: "g",
			Shard: wire.AnyShard, Offsets: []uint64{1}})).Body, wire.CodeInvalidRequest},
		{"AnyShard with offsets, discard", splitFrame(t, wire.AppendGroupSelect(nil, 1, true, wire.GroupSelect{Name: nameABC, Group: "g",
			Shard: wire.AnyShard, Offsets: []uint64{1, 2, 3}})).Body, wire.CodeInvalidRequest},
		{"AnyShard with offsets and a trailing byte", offsetsBody(wire.AnyShard, 1, append(be64(1), 0)), wire.CodeMalformedFrame},
		{"AnyShard with a count that lies", offsetsBody(wire.AnyShard, 2, be64(1)), wire.CodeMalformedFrame},
	})
}

func TestGroupDoneRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 65536, math.MaxUint64} {
		roundTrip(t, wire.AppendGroupDone(nil, 25, n), wire.TypeGroupDone, 25, wire.DecodeGroupDone, n, -1, true)
	}
}

func TestDescribeGroupRoundTrip(t *testing.T) {
	for _, g := range []wire.DescribeGroup{{}, {Name: nameABC, Group: "billing"}, {Name: nameLong, Group: repeatString('g', 65535)}} {
		roundTrip(t, wire.AppendDescribeGroup(nil, 26, g), wire.TypeDescribeGroup, 26, wire.DecodeDescribeGroup, g, -1, true)
	}
}

func TestGroupInfoRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		g    wire.GroupInfo
	}{
		{"zero", wire.GroupInfo{}},
		{"no members", wire.GroupInfo{Group: "billing", Generation: 1, VisibilityMillis: 30_000, SessionMillis: 10_000, MaxAttempts: 5,
			Shards: []wire.GroupShardInfo{{Shard: 0, Committed: 1, Delivered: 2, Tail: 3}}}},
		{"full", groupInfoFull},
		{"extremes", wire.GroupInfo{Group: repeatString('g', 65535), Generation: math.MaxUint64, VisibilityMillis: math.MaxUint32,
			SessionMillis: math.MaxUint32, MaxAttempts: math.MaxUint32,
			Shards: []wire.GroupShardInfo{{Shard: math.MaxUint32, Committed: math.MaxUint64, Delivered: math.MaxUint64, Tail: math.MaxUint64,
				Claims: math.MaxUint32, Owed: math.MaxUint32, DeadLetters: math.MaxUint32}},
			Members: []wire.GroupMemberInfo{{ID: repeatString('m', 65535), Shards: []uint32{0, math.MaxUint32}, Window: math.MaxUint32,
				InFlight: math.MaxUint32, IdleMillis: math.MaxUint32}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupInfo(nil, 26, tc.g), wire.TypeGroupInfo, 26, wire.DecodeGroupInfo, tc.g, -1, true)
		})
	}
	head := bcat(str16("g"), be64(1), be32(2), be32(3), be32(4))
	shard := bcat(be32(0), be64(1), be64(2), be64(3), be32(4), be32(5), be32(6))
	member := bcat(str16("m"), be32(1), be32(0), be32(7), be32(8), be32(9))
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupInfo(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"shard count missing", head, wire.CodeMalformedFrame},
		{"shard count lies by one", bcat(head, be32(2), shard, be32(0)), wire.CodeMalformedFrame},
		{"shard count huge", bcat(head, be32(math.MaxUint32), shard, be32(0)), wire.CodeMalformedFrame},
		{"member count missing", bcat(head, be32(1), shard), wire.CodeMalformedFrame},
		{"member count lies by one", bcat(head, be32(1), shard, be32(2), member), wire.CodeMalformedFrame},
		{"member count huge", bcat(head, be32(0), be32(math.MaxUint32), member), wire.CodeMalformedFrame},
		{"member shard count lies", bcat(head, be32(0), be32(1), str16("m"), be32(5), be32(0), be32(7), be32(8), be32(9)), wire.CodeMalformedFrame},
		{"member shard count huge", bcat(head, be32(0), be32(1), str16("m"), be32(math.MaxUint32), be32(0), be32(7), be32(8), be32(9)), wire.CodeMalformedFrame},
		{"member id length lies", bcat(head, be32(0), be32(1), be16(99), []byte("m"), be32(0), be32(7), be32(8), be32(9)), wire.CodeMalformedFrame},
		{"trailing byte", bcat(head, be32(1), shard, be32(1), member, []byte{0}), wire.CodeMalformedFrame},
	})
	g, err := wire.DecodeGroupInfo(bcat(head, be32(1), shard, be32(1), member))
	want := wire.GroupInfo{Group: "g", Generation: 1, VisibilityMillis: 2, SessionMillis: 3, MaxAttempts: 4,
		Shards:  []wire.GroupShardInfo{{Shard: 0, Committed: 1, Delivered: 2, Tail: 3, Claims: 4, Owed: 5, DeadLetters: 6}},
		Members: []wire.GroupMemberInfo{{ID: "m", Shards: []uint32{0}, Window: 7, InFlight: 8, IdleMillis: 9}}}
	if err != nil || !sameValue(g, want) {
		t.Fatalf("hand-built body decodes to %+v, %v", g, err)
	}
}

func TestGroupSubscribeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		g    wire.GroupSubscribe
	}{
		{"zero", wire.GroupSubscribe{}},
		{"node names the member", wire.GroupSubscribe{Name: nameABC, Group: "billing", Window: 64, MaxPerPush: 16}},
		{"named member", wire.GroupSubscribe{Name: nameABC, Group: "billing", Member: "worker-1", Window: 64, MaxPerPush: 16}},
		{"extremes", wire.GroupSubscribe{Name: nameLong, Group: repeatString('g', 65535), Member: repeatString('m', 65535), Window: math.MaxUint32, MaxPerPush: math.MaxUint32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupSubscribe(nil, 27, tc.g), wire.TypeGroupSubscribe, 27, wire.DecodeGroupSubscribe, tc.g, -1, true)
		})
	}
}

func TestGroupAssignmentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		g    wire.GroupAssignment
	}{
		{"zero", wire.GroupAssignment{}},
		{"idle member", wire.GroupAssignment{Member: "worker-2", Generation: 3, Window: 64, MaxPerPush: 16, SessionMillis: 10_000}},
		{"shards", wire.GroupAssignment{Member: "worker-1", Generation: 3, Shards: []uint32{0, 2, 5}, Window: 64, MaxPerPush: 16, SessionMillis: 10_000, InFlight: 12}},
		{"extremes", wire.GroupAssignment{Member: repeatString('m', 65535), Generation: math.MaxUint64, Shards: []uint32{math.MaxUint32},
			Window: math.MaxUint32, MaxPerPush: math.MaxUint32, SessionMillis: math.MaxUint32, InFlight: math.MaxUint32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupAssignment(nil, 27, tc.g), wire.TypeGroupAssignment, 27, wire.DecodeGroupAssignment, tc.g, -1, true)
		})
	}
	tail := bcat(be32(1), be32(2), be32(3), be32(4))
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupAssignment(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"member length lies", bcat(be16(9), []byte("m")), wire.CodeMalformedFrame},
		{"shard count lies by one", bcat(str16("m"), be64(1), be32(2), be32(0)), wire.CodeMalformedFrame},
		{"shard count huge", bcat(str16("m"), be64(1), be32(math.MaxUint32), be32(0), tail), wire.CodeMalformedFrame},
		{"shard count eats the tail", bcat(str16("m"), be64(1), be32(4), tail), wire.CodeMalformedFrame},
		{"trailing byte", bcat(str16("m"), be64(1), be32(0), tail, []byte{0}), wire.CodeMalformedFrame},
	})
}

func TestGroupStreamAckRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		a     wire.GroupStreamAck
		fixed int
	}{
		{"heartbeat", wire.GroupStreamAck{}, -1},
		{"credit only", wire.GroupStreamAck{Count: 16}, -1},
		{"commit and credit", wire.GroupStreamAck{Cursor: []byte("opaque-cursor-token"), Count: 16}, -1},
		{"extremes", wire.GroupStreamAck{Cursor: repeat(0xc5, wire.MaxCursorBytes), Count: math.MaxUint32}, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupStreamAck(nil, 28, tc.a), wire.TypeGroupStreamAck, 28, wire.DecodeGroupStreamAck, tc.a, tc.fixed, true)
		})
	}
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupStreamAck(b); return err }, []badGroupBody{
		{"cursor length lies", bcat(be16(9), []byte("cur"), be32(1)), wire.CodeMalformedFrame},
		{"count missing", bcat(be16(3), []byte("cur")), wire.CodeMalformedFrame},
		{"trailing byte", bcat(be16(0), be32(1), []byte{0}), wire.CodeMalformedFrame},
	})
}

func TestGroupLayouts(t *testing.T) {
	name := hex.EncodeToString(nameBytes())
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"group_poll", wire.AppendGroupPoll(nil, 1, wire.GroupPoll{Name: nameABC, Group: "g1", Shard: 0x01020304, Max: 0x05060708, WaitMillis: 0x090a0b0c}),
			name + "0002" + "6731" + "01020304" + "05060708" + "090a0b0c"},
		{"group_records", wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: []byte("cu"), Records: []wire.GroupRecord{
			{Shard: 0x01020304, Offset: 0x1112131415161718, Attempts: 0x21222324, Timestamp: -2, Record: oneRecord}}}),
			"0002" + "6375" + "00000001" + "01020304" + "1112131415161718" + "21222324" + "fffffffffffffffe" + "00000004" + "000001" + "70"},
		{"group_ack", wire.AppendGroupAck(nil, 1, false, wire.GroupAck{Name: nameABC, Group: "g1", Shard: 0x01020304, Offsets: []uint64{0x1112131415161718, 2}}),
			name + "0002" + "6731" + "01020304" + "00000002" + "1112131415161718" + "0000000000000002"},
		{"group_dead_letters", wire.AppendGroupDeadLetters(nil, 1, wire.GroupDeadLetters{Name: nameABC, Group: "g1", Shard: 0x01020304, From: 0x1112131415161718, Limit: 0x21222324}),
			name + "0002" + "6731" + "01020304" + "1112131415161718" + "21222324"},
		{"group_dead_list", wire.AppendGroupDeadList(nil, 1, wire.GroupDeadList{More: true, Letters: []wire.DeadLetter{
			{Shard: 0x01020304, Offset: 0x1112131415161718, Attempts: 0x21222324, DeadUnixNano: -2, Reason: "rs"}}}),
			"01" + "00000001" + "01020304" + "1112131415161718" + "21222324" + "fffffffffffffffe" + "0002" + "7273"},
		{"group_redrive", wire.AppendGroupSelect(nil, 1, false, wire.GroupSelect{Name: nameABC, Group: "g1", Shard: wire.AnyShard}),
			name + "0002" + "6731" + "ffffffff" + "00000000"},
		{"group_done", wire.AppendGroupDone(nil, 1, 0x1112131415161718), "1112131415161718"},
		{"describe_group", wire.AppendDescribeGroup(nil, 1, wire.DescribeGroup{Name: nameABC, Group: "g1"}), name + "0002" + "6731"},
		{"group_info", wire.AppendGroupInfo(nil, 1, wire.GroupInfo{Group: "g1", Generation: 0x1112131415161718, VisibilityMillis: 0x01020304,
			SessionMillis: 0x05060708, MaxAttempts: 0x090a0b0c,
			Shards:  []wire.GroupShardInfo{{Shard: 0xa1a2a3a4, Committed: 0xb1, Delivered: 0xb2, Tail: 0xb3, Claims: 0xc1, Owed: 0xc2, DeadLetters: 0xc3}},
			Members: []wire.GroupMemberInfo{{ID: "m", Shards: []uint32{7, 9}, Window: 0xd1, InFlight: 0xd2, IdleMillis: 0xd3}}}),
			"0002" + "6731" + "1112131415161718" + "01020304" + "05060708" + "090a0b0c" +
				"00000001" + "a1a2a3a4" + "00000000000000b1" + "00000000000000b2" + "00000000000000b3" + "000000c1" + "000000c2" + "000000c3" +
				"00000001" + "0001" + "6d" + "00000002" + "00000007" + "00000009" + "000000d1" + "000000d2" + "000000d3"},
		{"group_subscribe", wire.AppendGroupSubscribe(nil, 1, wire.GroupSubscribe{Name: nameABC, Group: "g1", Member: "m", Window: 0x01020304, MaxPerPush: 0x05060708}),
			name + "0002" + "6731" + "0001" + "6d" + "01020304" + "05060708"},
		{"group_assignment", wire.AppendGroupAssignment(nil, 1, wire.GroupAssignment{Member: "m", Generation: 0x1112131415161718, Shards: []uint32{7, 9},
			Window: 0x01020304, MaxPerPush: 0x05060708, SessionMillis: 0x090a0b0c, InFlight: 0x0d0e0f10}),
			"0001" + "6d" + "1112131415161718" + "00000002" + "00000007" + "00000009" + "01020304" + "05060708" + "090a0b0c" + "0d0e0f10"},
		{"group_stream_ack", wire.AppendGroupStreamAck(nil, 1, wire.GroupStreamAck{Cursor: []byte("cu"), Count: 0x01020304}),
			"0002" + "6375" + "01020304"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := splitFrame(t, tc.frame)
			if f.Header.Type.String() != tc.name {
				t.Fatalf("frame type %v, want %s", f.Header.Type, tc.name)
			}
			if got := hex.EncodeToString(f.Body); got != tc.want {
				t.Fatalf("body %s\nwant %s", got, tc.want)
			}
		})
	}
}

// allocatedBytes returns how many heap bytes f allocates.
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestGroupCountsLieWithoutAllocating checks that a count the body cannot
// hold is refused before anything is allocated for it: each body announces
// entries worth megabytes in a few dozen bytes.
func TestGroupCountsLieWithoutAllocating(t *testing.T) {
	const big = 1 << 20
	tests := []struct {
		name   string
		decode func([]byte) error
		body   []byte
	}{
		{"group_records record count", func(b []byte) error { _, err := wire.DecodeGroupRecords(b); return err },
			bcat(be16(0), be32(big), goodEntry)},
		{"group_ack offset count", func(b []byte) error { _, err := wire.DecodeGroupAck(b); return err },
			offsetsBody(0, wire.MaxGroupAckOffsets, be64(1))},
		{"group_select offset count", func(b []byte) error { _, err := wire.DecodeGroupSelect(b); return err },
			offsetsBody(0, wire.MaxGroupAckOffsets, be64(1))},
		{"group_dead_list count", func(b []byte) error { _, err := wire.DecodeGroupDeadList(b); return err },
			bcat([]byte{0}, be32(big), be32(1), be64(2), be32(3), be64(4), str16("r"))},
		{"group_info shard count", func(b []byte) error { _, err := wire.DecodeGroupInfo(b); return err },
			bcat(str16("g"), be64(1), be32(2), be32(3), be32(4), be32(big), be32(0))},
		{"group_info member count", func(b []byte) error { _, err := wire.DecodeGroupInfo(b); return err },
			bcat(str16("g"), be64(1), be32(2), be32(3), be32(4), be32(0), be32(big), str16("m"), be32(0), be32(1), be32(2), be32(3))},
		{"group_info member shard count", func(b []byte) error { _, err := wire.DecodeGroupInfo(b); return err },
			bcat(str16("g"), be64(1), be32(2), be32(3), be32(4), be32(0), be32(1), str16("m"), be32(big), be32(1), be32(2), be32(3))},
		{"group_assignment shard count", func(b []byte) error { _, err := wire.DecodeGroupAssignment(b); return err },
			bcat(str16("m"), be64(1), be32(big), be32(1), be32(2), be32(3), be32(4))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const runs = 10
			n := allocatedBytes(func() {
				for i := 0; i < runs; i++ {
					wantCode(t, tc.decode(tc.body), wire.CodeMalformedFrame)
				}
			})
			// The refusal itself allocates an error and its message; an
			// allocation from the count would be hundreds of kilobytes.
			if n > runs*16<<10 {
				t.Fatalf("%d refusals of a %d-byte body allocated %d bytes", runs, len(tc.body), n)
			}
		})
	}
}
