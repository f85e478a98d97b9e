package client

import (
	"bytes"
	"encoding/binary"

	"github.com/heraldmq/herald/net/wire"
)

// Producer batching: a publish-stream actor writes the publishes queued
// behind the one it is writing as one Publish frame, so one-record
// publishes made faster than frames can be written share frames (and the
// node's per-frame work) without the caller asking for it. Nothing waits to
// be merged: a publish is written as soon as the actor gets to it, together
// with whatever queued meanwhile (while earlier frames were written, their
// acks handled, or the window was full), like the node's delivery batching.
//
// Which publishes merge, and how their acks are split again, is decided by
// frameCoalescer with no I/O:
//
//   - only single-frame plain publishes merge (AckPerBatch or AckNone; not
//     AckPerMessage, conditional or idempotent ones, whose frames are
//     each their caller's unit of success, condition or dedup);
//   - only adjacent queued frames merge, and only those whose Publish frames
//     are the same but for the records: the same stream, shard (or
//     AnyShard), key and ack mode. A shard's publishes keep their order;
//     a keyed publish merges only with publishes of the same key, so the
//     node's check that the key routes to the shard covers every record;
//   - a merged frame holds at most limits.records records and
//     limits.bytes bytes of records, so the node never refuses it as too
//     large where its parts alone would have passed; a publish larger than
//     that goes alone, as before;
//   - the node answers a merged AckPerBatch frame with one ack for its
//     contiguous records: each part gets its own slice of it (split). A
//     refusal is about the whole frame (the stream, the shard, draining,
//     overload, storage: every per-record check was made by each caller
//     before it queued), and each part gets it as it would have alone.
//
// Each publish keeps its own trace span, ended at its own ack: its records
// carry its span's trace context whichever frame they travel in (the node's
// receive span of a merged frame is a child of its first record's).

// coalesceMaxBytes bounds the records of one merged frame: beyond a few
// hundred KiB per frame, merging saves nothing more of the node's per-frame
// work, and a larger frame only holds up what is behind it.
const coalesceMaxBytes = 256 << 10

// coalesceMaxRecords bounds the records of one merged frame.
const coalesceMaxRecords = 4096

// coalesceLimits bounds one merged frame.
type coalesceLimits struct {
	// records is the most records in a merged frame.
	records int
	// bytes is the most bytes of records in a merged frame.
	bytes int
}

// coalesceLimitsFor returns the limits for a node whose largest frame body
// is maxFrame bytes. The node refuses a publish whose records do not fit a
// delivery frame (its max frame less a delivery head of well under 1 KiB);
// half the frame leaves that room with a wide margin.
func coalesceLimitsFor(maxFrame uint32) coalesceLimits {
	return coalesceLimits{records: coalesceMaxRecords, bytes: min(coalesceMaxBytes, int(maxFrame/2))}
}

// frameCoalescer decides which queued frames share a Publish frame, encodes
// that frame and splits its ack. It holds only its limits.
type frameCoalescer struct {
	limits coalesceLimits
}

// take returns how many frames at the head of queue go into the next
// frame written: at least 1 (the head alone), and more only while each
// further frame can merge with the head (see the file's comment) and the
// merged frame stays within the limits.
func (c frameCoalescer) take(queue []pendingFrame) int {
	if len(queue) == 0 {
		return 0
	}
	head := queue[0]
	if !head.req.mergeable() {
		return 1
	}
	records, size := int(head.req.count), head.req.recBytes
	prefix := head.req.prefix()
	n := 1
	for ; n < len(queue); n++ {
		f := queue[n]
		if !f.req.mergeable() || !bytes.Equal(f.req.prefix(), prefix) {
			break
		}
		if records+int(f.req.count) > c.limits.records || size+f.req.recBytes > c.limits.bytes {
			break
		}
		records += int(f.req.count)
		size += f.req.recBytes
	}
	return n
}

// encode returns the Publish frame carrying the records of parts, in
// order, with request id 0: parts[0]'s frame itself when it is alone, else
// a frame with parts[0]'s head, the records count of all, and every part's
// records block after another, in a buffer from frameBuffers (the caller
// gives it back once written). parts come from take.
func (c frameCoalescer) encode(parts []pendingFrame) []byte {
	first := parts[0].req
	if len(parts) == 1 {
		return first.frames[parts[0].idx]
	}
	frame0 := first.frames[0]
	head := frame0[:len(frame0)-first.recBytes-4] // through the key (and flags' fields), before the count
	size := len(head) + 4
	count := uint32(0)
	for _, p := range parts {
		size += p.req.recBytes
		count += p.req.count
	}
	out := frameBuffers.get(size)
	out = append(out, head...)
	out = binary.BigEndian.AppendUint32(out, count)
	for _, p := range parts {
		out = append(out, p.req.records()...)
	}
	binary.BigEndian.PutUint32(out[0:4], uint32(len(out)-wire.HeaderSize))
	return out
}

// split returns each part's ack of the ack of the merged frame carrying
// parts: part i's records are the Count records after those of the parts
// before it. An ack that does not cover exactly the parts' records breaks
// the protocol.
func (c frameCoalescer) split(ack wire.PublishAck, parts []pendingFrame) ([]wire.PublishAck, error) {
	total := uint64(0)
	for _, p := range parts {
		total += uint64(p.req.count)
	}
	if uint64(ack.Count) != total || ack.Duplicate {
		return nil, protocolViolation("publish ack of %d records (duplicate %v) for a merged publish of %d", ack.Count, ack.Duplicate, total)
	}
	out := make([]wire.PublishAck, len(parts))
	off := ack.Offset
	for i, p := range parts {
		out[i] = wire.PublishAck{Shard: ack.Shard, Offset: off, Count: p.req.count}
		off += uint64(p.req.count)
	}
	return out, nil
}

// mergeable reports whether r's frame may share a Publish frame with
// others (see the file's comment); startPublish sets recBytes only then.
func (r *publishRequest) mergeable() bool { return r.recBytes > 0 }

// records returns the records block of r's frame (a mergeable request has
// one frame, which ends with its records).
func (r *publishRequest) records() []byte {
	f := r.frames[0]
	return f[len(f)-r.recBytes:]
}

// prefix returns the body of r's frame between the header and the records
// count: what must be the same for two frames to merge.
func (r *publishRequest) prefix() []byte {
	f := r.frames[0]
	return f[wire.HeaderSize : len(f)-r.recBytes-4]
}
