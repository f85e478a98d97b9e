package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/wire"
)

// A replicated shard serves subscriptions and range reads by the rule of
// follower_reads.go: the replica the request reached serves it (a
// follower refuses with replica_behind when it is behind), or the leader
// only, when the client asks for it (a follower refuses with not_leader
// naming the leader). The shard checks the rule when a request arrives,
// and on every raft tick and change of leader for what it serves already:
// a subscription it may no longer serve ends (SubscriptionEnded) and the
// client resumes on another replica, and a read waiting for its read index
// is answered with the refusal.

// followerState is a replicated shard's follower-read bookkeeping; owned
// by the shard actor.
type followerState struct {
	// heardAt is the raft tick a leader was last heard from at; heard is
	// set once one was (since the replica started).
	heardAt int
	heard   bool
	// term and commit are the highest commit index a leader of term sent
	// this replica.
	term, commit uint64
	// marks are the batches applied lately, for the replicas' lag in
	// records and bytes (shard_lag.go).
	marks applyMarks
	// nudgedAt is the tick this follower last asked its leader to wake.
	nudgedAt int
}

// ReplicaLag is one replica's lag behind its shard's leader, as the leader
// sees it.
type ReplicaLag struct {
	// Entries is how many raft entries the replica's log is behind the
	// leader's commit index; Records and Bytes how many records, and
	// records bytes, the leader applied to the shard log that the
	// replica's log does not hold (read off the leader's apply marks,
	// shard_lag.go: exact for a replica a few batches behind, coarser for
	// one far behind).
	Entries, Records, Bytes uint64
}

// startFollowerReads hooks the rule's bookkeeping to a replica that
// starts: its marks begin at what the shard applied.
func (s *shard) startFollowerReads(r *raftReplica) {
	r.onLeaderMsg = s.onLeaderMsg
	// Its silence counts from its start: a follower that starts hears its
	// leader's heartbeat (or elects one) within an election timeout.
	s.follow = followerState{heardAt: s.ticks, heard: true, nudgedAt: s.ticks}
	s.follow.marks.reset(r.applied, s.core.tail)
}

// onLeaderMsg hears of a message from a leader of term at least the
// replica's, carrying commit.
func (s *shard) onLeaderMsg(term, commit uint64) {
	f := &s.follow
	f.heardAt, f.heard = s.ticks, true
	switch {
	case term > f.term:
		f.term, f.commit = term, commit
	case term == f.term:
		f.commit = max(f.commit, commit)
	}
}

// markApplied records a batch applied at raft index index.
func (s *shard) markApplied(index, tail uint64, size int) { s.follow.marks.add(index, tail, size) }

// followerRule is the rule with this shard's bounds.
func (s *shard) followerRule() followerRule {
	return followerRule{MaxSilenceTicks: s.electionTicks(), MaxLagEntries: s.cfg.Raft.FollowerMaxLag}
}

// replicaView is what the replica knows, for the rule.
func (s *shard) replicaView() replicaView {
	st := s.replica.status()
	v := replicaView{Leading: st.RaftState == raft.StateLeader, Lead: st.Lead, Silence: -1,
		Applied: s.replica.applied, LeaderCommit: s.follow.commit}
	if s.follow.heard {
		v.Silence = s.ticks - s.follow.heardAt
	}
	return v
}

// refuseRead says why this replica may not serve a read or subscription
// that asks for replica (nil: it may); waits is set for what may wait out
// an election (a range read, a subscription served already). A shard that
// is not replicated serves everything.
func (s *shard) refuseRead(replica wire.Replica, waits bool) *wire.Error {
	rc := s.cfg.Raft
	switch {
	case rc == nil:
		return nil
	case !rc.hosted():
		return s.notHosted()
	case s.failed != nil:
		return storageError(s.failed)
	case s.removed:
		target, pref := rc.target(s.cfg.Key.Shard)
		return &wire.Error{Code: wire.CodeNotLeader, Detail: pref,
			Message: fmt.Sprintf("this node's replica of shard %d of %s was removed; its replicas are on nodes %v", s.cfg.Key.Shard, s.cfg.Stream, target)}
	case s.replica == nil:
		return s.installing()
	}
	if replica == wire.ReplicaLeader {
		if s.replica.status().RaftState == raft.StateLeader {
			return nil
		}
		return s.notLeader()
	}
	if s.install != nil {
		return &wire.Error{Code: wire.CodeReplicaBehind, Detail: s.replica.status().Lead, Message: fmt.Sprintf(
			"node %d's replica of shard %d of %s is catching up from a snapshot; read from another replica", rc.Self, s.cfg.Key.Shard, s.cfg.Stream)}
	}
	v := s.replicaView()
	rule := s.followerRule()
	why := rule.behind(v, waits)
	if why == behindNot {
		return nil
	}
	return &wire.Error{Code: wire.CodeReplicaBehind, Detail: v.Lead, Message: fmt.Sprintf(
		"node %d's replica of shard %d of %s is behind its leader: %s; read from another replica",
		rc.Self, s.cfg.Key.Shard, s.cfg.Stream, rule.describe(why, v, s.replica.tickEvery.String()))}
}

// refuseNew is refuseRead for a new read or subscription, counted when
// it is refused as replica_behind.
func (s *shard) refuseNew(replica wire.Replica, waits bool) *wire.Error {
	werr := s.refuseRead(replica, waits)
	if werr != nil && werr.Code == wire.CodeReplicaBehind {
		s.cfg.Stats.add(&s.cfg.Stats.ReplicaBehind, 1)
	}
	return werr
}

// checkServing ends what this replica may no longer serve: subscriptions
// (the client resumes elsewhere from the offset after the last record it
// received) and reads waiting for their read index. It runs on each raft
// tick and change of leader.
func (s *shard) checkServing(ctx actor.Context) {
	if s.replica == nil || s.core == nil || s.cfg.Raft == nil {
		return
	}
	if st := s.replica.status(); st.RaftState == raft.StateLeader {
		// A leader hears itself: once it steps down (a handover, or cut
		// off from its quorum), its silence counts from when it last led.
		s.follow.heardAt, s.follow.heard = s.ticks, true
	} else {
		s.nudgeLeader(ctx, st.Lead)
	}
	var refusal [2]*wire.Error
	var checked [2]bool
	refuse := func(r wire.Replica) *wire.Error {
		i := min(int(r), 1)
		if !checked[i] {
			checked[i], refusal[i] = true, s.refuseRead(r, true)
		}
		return refusal[i]
	}
	ended := 0
	for id, sub := range s.core.subs {
		if werr := refuse(sub.replica); werr != nil {
			delete(s.core.subs, id)
			ctx.Unwatch(sub.pid)
			ctx.Send(sub.pid, &SubscriptionEnded{Err: werr})
			ended++
		}
	}
	if ended > 0 {
		s.cfg.Stats.add(&s.cfg.Stats.SubscriptionsEnded, uint64(ended))
		s.admitHeld(ctx) // a blocking subscriber that went away releases the publishers
	}
	for id, r := range s.reads {
		if werr := refuse(r.replica); werr != nil {
			delete(s.reads, id)
			resp := s.info()
			resp.Err = werr
			ctx.Send(r.to, resp)
		}
	}
}

// nudgeLeader asks a leader this follower has not heard from for half an
// election timeout to wake, when the node pair's link says the leader's
// node is alive. A quiet group's follower woken for a reason of its own
// (a publish it refuses) ticks while its leader, still quiet, sends no
// heartbeat: without the nudge it would take that silence for a loss and
// refuse reads (and raft would stand for election). Woken, the leader
// heartbeats, and quiesces the group again once it is idle.
func (s *shard) nudgeLeader(ctx actor.Context, lead uint64) {
	rc, f := s.cfg.Raft, &s.follow
	half := max(s.electionTicks()/2, 1)
	if lead == 0 || lead == rc.Self || rc.Router == nil || !f.heard || s.ticks-f.heardAt < half || s.ticks-f.nudgedAt < half || !rc.Router.Alive(lead) {
		return
	}
	if link := rc.Router.Link(lead); link != nil {
		f.nudgedAt = s.ticks
		ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardWake(nil, peerwire.ShardWake{Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}})})
	}
}

// trimMarks drops the marks no replica needs: on the leader, those below
// the least index every replica's log holds; on a follower, all but its
// last followerMarks.
func (s *shard) trimMarks() {
	if s.replica == nil {
		return
	}
	if s.replica.status().RaftState != raft.StateLeader {
		s.follow.marks.trim(0, followerMarks)
		return
	}
	least := ^uint64(0)
	s.replica.core.rn.WithProgress(func(_ uint64, _ raft.ProgressType, pr tracker.Progress) {
		least = min(least, pr.Match)
	})
	s.follow.marks.trim(least, 0)
}

// LagRecords and LagBytes are, on a shard's leader, how many records and
// records bytes of the shard log each replica lacks (nil elsewhere).
func (r *ShardInfoResponse) LagRecords() map[uint64]uint64 {
	return lagOf(r.LagDetail, func(l ReplicaLag) uint64 { return l.Records })
}

// LagBytes: see LagRecords.
func (r *ShardInfoResponse) LagBytes() map[uint64]uint64 {
	return lagOf(r.LagDetail, func(l ReplicaLag) uint64 { return l.Bytes })
}

func lagOf(lags map[uint64]ReplicaLag, read func(ReplicaLag) uint64) map[uint64]uint64 {
	if len(lags) == 0 {
		return nil
	}
	out := make(map[uint64]uint64, len(lags))
	for id, l := range lags {
		out[id] = read(l)
	}
	return out
}

// replicaLags is each replica's lag, on the leader (nil elsewhere).
func (s *shard) replicaLags(st raft.Status) map[uint64]ReplicaLag {
	if st.RaftState != raft.StateLeader {
		return nil
	}
	commit := st.GetCommit()
	out := make(map[uint64]ReplicaLag, len(st.Progress))
	for id, pr := range st.Progress {
		rec, bytes := s.follow.marks.lag(pr.Match)
		out[id] = ReplicaLag{Entries: commit - min(pr.Match, commit), Records: rec, Bytes: bytes}
	}
	return out
}
