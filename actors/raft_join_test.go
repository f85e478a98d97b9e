package actors

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A replica that joins a running group with nothing stored (Join: it does
// not know the group's first configuration) is sent the snapshot every
// replica took at the configuration change that added it, installs it
// (its data and the configuration that holds it), and then follows the
// log by entries; it is promoted and counts in the quorum. A replica
// started from the group's first configuration instead would have applied
// the log from index 2 on a configuration it made up.
func TestRaftCoreJoinerTakesTheSnapshot(t *testing.T) {
	cores := map[uint64]*raftCore{}
	for _, id := range []uint64{1, 2, 3} {
		c, err := newRaftCore(raftCoreConfig{ID: id, Peers: []uint64{1, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		cores[id] = c
	}
	joiner, err := newRaftCore(raftCoreConfig{ID: 4, Join: true})
	if err != nil {
		t.Fatal(err)
	}
	cores[4] = joiner
	applied := map[uint64][]string{} // normal entries' data, by replica
	installed := map[uint64]*pb.Snapshot{}
	var net []*pb.Message
	handle := func(id uint64, out raftOutput) {
		c := cores[id]
		for {
			var snap *pb.Snapshot
			if out.Persist != nil {
				snap = out.Persist.Snapshot
			}
			net = append(net, out.Send...)
			for _, e := range out.Apply {
				switch {
				case isConfChange(e):
					cs, err := c.applyConfChange(e)
					if err != nil {
						t.Fatal(err)
					}
					// Every replica snapshots the state at a change.
					if err := c.compact(e.GetIndex(), 0, cs, fmt.Appendf(nil, "state at %d", e.GetIndex())); err != nil {
						t.Fatalf("replica %d: snapshot at %d: %v", id, e.GetIndex(), err)
					}
				case len(e.GetData()) > 0:
					applied[id] = append(applied[id], string(e.GetData()))
				}
			}
			if out.Persist == nil {
				return
			}
			if snap != nil {
				installed[id] = snap
			}
			next, err := c.persisted()
			if err != nil {
				t.Fatalf("replica %d: %v", id, err)
			}
			out = next
		}
	}
	run := func() {
		for steps := 0; len(net) > 0; steps++ {
			if steps > 10000 {
				t.Fatal("the network does not settle")
			}
			m := net[0]
			net = net[1:]
			if c := cores[m.GetTo()]; c != nil {
				handle(m.GetTo(), c.step(m))
			}
		}
	}
	if err := cores[1].rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	handle(1, cores[1].ready())
	run()
	propose := func(data string) {
		t.Helper()
		out, err := cores[1].propose([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		handle(1, out)
		run()
	}
	change := func(typ pb.ConfChangeType) {
		t.Helper()
		out, err := cores[1].proposeConfChange(&pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(uint64(4))}}})
		if err != nil {
			t.Fatal(err)
		}
		handle(1, out)
		run()
		// The leader's heartbeats carry the commit to everyone.
		for range 3 {
			for _, id := range []uint64{1, 2, 3, 4} {
				handle(id, cores[id].tick())
			}
			run()
		}
	}
	propose("a")
	propose("b")
	change(pb.ConfChangeType_ConfChangeAddLearnerNode)
	if installed[4] == nil {
		t.Fatal("the joiner was sent no snapshot")
	}
	if cs := installed[4].GetMetadata().GetConfState(); !slices.Equal(cs.GetVoters(), []uint64{1, 2, 3}) || !slices.Equal(cs.GetLearners(), []uint64{4}) {
		t.Fatalf("the joiner's snapshot holds %v", cs)
	}
	if len(installed[4].GetData()) == 0 || len(applied[4]) != 0 {
		t.Fatalf("snapshot data %q, applied %v: the joiner must take the state from the snapshot, not replay the log", installed[4].GetData(), applied[4])
	}
	propose("c")
	change(pb.ConfChangeType_ConfChangeAddNode)
	propose("d")
	if got := applied[4]; !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("the joiner applied %v after its snapshot, want c and d", got)
	}
	if v := cores[4].conf.GetVoters(); !slices.Equal(v, []uint64{1, 2, 3, 4}) {
		t.Fatalf("the joiner's configuration: %v", cores[4].conf)
	}
	// It votes now: with 1 gone, three of the four are a quorum only with
	// the joiner's vote.
	delete(cores, 1)
	// etcd raft randomizes election timeouts, so a
	// vote may split and the next election settle it: up to 300 ticks.
	for range 300 {
		for _, id := range []uint64{2, 3, 4} {
			handle(id, cores[id].tick())
		}
		run()
		if l := cores[2].status().Lead; l != 0 && l != 1 && cores[l].status().RaftState == raft.StateLeader {
			break
		}
	}
	lead := cores[2].status().Lead
	if lead == 0 || lead == 1 || cores[lead].status().RaftState != raft.StateLeader {
		t.Fatalf("no leader among 2, 3 and 4: %+v", cores[2].status())
	}
}
