package actors

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/heraldmq/herald/net/peerwire"
)

// Quiet groups. A raft group ticks and its leader heartbeats each follower
// every tick, busy or not: a node with a thousand idle replicated shards
// would spend its time and its links on heartbeats. So an idle group
// quiesces, as CockroachDB's ranges do: once its leader has seen, for
// quiesceAfter ticks, nothing new (every replica holds and has committed
// its last entry, the owner has nothing on its way: no proposal, read,
// write, install or handover, and every follower's node is alive), it
// tells its followers (a peerwire ShardQuiesce naming its term and commit)
// and stops its clock; a follower at that term and commit, with nothing of
// its own pending, stops its clock too. Nothing of the group then runs or
// crosses the network.
//
// Any message of the group but a heartbeat wakes a replica: a proposal or
// read on the leader, whose appends wake the followers; a follower's
// election messages or forwarded proposals, which wake the leader. (A quiet
// replica still answers a heartbeat: the last ones cross the quiesce on
// the wire.) What a quiet follower no longer learns from heartbeats, that
// its leader is alive, comes from the node pair's link: each link writes a
// frame at least every beat (an empty one when idle) and suspects a peer
// it has not heard from for SuspectAfter (half an election timeout); every
// group then hears PeerSuspect, and a quiet follower whose leader's node
// that is wakes, counts the ticks of that silence, and its election
// timeout runs on from there (an election follows if the leader is gone,
// its heartbeat if not). A quiet leader
// wakes when a follower's node is suspected, so that CheckQuorum steps it
// down if it is the one cut off. The node pair's beats are the one
// heartbeat of every quiet group between them.
const quiesceAfter = 3

// maybeQuiesce quiesces the group on its leader when it has been idle
// long enough (called after each tick).
func (r *raftReplica) maybeQuiesce(ctx actor.Context) {
	if r.alive == nil || r.quiet || r.stopped {
		return
	}
	st := r.core.rn.Status()
	last, _ := r.core.log.LastIndex()
	idle := st.RaftState == raft.StateLeader && st.LeadTransferee == 0 && r.token == 0 && r.installing == nil &&
		st.GetCommit() == last && r.applied == last && len(st.Progress) == len(confMembers(r.core.conf)) &&
		(r.busy == nil || !r.busy())
	for id, pr := range st.Progress {
		if !idle {
			break
		}
		if id != r.self && (pr.Match != last || pr.State != tracker.StateReplicate || !r.alive(id)) {
			idle = false
		}
	}
	if !idle || last != r.idleAt {
		r.idleAt, r.idleTicks = last, 0
		return
	}
	if r.idleTicks++; r.idleTicks < quiesceAfter {
		return
	}
	g := peerwire.Group{Stream: r.key.Stream, Shard: r.key.Shard}
	for id := range st.Progress {
		if id == r.self {
			continue
		}
		if link := r.link(id); link != nil {
			ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardQuiesce(nil, peerwire.ShardQuiesce{Group: g, Term: st.GetTerm(), Commit: last})})
		}
	}
	r.quiesce()
}

// onQuiesce quiesces a follower its leader told to, if it is where the
// leader was and has nothing pending.
func (r *raftReplica) onQuiesce(from uint64, q *peerwire.ShardQuiesce) {
	if r.alive == nil || r.quiet || r.stopped {
		return
	}
	st := r.core.rn.Status()
	last, _ := r.core.log.LastIndex()
	if st.RaftState != raft.StateFollower || st.Lead != from || !r.alive(from) || st.GetTerm() != q.Term || st.GetCommit() != q.Commit ||
		last != q.Commit || r.token != 0 || r.installing != nil || (r.busy != nil && r.busy()) {
		return // it keeps ticking; its next election message wakes the leader
	}
	r.quiesce()
}

// onPeerSuspect wakes a quiet replica whose leader's node (or, on the
// leader, a follower's) went silent.
func (r *raftReplica) onPeerSuspect(ctx actor.Context, peer uint64) {
	if !r.quiet || !slices.Contains(r.core.conf.GetVoters(), peer) {
		return
	}
	st := r.status()
	if st.RaftState != raft.StateLeader && st.Lead != peer && st.Lead != 0 {
		return
	}
	r.wake(ctx)
	if st.RaftState != raft.StateLeader {
		// Its leader has been silent for as long as the link took to
		// suspect it (half an election timeout): the ticks a follower that
		// was not quiet would have counted meanwhile are counted now, so a
		// quiet group elects about as soon as a busy one.
		for range r.electionTicks / 2 {
			r.handle(ctx, r.core.tick())
		}
	}
}

// quiesce stops raft's clock.
func (r *raftReplica) quiesce() {
	if r.quiet || r.stopped {
		return
	}
	r.quiet = true
	r.idleTicks = 0
	if r.stopTick != nil {
		r.stopTick()
	}
	if r.onQuiet != nil {
		r.onQuiet(1)
	}
}

// wake starts raft's clock again.
func (r *raftReplica) wake(ctx actor.Context) {
	if !r.quiet || r.stopped {
		return
	}
	r.quiet = false
	if r.onQuiet != nil {
		r.onQuiet(-1)
	}
	r.arm(ctx)
}
