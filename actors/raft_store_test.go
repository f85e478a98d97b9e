package actors

import (
	"encoding/binary"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/storage"
)

func testEntries(from, to, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &pb.Entry{Index: new(i), Term: new(term), Data: []byte{byte(i)}})
	}
	return out
}

func entryIndexes(es []*pb.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.GetIndex())
	}
	return out
}

// A replica's raft state written through a real Badger log reads back as
// written: appends, a follower's conflicting tail replaced, the HardState,
// a compaction, an installed snapshot (which drops every entry), and two
// groups side by side that never see each other's keys. It survives a
// reopen of the database.
func TestRaftStoreRoundTripOnBadger(t *testing.T) {
	dir := t.TempDir()
	log, err := storage.OpenBadger(storage.DefaultBadgerOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	g1, g2 := storage.ShardKey{Stream: 7, Shard: 0}, storage.ShardKey{Stream: 7, Shard: 1}
	first, last := uint64(raftBootstrapIndex+1), uint64(raftBootstrapIndex)
	persist := func(g storage.ShardKey, p *raftPersist) {
		t.Helper()
		metas, err := raftPersistMetas(g, p, first, last)
		if err != nil {
			t.Fatal(err)
		}
		if err := log.Commit(nil, metas); err != nil {
			t.Fatal(err)
		}
	}
	load := func(g storage.ShardKey) raftDurable {
		t.Helper()
		d, err := loadRaftDurable(log, g)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Entries 2..9 of term 1, and a HardState.
	persist(g1, &raftPersist{Entries: testEntries(2, 9, 1), HardState: &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(2)), Commit: new(uint64(5))}})
	last = 9
	persist(g2, &raftPersist{Entries: testEntries(2, 3, 4)})
	d := load(g1)
	if got := entryIndexes(d.Entries); !slices.Equal(got, []uint64{2, 3, 4, 5, 6, 7, 8, 9}) || d.HardState.GetCommit() != 5 || d.Snapshot != nil {
		t.Fatalf("after the first append: entries %v, HardState %v, snapshot %v", got, d.HardState, d.Snapshot)
	}
	// A new leader's entries replace 7..9 with 7..8 of term 2.
	persist(g1, &raftPersist{Entries: testEntries(7, 8, 2), DropFrom: 7})
	last = 8
	d = load(g1)
	if got := entryIndexes(d.Entries); !slices.Equal(got, []uint64{2, 3, 4, 5, 6, 7, 8}) || d.Entries[5].GetTerm() != 2 || d.Entries[4].GetTerm() != 1 {
		t.Fatalf("after the conflicting tail: entries %v", got)
	}
	// Compaction behind index 5.
	snap := &pb.Snapshot{Data: []byte("shard at 5"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	metas, err := raftCompactMetas(g1, snap, first, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Commit(nil, metas); err != nil {
		t.Fatal(err)
	}
	first = 6
	d = load(g1)
	if got := entryIndexes(d.Entries); !slices.Equal(got, []uint64{6, 7, 8}) || !proto.Equal(d.Snapshot, snap) {
		t.Fatalf("after compaction: entries %v, snapshot %v", got, d.Snapshot)
	}
	// A snapshot from the leader, at 20: every entry goes, then 21..22.
	snap2 := &pb.Snapshot{Data: []byte("shard at 20"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	persist(g1, &raftPersist{Snapshot: snap2, Entries: testEntries(21, 22, 3), HardState: &pb.HardState{Term: new(uint64(3)), Commit: new(uint64(21))}})
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if log, err = storage.OpenBadger(storage.DefaultBadgerOptions(dir)); err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	d = load(g1)
	if got := entryIndexes(d.Entries); !slices.Equal(got, []uint64{21, 22}) || !proto.Equal(d.Snapshot, snap2) || d.HardState.GetCommit() != 21 || d.HardState.GetVote() != 0 {
		t.Fatalf("after the snapshot and a reopen: entries %v, snapshot %v, HardState %v", got, d.Snapshot, d.HardState)
	}
	if got := entryIndexes(load(g2).Entries); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("the other group: entries %v", got)
	}
	// What was loaded starts a core.
	c, err := newRaftCore(raftCoreConfig{ID: 1, Peers: []uint64{1, 2, 3}, ElectionTicks: 10, HeartbeatTicks: 1, Durable: d, Applied: 20})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := c.log.FirstIndex(); fi != 21 {
		t.Fatalf("core restored with first index %d, want 21", fi)
	}
}

// A store with a hole in its entries is refused, not started on.
func TestRaftStoreRefusesAGap(t *testing.T) {
	log, err := storage.OpenBadger(storage.DefaultBadgerOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	g := storage.ShardKey{Stream: 1}
	metas, err := raftPersistMetas(g, &raftPersist{Entries: append(testEntries(2, 3, 1), testEntries(5, 5, 1)...)}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Commit(nil, metas); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRaftDurable(log, g); err == nil {
		t.Fatal("entries 2, 3, 5 loaded without an error")
	}
}

// A snapshot install split by a crash after its first write (the storage
// writer may split a big commit across transactions) leaves the new
// snapshot beside the old entries and the old HardState: the replica
// still starts, its commit raised to the snapshot's index (raft would
// refuse a commit below its snapshot).
func TestRaftStoreSnapshotInstallCutShort(t *testing.T) {
	log, err := storage.OpenBadger(storage.DefaultBadgerOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	g := storage.ShardKey{Stream: 3}
	metas, err := raftPersistMetas(g, &raftPersist{Entries: testEntries(2, 6, 1), HardState: &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(4))}}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Commit(nil, metas); err != nil {
		t.Fatal(err)
	}
	snap := &pb.Snapshot{Data: []byte("at 20"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	metas, err = raftPersistMetas(g, &raftPersist{Snapshot: snap, Entries: testEntries(21, 21, 3), HardState: &pb.HardState{Term: new(uint64(3)), Commit: new(uint64(21))}}, 2, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Commit(nil, metas[:1]); err != nil { // the crash: only the first write landed
		t.Fatal(err)
	}
	d, err := loadRaftDurable(log, g)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(d.Snapshot, snap) || len(d.Entries) != 0 || d.HardState.GetCommit() != 20 {
		t.Fatalf("loaded snapshot %v, %d entries, commit %d; want the new snapshot, no entry, commit 20", d.Snapshot.GetMetadata(), len(d.Entries), d.HardState.GetCommit())
	}
	if _, err := newRaftCore(raftCoreConfig{ID: 1, Peers: []uint64{1, 2, 3}, Durable: d, Applied: 20}); err != nil {
		t.Fatalf("a replica on what the crash left: %v", err)
	}
}

// The metadata group's applied key holds its index alone (a shard's holds
// the shard's tail too): both load, so a node that restarts runs its
// metadata replica again. Anything else is refused.
func TestRaftStoreLoadsBothAppliedKeys(t *testing.T) {
	log, err := storage.OpenBadger(storage.DefaultBadgerOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	meta, shard, bad, short := metaGroupKey, storage.ShardKey{Stream: 9}, storage.ShardKey{Stream: 10}, storage.ShardKey{Stream: 11}
	if err := log.Commit(nil, []storage.MetaPut{
		{Key: raftAppliedKey(meta), Value: binary.BigEndian.AppendUint64(nil, 41)},
		{Key: raftAppliedKey(shard), Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 7), 300)},
		{Key: raftAppliedKey(bad), Value: []byte{1, 2, 3}},
		// A shard's without its tail would turn off the tail check.
		{Key: raftAppliedKey(short), Value: binary.BigEndian.AppendUint64(nil, 7)},
	}); err != nil {
		t.Fatal(err)
	}
	if d, err := loadRaftDurable(log, meta); err != nil || d.Applied != 41 || d.HasAppliedTail {
		t.Fatalf("metadata group: %+v, %v", d, err)
	}
	if d, err := loadRaftDurable(log, shard); err != nil || d.Applied != 7 || !d.HasAppliedTail || d.AppliedTail != 300 {
		t.Fatalf("shard: %+v, %v", d, err)
	}
	if _, err := loadRaftDurable(log, bad); err == nil {
		t.Fatal("a 3-byte applied key loaded")
	}
	if _, err := loadRaftDurable(log, short); err == nil {
		t.Fatal("a shard's applied key without its tail loaded")
	}
}
