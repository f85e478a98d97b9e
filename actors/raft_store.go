package actors

import (
	"bytes"
	"encoding/binary"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/storage"
)

// A replicated shard's raft state lives in the log's metadata keyspace,
// written by the storage writer in the same group commits as everything
// else (raft entries of every group on a node share one sync):
//
//	raft | stream u64 | shard u32 | 'e' | index u64   an entry (raftpb.Entry)
//	raft | stream u64 | shard u32 | 'h'                the HardState
//	raft | stream u64 | shard u32 | 's'                the last snapshot
//	raft | stream u64 | shard u32 | 'a'                the last index whose batch
//	                                                    the shard log holds, and
//	                                                    the tail after it (u64, u64)
//	raft | stream u64 | shard u32 | 'i'                a snapshot being installed
//	                                                    (its log fetched in pages)
//
// all big-endian, so a group's entries scan in index order. The raft log
// is the durable source of a replicated shard: the shard's own batches are
// written when entries apply, and the raft log is compacted behind the
// applied index once those batches are stored (docs/architecture.md).
var raftKeyPrefix = []byte("raft")

const (
	raftKindEntry     = 'e'
	raftKindHardState = 'h'
	raftKindSnapshot  = 's'
	raftKindApplied   = 'a'
	raftKindInstall   = 'i'
)

// raftGroupPrefix is every key of shard's raft group.
func raftGroupPrefix(shard storage.ShardKey) []byte {
	k := make([]byte, 0, len(raftKeyPrefix)+12+9)
	k = append(k, raftKeyPrefix...)
	k = binary.BigEndian.AppendUint64(k, shard.Stream)
	return binary.BigEndian.AppendUint32(k, shard.Shard)
}

func raftEntryKey(shard storage.ShardKey, index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(raftGroupPrefix(shard), raftKindEntry), index)
}

func raftHardStateKey(shard storage.ShardKey) []byte {
	return append(raftGroupPrefix(shard), raftKindHardState)
}

func raftSnapshotKey(shard storage.ShardKey) []byte {
	return append(raftGroupPrefix(shard), raftKindSnapshot)
}

func raftInstallKey(shard storage.ShardKey) []byte {
	return append(raftGroupPrefix(shard), raftKindInstall)
}

// raftPersistMetas are the writes that make p durable for shard, whose
// stored entries span [first, last] (last < first: none).
func raftPersistMetas(shard storage.ShardKey, p *raftPersist, first, last uint64) ([]storage.MetaPut, error) {
	var out []storage.MetaPut
	drop := func(from, to uint64) {
		for i := from; i <= to && i >= from; i++ {
			out = append(out, storage.MetaPut{Key: raftEntryKey(shard, i)})
		}
	}
	if p.Snapshot != nil {
		// The snapshot first, then the raft log restarts after it: every
		// stored entry goes. A commit split between the two leaves old
		// entries behind a newer snapshot, which loadRaftDurable drops or
		// raft overwrites, never a snapshot missing under its entries.
		v, err := proto.Marshal(p.Snapshot)
		if err != nil {
			return nil, fmt.Errorf("raft: encoding a snapshot: %w", err)
		}
		out = append(out, storage.MetaPut{Key: raftSnapshotKey(shard), Value: v})
		if last >= first {
			drop(first, last)
		}
	} else if p.DropFrom > 0 && p.DropFrom <= last {
		drop(max(p.DropFrom, first), last)
	}
	for _, e := range p.Entries {
		v, err := proto.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("raft: encoding entry %d: %w", e.GetIndex(), err)
		}
		out = append(out, storage.MetaPut{Key: raftEntryKey(shard, e.GetIndex()), Value: v})
	}
	// The HardState last: a commit split across transactions never stores
	// a commit index ahead of the entries it commits.
	if p.HardState != nil {
		v, err := proto.Marshal(p.HardState)
		if err != nil {
			return nil, fmt.Errorf("raft: encoding the HardState: %w", err)
		}
		out = append(out, storage.MetaPut{Key: raftHardStateKey(shard), Value: v})
	}
	return out, nil
}

// raftCompactMetas are the writes that compact shard's stored raft log
// behind snap (taken by raftCore.compact): the snapshot, then the
// deletion of the entries [first, to].
func raftCompactMetas(shard storage.ShardKey, snap *pb.Snapshot, first, to uint64) ([]storage.MetaPut, error) {
	v, err := proto.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("raft: encoding a snapshot: %w", err)
	}
	out := []storage.MetaPut{{Key: raftSnapshotKey(shard), Value: v}}
	for i := first; i <= to && i >= first; i++ {
		out = append(out, storage.MetaPut{Key: raftEntryKey(shard, i)})
	}
	return out, nil
}

// loadRaftDurable reads what log holds of shard's raft group. Entries
// must run without a gap from the snapshot on: anything else is a
// corrupt store, and the replica must not start on it.
func loadRaftDurable(log storage.Log, shard storage.ShardKey) (raftDurable, error) {
	var d raftDurable
	prefix := raftGroupPrefix(shard)
	err := log.ScanMeta(prefix, func(key, value []byte) error {
		rest := key[len(prefix):]
		if len(rest) == 0 {
			return fmt.Errorf("raft: key %x has no kind", key)
		}
		v := bytes.Clone(value)
		switch rest[0] {
		case raftKindEntry:
			if len(rest) != 9 {
				return fmt.Errorf("raft: entry key %x", key)
			}
			e := &pb.Entry{}
			if err := proto.Unmarshal(v, e); err != nil {
				return fmt.Errorf("raft: entry %d: %w", binary.BigEndian.Uint64(rest[1:]), err)
			}
			if e.GetIndex() != binary.BigEndian.Uint64(rest[1:]) {
				return fmt.Errorf("raft: entry stored at %d says %d", binary.BigEndian.Uint64(rest[1:]), e.GetIndex())
			}
			d.Entries = append(d.Entries, e)
		case raftKindHardState:
			hs := &pb.HardState{}
			if err := proto.Unmarshal(v, hs); err != nil {
				return fmt.Errorf("raft: HardState: %w", err)
			}
			d.HardState = hs
		case raftKindSnapshot:
			s := &pb.Snapshot{}
			if err := proto.Unmarshal(v, s); err != nil {
				return fmt.Errorf("raft: snapshot: %w", err)
			}
			d.Snapshot = s
		case raftKindInstall:
			s := &pb.Snapshot{}
			if err := proto.Unmarshal(v, s); err != nil {
				return fmt.Errorf("raft: snapshot being installed: %w", err)
			}
			d.Installing = s
		case raftKindApplied:
			// A shard's holds its tail too; the metadata group's, the index
			// alone.
			switch {
			case len(v) == 16 && shard != metaGroupKey:
				d.Applied, d.AppliedTail = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
				d.HasAppliedTail = true
			case len(v) == 8 && shard == metaGroupKey:
				d.Applied = binary.BigEndian.Uint64(v)
			default:
				return fmt.Errorf("raft: applied index of %d bytes", len(v))
			}
		default:
			return fmt.Errorf("raft: key %x of unknown kind %q", key, rest[0])
		}
		return nil
	})
	if err != nil {
		return raftDurable{}, fmt.Errorf("stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	next := uint64(raftBootstrapIndex + 1)
	if d.Snapshot != nil {
		next = d.Snapshot.GetMetadata().GetIndex() + 1
	}
	// Entries the snapshot covers may remain if a compaction's deletes were
	// split from its snapshot write: they are dropped here.
	for len(d.Entries) > 0 && d.Entries[0].GetIndex() < next {
		if d.StaleFrom == 0 {
			d.StaleFrom = d.Entries[0].GetIndex()
		}
		d.StaleTo = d.Entries[0].GetIndex()
		d.Entries = d.Entries[1:]
	}
	for i, e := range d.Entries {
		if e.GetIndex() != next+uint64(i) {
			return raftDurable{}, fmt.Errorf("stream %d shard %d: raft: entry %d follows %d", shard.Stream, shard.Shard, e.GetIndex(), next+uint64(i)-1)
		}
	}
	// A replicated shard records its applied index only with the batches it
	// writes; a compaction (written after every batch it covers, by the
	// same writer) may be at an entry that wrote none. What a snapshot
	// covers is applied, and raft refuses to start below it.
	d.Applied = max(d.Applied, next-1)
	// A snapshot is committed by definition: a HardState written before a
	// snapshot it was split from (a crash between them) may say less, and
	// raft refuses to start on a commit below its snapshot.
	if d.HardState != nil && d.HardState.GetCommit() < next-1 {
		hs := proto.Clone(d.HardState).(*pb.HardState)
		hs.Commit = new(next - 1)
		d.HardState = hs
	}
	return d, nil
}

// ShardAppliedKey is the metadata key a replicated shard stores its
// applied raft index and tail under (16 bytes: index u64, tail u64), written
// with every batch it applies: its tail is the shard log's tail once the
// commit that wrote it is durable. Tests check a replica's storage with it.
func ShardAppliedKey(shard storage.ShardKey) []byte { return raftAppliedKey(shard) }
