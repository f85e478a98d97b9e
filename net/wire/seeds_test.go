package wire_test

import (
	"bytes"
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"

	"github.com/heraldmq/herald/net/fuzzseed"
)

// The seed corpus under testdata/fuzz/<FuzzName>/ is built by the encoders:
// seedFileList says what every file holds, TestFuzzSeedFilesCurrent fails
// when a file on disk differs (an encoding changed and the seed went stale),
// and
//
//	go test -run '^TestFuzzSeedFilesCurrent$' ./net/wire/ -args -update-seeds
//
// rewrites them. Files the fuzzer adds (failing inputs, named by hash) are
// left alone.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed files under testdata/fuzz from the encoders")

// bodyTargets maps each body fuzz target to the frame type whose seed body
// it starts from.
var bodyTargets = map[string]wire.Type{
	"FuzzDecodeHello":          wire.TypeHello,
	"FuzzDecodeWelcome":        wire.TypeWelcome,
	"FuzzDecodeError":          wire.TypeError,
	"FuzzDecodeGoAway":         wire.TypeGoAway,
	"FuzzDecodeCreateStream":   wire.TypeCreateStream,
	"FuzzDecodeDescribeStream": wire.TypeDescribeStream,
	"FuzzDecodeListStreams":    wire.TypeListStreams,
	"FuzzDecodeStreamInfo":     wire.TypeStreamInfo,
	"FuzzDecodeStreamList":     wire.TypeStreamList,
	"FuzzDecodeDeleteStream":   wire.TypeDeleteStream,
	"FuzzDecodeSetReplicas":    wire.TypeSetReplicas,
	"FuzzDecodeNodeList":       wire.TypeNodeList,
	"FuzzDecodeRead":           wire.TypeRead,
	"FuzzDecodeReadResult":     wire.TypeReadResult,
	"FuzzDecodeOffsetsForTime": wire.TypeOffsetsForTime,
	"FuzzDecodeShardOffsets":   wire.TypeShardOffsets,
	"FuzzDecodePublish":        wire.TypePublish,
	"FuzzDecodePublishAck":     wire.TypePublishAck,
	"FuzzDecodeSubscribe":      wire.TypeSubscribe,
	"FuzzDecodeSubscribed":     wire.TypeSubscribed,
	"FuzzDecodeEventBatch":     wire.TypeEventBatch,

	"FuzzDecodeGroupPoll":        wire.TypeGroupPoll,
	"FuzzDecodeGroupRecords":     wire.TypeGroupRecords,
	"FuzzDecodeGroupAck":         wire.TypeGroupAck,
	"FuzzDecodeGroupDeadLetters": wire.TypeGroupDeadLetters,
	"FuzzDecodeGroupDeadList":    wire.TypeGroupDeadList,
	"FuzzDecodeGroupSelect":      wire.TypeGroupRedrive,
	"FuzzDecodeGroupDone":        wire.TypeGroupDone,
	"FuzzDecodeDescribeGroup":    wire.TypeDescribeGroup,
	"FuzzDecodeGroupInfo":        wire.TypeGroupInfo,
	"FuzzDecodeGroupSubscribe":   wire.TypeGroupSubscribe,
	"FuzzDecodeGroupAssignment":  wire.TypeGroupAssignment,
	"FuzzDecodeGroupStreamAck":   wire.TypeGroupStreamAck,
	"FuzzDecodeListGroups":       wire.TypeListGroups,
	"FuzzDecodeGroupList":        wire.TypeGroupList,
	"FuzzDecodeDeleteGroup":      wire.TypeDeleteGroup,
	"FuzzDecodeGroupSeek":        wire.TypeGroupSeek,
	"FuzzDecodeGroupAcks":        wire.TypeGroupAcks,
	"FuzzDecodeGroupAcksDone":    wire.TypeGroupAcksDone,
}

func seedFileList() []fuzzseed.Seed {
	var out []fuzzseed.Seed
	add := func(target, name string, vals ...any) {
		out = append(out, fuzzseed.Seed{Target: target, Name: name, Vals: vals})
	}
	body := func(frame []byte) []byte { return frame[wire.HeaderSize:] }

	// Every body target: the valid seed body, one byte short, one byte over.
	for target, typ := range bodyTargets {
		b := seedBody(typ)
		add(target, "valid", b)
		add(target, "truncated", b[:len(b)-1])
		add(target, "trailing_byte", append(bytes.Clone(b), 0))
	}

	// Error: a message longer than AppendError writes (code 1, detail 80).
	add("FuzzDecodeError", "long_message", append([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 80, 0x04, 0x01}, bytes.Repeat([]byte("m"), 1025)...))

	// CreateStream: the config's flags, routing and overflow bytes.
	cs := seedBody(wire.TypeCreateStream)
	add("FuzzDecodeCreateStream", "unknown_config_flag", withByte(cs, nameLen+4, 0x02))
	add("FuzzDecodeCreateStream", "unknown_routing", withByte(cs, nameLen+5, 2))
	add("FuzzDecodeCreateStream", "unknown_overflow", withByte(cs, nameLen+6, 3))
	add("FuzzDecodeCreateStream", "extremes", body(wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: nameLong, Config: cfgMax})))

	// StreamInfo: a tail count of 255 with one tail.
	si := bytes.Clone(seedBody(wire.TypeStreamInfo))
	si[len(si)-8-1] = 0xff
	add("FuzzDecodeStreamInfo", "tail_count_lies", si)
	add("FuzzDecodeStreamList", "count_too_large", []byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0})

	// Publish: ack mode, flags and the optional fields.
	pub := seedBody(wire.TypePublish)
	add("FuzzDecodePublish", "unknown_ack_mode", withByte(pub, nameLen, 7))
	add("FuzzDecodePublish", "unknown_flag", withByte(pub, nameLen+1, 0x04))
	for name, p := range seedPublishes() {
		add("FuzzDecodePublish", name, body(wire.AppendPublish(nil, 1, p)))
	}
	ack := seedBody(wire.TypePublishAck)
	add("FuzzDecodePublishAck", "duplicate", withByte(ack, 16, 1))
	add("FuzzDecodePublishAck", "unknown_flag", withByte(ack, 16, 2))

	add("FuzzDecodeSubscribe", "unknown_start_kind", withByte(seedBody(wire.TypeSubscribe), nameLen+4, 9))

	// EventBatch and ReadResult sections.
	one := oneRecord
	add("FuzzDecodeEventBatch", "count_mismatch", eventBody(1, rawSection{count: 2, length: uint32(len(one)), recs: one}))
	add("FuzzDecodeEventBatch", "records_length_lies", eventBody(1, rawSection{count: 1, length: 100, recs: one}))
	add("FuzzDecodeEventBatch", "zero_sections", eventBody(0))
	add("FuzzDecodeReadResult", "empty_page", body(wire.AppendReadResult(nil, 1, 5, 0, 5, nil)))
	add("FuzzDecodeReadResult", "count_mismatch", readResultBody(eventBody(1, rawSection{count: 2, length: uint32(len(one)), recs: one})))
	add("FuzzDecodeReadResult", "records_length_lies", readResultBody(eventBody(1, rawSection{count: 1, length: 100, recs: one})))
	add("FuzzDecodeReadResult", "empty_section", readResultBody(eventBody(1, rawSection{count: 0})))
	add("FuzzDecodeReadResult", "count_too_large", readResultBody(eventBody(math.MaxUint16, goodRaw)))

	add("FuzzDecodeRead", "bounded", body(wire.AppendRead(nil, 1, wire.Read{Name: nameABC, Shard: 0, Start: 10, End: 20, MaxRecords: 5, MaxBytes: 4096})))

	// Consumer groups: counts that lie, bad record bytes, the AnyShard rule,
	// flags and the empty forms (heartbeats, idle members, poll answers).
	add("FuzzDecodeGroupPoll", "no_wait", body(wire.AppendGroupPoll(nil, 1, wire.GroupPoll{Name: nameABC, Group: "billing", Max: 1})))
	add("FuzzDecodeGroupRecords", "poll_answer", body(wire.AppendGroupRecords(nil, 9, wire.GroupRecords{Records: seedGroupRecords()})))
	add("FuzzDecodeGroupRecords", "empty_poll_answer", body(wire.AppendGroupRecords(nil, 9, wire.GroupRecords{})))
	add("FuzzDecodeGroupRecords", "count_lies", bcat(be16(0), be32(math.MaxUint32), goodEntry))
	add("FuzzDecodeGroupRecords", "record_length_lies", bcat(be16(0), be32(1), groupEntry(100, oneRecord)))
	add("FuzzDecodeGroupRecords", "empty_record", bcat(be16(0), be32(1), groupEntry(0, nil)))
	add("FuzzDecodeGroupRecords", "bad_record", bcat(be16(0), be32(1), groupEntry(2, []byte{0x05, 'a'})))
	twoRecs := wire.AppendRecords(nil, []wire.Record{{}, {}})
	add("FuzzDecodeGroupRecords", "two_records_in_one", bcat(be16(0), be32(1), groupEntry(uint32(len(twoRecs)), twoRecs)))
	add("FuzzDecodeGroupAck", "no_offsets", offsetsBody(1, 0, nil))
	add("FuzzDecodeGroupAck", "count_lies", offsetsBody(1, 2, be64(1)))
	add("FuzzDecodeGroupAck", "count_over_limit", offsetsBody(1, wire.MaxGroupAckOffsets+1, be64(1)))
	add("FuzzDecodeGroupAcks", "no_entries", acksBody(0))
	add("FuzzDecodeGroupAcks", "entry_without_offsets", acksBody(1, 1, 0))
	add("FuzzDecodeGroupAcks", "entry_count_lies", acksBody(2, 1, 1, 7))
	add("FuzzDecodeGroupAcks", "entries_over_limit", acksBody(wire.MaxGroupAcksEntries+1, 1, 0))
	add("FuzzDecodeGroupAcks", "offsets_over_limit", acksBody(1, 1, wire.MaxGroupAckOffsets+1, 7))
	add("FuzzDecodeGroupAcksDone", "none", be32(0))
	add("FuzzDecodeGroupAcksDone", "settled_with_message", bcat(be32(1), be16(0), be64(3), str16("x")))
	add("FuzzDecodeGroupAcksDone", "count_lies", bcat(be32(2), be16(0), be64(3), str16("")))
	add("FuzzDecodeGroupDeadLetters", "one_shard_paged", body(wire.AppendGroupDeadLetters(nil, 1, wire.GroupDeadLetters{Name: nameABC, Group: "billing", Shard: 2, From: 100, Limit: 50})))
	add("FuzzDecodeGroupDeadList", "empty", body(wire.AppendGroupDeadList(nil, 1, wire.GroupDeadList{})))
	add("FuzzDecodeGroupDeadList", "unknown_more_flag", withByte(seedBody(wire.TypeGroupDeadList), 0, 2))
	add("FuzzDecodeGroupDeadList", "count_lies", bcat([]byte{0}, be32(math.MaxUint32), be32(1), be64(2), be32(3), be64(4), str16("r")))
	add("FuzzDecodeGroupSelect", "any_shard_all", seedBody(wire.TypeGroupDiscard))
	add("FuzzDecodeGroupSelect", "any_shard_with_offsets", offsetsBody(wire.AnyShard, 1, be64(9)))
	add("FuzzDecodeGroupSelect", "count_lies", offsetsBody(1, 2, be64(1)))
	add("FuzzDecodeGroupInfo", "empty", body(wire.AppendGroupInfo(nil, 1, wire.GroupInfo{})))
	infoHead := bcat(str16("g"), be64(1), be32(2), be32(3), be32(4))
	add("FuzzDecodeGroupInfo", "shard_count_lies", bcat(infoHead, be32(math.MaxUint32), be32(0)))
	add("FuzzDecodeGroupInfo", "member_count_lies", bcat(infoHead, be32(0), be32(math.MaxUint32), str16("m"), be32(0), be32(1), be32(2), be32(3)))
	add("FuzzDecodeGroupInfo", "member_shard_count_lies", bcat(infoHead, be32(0), be32(1), str16("m"), be32(math.MaxUint32), be32(1), be32(2), be32(3)))
	add("FuzzDecodeGroupSubscribe", "node_names_member", body(wire.AppendGroupSubscribe(nil, 1, wire.GroupSubscribe{Name: nameABC, Group: "billing", Window: 64, MaxPerPush: 16})))
	add("FuzzDecodeGroupAssignment", "idle", body(wire.AppendGroupAssignment(nil, 1, wire.GroupAssignment{Member: "worker-2", Generation: 3, Window: 64, MaxPerPush: 16, SessionMillis: 10_000})))
	add("FuzzDecodeGroupAssignment", "shard_count_lies", bcat(str16("m"), be64(1), be32(math.MaxUint32), be32(1), be32(2), be32(3), be32(4)))
	add("FuzzDecodeGroupStreamAck", "heartbeat", body(wire.AppendGroupStreamAck(nil, 1, wire.GroupStreamAck{})))
	add("FuzzDecodeGroupStreamAck", "cursor_length_lies", bcat(be16(math.MaxUint16), be32(1)))
	for name, s := range map[string]string{"valid": "billing", "empty": "", "too_long": strings.Repeat("g", wire.MaxGroupName+1), "bad_character": "bill ing"} {
		add("FuzzValidateGroupName", name, s)
	}

	// Offsets at a time and group administration: counts that lie, the
	// shard limit, empty answers and the seek kinds.
	add("FuzzDecodeOffsetsForTime", "one_shard_before_epoch", body(wire.AppendOffsetsForTime(nil, 1, wire.OffsetsForTime{Name: nameABC, Shard: 2, UnixNano: -1})))
	add("FuzzDecodeShardOffsets", "empty", body(wire.AppendShardOffsets(nil, 1, nil)))
	add("FuzzDecodeShardOffsets", "count_lies", bcat(be32(2), be32(0), be64(1)))
	add("FuzzDecodeShardOffsets", "count_over_limit", bcat(be32(1<<16+1), be32(0), be64(1)))
	add("FuzzDecodeGroupList", "empty", body(wire.AppendGroupList(nil, 1, nil)))
	add("FuzzDecodeGroupList", "count_lies", bcat(be32(math.MaxUint32), str16("g"), be32(1), be64(2)))
	add("FuzzDecodeGroupList", "name_length_lies", bcat(be32(1), be16(9), []byte("g"), be32(1), be64(2)))
	seek := seedBody(wire.TypeGroupSeek)
	add("FuzzDecodeGroupSeek", "to_offset", body(wire.AppendGroupSeek(nil, 1, wire.GroupSeek{Name: nameABC, Group: "billing", Shard: 1, To: wire.SeekToOffset, Offset: 41})))
	add("FuzzDecodeGroupSeek", "to_tail", body(wire.AppendGroupSeek(nil, 1, wire.GroupSeek{Name: nameABC, Group: "billing", Shard: wire.AnyShard, To: wire.SeekToOffset, Offset: wire.NoEnd})))
	add("FuzzDecodeGroupSeek", "unknown_seek_kind", withByte(seek, len(seek)-9, 2))

	// ReadFrame: streams of frames.
	frames := seedFrames()
	byType := map[wire.Type][]byte{}
	var all []byte
	for _, fr := range frames {
		byType[wire.Type(fr[4])] = fr
		all = append(all, fr...)
	}
	cat := func(types ...wire.Type) []byte {
		var b []byte
		for _, typ := range types {
			b = append(b, byType[typ]...)
		}
		return b
	}
	publish := byType[wire.TypePublish]
	add("FuzzReadFrame", "every_type", all)
	add("FuzzReadFrame", "hello_then_publish", cat(wire.TypeHello, wire.TypePublish))
	add("FuzzReadFrame", "cut_body", publish[:len(publish)-3])
	add("FuzzReadFrame", "reserved_byte", withByte(byType[wire.TypePublishAck], 6, 1))
	add("FuzzReadFrame", "too_large", wire.AppendHeader(nil, wire.Header{Length: 1 << 24, Type: wire.TypePublish, RequestID: 1}))
	add("FuzzReadFrame", "unknown_type", append(wire.AppendHeader(nil, wire.Header{Length: 1, Type: 0x7f, RequestID: 1}), 'x'))
	add("FuzzReadFrame", "delete_then_read", cat(wire.TypeDeleteStream, wire.TypeOK, wire.TypeRead, wire.TypeReadResult))
	pollAnswer := wire.AppendGroupRecords(nil, 9, wire.GroupRecords{Records: seedGroupRecords()})
	add("FuzzReadFrame", "group_pull", append(append(cat(wire.TypeGroupPoll), pollAnswer...), cat(wire.TypeGroupAck, wire.TypeGroupDone)...))
	add("FuzzReadFrame", "offsets_for_time", cat(wire.TypeOffsetsForTime, wire.TypeShardOffsets))
	add("FuzzReadFrame", "group_admin", cat(wire.TypeListGroups, wire.TypeGroupList, wire.TypeGroupSeek, wire.TypeShardOffsets, wire.TypeDeleteGroup, wire.TypeOK))
	add("FuzzReadFrame", "group_push", cat(wire.TypeGroupSubscribe, wire.TypeGroupAssignment, wire.TypeGroupRecords, wire.TypeGroupStreamAck, wire.TypeGroupAssignment))

	// Records blocks.
	two := wire.AppendRecords(nil, []wire.Record{
		{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "traceparent", Value: []byte("00-01")}}, Payload: []byte("p")},
		{Payload: []byte("second")},
	})
	headers := make([]wire.RecordHeader, wire.MaxHeaders+1)
	for i := range headers {
		headers[i] = wire.RecordHeader{Key: "h", Value: []byte{byte(i)}}
	}
	add("FuzzRecordIter", "two_records", two)
	add("FuzzRecordIter", "lying_key_length", []byte{0x05, 'a'})
	add("FuzzRecordIter", "too_many_headers", wire.AppendRecords(nil, []wire.Record{{Headers: headers}}))
	add("FuzzRecordIter", "varint_overflow", append([]byte{0, 0}, append(bytes.Repeat([]byte{0xff}, 10), 0x01)...))
	add("FuzzValidateRecords", "exact_count", two, uint32(2))
	add("FuzzValidateRecords", "count_mismatch", two, uint32(3))
	add("FuzzValidateRecords", "count_zero", two, uint32(0))
	add("FuzzValidateRecords", "count_over_limit", two, uint32(wire.MaxRecordsInBatch+1))

	for name, s := range map[string]string{"one_part": "orders", "three_parts": "acme/shop/orders", "four_parts": "a/b/c/d", "bad_character": "acme/sh op/orders"} {
		add("FuzzParseStreamName", name, s)
	}
	return out
}
func TestFuzzSeedFilesCurrent(t *testing.T) {
	fuzzseed.Check(t, seedFileList(), *updateSeeds)
}
