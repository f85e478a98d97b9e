package actors

import (
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// applyConf applies a planned change the way raft does, refusing what raft
// would refuse as a simple change (more than one voter changed).
func applyConf(t *testing.T, conf *pb.ConfState, cc *pb.ConfChangeV2) *pb.ConfState {
	t.Helper()
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(16, 0), LastIndex: 10}
	cfg, trk, err := confchange.Restore(chg, conf)
	if err != nil {
		t.Fatalf("restore %v: %v", conf, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	if auto, joint := cc.EnterJoint(); joint {
		t.Fatalf("%s enters a joint configuration (auto leave %v)", confchange.Describe(cc.Changes...), auto)
	}
	if cc.LeaveJoint() {
		cfg, trk, err = chg.LeaveJoint()
	} else {
		cfg, trk, err = chg.Simple(cc.Changes...)
	}
	if err != nil {
		t.Fatalf("raft refuses %s on %v: %v", confchange.Describe(cc.Changes...), conf, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	return chg.Tracker.ConfState()
}

func caughtUpAll(conf *pb.ConfState, commit uint64) map[uint64]confProgress {
	out := map[uint64]confProgress{}
	for _, id := range confMembers(conf) {
		out[id] = confProgress{Match: commit, Replicating: true, Active: true}
	}
	return out
}

func TestPlanConfChangeGrowsThroughLearners(t *testing.T) {
	conf := &pb.ConfState{Voters: []uint64{2}}
	target := []uint64{2, 3, 1}
	for _, want := range []uint64{1, 3} {
		step := planConfChange(target, conf, 2, caughtUpAll(conf, 100), 100)
		if step.Change == nil || len(step.Change.Changes) != 1 || step.Change.Changes[0].GetType() != pb.ConfChangeType_ConfChangeAddLearnerNode ||
			step.Change.Changes[0].GetNodeId() != want {
			t.Fatalf("step %v, want learner %d", step.Change, want)
		}
		conf = applyConf(t, conf, step.Change)
	}
	// A learner far behind (or being sent a snapshot) is not promoted.
	progress := map[uint64]confProgress{2: {Match: 5000, Replicating: true, Active: true}, 1: {Match: 10}, 3: {Match: 4000, Replicating: true, Active: true}}
	if step := planConfChange(target, conf, 2, progress, 5000); step.Change != nil || step.Transfer != 0 {
		t.Fatalf("promoted a learner behind: %v", step.Change)
	}
	// Caught up but not heard from lately (dead, its link not yet given
	// up): not promoted either.
	progress[3] = confProgress{Match: 5000 - promoteWithin, Replicating: true}
	if step := planConfChange(target, conf, 2, progress, 5000); step.Change != nil {
		t.Fatalf("promoted a learner not heard from: %v", step.Change)
	}
	progress[3] = confProgress{Match: 5000 - promoteWithin, Replicating: true, Active: true}
	step := planConfChange(target, conf, 2, progress, 5000)
	if step.Change == nil || len(step.Change.Changes) != 1 || step.Change.Changes[0].GetType() != pb.ConfChangeType_ConfChangeAddNode || step.Change.Changes[0].GetNodeId() != 3 {
		t.Fatalf("step %v, want node 3 promoted", step.Change)
	}
	conf = applyConf(t, conf, step.Change)
	if step := planConfChange(target, conf, 2, progress, 5000); step.Change != nil {
		t.Fatalf("step %v while learner 1 is behind", step.Change)
	}
	progress[1] = confProgress{Match: 5000, Replicating: true, Active: true}
	conf = applyConf(t, conf, planConfChange(target, conf, 2, progress, 5000).Change)
	if !confIsTarget(conf, target) {
		t.Fatalf("conf %v, want voters %v", conf, target)
	}
	if step := planConfChange(target, conf, 2, progress, 5000); step.Change != nil || step.Transfer != 0 {
		t.Fatalf("a step %v at the target", step)
	}
}

func TestPlanConfChangeShrinksLeaderLast(t *testing.T) {
	conf := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	target := []uint64{3}
	step := planConfChange(target, conf, 1, caughtUpAll(conf, 50), 50)
	if step.Change == nil || step.Change.Changes[0].GetType() != pb.ConfChangeType_ConfChangeRemoveNode || step.Change.Changes[0].GetNodeId() != 2 {
		t.Fatalf("first step %v, want node 2 removed", step.Change)
	}
	conf = applyConf(t, conf, step.Change)
	// The leader, 1, is not in the target: it hands over to 3 once 3 has
	// caught up, and does not remove itself.
	if step := planConfChange(target, conf, 1, map[uint64]confProgress{3: {Match: 1}}, 50); step.Change != nil || step.Transfer != 0 {
		t.Fatalf("step %+v with the successor behind", step)
	}
	if step := planConfChange(target, conf, 1, caughtUpAll(conf, 50), 50); step.Change != nil || step.Transfer != 3 {
		t.Fatalf("step %+v, want a transfer to 3", step)
	}
	// Node 3 leads now and removes 1.
	step = planConfChange(target, conf, 3, caughtUpAll(conf, 60), 60)
	if step.Change == nil || step.Change.Changes[0].GetNodeId() != 1 {
		t.Fatalf("step %v, want node 1 removed", step.Change)
	}
	if conf = applyConf(t, conf, step.Change); !confIsTarget(conf, target) {
		t.Fatalf("conf %v", conf)
	}
}

func TestPlanConfChangeKeepsAQuorum(t *testing.T) {
	// Removing 3 from {1,2,3} leaves {1,2}: with 2 down, that group could
	// not commit, so the removal waits.
	conf := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	progress := map[uint64]confProgress{1: {Match: 9, Replicating: true, Active: true}, 2: {Match: 1}, 3: {Match: 9, Replicating: true, Active: true}}
	if step := planConfChange([]uint64{1, 2}, conf, 1, progress, 9); step.Change != nil {
		t.Fatalf("removed a voter leaving no quorum: %v", step.Change)
	}
	// A voter that replicates but was not heard from lately counts as down.
	progress[2] = confProgress{Match: 9, Replicating: true}
	if step := planConfChange([]uint64{1, 2}, conf, 1, progress, 9); step.Change != nil {
		t.Fatalf("removed a voter leaving a dead one in a pair: %v", step.Change)
	}
	// Shrinking {1,2,3} to {1} with 3 down: 3 goes first (removing 2
	// would leave {1,3} without a quorum).
	progress[2] = confProgress{Match: 9, Replicating: true, Active: true}
	progress[3] = confProgress{Match: 2}
	if step := planConfChange([]uint64{1}, conf, 1, progress, 9); step.Change == nil || step.Change.Changes[0].GetNodeId() != 3 {
		t.Fatalf("step %v, want node 3 (down) removed first", step.Change)
	}
	// A joint configuration is left first.
	joint := &pb.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{1, 2, 3}}
	if step := planConfChange([]uint64{1, 2}, joint, 1, caughtUpAll(joint, 9), 9); step.Change == nil || !step.Change.LeaveJoint() {
		t.Fatalf("step %v, want to leave the joint configuration", step.Change)
	}
	// Unless raft leaves it on its own.
	joint.AutoLeave = new(true)
	if step := planConfChange([]uint64{1, 2}, joint, 1, caughtUpAll(joint, 9), 9); step.Change != nil {
		t.Fatalf("step %v, raft leaves this joint configuration itself", step.Change)
	}
}

// TestPlanConfChangeModel drives random groups from random configurations
// to random targets with raft's own configuration rules: every step is one
// raft accepts as simple, the voters are never empty, no target member is
// ever removed, the leader never removes itself, and the target is reached.
func TestPlanConfChangeModel(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	pick := func(min int) []uint64 {
		var out []uint64
		for len(out) < min {
			out = out[:0]
			for id := uint64(1); id <= 5; id++ {
				if r.IntN(2) == 0 {
					out = append(out, id)
				}
			}
		}
		return out
	}
	for run := range 2000 {
		voters := pick(1)
		conf := &pb.ConfState{Voters: voters}
		for _, id := range pick(0) {
			if !slices.Contains(voters, id) && r.IntN(3) == 0 {
				conf.Learners = append(conf.Learners, id)
			}
		}
		target := pick(1)
		leader := voters[r.IntN(len(voters))]
		commit := uint64(100)
		for steps := 0; ; steps++ {
			if steps > 20 {
				t.Fatalf("run %d: no target %v after 20 steps: %v", run, target, conf)
			}
			progress := caughtUpAll(conf, commit)
			// Now and then a member lags: the plan waits rather than act.
			lag := uint64(0)
			if members := confMembers(conf); r.IntN(4) == 0 {
				lag = members[r.IntN(len(members))]
				if lag != leader {
					progress[lag] = confProgress{Match: 1}
					if r.IntN(2) == 0 {
						// Dead, its link not yet given up: raft still
						// replicates to it, but it was not heard from.
						progress[lag] = confProgress{Match: commit, Replicating: true}
					}
				}
			}
			step := planConfChange(target, conf, leader, progress, commit)
			switch {
			case step.Transfer != 0:
				if !slices.Contains(target, step.Transfer) || !slices.Contains(conf.GetVoters(), step.Transfer) || step.Transfer == lag {
					t.Fatalf("run %d: transfer to %d, target %v, conf %v, lagging %d", run, step.Transfer, target, conf, lag)
				}
				leader = step.Transfer
			case step.Change != nil:
				for _, c := range step.Change.Changes {
					if c.GetType() == pb.ConfChangeType_ConfChangeRemoveNode && (c.GetNodeId() == leader || slices.Contains(target, c.GetNodeId())) {
						t.Fatalf("run %d: removes %d (leader %d, target %v)", run, c.GetNodeId(), leader, target)
					}
					if c.GetType() == pb.ConfChangeType_ConfChangeAddNode && c.GetNodeId() == lag {
						t.Fatalf("run %d: promotes lagging %d", run, lag)
					}
				}
				conf = applyConf(t, conf, step.Change)
				if len(conf.GetVoters()) == 0 {
					t.Fatalf("run %d: no voters left", run)
				}
			default:
				if confIsTarget(conf, target) {
					goto next
				}
				if lag == 0 {
					t.Fatalf("run %d: stuck at %v, target %v, leader %d, nobody lagging", run, conf, target, leader)
				}
			}
			commit++
		}
	next:
	}
}
