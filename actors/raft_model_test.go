package actors

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var raftModelSeeds = flag.Int("raft-model-seeds", 8, "seeds TestRaftModel runs (each a few thousand random steps)")

// TestRaftModel runs three replicas of one group, each a raftCore and a
// raftApplier, through random steps: ticks, proposals on whoever leads,
// messages delivered late, out of order, twice or never, links cut and
// healed, writes that take their time to become durable, crashes that lose
// whatever was not durable yet, restarts from storage, and log compactions
// that make a lagging replica catch up from a snapshot. After every step:
// the replicas' shard logs (what apply appended) are prefixes of one
// another, offsets are contiguous, and no proposal appears twice. At the
// end everything heals and goes quiet: every replica holds the same log,
// and every publish that was acknowledged (applied on the leader that
// proposed it) is in it once, at the offset its acknowledgement gave.
func TestRaftModel(t *testing.T) {
	for seed := range uint64(*raftModelSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newRaftSim(t, seed, 3)
			for range 4000 {
				s.step()
				s.check()
			}
			s.heal()
			for i := 1; i < 50_000 && (i%500 != 0 || !s.converged()); i++ {
				s.quietStep()
			}
			s.check()
			s.checkFinal()
		})
	}
}

// simAppended is one entry as a replica's apply saw it.
type simAppended struct {
	index, base uint64
	count       uint32
	proposal    uint64
	refused     bool
}

// simReplica is one replica and what its storage holds.
type simReplica struct {
	id      uint64
	up      bool
	core    *raftCore
	applier raftApplier
	// appended is the shard's log as apply built it (a data entry each).
	appended []simAppended
	// durable is what storage holds; write is the Ready's writes on their
	// way (lost by a crash).
	durable raftDurable
	write   *raftPersist
	// proposed are this replica's proposals not yet applied.
	proposed map[uint64]bool
	// confWait counts the drives this replica waits, as leader, for the
	// configuration change it proposed last in term confTerm to apply
	// (reconfiguring runs); snapAt is a snapshot to take at a
	// configuration change once no write is pending.
	confWait         int
	confTerm, snapAt uint64
	snapData         []byte
	snapConf         *pb.ConfState
	// removed is set when the replica left the group (reconfiguring runs):
	// it is down until a target holds it again.
	removed bool
}

type simMsg struct {
	m        *pb.Message
	snapshot bool
}

type raftSim struct {
	t        *testing.T
	r        *rand.Rand
	replicas []*simReplica
	peers    []uint64
	net      []simMsg
	cut      map[[2]uint64]bool
	nextProp uint64
	// acked is every acknowledged proposal's base offset.
	acked   map[uint64]uint64
	ackInfo map[uint64]string
	steps   int
	// bootstrap is the group's first configuration (nil: every replica);
	// target, when set, is where the leaders move the configuration to
	// (raft_reconfig.go), changed now and then at random.
	bootstrap, target []uint64
	// confChanges counts configuration changes the leaders applied;
	// targets the targets picked; reached those the group got to.
	confChanges, targets, reached int
}

func newRaftSim(t *testing.T, seed uint64, n int) *raftSim {
	s := &raftSim{t: t, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cut: map[[2]uint64]bool{}, acked: map[uint64]uint64{}, ackInfo: map[uint64]string{}}
	for i := range n {
		s.peers = append(s.peers, uint64(i+1))
	}
	for _, id := range s.peers {
		r := &simReplica{id: id, up: true, proposed: map[uint64]bool{}}
		s.replicas = append(s.replicas, r)
		s.start(r)
	}
	return s
}

func (s *raftSim) replica(id uint64) *simReplica { return s.replicas[id-1] }

// start makes r's core from its storage, and its shard log from the
// snapshot (what a restart finds).
func (s *raftSim) start(r *simReplica) {
	r.appended, r.applier = nil, raftApplier{applied: raftBootstrapIndex}
	if snap := r.durable.Snapshot; snap != nil {
		r.appended, r.applier = decodeSimState(s.t, snap.GetData()), raftApplier{applied: snap.GetMetadata().GetIndex()}
		r.applier.next = simNext(r.appended)
	}
	peers := s.peers
	if s.bootstrap != nil {
		peers = s.bootstrap
	}
	r.confWait, r.snapAt = 0, 0
	c, err := newRaftCore(raftCoreConfig{ID: r.id, Peers: peers, ElectionTicks: 10, HeartbeatTicks: 1,
		MaxSizePerMsg: 4 << 10, MaxInflightMsgs: 16, Durable: cloneDurable(r.durable), Applied: r.applier.applied})
	if err != nil {
		s.t.Fatal(err)
	}
	r.core, r.write, r.up = c, nil, true
	r.proposed = map[uint64]bool{}
}

func (s *raftSim) step() {
	s.steps++
	up := s.upReplicas()
	switch k := s.r.IntN(1000); {
	case k < 300 && len(up) > 0:
		r := up[s.r.IntN(len(up))]
		s.handle(r, r.core.tick())
		s.drive(r)
	case k < 303 && s.target != nil:
		s.retarget()
	case k < 650 && len(s.net) > 0:
		s.deliver(s.r.IntN(len(s.net)), s.r.IntN(10) == 0, s.r.IntN(20) == 0)
	case k < 800:
		s.completeWrite(up)
	case k < 920:
		s.propose()
	case k < 925 && len(up) > 1:
		s.crash(up[s.r.IntN(len(up))])
	case k < 945:
		for _, r := range s.replicas {
			if !r.up && !r.removed {
				s.start(r)
				break
			}
		}
	case k < 965:
		// Cut a link (one way: the other way still carries), or heal all.
		a, b := s.peers[s.r.IntN(len(s.peers))], s.peers[s.r.IntN(len(s.peers))]
		switch {
		case s.r.IntN(2) == 0:
			clear(s.cut)
		case a != b:
			s.cut[[2]uint64{a, b}] = true
		}
	case k < 980 && len(up) > 0:
		s.compact(up[s.r.IntN(len(up))])
	default:
		if len(s.net) > 0 {
			// Reorder: a message overtakes the others.
			i := s.r.IntN(len(s.net))
			s.net[0], s.net[i] = s.net[i], s.net[0]
		}
	}
}

// quietStep is a step of a healed cluster: no loss, no crash, no proposal.
func (s *raftSim) quietStep() {
	up := s.upReplicas()
	switch k := s.r.IntN(3); {
	case k == 0:
		r := up[s.r.IntN(len(up))]
		s.handle(r, r.core.tick())
		s.drive(r)
	case k == 1 && len(s.net) > 0:
		// Five replicas send more than one delivery a step carries: the
		// network would fall ever further behind.
		for n := 0; n < 1+2*len(s.replicas)/5 && len(s.net) > 0; n++ {
			s.deliver(0, false, false)
		}
	default:
		s.completeWrite(up)
	}
}

func (s *raftSim) heal() {
	clear(s.cut)
	for _, r := range s.replicas {
		if !r.up && !r.removed {
			s.start(r)
		}
	}
}

func (s *raftSim) upReplicas() []*simReplica {
	var up []*simReplica
	for _, r := range s.replicas {
		if r.up {
			up = append(up, r)
		}
	}
	return up
}

// deliver hands message i to its replica, or drops it; dup keeps a copy
// on its way.
func (s *raftSim) deliver(i int, drop, dup bool) {
	msg := s.net[i]
	if !dup {
		s.net = slices.Delete(s.net, i, i+1)
	}
	from, to := msg.m.GetFrom(), msg.m.GetTo()
	lost := drop || s.cut[[2]uint64{from, to}] || !s.replica(to).up
	if msg.snapshot && s.replica(from).up {
		s.handle(s.replica(from), s.replica(from).core.reportSnapshot(to, !lost))
	}
	if lost {
		if s.replica(from).up {
			s.replica(from).core.reportUnreachable(to)
		}
		return
	}
	r := s.replica(to)
	if s.target != nil && !slices.Contains(confMembers(r.core.conf), from) && slices.Contains(confMembers(r.core.conf), r.id) {
		// A member answers a stranger with ShardRemoved (shard_reconfig.go).
		s.toldRemoved(s.replica(from), r)
	}
	s.handle(r, r.core.step(proto.Clone(msg.m).(*pb.Message)))
}

// completeWrite makes one replica's pending write durable.
func (s *raftSim) completeWrite(up []*simReplica) {
	var writing []*simReplica
	for _, r := range up {
		if r.write != nil {
			writing = append(writing, r)
		}
	}
	if len(writing) == 0 {
		return
	}
	r := writing[s.r.IntN(len(writing))]
	w := r.write
	r.write = nil
	d := &r.durable
	if w.Snapshot != nil {
		d.Snapshot, d.Entries = w.Snapshot, nil // the raft log restarts after it
	}
	if w.DropFrom > 0 {
		d.Entries = slices.DeleteFunc(d.Entries, func(e *pb.Entry) bool { return e.GetIndex() >= w.DropFrom })
	}
	if len(w.Entries) > 0 {
		if n := len(d.Entries); n > 0 && d.Entries[n-1].GetIndex()+1 != w.Entries[0].GetIndex() {
			s.t.Fatalf("replica %d: appending %d after %d (drop from %d)", r.id, w.Entries[0].GetIndex(), d.Entries[n-1].GetIndex(), w.DropFrom)
		}
		for _, e := range w.Entries {
			d.Entries = append(d.Entries, proto.Clone(e).(*pb.Entry))
		}
	}
	if w.HardState != nil {
		d.HardState = proto.Clone(w.HardState).(*pb.HardState)
	}
	if w.Snapshot != nil {
		// The shard's log is the snapshot's.
		r.appended = decodeSimState(s.t, w.Snapshot.GetData())
		r.applier = raftApplier{applied: w.Snapshot.GetMetadata().GetIndex(), next: simNext(r.appended)}
	}
	out, err := r.core.persisted()
	if err != nil {
		s.t.Fatal(err)
	}
	s.handle(r, out)
	s.snapshotConf(r)
}

// propose proposes a publish on a replica that believes it leads (several
// may, for a moment, across a partition).
func (s *raftSim) propose() {
	for _, r := range s.upReplicas() {
		if r.core.status().RaftState != raft.StateLeader {
			continue
		}
		s.nextProp++
		p := raftPublish{Proposal: s.nextProp, Timestamp: int64(s.steps), Count: uint32(1 + s.r.IntN(3)), Records: []byte("x")}
		if s.r.IntN(5) == 0 {
			// A conditional publish expecting what this leader has applied.
			p.HasExpected, p.Expected = true, r.applier.next
		}
		out, err := r.core.propose(appendRaftPublish(nil, p))
		if err != nil {
			continue // dropped (uncommitted bound, or stepping down)
		}
		r.proposed[p.Proposal] = true
		s.handle(r, out)
		return
	}
}

// crash loses r's memory and its write on its way.
func (s *raftSim) crash(r *simReplica) {
	r.up, r.write, r.core = false, nil, nil
	var lostSnaps []simMsg
	s.net = slices.DeleteFunc(s.net, func(m simMsg) bool {
		gone := m.m.GetTo() == r.id || m.m.GetFrom() == r.id
		if gone && m.snapshot && m.m.GetFrom() != r.id {
			lostSnaps = append(lostSnaps, m)
		}
		return gone
	})
	// A snapshot that can no longer arrive is reported failed, as the
	// transport does when its send fails (else its follower would wait
	// in snapshot state for ever).
	for _, m := range lostSnaps {
		if from := s.replica(m.m.GetFrom()); from.up {
			s.handle(from, from.core.reportSnapshot(r.id, false))
		}
	}
}

// compact snapshots r's shard log at what it applied and drops the raft
// log before it, in storage too (what the node does once the shard log
// holds the applied entries).
func (s *raftSim) compact(r *simReplica) {
	idx := r.applier.applied
	first, _ := r.core.log.FirstIndex()
	if snap, _ := r.core.log.Snapshot(); idx < first+2 || r.write != nil || idx <= snap.GetMetadata().GetIndex() {
		return // (a configuration change's snapshot may be at the index applied last)
	}
	data := encodeSimState(r.appended)
	if err := r.core.compact(idx, idx, r.core.conf, data); err != nil {
		s.t.Fatalf("replica %d: compact at %d: %v", r.id, idx, err)
	}
	snap, _ := r.core.log.Snapshot()
	r.durable.Snapshot = proto.Clone(snap).(*pb.Snapshot)
	r.durable.Entries = slices.DeleteFunc(r.durable.Entries, func(e *pb.Entry) bool { return e.GetIndex() <= idx })
}

// handle does what the core asked, in order: persist (later), send, apply.
func (s *raftSim) handle(r *simReplica, out raftOutput) {
	if out.Persist != nil {
		if r.write != nil {
			s.t.Fatalf("replica %d: a second write while one is pending", r.id)
		}
		r.write = out.Persist
	}
	for _, m := range out.Send {
		if m.GetTo() == r.id {
			s.t.Fatalf("replica %d: a message to itself: %v", r.id, m.GetType())
		}
		s.net = append(s.net, simMsg{m: proto.Clone(m).(*pb.Message), snapshot: m.GetType() == pb.MessageType_MsgSnap})
	}
	for _, e := range out.Apply {
		if isConfChange(e) {
			// As raftReplica does: applied to raft whenever handed out, and
			// a snapshot taken there (raft refuses one whose configuration
			// does not hold its receiver).
			before := confMembers(r.core.conf)
			if _, err := r.core.applyConfChange(e); err != nil {
				s.t.Fatalf("replica %d: %v", r.id, err)
			}
			if r.core.status().RaftState == raft.StateLeader {
				// The leader tells the replicas the change removed.
				for _, id := range before {
					if x := s.replica(id); id != r.id && !slices.Contains(confMembers(r.core.conf), id) && !s.cut[[2]uint64{r.id, id}] {
						defer s.toldRemoved(x, r)
					}
				}
			}
			r.confWait = 0
			if s.target != nil && !slices.Contains(confMembers(r.core.conf), r.id) && !slices.Contains(s.target, r.id) {
				defer s.remove(r) // it applied its own removal
			}
			if r.core.status().RaftState == raft.StateLeader {
				s.confChanges++
				if confIsTarget(r.core.conf, s.target) {
					s.reached++
				}
			}
			if e.GetIndex() > r.applier.applied {
				r.snapAt, r.snapData, r.snapConf = e.GetIndex(), encodeSimState(r.appended), proto.Clone(r.core.conf).(*pb.ConfState)
			}
		}
		if e.GetIndex() <= r.applier.applied {
			continue // below a snapshot installed meanwhile
		}
		a, err := r.applier.apply(e)
		if err != nil {
			s.t.Fatalf("replica %d: %v", r.id, err)
		}
		if !a.Publish {
			continue
		}
		base := a.Batch.Base
		if a.Refused != nil {
			base = a.Refused.Detail // the tail it found; it appended nothing
		}
		r.appended = append(r.appended, simAppended{index: a.Index, base: base, count: a.Batch.Count, proposal: a.Proposal, refused: a.Refused != nil})
		if r.proposed[a.Proposal] {
			delete(r.proposed, a.Proposal)
			if a.Refused == nil {
				s.acked[a.Proposal] = a.Batch.Base
				s.ackInfo[a.Proposal] = fmt.Sprintf("acked by replica %d at step %d: index %d term %d", r.id, s.steps, a.Index, e.GetTerm())
			}
		}
	}
}

// check: the shard logs are prefixes of one another, offsets contiguous,
// no proposal twice.
func (s *raftSim) check() {
	var longest []simAppended
	for _, r := range s.replicas {
		next := uint64(0)
		seen := map[uint64]bool{}
		for i, a := range r.appended {
			if seen[a.proposal] {
				s.t.Fatalf("step %d: replica %d: proposal %d applied twice", s.steps, r.id, a.proposal)
			}
			seen[a.proposal] = true
			if a.base != next || i > 0 && a.index <= r.appended[i-1].index {
				s.t.Fatalf("step %d: replica %d: entry %d at offset %d, want %d", s.steps, r.id, a.index, a.base, next)
			}
			next += uint64(a.count)
		}
		if len(r.appended) > len(longest) {
			longest = r.appended
		}
	}
	for _, r := range s.replicas {
		if !slices.Equal(r.appended, longest[:len(r.appended)]) {
			s.t.Fatalf("step %d: replica %d's shard log is not a prefix of the longest:\n%v\n%v", s.steps, r.id, r.appended, longest)
		}
	}
}

// converged reports that every replica applied the same, nothing is on
// its way and no write pending.
func (s *raftSim) converged() bool {
	leaders := 0
	hs := s.holders()
	for _, r := range hs {
		if r.write != nil || r.core.rn.HasReady() || !slices.Equal(r.appended, hs[0].appended) || r.applier.applied != hs[0].applier.applied {
			return false
		}
		if st := r.core.status(); st.RaftState == raft.StateLeader && st.GetCommit() == r.applier.applied &&
			(s.target == nil || confIsTarget(r.core.conf, s.target)) {
			leaders++
		}
	}
	// Replicas removed from the group ask for votes now and then: their
	// messages are not waited for.
	return (len(s.net) == 0 || s.target != nil) && leaders == 1
}

// checkFinal: after healing every replica holds the same log, and every
// acknowledged publish is in it at its acknowledged offset.
func (s *raftSim) checkFinal() {
	hs := s.holders()
	want := hs[0].appended
	for _, r := range hs[1:] {
		if !slices.Equal(r.appended, want) {
			s.t.Fatalf("replica %d holds %d entries, replica %d %d", r.id, len(r.appended), hs[0].id, len(want))
		}
	}
	at := map[uint64]simAppended{}
	for _, a := range want {
		at[a.proposal] = a
	}
	for p, base := range s.acked {
		a, ok := at[p]
		if !ok || a.refused || a.base != base {
			var atBase []simAppended
			for _, e := range want {
				if e.base <= base && base < e.base+uint64(e.count) || e.base == base {
					atBase = append(atBase, e)
				}
			}
			for _, r := range s.replicas {
				st := r.core.status()
				first, _ := r.core.log.FirstIndex()
				last, _ := r.core.log.LastIndex()
				s.t.Logf("replica %d: %v term %d lead %d commit %d applied %d log [%d, %d] durable %d entries, snapshot at %d, write %v (core %v, ready %v); appended %d", r.id, st.RaftState, st.GetTerm(), st.Lead, st.GetCommit(), r.applier.applied, first, last, len(r.durable.Entries), r.durable.Snapshot.GetMetadata().GetIndex(), r.write != nil, r.core.pending != nil, r.core.rn.HasReady(), len(r.appended))
			}
			s.t.Fatalf("acknowledged proposal %d at offset %d (%s): in the log as %+v (%v); the log there: %+v", p, base, s.ackInfo[p], a, ok, atBase)
		}
	}
	if len(s.acked) == 0 {
		s.t.Fatal("nothing was acknowledged: the run tested nothing")
	}
}

func simNext(appended []simAppended) uint64 {
	if n := len(appended); n > 0 {
		return appended[n-1].base + uint64(appended[n-1].count)
	}
	return 0
}

func encodeSimState(appended []simAppended) []byte {
	var b []byte
	for _, a := range appended {
		b = binary.BigEndian.AppendUint64(b, a.index)
		b = binary.BigEndian.AppendUint64(b, a.base)
		b = binary.BigEndian.AppendUint32(b, a.count)
		b = binary.BigEndian.AppendUint64(b, a.proposal)
		if a.refused {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

func decodeSimState(t *testing.T, b []byte) []simAppended {
	const size = 8 + 8 + 4 + 8 + 1
	if len(b)%size != 0 {
		t.Fatalf("snapshot data of %d bytes", len(b))
	}
	var out []simAppended
	for ; len(b) > 0; b = b[size:] {
		out = append(out, simAppended{index: binary.BigEndian.Uint64(b), base: binary.BigEndian.Uint64(b[8:]),
			count: binary.BigEndian.Uint32(b[16:]), proposal: binary.BigEndian.Uint64(b[20:]), refused: b[28] == 1})
	}
	return out
}

func cloneDurable(d raftDurable) raftDurable {
	out := raftDurable{}
	if d.HardState != nil {
		out.HardState = proto.Clone(d.HardState).(*pb.HardState)
	}
	if d.Snapshot != nil {
		out.Snapshot = proto.Clone(d.Snapshot).(*pb.Snapshot)
	}
	for _, e := range d.Entries {
		out.Entries = append(out.Entries, proto.Clone(e).(*pb.Entry))
	}
	return out
}
