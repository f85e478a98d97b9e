package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// TestRaftModelReconfig is TestRaftModel with the group's configuration
// changing under it: five replicas, three of them the first voters, and a
// target configuration that changes at random (one to five voters); the
// leader moves the group towards it with planConfChange, a step per tick,
// as a shard's leader does, through the same drops, partitions, slow
// writes, crashes and compactions. Every replica takes a snapshot at each
// configuration change it applies, as shards do. The same checks hold
// after every step, and at the end the group reaches its last target and
// every replica of it holds every acknowledged publish at its offset.
func TestRaftModelReconfig(t *testing.T) {
	for seed := range uint64(*raftModelSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newRaftSimReconfig(t, seed)
			for range 6000 {
				s.step()
				s.check()
			}
			s.heal()
			for i := 1; i < 80_000 && (i%500 != 0 || !s.converged()); i++ {
				s.quietStep()
			}
			if !s.converged() {
				for _, r := range s.replicas {
					if r.core == nil {
						s.t.Logf("replica %d: down, removed %v", r.id, r.removed)
						continue
					}
					st := r.core.rn.Status()
					prs := ""
					for id, pr := range st.Progress {
						prs += fmt.Sprintf(" %d:%s/%d", id, pr.State, pr.Match)
					}
					s.t.Logf("replica %d: up %v removed %v %v term %d lead %d commit %d applied %d conf %v confWait %d write %v; progress%s", r.id, r.up, r.removed,
						st.RaftState, st.GetTerm(), st.Lead, st.GetCommit(), r.applier.applied, r.core.conf, r.confWait, r.write != nil, prs)
				}
				s.t.Fatalf("no convergence to target %v", s.target)
			}
			s.check()
			s.checkFinal()
			t.Logf("%d targets, %d configuration changes applied by leaders, %d reaching the target then; %d acknowledged publishes; last target %v",
				s.targets, s.confChanges, s.reached, len(s.acked), s.target)
			if s.confChanges == 0 {
				t.Fatal("the group never changed its configuration: the run tested nothing")
			}
		})
	}
}

func newRaftSimReconfig(t *testing.T, seed uint64) *raftSim {
	s := &raftSim{t: t, cut: map[[2]uint64]bool{}, acked: map[uint64]uint64{}, ackInfo: map[uint64]string{},
		bootstrap: []uint64{1, 2, 3}, target: []uint64{1, 2, 3}}
	s.r = rand.New(rand.NewPCG(seed, seed^0x51ed270b27a5f1c3))
	s.peers = []uint64{1, 2, 3, 4, 5}
	for _, id := range s.peers {
		r := &simReplica{id: id, up: true, proposed: map[uint64]bool{}}
		s.replicas = append(s.replicas, r)
		s.start(r)
	}
	return s
}

// retarget picks a new target configuration.
func (s *raftSim) retarget() {
	var t []uint64
	for len(t) == 0 {
		t = t[:0]
		for _, id := range s.peers {
			if s.r.IntN(2) == 0 {
				t = append(t, id)
			}
		}
	}
	s.target = t
	s.targets++
	// The catalog starts a replica the target holds again.
	for _, id := range t {
		if r := s.replica(id); r.removed {
			r.removed = false
			s.start(r)
		}
	}
}

// toldRemoved is x hearing from member r that r's configuration does not
// hold it: it stops if the target does not hold it either and r applied
// past x's commit index (or x never applied its own addition).
func (s *raftSim) toldRemoved(x, r *simReplica) {
	if !x.up || slices.Contains(s.target, x.id) {
		return
	}
	if slices.Contains(confMembers(x.core.conf), x.id) && r.core.rn.Status().Applied < x.core.status().GetCommit() {
		return
	}
	// The rule must never stop a voter whose removal is not applied: the
	// replica that applied furthest holds the newest committed
	// configuration, and x must not be a voter there.
	var furthest *simReplica
	for _, o := range s.replicas {
		if o.up && o.core != nil && (furthest == nil || o.core.rn.Status().Applied > furthest.core.rn.Status().Applied) {
			furthest = o
		}
	}
	if furthest != nil && slices.Contains(furthest.core.conf.GetVoters(), x.id) {
		s.t.Fatalf("step %d: replica %d told removed by %d while a voter of the configuration replica %d applied at %d: %v",
			s.steps, x.id, r.id, furthest.id, furthest.core.rn.Status().Applied, furthest.core.conf)
	}
	s.remove(x)
}

// remove stops a replica that left the group, as its shard does.
func (s *raftSim) remove(r *simReplica) {
	if r.up {
		s.crash(r)
	}
	r.removed = true
}

// drive takes the leader r's next step towards the target.
func (s *raftSim) drive(r *simReplica) {
	if s.target == nil || !r.up || r.core == nil {
		return
	}
	st := r.core.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || confIsTarget(r.core.conf, s.target) {
		return
	}
	if r.confWait > 0 && r.confTerm == st.GetTerm() {
		r.confWait--
		return
	}
	progress := map[uint64]confProgress{}
	for id, pr := range st.Progress {
		// Heard from: up, and the link between them not cut.
		active := id == r.id || (s.replica(id).up && !s.cut[[2]uint64{id, r.id}])
		progress[id] = confProgress{Match: pr.Match, Replicating: pr.State == tracker.StateReplicate, Active: active}
	}
	step := planConfChange(s.target, r.core.conf, r.id, progress, st.GetCommit())
	switch {
	case step.Transfer != 0:
		s.handle(r, r.core.transferLeader(step.Transfer))
	case step.Change != nil:
		out, err := r.core.proposeConfChange(step.Change)
		var nl errNotLeader
		if err != nil && !errors.As(err, &nl) && !errors.Is(err, raft.ErrProposalDropped) {
			s.t.Fatalf("replica %d: %v", r.id, err)
		}
		if err == nil {
			r.confWait, r.confTerm = 20, st.GetTerm()
			s.handle(r, out)
		}
	}
}

// snapshotConf takes the snapshot a configuration change asked for, once
// no write of r is pending (as the shard's compactLog waits).
func (s *raftSim) snapshotConf(r *simReplica) {
	if r.core == nil || r.snapAt == 0 || r.write != nil || r.core.pending != nil {
		return
	}
	at := r.snapAt
	r.snapAt = 0
	if err := r.core.compact(at, 0, r.snapConf, r.snapData); err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return // a later snapshot came first
		}
		s.t.Fatalf("replica %d: snapshot at %d: %v", r.id, at, err)
	}
	snap, _ := r.core.log.Snapshot()
	r.durable.Snapshot = proto.Clone(snap).(*pb.Snapshot)
}

// holders are the replicas that must hold the whole log at the end: every
// replica, or, while reconfiguring, the target's.
func (s *raftSim) holders() []*simReplica {
	if s.target == nil {
		return s.replicas
	}
	var out []*simReplica
	for _, id := range s.target {
		out = append(out, s.replica(id))
	}
	return out
}
