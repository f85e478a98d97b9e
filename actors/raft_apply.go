package actors

import (
	"encoding/binary"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// A replicated shard's raft entry carries one publish batch, encoded by
// the leader that proposed it:
//
//	version u8 (1) | proposal u64 | timestamp i64 | count u32 | flags u8 |
//	[expected u64, if flags&1] | [producer u64 | sequence u64, if flags&2] |
//	records
//
// proposal names the proposal on its leader, so that the leader knows its
// own entries when they apply (another leader's, or one proposed before a
// restart, are applied the same but answer nobody). timestamp is when the
// leader accepted the batch: the batch's timestamp on every replica.
// expected is a conditional publish's expected tail, checked at apply, so
// that exactly one of two racing conditional writers wins on every replica
// and across a failover. producer and sequence are an idempotent
// producer's, deduplicated at apply: a re-send after a failover finds the
// first send's offsets on every replica.
const (
	raftEntryVersion        = 1
	raftEntryHeadLen        = 1 + 8 + 8 + 4 + 1
	raftEntryFlagExpected   = 1
	raftEntryFlagIdempotent = 2
)

// raftPublish is a publish as proposed.
type raftPublish struct {
	Proposal  uint64
	Timestamp int64
	Count     uint32
	// Expected is a conditional publish's expected tail (HasExpected).
	Expected    uint64
	HasExpected bool
	// ProducerID and Sequence are an idempotent producer's (Idempotent).
	ProducerID, Sequence uint64
	Idempotent           bool
	Records              []byte
}

// appendRaftPublish encodes p as an entry's data.
func appendRaftPublish(dst []byte, p raftPublish) []byte {
	dst = append(dst, raftEntryVersion)
	dst = binary.BigEndian.AppendUint64(dst, p.Proposal)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Timestamp))
	dst = binary.BigEndian.AppendUint32(dst, p.Count)
	var flags byte
	if p.HasExpected {
		flags |= raftEntryFlagExpected
	}
	if p.Idempotent {
		flags |= raftEntryFlagIdempotent
	}
	dst = append(dst, flags)
	if p.HasExpected {
		dst = binary.BigEndian.AppendUint64(dst, p.Expected)
	}
	if p.Idempotent {
		dst = binary.BigEndian.AppendUint64(dst, p.ProducerID)
		dst = binary.BigEndian.AppendUint64(dst, p.Sequence)
	}
	return append(dst, p.Records...)
}

// decodeRaftPublish decodes an entry's data; Records share data.
func decodeRaftPublish(data []byte) (raftPublish, error) {
	if len(data) < raftEntryHeadLen {
		return raftPublish{}, fmt.Errorf("raft entry of %d bytes is shorter than its %d-byte head", len(data), raftEntryHeadLen)
	}
	if data[0] != raftEntryVersion {
		return raftPublish{}, fmt.Errorf("raft entry version %d, want %d", data[0], raftEntryVersion)
	}
	p := raftPublish{
		Proposal:  binary.BigEndian.Uint64(data[1:9]),
		Timestamp: int64(binary.BigEndian.Uint64(data[9:17])),
		Count:     binary.BigEndian.Uint32(data[17:21]),
	}
	flags, rest := data[21], data[raftEntryHeadLen:]
	if flags&^(raftEntryFlagExpected|raftEntryFlagIdempotent) != 0 {
		return raftPublish{}, fmt.Errorf("raft entry flags %#x unknown", flags)
	}
	if flags&raftEntryFlagExpected != 0 {
		if len(rest) < 8 {
			return raftPublish{}, fmt.Errorf("raft entry: conditional publish without its expected offset")
		}
		p.Expected, p.HasExpected, rest = binary.BigEndian.Uint64(rest), true, rest[8:]
	}
	if flags&raftEntryFlagIdempotent != 0 {
		if len(rest) < 16 {
			return raftPublish{}, fmt.Errorf("raft entry: idempotent publish without its producer and sequence")
		}
		p.ProducerID, p.Sequence, p.Idempotent, rest = binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:]), true, rest[16:]
	}
	if p.Count == 0 {
		return raftPublish{}, fmt.Errorf("raft entry of no records")
	}
	p.Records = rest
	return p, nil
}

// raftApplier is a replicated shard's state machine: it turns committed
// entries into batches of the shard's log. Every replica applies the same
// entries in the same order, so every replica assigns the same offsets;
// entries raft writes for itself (a new leader's empty entry, configuration
// changes) take none, so a failover leaves no gap in the offsets and does
// not move a conditional writer's expected tail.
type raftApplier struct {
	// next is the offset the next record gets; applied is the raft index
	// applied last.
	next, applied uint64
}

// raftApplied is what one committed entry did to the shard.
type raftApplied struct {
	// Index is the entry's raft index.
	Index uint64
	// Publish is true for a publish entry; Proposal is then its proposal.
	Publish  bool
	Proposal uint64
	// Batch is what the entry appended (Count 0: nothing).
	Batch storage.Batch
	// Refused is a conditional publish whose expected tail was not the
	// tail: nothing appended, the error names the tail.
	Refused *wire.Error
}

// apply applies one committed entry, which must be the one after the last
// applied. An entry that does not decode is an error: every replica would
// fail on it alike, and the shard must stop rather than diverge.
func (a *raftApplier) apply(e *pb.Entry) (raftApplied, error) {
	idx := e.GetIndex()
	if idx != a.applied+1 {
		return raftApplied{}, fmt.Errorf("raft apply: entry %d after %d", idx, a.applied)
	}
	out := raftApplied{Index: idx}
	if e.GetType() != pb.EntryType_EntryNormal || len(e.GetData()) == 0 {
		a.applied = idx // a leader's empty entry, or a configuration change
		return out, nil
	}
	p, err := decodeRaftPublish(e.GetData())
	if err != nil {
		return raftApplied{}, fmt.Errorf("raft apply: entry %d: %w", idx, err)
	}
	a.applied = idx
	out.Publish, out.Proposal = true, p.Proposal
	if p.HasExpected && p.Expected != a.next {
		out.Refused = &wire.Error{Code: wire.CodeConditionFailed, Detail: a.next,
			Message: fmt.Sprintf("expected tail %d, the tail is %d", p.Expected, a.next)}
		return out, nil
	}
	out.Batch = storage.Batch{Base: a.next, Count: p.Count, Timestamp: p.Timestamp, Records: p.Records}
	a.next += uint64(p.Count)
	return out, nil
}
