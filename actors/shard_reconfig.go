package actors

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/wire"
)

// A replicated shard's replicas change when its stream's replica count
// does (raft_reconfig.go has the rule). The catalog publishes each
// stream's placement in a ReplicaTargets that all of the stream's shards
// share, and tells each shard (ShardReplicasChanged) when it changes:
//
//   - a shard here that becomes a replica stops, and the catalog starts it
//     again as one (it loads its raft state, none for a newcomer, and
//     waits, outside the group's configuration, for its leader to add it);
//   - the leader moves the group's configuration to the target, a step per
//     tick (driveConfChange);
//   - a replica the target no longer holds runs on until its removal has
//     committed, then stops, and the catalog starts it again as no
//     replica: it learns the removal by applying it, or, when the leader
//     stopped writing to it first, from a member it asks for a vote
//     (peerwire ShardRemoved).

// ReplicaTargets holds a replicated stream's current placement, shared by
// the catalog (the one writer) and the stream's shards.
type ReplicaTargets struct {
	p atomic.Pointer[streamPlacement]
}

// NewReplicaTargets makes targets for replicas and preferred leaders by
// shard.
func NewReplicaTargets(replicas map[uint32][]uint64, preferred map[uint32]uint64) *ReplicaTargets {
	t := &ReplicaTargets{}
	t.p.Store(&streamPlacement{replicas: replicas, preferred: preferred})
	return t
}

// ShardReplicasChanged tells a replicated shard that its stream's
// placement changed (read it from ShardRaft.Targets).
type ShardReplicasChanged struct{}

// target is the shard's replicas now, and the one that should lead.
func (r *ShardRaft) target(shard uint32) ([]uint64, uint64) {
	if r.Targets != nil {
		if p := r.Targets.p.Load(); p != nil {
			return p.replicas[shard], p.preferred[shard]
		}
	}
	return r.Replicas, r.Preferred
}

// bootstrap is the group's first configuration: what a replica that has
// nothing stored starts from.
func (r *ShardRaft) bootstrap() []uint64 {
	if len(r.Bootstrap) > 0 {
		return r.Bootstrap
	}
	return r.Replicas
}

// members are the group's replicas as this one knows them: its raft
// configuration's when it runs, the target's otherwise.
func (s *shard) members() []uint64 {
	if s.replica != nil {
		return confMembers(s.replica.core.conf)
	}
	t, _ := s.cfg.Raft.target(s.cfg.Key.Shard)
	return t
}

// onReplicasChanged reconciles the shard with a new target.
func (s *shard) onReplicasChanged(ctx actor.Context) {
	if s.cfg.Raft == nil || !s.ready {
		return
	}
	if s.replica != nil {
		s.replica.wake(ctx) // a quiet leader must tick to drive the change
	}
	s.reconcileHosting(ctx)
}

// reconcileHosting stops the shard when what it runs no longer matches the
// target: a replica wanted here that does not run, or one that runs and is
// out of both the target and the group. The catalog starts it again from
// the placement it now has.
func (s *shard) reconcileHosting(ctx actor.Context) {
	rc := s.cfg.Raft
	target, pref := rc.target(s.cfg.Key.Shard)
	wanted := slices.Contains(target, rc.Self)
	if p := s.cfg.Progress; p != nil && s.replica == nil && !rc.hosted() {
		// No replica here to know the leader: the preferred replica is
		// where requests that need it go first (it names the leader if it
		// does not lead).
		if pref == 0 && len(target) > 0 {
			pref = target[0]
		}
		p.Leader.Store(pref)
		s.publishRemote(target)
	}
	switch {
	case wanted && !rc.hosted():
		s.logger(ctx).Info("shard: this node becomes a replica; starting the shard again as one", slog.Any("replicas", target))
		s.replace(ctx)
	case !wanted && s.replica != nil && s.replayed() && !slices.Contains(confMembers(s.replica.core.conf), rc.Self):
		// (Only on a current configuration: right after a restart raft's is
		// its snapshot's until the changes after it are applied again.)
		s.leaveGroup(ctx, "the group's configuration no longer holds it")
	}
}

// leaveGroup stops a replica whose removal committed.
func (s *shard) leaveGroup(ctx actor.Context, why string) {
	if s.stoppingRaft {
		return
	}
	s.stoppingRaft = true
	s.logger(ctx).Info("shard: this replica was removed from its group; it stops, and its records stay on disk", slog.String("why", why))
	err := &wire.Error{Code: wire.CodeNotLeader, Message: "this node's replica of the shard was removed; look the stream up again"}
	s.stopReplica(ctx, err)
	s.removed, s.leaving = true, true
	s.maybeLeave(ctx)
}

// maybeLeave stops a removed replica's shard once no batch of it is on
// its way to storage (the next instance must not hear of them).
func (s *shard) maybeLeave(ctx actor.Context) {
	if s.leaving && (s.core == nil || len(s.core.pending) == 0) {
		s.leaving = false
		s.replace(ctx)
	}
}

// replace asks the catalog to stop the shard and start it again from the
// stream's placement now.
func (s *shard) replace(ctx actor.Context) {
	if p := ctx.Parent(); p != nil && !s.replacing {
		s.replacing = true
		ctx.Request(p, &ShardReplaced{}) // a request: the catalog reads the sender
	}
}

// ShardReplaced asks the catalog to stop the sending shard and start it
// again under its stream's new placement.
type ShardReplaced struct{}

// onConf learns a configuration change this replica applied at index.
// Every replica takes a snapshot there (fresh: not one a restart hands out
// again): a replica added by the change may need one, and raft refuses a
// snapshot whose configuration does not hold its receiver. A leader tells
// the replicas the change removed (they may never learn that it
// committed). Changes a restart hands out again decide nothing: the
// configuration is not the current one until the last is applied
// (replayed).
func (s *shard) onConf(ctx actor.Context, cs *pb.ConfState, index uint64, fresh bool) {
	s.confUntil = 0
	before := s.members0
	s.members0 = confMembers(cs)
	if !fresh {
		return
	}
	s.cfg.Stats.add(&s.cfg.Stats.RaftConfChanges, 1)
	s.logger(ctx).Info("shard: raft configuration changed", slog.Uint64("index", index),
		slog.Any("voters", cs.GetVoters()), slog.Any("learners", cs.GetLearners()))
	s.snapshotAt(ctx, index, cs)
	if s.replica.status().RaftState == raft.StateLeader {
		for _, id := range before {
			if id != s.cfg.Raft.Self && !slices.Contains(s.members0, id) {
				if s.notifyRemoved == nil {
					s.notifyRemoved = map[uint64]int{}
				}
				s.notifyRemoved[id] = s.ticks + 4*s.electionTicks()
				s.sendRemoved(ctx, id)
			}
		}
	}
	if s.replayed() {
		s.reconcileHosting(ctx)
	}
}

// replayed reports whether raft has applied again every configuration
// change a restart hands out again: the configuration is current.
func (s *shard) replayed() bool {
	return s.replica != nil && s.replica.core.rn.Status().Applied >= s.replica.startApplied
}

// tellRemoved repeats, every few ticks for a while, the news to the
// replicas a change removed (a frame may be lost with its link).
func (s *shard) tellRemoved(ctx actor.Context) {
	for id, until := range s.notifyRemoved {
		switch {
		case s.ticks > until || s.lead != s.cfg.Raft.Self:
			delete(s.notifyRemoved, id)
		case s.ticks%5 == 0:
			s.sendRemoved(ctx, id)
		}
	}
}

// snapshotAt takes a snapshot at index, the entry applied last, whose
// configuration is cs, keeping the raft log (and the compaction pending,
// if one is).
func (s *shard) snapshotAt(ctx actor.Context, index uint64, cs *pb.ConfState) {
	to := uint64(0)
	if s.compaction != nil {
		to = s.compaction.to
	}
	s.compaction = &pendingCompaction{at: index, to: to, data: encodeShardSnapshot(s.core.tail, s.core.producers),
		conf: proto.Clone(cs).(*pb.ConfState)}
	s.compactLog(ctx)
}

// checkRestartSnapshot runs on a tick once a restart handed out again
// every configuration change up to what the shard applied before it: if
// the stored snapshot's configuration is not the one that makes (a crash
// came before the snapshot onConf took was stored), a snapshot is taken at
// the entry applied last.
func (s *shard) checkRestartSnapshot(ctx actor.Context) {
	r := s.replica
	if s.confChecked || r == nil || !s.replayed() {
		return
	}
	s.confChecked = true
	s.reconcileHosting(ctx) // with the configuration now current
	snap, err := r.core.log.Snapshot()
	if err != nil || proto.Equal(snap.GetMetadata().GetConfState(), r.core.conf) || r.applied <= snap.GetMetadata().GetIndex() {
		return
	}
	s.snapshotAt(ctx, r.applied, r.core.conf)
}

// onRemovedNotice is a member's answer to this replica's vote request: its
// configuration, as of its applied index, does not hold this replica. The
// replica stops if the target does not hold it either and the member has
// applied everything this replica's log holds: the removal then
// committed (a member that applied past this replica's addition applied
// its removal too).
func (s *shard) onRemovedNotice(ctx actor.Context, from uint64, m *peerwire.ShardRemoved) {
	if s.replica == nil || !s.replayed() {
		return
	}
	target, _ := s.cfg.Raft.target(s.cfg.Key.Shard)
	if slices.Contains(target, s.cfg.Raft.Self) {
		return
	}
	// A replica that applied its own addition has a commit index past it:
	// a member that applied that far applied the addition, and holds it no
	// longer only because a removal applied since. One that never applied
	// its addition votes in nothing, and may go.
	if slices.Contains(confMembers(s.replica.core.conf), s.cfg.Raft.Self) && m.Applied < s.replica.status().GetCommit() {
		return
	}
	s.leaveGroup(ctx, "a member's configuration no longer holds it")
}

// sendRemoved tells a replica that this one's configuration, as of the
// index raft applied it at, does not hold it: the answer to any message
// it sends (once the configuration is current), and a leader's news to the
// replicas a change removed.
func (s *shard) sendRemoved(ctx actor.Context, to uint64) {
	if !s.replayed() || !slices.Contains(s.members0, s.cfg.Raft.Self) {
		return // only a member whose configuration is current speaks for it
	}
	if at, ok := s.toldAt[to]; ok && at == s.ticks {
		return // once a tick is enough
	}
	if s.toldAt == nil {
		s.toldAt = map[uint64]int{}
	}
	s.toldAt[to] = s.ticks
	if link := s.cfg.Raft.Router.Link(to); link != nil {
		ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardRemoved(nil, peerwire.ShardRemoved{
			Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}, Applied: s.replica.core.rn.Status().Applied})})
	}
}

// reconfiguring reports whether the group's configuration is not yet its
// target (a leader's reason not to quiesce).
func (s *shard) reconfiguring() bool {
	if s.replica == nil {
		return false
	}
	target, _ := s.cfg.Raft.target(s.cfg.Key.Shard)
	return !confIsTarget(s.replica.core.conf, target)
}

// driveConfChange takes the leader's next step towards the target
// configuration (called on each tick while it leads).
func (s *shard) driveConfChange(ctx actor.Context) {
	r := s.replica
	if r == nil || !s.reconfiguring() {
		return
	}
	st := r.core.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	if s.confUntil != 0 && s.ticks <= s.confUntil && s.confTerm == st.GetTerm() {
		return // the last change proposed has not applied yet (raft would drop another)
	}
	target, _ := s.cfg.Raft.target(s.cfg.Key.Shard)
	progress := map[uint64]confProgress{}
	recent := max(2*s.cfg.Raft.HeartbeatTicks, s.electionTicks()/2)
	for id, pr := range st.Progress {
		heard, ok := s.heard[id]
		progress[id] = confProgress{Match: pr.Match, Replicating: pr.State == tracker.StateReplicate,
			Active: id == s.cfg.Raft.Self || (ok && s.ticks-heard <= recent)}
	}
	step := planConfChange(target, r.core.conf, s.cfg.Raft.Self, progress, st.GetCommit())
	switch {
	case step.Transfer != 0:
		s.logger(ctx).Info("shard: handing leadership over before leaving the group", slog.Uint64("to", step.Transfer))
		r.handle(ctx, r.core.transferLeader(step.Transfer))
	case step.Change != nil:
		if err := r.proposeConfChange(ctx, step.Change); err != nil {
			var nl errNotLeader
			if !errors.As(err, &nl) {
				s.logger(ctx).Warn("shard: configuration change not proposed", slog.Any("error", err))
			}
			return
		}
		s.confUntil, s.confTerm = s.ticks+2*s.electionTicks(), st.GetTerm()
		s.logger(ctx).Info("shard: proposed a raft configuration change", slog.String("change", describeConfChange(step.Change)),
			slog.Any("target", target))
	}
}

// describeConfChange is a configuration change for a log line.
func describeConfChange(cc *pb.ConfChangeV2) string {
	if len(cc.Changes) == 0 {
		return "leave the joint configuration"
	}
	out := ""
	for i, c := range cc.Changes {
		if i > 0 {
			out += ", "
		}
		switch c.GetType() {
		case pb.ConfChangeType_ConfChangeAddLearnerNode:
			out += "add learner "
		case pb.ConfChangeType_ConfChangeAddNode:
			out += "promote "
		case pb.ConfChangeType_ConfChangeRemoveNode:
			out += "remove "
		default:
			out += c.GetType().String() + " "
		}
		out += strconv.FormatUint(c.GetNodeId(), 10)
	}
	return out
}
