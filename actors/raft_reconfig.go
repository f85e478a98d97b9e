package actors

import (
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Changing a replicated shard's replicas. The catalog's metadata group
// holds each stream's replica count, and so every replica's target: the
// nodes placement gives that count. The group's own configuration (who
// votes, who learns) lives in its raft log, and its leader moves it to the
// target one raft configuration change at a time, the way etcd and
// CockroachDB add members:
//
//  1. every target node the group lacks joins as a learner: it receives
//     the log (entries, or a snapshot and the shard log in pages) and
//     votes in nothing, so a slow newcomer costs no availability;
//  2. a learner that has caught up (replicating, within promoteWithin
//     entries of the commit index) is promoted to voter, one at a time;
//  3. once no target node is left to promote, voters outside the target
//     are removed, one at a time, the leader last: it first hands
//     leadership to a target voter that holds every committed entry, and
//     the new leader removes it.
//
// Every step is one change of one replica, so none needs a joint
// configuration (raft makes a ConfChangeV2 of several changes a joint one);
// a joint one found anyway that raft does not leave on its own is left
// first. planConfChange is the rule, a pure function of
// what the leader knows, tested against a model; the shard's actor asks it
// on each tick while it leads and proposes what it says.

// promoteWithin is how close to the commit index a learner's log must be
// for it to become a voter.
const promoteWithin = 256

// confProgress is what the leader knows of one replica's log.
type confProgress struct {
	// Match is the last index known to be in the replica's log.
	Match uint64
	// Replicating is set when the leader streams entries to it (not
	// probing, not sending a snapshot).
	Replicating bool
	// Active is set when the leader heard from it lately (raft keeps a
	// dead replica replicating until its link gives up).
	Active bool
}

// confStep is the next step towards the target configuration.
type confStep struct {
	// Change is the configuration change to propose (nil: none).
	Change *pb.ConfChangeV2
	// Transfer is the replica to hand leadership to first (0: none): the
	// leader is not in the target.
	Transfer uint64
}

// planConfChange returns the next step from conf towards a configuration
// whose voters are exactly target, on the leader self with commit index
// commit and its followers' progress. It returns the zero step when conf
// is the target, or when the next step must wait (a learner catching up, a
// successor for the leader not caught up). The caller proposes one change
// at a time: it waits until the last one applied.
func planConfChange(target []uint64, conf *pb.ConfState, self uint64, progress map[uint64]confProgress, commit uint64) confStep {
	if len(target) == 0 {
		return confStep{}
	}
	if len(conf.GetVotersOutgoing()) > 0 {
		if conf.GetAutoLeave() {
			return confStep{} // raft leaves it itself
		}
		return confStep{Change: &pb.ConfChangeV2{}} // leave the joint configuration
	}
	voters, learners := conf.GetVoters(), conf.GetLearners()
	member := func(id uint64) bool { return slices.Contains(voters, id) || slices.Contains(learners, id) }
	single := func(t pb.ConfChangeType, id uint64) confStep {
		return confStep{Change: &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}}}
	}
	caughtUp := func(id uint64) bool {
		pr, ok := progress[id]
		return id == self || (ok && pr.Active && pr.Replicating && pr.Match+promoteWithin >= commit)
	}
	sorted := slices.Sorted(slices.Values(target))

	// 1. Newcomers join as learners.
	for _, id := range sorted {
		if !member(id) {
			return single(pb.ConfChangeType_ConfChangeAddLearnerNode, id)
		}
	}
	// 2. Learners of the target are promoted once caught up; until every
	// one is, nobody is removed.
	waiting := false
	for _, id := range sorted {
		if slices.Contains(learners, id) {
			if caughtUp(id) {
				return single(pb.ConfChangeType_ConfChangeAddNode, id)
			}
			waiting = true
		}
	}
	if waiting {
		return confStep{}
	}
	// 3. Learners outside the target leave, then voters, the leader last.
	for _, id := range slices.Sorted(slices.Values(learners)) {
		if !slices.Contains(target, id) {
			return single(pb.ConfChangeType_ConfChangeRemoveNode, id)
		}
	}
	// Voters that are down or behind go first: removing one is never less
	// safe than removing one that is caught up.
	leaving := slices.DeleteFunc(slices.Sorted(slices.Values(voters)), func(id uint64) bool { return id == self || slices.Contains(target, id) })
	slices.SortStableFunc(leaving, func(a, b uint64) int {
		switch ca, cb := caughtUp(a), caughtUp(b); {
		case ca == cb:
			return 0
		case !ca:
			return -1
		}
		return 1
	})
	for _, id := range leaving {
		// Only when the voters left can commit without it: a majority of
		// them caught up.
		healthy, left := 0, 0
		for _, v := range voters {
			if v != id {
				left++
				if caughtUp(v) {
					healthy++
				}
			}
		}
		if 2*healthy > left {
			return single(pb.ConfChangeType_ConfChangeRemoveNode, id)
		}
	}
	if len(leaving) > 0 {
		return confStep{} // none can go yet
	}
	if slices.Contains(voters, self) && !slices.Contains(target, self) {
		// Hand over to the target voter furthest along that has caught up
		// (raft completes the transfer once it holds every entry).
		best, bestMatch := uint64(0), uint64(0)
		for _, id := range sorted {
			pr, ok := progress[id]
			if id == self || !ok || !slices.Contains(voters, id) || !caughtUp(id) {
				continue
			}
			if best == 0 || pr.Match > bestMatch {
				best, bestMatch = id, pr.Match
			}
		}
		return confStep{Transfer: best}
	}
	return confStep{}
}

// confMembers is every replica of a configuration, voters and learners,
// in increasing id order.
func confMembers(conf *pb.ConfState) []uint64 {
	out := slices.Concat(conf.GetVoters(), conf.GetLearners(), conf.GetVotersOutgoing(), conf.GetLearnersNext())
	slices.Sort(out)
	return slices.Compact(out)
}

// confIsTarget reports whether conf's voters are exactly target, with no
// learner and no joint configuration.
func confIsTarget(conf *pb.ConfState, target []uint64) bool {
	if len(conf.GetLearners()) > 0 || len(conf.GetVotersOutgoing()) > 0 || len(conf.GetLearnersNext()) > 0 {
		return false
	}
	return slices.Equal(slices.Sorted(slices.Values(conf.GetVoters())), slices.Sorted(slices.Values(target)))
}
