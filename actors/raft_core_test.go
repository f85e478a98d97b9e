package actors

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/wire"
)

// The applier assigns offsets in entry order, gives none to raft's own
// entries (a leader's empty entry, configuration changes), refuses a
// conditional publish whose expected tail is not the tail without taking
// an offset, and stops on an entry out of order or one that does not
// decode.
func TestRaftApplierOffsets(t *testing.T) {
	a := raftApplier{applied: raftBootstrapIndex}
	entry := func(idx uint64, data []byte) *pb.Entry {
		return &pb.Entry{Index: new(idx), Term: new(uint64(2)), Data: data}
	}
	pub := func(prop uint64, n uint32, expected *uint64) []byte {
		p := raftPublish{Proposal: prop, Timestamp: 99, Count: n, Records: []byte("recs")}
		if expected != nil {
			p.HasExpected, p.Expected = true, *expected
		}
		return appendRaftPublish(nil, p)
	}
	steps := []struct {
		e       *pb.Entry
		base    uint64
		count   uint32
		refused bool
		publish bool
	}{
		{e: entry(2, nil)}, // the new leader's empty entry: no offset
		{e: entry(3, pub(1, 3, nil)), base: 0, count: 3, publish: true},
		{e: entry(4, pub(2, 2, new(uint64(3)))), base: 3, count: 2, publish: true},
		{e: entry(5, pub(3, 1, new(uint64(3)))), base: 5, refused: true, publish: true}, // stale expectation
		{e: &pb.Entry{Index: new(uint64(6)), Type: pb.EntryType_EntryConfChange.Enum(), Data: []byte{1}}},
		{e: entry(7, pub(4, 1, new(uint64(5)))), base: 5, count: 1, publish: true},
	}
	for _, s := range steps {
		got, err := a.apply(s.e)
		if err != nil {
			t.Fatalf("entry %d: %v", s.e.GetIndex(), err)
		}
		if got.Publish != s.publish || got.Batch.Count != s.count || (got.Refused != nil) != s.refused {
			t.Fatalf("entry %d: %+v", s.e.GetIndex(), got)
		}
		if s.refused {
			if got.Refused.Code != wire.CodeConditionFailed || got.Refused.Detail != s.base {
				t.Fatalf("entry %d refused with %v, want condition_failed at tail %d", s.e.GetIndex(), got.Refused, s.base)
			}
		} else if s.count > 0 && (got.Batch.Base != s.base || got.Batch.Timestamp != 99 || string(got.Batch.Records) != "recs") {
			t.Fatalf("entry %d: batch %+v, want base %d", s.e.GetIndex(), got.Batch, s.base)
		}
	}
	if a.next != 6 || a.applied != 7 {
		t.Fatalf("next %d applied %d, want 6 and 7", a.next, a.applied)
	}
	if _, err := a.apply(entry(9, pub(5, 1, nil))); err == nil {
		t.Fatal("entry 9 after 7 applied")
	}
	for _, bad := range [][]byte{{9}, {raftEntryVersion, 1, 2}, pub(6, 0, nil), append(pub(6, 1, nil)[:21:21], 0x80)} {
		if _, err := (&raftApplier{applied: 7}).apply(entry(8, bad)); err == nil {
			t.Errorf("entry data %x applied", bad)
		}
	}
}

// A follower refuses a proposal naming the leader; the leader answers a
// read index once a quorum confirms it leads; a core whose write failed
// refuses everything; persisted with no write pending is an error.
func TestRaftCoreRefusals(t *testing.T) {
	peers := []uint64{1, 2}
	cores := map[uint64]*raftCore{}
	for _, id := range peers {
		c, err := newRaftCore(raftCoreConfig{ID: id, Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		cores[id] = c
	}
	if _, err := cores[1].persisted(); err == nil {
		t.Fatal("persisted with nothing pending")
	}
	// Elect 1: campaign, then run both until quiet, persisting at once.
	var net []*pb.Message
	handle := func(c *raftCore, out raftOutput) {
		for out.Persist != nil {
			next, err := c.persisted()
			if err != nil {
				t.Fatal(err)
			}
			net = append(net, out.Send...)
			out = next
		}
		net = append(net, out.Send...)
	}
	if err := cores[1].rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	handle(cores[1], cores[1].ready())
	for len(net) > 0 {
		m := net[0]
		net = net[1:]
		c := cores[m.GetTo()]
		handle(c, c.step(m))
	}
	if st := cores[1].status(); st.RaftState != raft.StateLeader {
		t.Fatalf("replica 1 is %v", st.RaftState)
	}
	// A read of the tail on the leader: its ReadState carries the request's
	// context and the commit index the read must wait for.
	rs := cores[1].readIndex([]byte("read-1"))
	handle(cores[1], rs)
	for len(net) > 0 {
		m := net[0]
		net = net[1:]
		c := cores[m.GetTo()]
		out := c.step(m)
		if m.GetTo() == 1 {
			rs.ReadStates = append(rs.ReadStates, out.ReadStates...)
		}
		handle(c, out)
	}
	if len(rs.ReadStates) != 1 || string(rs.ReadStates[0].RequestCtx) != "read-1" || rs.ReadStates[0].Index != cores[1].status().GetCommit() {
		t.Fatalf("read index: %+v, want one for read-1 at commit %d", rs.ReadStates, cores[1].status().GetCommit())
	}
	_, err := cores[2].propose([]byte("x"))
	var nl errNotLeader
	if !errors.As(err, &nl) || nl.Leader != 1 {
		t.Fatalf("a follower's proposal: %v, want not leader naming 1", err)
	}
	out, err := cores[1].propose(appendRaftPublish(nil, raftPublish{Proposal: 1, Count: 1}))
	if err != nil || out.Persist == nil {
		t.Fatalf("the leader's proposal: %v, persist %v", err, out.Persist)
	}
	cores[1].writeFailed()
	if _, err := cores[1].persisted(); !errors.Is(err, errRaftCoreFailed) {
		t.Fatalf("persisted after a failed write: %v", err)
	}
	if _, err := cores[1].propose([]byte("y")); !errors.Is(err, errRaftCoreFailed) {
		t.Fatalf("proposal after a failed write: %v", err)
	}
}
