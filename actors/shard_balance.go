package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
)

// Leader balance. Placement gives each shard a preferred leader so that
// leaderships spread over the nodes (spreadLeaders); raft elects whoever
// it elects. A leader in its preferred replica's place checks every
// BalanceTicks ticks (and not before it has led that long, so the
// preferred one can catch up) whether the preferred replica could lead
// now: heard from within the last two heartbeats and holding every
// committed entry; if so it hands leadership to it. While that replica's
// node is alive the leader does not quiesce (and a leader never is quiet
// while a follower's node is not alive: raft_quiesce.go), and undraining a
// node wakes every shard. So after a node comes back, the shards it is
// preferred for return to it within BalanceTicks ticks of its having
// caught up, plus a transfer (a heartbeat round trip when it is caught
// up).

// defaultBalanceTicks is ShardRaft.BalanceTicks's default: two election
// timeouts of the default ten ticks.
const defaultBalanceTicks = 20

// balanceTicks is how many ticks apart the leader checks, 0 for never.
func (r *ShardRaft) balanceTicks() int {
	switch {
	case r.BalanceTicks < 0:
		return 0
	case r.BalanceTicks == 0:
		return defaultBalanceTicks
	}
	return r.BalanceTicks
}

// balancePending reports whether this leader waits to hand leadership to
// its preferred replica, whose node is alive (the group must keep
// ticking).
func (s *shard) balancePending() bool {
	rc := s.cfg.Raft
	if rc.balanceTicks() == 0 {
		return false
	}
	_, pref := rc.target(s.cfg.Key.Shard)
	return pref != 0 && pref != rc.Self && !rc.drained(pref) && rc.Router.Alive(pref)
}

// balanceLeader hands leadership to the preferred replica when this one
// leads in its place and the preferred one could lead now (on each tick
// while it leads).
func (s *shard) balanceLeader(ctx actor.Context) {
	every := s.cfg.Raft.balanceTicks()
	_, pref := s.cfg.Raft.target(s.cfg.Key.Shard)
	if every == 0 || pref == 0 || pref == s.cfg.Raft.Self || s.ticks%every != 0 || s.reconfiguring() || s.cfg.Raft.drained(pref) {
		return
	}
	st := s.replica.core.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || s.ticks-s.ledSince < every {
		return
	}
	// The preferred replica must be alive (heard from within the last two
	// heartbeats: raft's own RecentActive is reset every election timeout,
	// in step with these checks) and hold every committed entry.
	pr, ok := st.Progress[pref]
	heard, seen := s.heard[pref]
	if !ok || !seen || s.ticks-heard > 2*max(s.cfg.Raft.HeartbeatTicks, 1) || pr.Match < st.GetCommit() {
		return
	}
	s.logger(ctx).Info("shard: handing leadership to its preferred replica", slog.Uint64("to", pref))
	s.replica.handle(ctx, s.replica.core.transferLeader(pref))
}
