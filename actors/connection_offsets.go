package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// offsetsForTime answers an OffsetsForTime: for each shard asked, the first
// offset committed at or after the time, from the batch index. Like a range
// read it runs in the control loop's goroutine and registers nothing with
// the shards.
func (cs *connSession) offsetsForTime(id uint64, req wire.OffsetsForTime) []byte {
	// Where to start reading is a reader's question: subscribers and
	// group consumers both ask it.
	if werr := cs.allow(PermSubscribe|PermConsume, req.Name); werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	h, werr := cs.lookup(&LookupStreamRequest{Name: req.Name})
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	shards, werr := shardsOf(h, req.Shard)
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	offs, werr := cs.offsetsAt(h, shards, req.UnixNano)
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	return wire.AppendShardOffsets(nil, id, offs)
}

// shardsOf returns the shard a request names, or with AnyShard every shard
// of h, in order.
func shardsOf(h *StreamHandle, shard uint32) ([]uint32, *wire.Error) {
	if shard == wire.AnyShard {
		out := make([]uint32, len(h.Shards))
		for i := range out {
			out[i] = uint32(i)
		}
		return out, nil
	}
	if shard >= uint32(len(h.Shards)) {
		return nil, wire.ShardOutOfRange(h.Name, uint64(shard), len(h.Shards))
	}
	return []uint32{shard}, nil
}

// offsetsAt finds, for each of shards, the first offset committed at or
// after unixNano (storage.Log.OffsetAt: the first batch in offset order
// stamped at or after it), within the shard's committed range as the shard
// reports it: a batch on disk but not yet committed at the shard is past
// its tail, and retention may have moved its first offset. It waits for
// the shards and reads the index from the calling goroutine, never an
// actor's.
func (cs *connSession) offsetsAt(h *StreamHandle, shards []uint32, unixNano int64) ([]wire.ShardOffset, *wire.Error) {
	futures := make([]*actor.Future, len(shards))
	for i, sh := range shards {
		futures[i] = cs.root.RequestFuture(h.Shards[sh], &ShardInfoRequest{}, cs.cfg.RequestTimeout)
	}
	out := make([]wire.ShardOffset, len(shards))
	for i, sh := range shards {
		res, err := futures[i].Result()
		info, ok := res.(*ShardInfoResponse)
		if err != nil || !ok {
			return nil, wire.Errorf(wire.CodeInternal, "shard %d: %v", sh, err)
		}
		off, err := h.Log.OffsetAt(h.ShardKey(sh), unixNano)
		if err != nil {
			return nil, wire.Errorf(wire.CodeStorageFailure, "finding shard %d's offset at %d: %v", sh, unixNano, err)
		}
		out[i] = wire.ShardOffset{Shard: sh, Offset: min(max(off, info.First), info.Tail)}
	}
	return out, nil
}
