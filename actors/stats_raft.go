package actors

import (
	"sync/atomic"

	"go.etcd.io/raft/v3"

	"github.com/heraldmq/herald/storage"
)

// RaftGauges is one replicated shard's raft group as its replica here last
// published it, on each tick and each change of leader: the per-group
// metrics read it when scraped. A replica registers it when it starts and
// removes it when it stops, so only groups held here are exported.
type RaftGauges struct {
	// Stream and Shard name the group.
	Stream string
	Shard  uint32
	// Term, Commit and Applied are this replica's; Leader the leader it
	// knows (0: none).
	Term, Commit, Applied, Leader atomic.Uint64
	// lag is, on the leader, each replica's lag behind the commit index
	// in entries, records and bytes (nil elsewhere).
	lag atomic.Pointer[map[uint64]ReplicaLag]
	// SnapshotsSent counts the snapshots this replica sent as leader;
	// LeaderChanges the changes of leader it saw.
	SnapshotsSent, LeaderChanges atomic.Uint64
	// Behind is 1 while this replica, a follower, is behind its leader by
	// the follower-read rule (follower_reads.go: silent, lagging, or
	// installing a snapshot): it refuses reads and subscriptions as
	// replica_behind. An election alone does not set it.
	Behind atomic.Int64
}

// Lag is each replica's lag as the leader here last published it (nil
// where this replica does not lead).
func (g *RaftGauges) Lag() map[uint64]ReplicaLag {
	if p := g.lag.Load(); p != nil {
		return *p
	}
	return nil
}

// RaftGroup registers the gauges of the replicated shard key held here.
func (s *Stats) RaftGroup(key storage.ShardKey, stream string) *RaftGauges {
	if s == nil {
		return &RaftGauges{Stream: stream, Shard: key.Shard}
	}
	g := &RaftGauges{Stream: stream, Shard: key.Shard}
	s.labels.raft.Store(key, g)
	return g
}

// DropRaftGroup removes g, if it is still the one registered for key.
func (s *Stats) DropRaftGroup(key storage.ShardKey, g *RaftGauges) {
	if s != nil {
		s.labels.raft.CompareAndDelete(key, g)
	}
}

// EachRaftGroup calls fn for every replicated shard held here.
func (s *Stats) EachRaftGroup(fn func(g *RaftGauges)) {
	s.labels.raft.Range(func(_, v any) bool {
		fn(v.(*RaftGauges))
		return true
	})
}

// publishRaft publishes the replica's state to its gauges.
func (s *shard) publishRaft() {
	if p := s.cfg.Progress; p != nil && s.replica != nil {
		p.Leader.Store(s.replica.status().Lead)
	}
	g := s.raftGauges
	if g == nil || s.replica == nil {
		return
	}
	st := s.replica.core.rn.Status()
	g.Term.Store(st.GetTerm())
	g.Commit.Store(st.GetCommit())
	g.Applied.Store(s.replica.applied)
	g.Leader.Store(st.Lead)
	behind := int64(0)
	if s.followerRule().behind(s.replicaView(), true) != behindNot || s.install != nil {
		behind = 1
	}
	g.Behind.Store(behind)
	if st.RaftState != raft.StateLeader {
		g.lag.Store(nil)
		return
	}
	lag := s.replicaLags(st)
	g.lag.Store(&lag)
}
