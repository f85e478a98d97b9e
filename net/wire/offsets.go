package wire

import "encoding/binary"

// Offsets for a time (FeatureOffsetsForTime): where a shard's records
// committed at or after a moment begin, so a subscriber can start there
// ("the last ten minutes") without reading the log. docs/protocol.md gives
// each body's layout.

// OffsetsForTime asks, for Shard (AnyShard: every shard of the stream), the
// first offset whose record was committed at or after UnixNano. Answered
// with ShardOffsets or Error.
//
// The node answers from its batch index: a batch's records share its
// timestamp, taken from the shard's wall clock, which need not increase from
// one batch to the next. The answer is the base of the first batch in
// offset order stamped at or after UnixNano; the shard's first retained
// offset when that is the first retained batch (a time before everything
// retained); the shard's committed tail when no committed batch is that
// recent (a time in the future).
type OffsetsForTime struct {
	Name     StreamName
	Shard    uint32
	UnixNano int64
}

// AppendOffsetsForTime appends an OffsetsForTime frame.
func AppendOffsetsForTime(dst []byte, reqID uint64, o OffsetsForTime) []byte {
	dst, s := frameStart(dst, TypeOffsetsForTime, 0, reqID)
	dst = appendName(dst, o.Name)
	dst = binary.BigEndian.AppendUint32(dst, o.Shard)
	dst = binary.BigEndian.AppendUint64(dst, uint64(o.UnixNano))
	return frameEnd(dst, s)
}

// DecodeOffsetsForTime decodes an OffsetsForTime body.
func DecodeOffsetsForTime(body []byte) (OffsetsForTime, error) {
	d := decoder{b: body}
	o := OffsetsForTime{Name: d.name(), Shard: d.u32("shard"), UnixNano: int64(d.u64("time"))}
	return o, d.end("offsets_for_time")
}

// ShardOffset is one shard's offset in a ShardOffsets answer.
type ShardOffset struct {
	Shard  uint32
	Offset uint64
}

// shardOffsetSize is the encoded size of a ShardOffset.
const shardOffsetSize = 4 + 8

// AppendShardOffsets appends a ShardOffsets frame: an offset per shard, in
// shard order. It answers OffsetsForTime (where each shard's records from
// the time begin) and GroupSeek (each shard's committed position after the
// seek).
func AppendShardOffsets(dst []byte, reqID uint64, offs []ShardOffset) []byte {
	dst, s := frameStart(dst, TypeShardOffsets, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(offs)))
	for _, o := range offs {
		dst = binary.BigEndian.AppendUint32(dst, o.Shard)
		dst = binary.BigEndian.AppendUint64(dst, o.Offset)
	}
	return frameEnd(dst, s)
}

// DecodeShardOffsets decodes a ShardOffsets body. A count over 65,536 (the
// most shards a stream has on the wire) or over what the body holds is
// refused before anything is allocated.
func DecodeShardOffsets(body []byte) ([]ShardOffset, error) {
	d := decoder{b: body}
	n := d.u32("shard count")
	if d.err == nil && (n > maxShards || uint64(n)*shardOffsetSize > uint64(len(d.b)-d.off)) {
		d.fail("shard count %d is over %d or exceeds the frame", n, maxShards)
	}
	if d.err != nil {
		return nil, d.err
	}
	out := make([]ShardOffset, n)
	for i := range out {
		out[i] = ShardOffset{Shard: d.u32("shard"), Offset: d.u64("offset")}
	}
	return out, d.end("shard_offsets")
}
