package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// A replicated shard on a drained node (cluster_state.go), or on one
// leaving the cluster, leads nothing: a
// leader there hands its leadership to another replica on its next tick,
// and again whenever an election makes it leader, its preferred replica
// first (placement never prefers a drained node) and else the undrained
// voter furthest along. A shard whose every other replica is drained, or
// down, or behind, leads on until one can take it.

// drained reports whether node id must lead nothing (it is drained, or
// leaving the cluster), as this node applied the cluster's state.
func (r *ShardRaft) drained(id uint64) bool {
	return r.View.Load().LeadsNothing(id)
}

// drainedLeader reports whether this replica leads on a drained node while
// the group has another voter that could take over.
func (s *shard) drainedLeader() bool {
	rc := s.cfg.Raft
	return s.replica != nil && s.lead == rc.Self && rc.drained(rc.Self) && len(s.replica.core.conf.GetVoters()) > 1
}

// handAway hands a drained node's leadership to another replica (called on
// each tick while it leads).
func (s *shard) handAway(ctx actor.Context) {
	st := s.replica.core.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	to := uint64(0)
	if _, pref := s.cfg.Raft.target(s.cfg.Key.Shard); pref != 0 && pref != s.cfg.Raft.Self && !s.cfg.Raft.drained(pref) && s.canLead(st, pref) {
		to = pref
	} else {
		to = s.successor(st, true)
	}
	if to == 0 {
		return // nobody to take it yet: asked again on the next tick
	}
	s.logger(ctx).Info("shard: handing leadership over; this node is drained", slog.Uint64("to", to))
	s.replica.handle(ctx, s.replica.core.transferLeader(to))
}

// canLead reports whether voter id could take the leadership now: the
// leader streams entries to it, heard from it lately, and its node's link
// is alive (a peer that just stopped may still look replicating).
func (s *shard) canLead(st raft.Status, id uint64) bool {
	pr, ok := st.Progress[id]
	heard, seen := s.heard[id]
	recent := max(2*s.cfg.Raft.HeartbeatTicks, s.electionTicks()/2)
	return id != s.cfg.Raft.Self && ok && !pr.IsLearner && pr.State == tracker.StateReplicate && seen && s.ticks-heard <= recent &&
		s.cfg.Raft.Router.Alive(id)
}

// successor is the voter, other than this replica, that could lead now
// and whose log is furthest along, an undrained one before a drained one
// (0: none); with skipDrained, an undrained one only.
func (s *shard) successor(st raft.Status, skipDrained bool) uint64 {
	best, bestMatch, bestDrained := uint64(0), uint64(0), true
	for _, id := range s.replica.core.conf.GetVoters() {
		if !s.canLead(st, id) {
			continue
		}
		d := s.cfg.Raft.drained(id)
		if d && skipDrained {
			continue
		}
		if m := st.Progress[id].Match; best == 0 || (bestDrained && !d) || (bestDrained == d && m > bestMatch) {
			best, bestMatch, bestDrained = id, m, d
		}
	}
	return best
}
