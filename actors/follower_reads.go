package actors

import "fmt"

// Follower reads. A subscription or a range read of a replicated shard is
// served by the replica on the node the client reached (wire.ReplicaNearest)
// or, when the client asks, by the shard's leader only
// (wire.ReplicaLeader). Every replica's shard log holds committed records
// only, so a follower never serves a record that could be lost; what it
// could serve is a stale tail: a follower cut off from its leader, or far
// behind it, goes on answering with what it has while the others move on.
// So a follower that is behind says so (replica_behind) instead, by this
// rule, a pure function of what the replica knows:
//
//   - A leader is never behind. One cut off from its quorum steps down
//     within an election timeout (CheckQuorum), and is then a follower
//     that knows no leader.
//   - A follower that knows no leader (an election is under way) refuses
//     new subscriptions. What may wait out the election does: a range read
//     (its read index is asked once a leader is known) and a subscription
//     served already (a leader change completes within an election timeout
//     or two, and it goes on under the new leader), unless the silence
//     rule below ends them.
//   - A follower that has heard nothing from a leader for more than
//     MaxSilenceTicks raft ticks (an election timeout) is cut off or has
//     lost its leader: it refuses reads and subscriptions and ends those it
//     serves. Ticks are the replica's raft clock, which stops while its
//     group is quiet (raft_quiesce.go): a quiet group's leader told it that
//     it holds everything committed, and the node pair's link, which beats
//     all along, wakes it when the leader's node goes silent. A replica
//     that starts counts its silence from its start.
//   - A follower whose applied index is more than MaxLagEntries raft
//     entries behind the highest commit index its leader sent it (in
//     appends and heartbeats, this term) is lagging: it refuses reads and
//     subscriptions and ends those it serves (0: no bound).

// followerRule is the rule, with its two bounds.
type followerRule struct {
	// MaxSilenceTicks bounds the ticks a follower may go without hearing
	// from a leader (the election timeout, in ticks).
	MaxSilenceTicks int
	// MaxLagEntries bounds how far the follower's applied index may be
	// behind the leader's commit index it heard of (0: no bound).
	MaxLagEntries uint64
}

// replicaView is what a replica knows when the rule is asked.
type replicaView struct {
	// Leading is set on the leader.
	Leading bool
	// Lead is the leader the replica knows (0: none, an election is under
	// way).
	Lead uint64
	// Silence is how many ticks ago the replica last heard from a leader
	// (or started); negative when it never has.
	Silence int
	// Applied is the replica's applied index; LeaderCommit the highest
	// commit index its leader sent it in the current term.
	Applied, LeaderCommit uint64
}

// behindReason says why a follower is behind (behindNot: it is not).
type behindReason uint8

const (
	behindNot behindReason = iota
	// behindNoLeader: the follower knows no leader.
	behindNoLeader
	// behindSilent: it has not heard from a leader for too long.
	behindSilent
	// behindLagging: its applied index is too far behind the commit.
	behindLagging
)

// behind says whether a replica with view v may serve: a new
// subscription (waits false), or what may wait out an election (waits
// true): a range read, or a subscription it serves already.
func (r followerRule) behind(v replicaView, waits bool) behindReason {
	switch {
	case v.Leading:
		return behindNot
	case v.Silence < 0 || v.Silence > r.MaxSilenceTicks:
		return behindSilent
	case r.MaxLagEntries > 0 && v.LeaderCommit > v.Applied && v.LeaderCommit-v.Applied > r.MaxLagEntries:
		return behindLagging
	case v.Lead == 0 && !waits:
		return behindNoLeader
	}
	return behindNot
}

// describe says why, for the error's message; tick is the raft tick.
func (r followerRule) describe(why behindReason, v replicaView, tick string) string {
	switch why {
	case behindNoLeader:
		return "it knows no leader (an election is under way)"
	case behindSilent:
		if v.Silence < 0 {
			return "it has not heard from a leader since it started"
		}
		return fmt.Sprintf("it has heard nothing from a leader for %d ticks of %s (the election timeout is %d)", v.Silence, tick, r.MaxSilenceTicks)
	case behindLagging:
		return fmt.Sprintf("its applied index %d is %d entries behind its leader's commit index %d (follower_max_lag_entries is %d)",
			v.Applied, v.LeaderCommit-v.Applied, v.LeaderCommit, r.MaxLagEntries)
	}
	return "it is not behind"
}
