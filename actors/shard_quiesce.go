package actors

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/peerwire"
)

// busy reports what keeps a replicated shard's group from quiescing
// (raft_quiesce.go): a publish proposed or waiting, a read, an install, a
// compaction or a batch on its way to storage, or, on a leader in its
// preferred replica's place, the handover still to come.
func (s *shard) busy() bool {
	rc := s.cfg.Raft
	if len(s.proposals) > 0 || len(s.reads) > 0 || s.install != nil || s.compaction != nil || len(s.held) > 0 ||
		(s.core != nil && len(s.core.pending) > 0) {
		return true
	}
	if s.lead == rc.Self && (s.reconfiguring() || s.handingOff || len(s.notifyRemoved) > 0 || s.drainedLeader()) {
		return true
	}
	return s.lead == rc.Self && s.balancePending()
}

func (s *shard) onQuiet(n int64) { s.cfg.Stats.RaftQuiesced.Add(n) }

// wakePeers wakes the other replicas of a group whose replica here stopped
// or could not start: this node's beats go on, so a quiet group would not
// otherwise learn that it lost its leader.
func (s *shard) wakePeers(ctx actor.Context) {
	rc := s.cfg.Raft
	if rc == nil || rc.Router == nil {
		return
	}
	target, _ := rc.target(s.cfg.Key.Shard)
	ids := slices.Concat(s.members(), target, rc.Replicas)
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		if id == rc.Self {
			continue
		}
		if link := rc.Router.Link(id); link != nil {
			ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardWake(nil, peerwire.ShardWake{Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}})})
		}
	}
}
