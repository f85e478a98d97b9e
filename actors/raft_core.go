package actors

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Replicated shards (issue 17): every replicated shard is a raft group
// (go.etcd.io/raft/v3), and its actor is the group's event loop. The rules
// live here, in plain structs that do no I/O, so that a model test can run
// three of them through drops, partitions, slow disks and crashes:
//
//   - raftCore is one replica's RawNode and its log as far as storage made
//     it durable. It hands out what to persist, what to send and what to
//     apply; the actor does the effects and reports back.
//   - raftApplier (raft_apply.go) turns committed entries into the shard's
//     log: offsets are assigned at apply, so every replica assigns the same.
//
// The Ready loop follows go.etcd.io/raft's contract (and the traps listed
// in reference/replication-notes.md): a Ready's entries, HardState and
// snapshot are made durable before any of its messages is sent and before
// its committed entries are applied; Advance comes after that, never after
// a failed write (a failed write ends the core: the actor stops, and the
// group restarts from what storage holds); one Ready is out at a time, so
// writes reach storage in order.

// raftCoreConfig is how a replica's core is made.
type raftCoreConfig struct {
	// ID is this replica's raft id (non-zero; Herald uses node ids).
	ID uint64
	// Peers are every replica's id, this one's included: the group's
	// first configuration, used only when the replica starts with nothing
	// durable.
	Peers []uint64
	// ElectionTicks and HeartbeatTicks are raft's ElectionTick and
	// HeartbeatTick: how many Tick calls without a leader start an
	// election, and between a leader's heartbeats.
	ElectionTicks, HeartbeatTicks int
	// MaxSizePerMsg bounds the entries of one append message (bytes);
	// MaxInflightMsgs the appends on their way to one follower;
	// MaxUncommittedBytes the leader's uncommitted entries, past which
	// proposals are refused (ErrProposalDropped).
	MaxSizePerMsg       uint64
	MaxInflightMsgs     int
	MaxUncommittedBytes uint64
	// Durable is what storage holds of this replica (empty for a new one);
	// Applied is the last index the shard's log has applied, so that raft
	// hands out only the entries after it again.
	Durable raftDurable
	Applied uint64
	// Logger receives raft's own log lines (nil: discarded).
	Logger raft.Logger
	// ForwardProposals lets a follower forward a proposal to its leader.
	ForwardProposals bool
	// Join starts a replica with nothing stored from nothing, not from
	// Peers: no configuration, no snapshot; the leader that adds it sends
	// it a snapshot (raft's way for a member that joins later).
	Join bool
}

// raftDurable is a replica's raft state as storage holds it.
type raftDurable struct {
	HardState *pb.HardState
	// Snapshot is the last snapshot (nil: none); Entries follow it, in
	// index order.
	Snapshot *pb.Snapshot
	Entries  []*pb.Entry
	// Applied is the last index a replicated shard's log holds the batch
	// of (0: none); entries after it are applied again at start.
	Applied uint64
	// AppliedTail is the shard's tail after that batch (HasAppliedTail:
	// one was written): the shard log recovered must end there, or it lost
	// batches raft will not hand out again.
	AppliedTail    uint64
	HasAppliedTail bool
	// Installing is a snapshot whose install a crash cut short (nil:
	// none): the shard log may hold part of what it fetched.
	Installing *pb.Snapshot
	// StaleFrom and StaleTo are stored entries the snapshot covers (0:
	// none): a compaction keeps entries behind its snapshot for slow
	// followers, and a restart no longer needs them.
	StaleFrom, StaleTo uint64
}

// raftPersist is what must be durable before the messages of the Ready it
// came with may go.
type raftPersist struct {
	// Entries to append; each replaces the entry at its index and every
	// entry after it (raft overwrites a follower's conflicting tail), so
	// storage drops the entries from DropFrom on before writing them.
	Entries  []*pb.Entry
	DropFrom uint64 // 0: nothing to drop
	// HardState to store (nil: unchanged).
	HardState *pb.HardState
	// Snapshot to install (nil: none): the shard's log is replaced by the
	// snapshot's, and the raft log restarts after its index: storage drops
	// every entry it holds before writing Entries.
	Snapshot *pb.Snapshot
	// MustSync is raft's: false when only the commit index moved, which may
	// be written without a sync.
	MustSync bool
}

// raftOutput is what the actor does after a call to the core, in this
// order: persist (then report it with persisted), send, apply.
type raftOutput struct {
	// Persist is set when a Ready's writes must be made durable; until the
	// actor reports them with persisted, the core hands out nothing more.
	Persist *raftPersist
	// Send are messages to other replicas, to send now (unreliable: lost
	// ones are raft's business).
	Send []*pb.Message
	// Apply are committed entries, in index order, to apply now.
	Apply []*pb.Entry
	// Soft is the replica's new role and leader, when either changed.
	Soft *raft.SoftState
	// ReadStates answer ReadIndex requests.
	ReadStates []raft.ReadState
}

func (o *raftOutput) merge(n raftOutput) {
	if n.Persist != nil {
		o.Persist = n.Persist
	}
	o.Send = append(o.Send, n.Send...)
	o.Apply = append(o.Apply, n.Apply...)
	if n.Soft != nil {
		o.Soft = n.Soft
	}
	o.ReadStates = append(o.ReadStates, n.ReadStates...)
}

// errRaftCoreFailed is every call on a core whose write failed.
var errRaftCoreFailed = errors.New("raft: a write of this replica failed; it must restart from storage")

// errNotLeader refuses a proposal on a replica that does not lead.
type errNotLeader struct {
	// Leader is the leader this replica knows of (0: none).
	Leader uint64
}

func (e errNotLeader) Error() string {
	if e.Leader == 0 {
		return "raft: no leader"
	}
	return fmt.Sprintf("raft: not the leader; replica %d leads", e.Leader)
}

// raftCore is one replica of one raft group. Not safe for concurrent use:
// its actor owns it.
type raftCore struct {
	id uint64
	rn *raft.RawNode
	// log mirrors what storage holds: entries and the HardState are added
	// only once persisted, so raft never reads back an entry that a crash
	// could lose.
	log *raft.MemoryStorage
	// pending is the Ready whose writes are on their way to storage.
	pending *raft.Ready
	failed  bool
	// forward is set when a follower forwards proposals to its leader.
	forward bool
	// soft is the last role and leader handed out.
	soft raft.SoftState
	// conf is the group's configuration as of the last entry applied: the
	// last snapshot's, changed by every configuration change applied since
	// (applyConfChange).
	conf *pb.ConfState
}

// newRaftCore makes a replica's core from what storage holds.
func newRaftCore(cfg raftCoreConfig) (*raftCore, error) {
	if cfg.ID == 0 {
		return nil, errors.New("raft: replica id 0")
	}
	// Defaults for what is left zero (raft panics on some of them).
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.HeartbeatTicks >= cfg.ElectionTicks {
		return nil, fmt.Errorf("raft: heartbeat every %d ticks, not fewer than the election's %d", cfg.HeartbeatTicks, cfg.ElectionTicks)
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = 1 << 20
	}
	if cfg.MaxInflightMsgs <= 0 {
		cfg.MaxInflightMsgs = 256
	}
	log := raft.NewMemoryStorage()
	d := cfg.Durable
	snap := d.Snapshot
	join := cfg.Join && (snap == nil || raft.IsEmptySnap(snap)) && d.HardState == nil && len(d.Entries) == 0
	if join {
		// Nothing at all: raft's log starts at index 0, which the leader
		// cannot send entries after (its log starts after its first
		// snapshot), so it sends a snapshot that holds this replica.
		snap = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(0)), Term: new(uint64(0)), ConfState: &pb.ConfState{}}}
		cfg.Applied = 0 // (storage reads an empty group as one at its implied first snapshot)
	} else if snap == nil || raft.IsEmptySnap(snap) {
		// Every replica of a group starts from the same state, implied by
		// its peers rather than written: a snapshot at index 1 holding the
		// configuration. No configuration entries, so the first entry a
		// leader appends (its no-op) is index 2 on every replica.
		if len(cfg.Peers) == 0 {
			return nil, errors.New("raft: a replica with nothing stored needs its peers")
		}
		snap = raftBootstrapSnapshot(cfg.Peers)
	}
	if !join {
		if err := log.ApplySnapshot(snap); err != nil {
			return nil, fmt.Errorf("raft: restoring the snapshot: %w", err)
		}
	}
	if len(d.Entries) > 0 {
		if err := log.Append(d.Entries); err != nil {
			return nil, fmt.Errorf("raft: restoring the log: %w", err)
		}
	}
	if d.HardState != nil {
		if err := log.SetHardState(d.HardState); err != nil {
			return nil, err
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = discardRaftLogger{}
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   log,
		Applied:                   replayFrom(snap, d.Entries, cfg.Applied, d.HardState),
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		// A leader whose own removal commits (proposed by an earlier
		// leader, committed under it) steps down: it could propose nothing
		// more (raft drops a non-member's proposals), and its heartbeats
		// would keep the others from electing a leader that can.
		StepDownOnRemoval: true,
		// A publish goes to the leader, which answers; a follower refuses
		// it naming the leader, rather than forward it where its fate is
		// not the proposer's to know.
		DisableProposalForwarding: !cfg.ForwardProposals,
		Logger:                    logger,
	})
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	return &raftCore{id: cfg.ID, rn: rn, log: log, forward: cfg.ForwardProposals, conf: proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)}, nil
}

// replayFrom is the applied index raft is started at: the owner's applied
// index, unless a configuration change lies between the snapshot and it.
// Raft's configuration at start is the snapshot's, and a configuration
// change is applied to raft only when handed out committed, so those after
// the snapshot are handed out again (with the entries between, which the
// owner has applied and the replica skips): the configuration is then the
// same as before the restart, with nothing stored but the log itself.
func replayFrom(snap *pb.Snapshot, entries []*pb.Entry, applied uint64, hs *pb.HardState) uint64 {
	from := snap.GetMetadata().GetIndex()
	applied = max(applied, from)
	if hs != nil {
		applied = min(applied, max(hs.GetCommit(), from))
	}
	for _, e := range entries {
		if i := e.GetIndex(); i > from && i <= applied && isConfChange(e) {
			return i - 1
		}
	}
	return applied
}

// isConfChange reports whether e changes the group's configuration.
func isConfChange(e *pb.Entry) bool {
	t := e.GetType()
	return t == pb.EntryType_EntryConfChange || t == pb.EntryType_EntryConfChangeV2
}

// applyConfChange applies a committed configuration change to raft (every
// replica, in log order, also when a restart hands it out again) and
// returns the configuration it makes. A change that does not decode is an
// error: every replica would fail on it alike.
func (c *raftCore) applyConfChange(e *pb.Entry) (*pb.ConfState, error) {
	var cc pb.ConfChangeI
	switch e.GetType() {
	case pb.EntryType_EntryConfChange:
		var v1 pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &v1); err != nil {
			return nil, fmt.Errorf("raft: configuration change at index %d: %w", e.GetIndex(), err)
		}
		cc = &v1
	default:
		var v2 pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &v2); err != nil {
			return nil, fmt.Errorf("raft: configuration change at index %d: %w", e.GetIndex(), err)
		}
		cc = &v2
	}
	cs := c.rn.ApplyConfChange(cc)
	c.conf = proto.Clone(cs).(*pb.ConfState)
	return c.conf, nil
}

// proposeConfChange proposes a configuration change, on the leader only.
// Raft refuses one while another is not yet applied (it commits an empty
// entry in its place).
func (c *raftCore) proposeConfChange(cc *pb.ConfChangeV2) (raftOutput, error) {
	if c.failed {
		return raftOutput{}, errRaftCoreFailed
	}
	if st := c.rn.BasicStatus(); st.RaftState != raft.StateLeader {
		return raftOutput{}, errNotLeader{Leader: st.Lead}
	}
	if err := c.rn.ProposeConfChange(cc); err != nil {
		return raftOutput{}, err
	}
	return c.ready(), nil
}

// raftBootstrapIndex is the index of a group's implied first snapshot.
const raftBootstrapIndex = 1

// raftBootstrapSnapshot is the state every replica of a group with these
// voters starts from.
func raftBootstrapSnapshot(peers []uint64) *pb.Snapshot {
	voters := slices.Clone(peers)
	slices.Sort(voters)
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index:     new(uint64(raftBootstrapIndex)),
		Term:      new(uint64(1)),
		ConfState: &pb.ConfState{Voters: voters},
	}}
}

// tick advances raft's clock by one tick.
func (c *raftCore) tick() raftOutput {
	if c.failed {
		return raftOutput{}
	}
	c.rn.Tick()
	return c.ready()
}

// step hands the core a message from another replica.
func (c *raftCore) step(m *pb.Message) raftOutput {
	if c.failed {
		return raftOutput{}
	}
	// The errors raft returns (a message from an unknown replica, a local
	// message type from the network) say nothing the sender can act on.
	_ = c.rn.Step(m)
	return c.ready()
}

// propose proposes data as an entry, on the leader only (errNotLeader
// elsewhere). A proposal accepted here may still never commit (a leader
// change drops it): the proposer learns its fate only from apply, and
// needs a timeout.
func (c *raftCore) propose(data []byte) (raftOutput, error) {
	if c.failed {
		return raftOutput{}, errRaftCoreFailed
	}
	if st := c.rn.BasicStatus(); st.RaftState != raft.StateLeader && (!c.forward || st.Lead == 0) {
		return raftOutput{}, errNotLeader{Leader: st.Lead}
	}
	if err := c.rn.Propose(data); err != nil {
		return raftOutput{}, err
	}
	return c.ready(), nil
}

// readIndex asks for the commit index a linearizable read must wait for;
// the answer comes as a ReadState carrying rctx.
func (c *raftCore) readIndex(rctx []byte) raftOutput {
	if c.failed {
		return raftOutput{}
	}
	c.rn.ReadIndex(rctx)
	return c.ready()
}

// reportUnreachable tells raft that a message to id could not be sent.
func (c *raftCore) reportUnreachable(id uint64) {
	if !c.failed {
		c.rn.ReportUnreachable(id)
	}
}

// reportSnapshot tells raft how sending a snapshot to id ended (a follower
// stays in snapshot state until told).
func (c *raftCore) reportSnapshot(id uint64, ok bool) raftOutput {
	if c.failed {
		return raftOutput{}
	}
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	c.rn.ReportSnapshot(id, st)
	return c.ready()
}

// persisted reports that the pending Ready's writes are durable: its
// messages go and its committed entries are applied, and the next Ready
// follows.
func (c *raftCore) persisted() (raftOutput, error) {
	if c.failed {
		return raftOutput{}, errRaftCoreFailed
	}
	rd := c.pending
	if rd == nil {
		return raftOutput{}, errors.New("raft: persisted with no write pending")
	}
	c.pending = nil
	if err := c.mirror(rd); err != nil {
		c.failed = true
		return raftOutput{}, err
	}
	out := raftOutput{Send: rd.Messages, Apply: rd.CommittedEntries}
	c.rn.Advance(*rd)
	out.merge(c.ready())
	return out, nil
}

// writeFailed reports that the pending Ready's writes failed: the core
// stops (raft must never Advance past a write it does not have).
func (c *raftCore) writeFailed() { c.failed = true }

// mirror adds what a Ready made durable to the log raft reads.
func (c *raftCore) mirror(rd *raft.Ready) error {
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		if err := c.log.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("raft: installing a snapshot: %w", err)
		}
		c.conf = proto.Clone(rd.Snapshot.GetMetadata().GetConfState()).(*pb.ConfState)
	}
	if len(rd.Entries) > 0 {
		if err := c.log.Append(rd.Entries); err != nil {
			return fmt.Errorf("raft: appending: %w", err)
		}
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if err := c.log.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	return nil
}

// ready takes Readies until one needs a write (or none is left): a Ready
// with nothing to persist is handed out and advanced at once.
func (c *raftCore) ready() raftOutput {
	var out raftOutput
	for c.pending == nil && c.rn.HasReady() {
		rd := c.rn.Ready()
		if rd.SoftState != nil && *rd.SoftState != c.soft {
			c.soft = *rd.SoftState
			soft := c.soft
			out.Soft = &soft
		}
		out.ReadStates = append(out.ReadStates, rd.ReadStates...)
		hs := rd.HardState
		if hs != nil && raft.IsEmptyHardState(hs) {
			hs = nil
		}
		snap := rd.Snapshot
		if snap != nil && raft.IsEmptySnap(snap) {
			snap = nil
		}
		if len(rd.Entries) == 0 && hs == nil && snap == nil {
			out.Send = append(out.Send, rd.Messages...)
			out.Apply = append(out.Apply, rd.CommittedEntries...)
			c.rn.Advance(rd)
			continue
		}
		p := &raftPersist{Entries: rd.Entries, HardState: hs, Snapshot: snap, MustSync: rd.MustSync}
		if len(rd.Entries) > 0 {
			if last, _ := c.log.LastIndex(); rd.Entries[0].GetIndex() <= last {
				p.DropFrom = rd.Entries[0].GetIndex()
			}
		}
		c.pending = &rd
		out.Persist = p
	}
	return out
}

// campaign starts an election now (a group of one voter need not wait
// for an election timeout).
func (c *raftCore) campaign() raftOutput {
	if c.failed {
		return raftOutput{}
	}
	_ = c.rn.Campaign()
	return c.ready()
}

// transferLeader asks raft to hand leadership to id (a leader only; raft
// ignores it elsewhere, and abandons a transfer that does not complete
// within an election timeout).
func (c *raftCore) transferLeader(id uint64) raftOutput {
	if c.failed {
		return raftOutput{}
	}
	c.rn.TransferLeader(id)
	return c.ready()
}

// status is the replica's role, term and leader, and its log's reach.
func (c *raftCore) status() raft.BasicStatus { return c.rn.BasicStatus() }

// compact takes a snapshot at index at (applied; data describes the shard
// there, conf is the configuration there) and drops the log's entries up
// to to (at most at): a follower behind to is sent the snapshot, one
// between to and at the entries.
func (c *raftCore) compact(at, to uint64, conf *pb.ConfState, data []byte) error {
	if _, err := c.log.CreateSnapshot(at, conf, data); err != nil {
		return err
	}
	if first, _ := c.log.FirstIndex(); to < first {
		return nil
	}
	return c.log.Compact(to)
}

// discardRaftLogger drops raft's log lines.
type discardRaftLogger struct{}

func (discardRaftLogger) Debug(...any)            {}
func (discardRaftLogger) Debugf(string, ...any)   {}
func (discardRaftLogger) Error(...any)            {}
func (discardRaftLogger) Errorf(string, ...any)   {}
func (discardRaftLogger) Info(...any)             {}
func (discardRaftLogger) Infof(string, ...any)    {}
func (discardRaftLogger) Warning(...any)          {}
func (discardRaftLogger) Warningf(string, ...any) {}
func (discardRaftLogger) Fatal(v ...any)          { panic(fmt.Sprint(v...)) }
func (discardRaftLogger) Fatalf(f string, v ...any) {
	panic(fmt.Sprintf(f, v...))
}
func (discardRaftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (discardRaftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
