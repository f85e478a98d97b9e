package client

import "github.com/heraldmq/herald/net/wire"

// shardResume is the resume of one subscribed shard after its connection
// was lost, the deterministic part of it: where to ask the node to resume,
// what to ask when the node refuses that offset, and what the application
// must be told once the node accepted. It does no I/O; the subscription
// actor owns it.
//
// A shard resumes at the offset after the last record it received (the
// queue's resumeOffset; received records not yet delivered are kept and
// delivered first), so a durable shard goes on with no gap and no
// duplicate. If the node no longer has that offset it refuses with
// offset_out_of_range, whose detail is the first offset it has, or its tail
// (below the asked offset when the shard's offsets restarted: an ephemeral
// shard after its node restarted). The shard then resumes there, and the
// records in between are a gap the application hears of (*GapError). A
// second refusal resumes at the tail. When the node accepts the offset
// asked for, the first record must be at it: a node may also skip records
// it no longer holds without refusing (an ephemeral shard's memory cap), so
// the queue watches for that.
type shardResume struct {
	// active is set from the loss until the node accepts the resumed
	// subscription.
	active bool
	// from is the first offset not received: where the shard resumes.
	from uint64
	// refusals counts the node's offset_out_of_range refusals of this
	// resume.
	refusals int
}

// begin starts resuming at from and returns what to subscribe with.
func (r *shardResume) begin(from uint64) (wire.StartKind, uint64) {
	r.active, r.from, r.refusals = true, from, 0
	return wire.StartOffset, from
}

// refused handles the node's offset_out_of_range refusal of the resume
// (detail is the refusal's detail) and returns what to subscribe with next;
// ok is false when this is not a resume, or the refusals ran out, and the
// shard ends with the refusal.
func (r *shardResume) refused(detail uint64) (start wire.StartKind, offset uint64, ok bool) {
	if !r.active {
		return 0, 0, false
	}
	r.refusals++
	switch r.refusals {
	case 1:
		return wire.StartOffset, detail, true
	case 2:
		return wire.StartLatest, 0, true
	}
	r.active = false
	return 0, 0, false
}

// subscribed ends the resume: the node accepted it at offset. It returns
// the gap the application must hear of (nil if none), or, when the node
// accepted the offset asked for, watch: the first record must be at it.
func (r *shardResume) subscribed(shard uint32, offset uint64) (gap *GapError, watch bool) {
	if !r.active {
		return nil, false
	}
	r.active = false
	if r.refusals == 0 {
		return nil, offset == r.from
	}
	if offset == r.from {
		return nil, true
	}
	return &GapError{Shard: shard, From: r.from, To: offset}, false
}
