package actors

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/storage"
)

// raftReplica is the effect loop of one replica of one raft group, for the
// actor that owns it (a replicated shard, the metadata group, a test
// group): the actor's mailbox is the group's event loop. It does what the
// core asks, in the core's order, and never blocks: a Ready's writes go to
// the storage writer (group-committed with every other write of the node)
// and the core goes on when the writer answers; messages go to the peer
// links, which batch them with every other group's; committed entries go
// to the owner's apply, on the actor's goroutine.
type raftReplica struct {
	key  storage.ShardKey
	self uint64
	core *raftCore
	// writer is the node's storage writer; link finds a peer's link.
	writer *actor.PID
	link   func(uint64) *actor.PID
	// apply applies one committed entry (a failure stops the replica);
	// soft learns of a role or leader change.
	apply func(actor.Context, *pb.Entry) error
	soft  func(actor.Context, raft.SoftState)
	// onConf learns of each configuration change applied (nil: nothing);
	// onRemoved hears a member's ShardRemoved; onStranger is asked to
	// answer a vote request from a replica the configuration does not
	// hold (nil: not answered).
	onConf     func(actor.Context, *pb.ConfState, uint64, bool)
	onRemoved  func(actor.Context, uint64, *peerwire.ShardRemoved)
	onStranger func(actor.Context, uint64)
	// tick runs after each tick is handled (nil: nothing).
	tick func(actor.Context)
	// install installs a snapshot raft handed out (nil: a snapshot stops
	// the replica); installing is its Ready's writes, waiting for the
	// owner's finishInstall.
	install    func(actor.Context, *pb.Snapshot)
	installing *raftPersist
	// onSnapSent counts a snapshot sent (nil: not counted); onReads takes
	// the answers to ReadIndex requests.
	onSnapSent func()
	onReads    func(actor.Context, []raft.ReadState)
	// onLeaderMsg hears of each message a leader sent this replica (an
	// append, a heartbeat, a snapshot), with its term and commit index,
	// before it is stepped (nil: nothing; follower_reads.go).
	onLeaderMsg func(term, commit uint64)
	// quiet is set while the group is quiesced: raft does not tick
	// (raft_quiesce.go). alive says whether a peer's node is heard from
	// (nil: the group never quiesces); busy whether the owner has
	// something on its way; onQuiet counts quiet replicas (+1, -1).
	quiet         bool
	alive         func(uint64) bool
	busy          func() bool
	onQuiet       func(int64)
	idleAt        uint64
	idleTicks     int
	tickGen       uint64
	electionTicks int
	// applied is the last index handed to apply; startApplied was it at
	// start.
	applied, startApplied uint64
	// token names the write on its way to storage (0: none).
	token, tokens uint64
	tickEvery     time.Duration
	afterFunc     func(time.Duration, func()) (stop func() bool)
	stopTick      func() bool
	stopped       bool
	// failedErr is why the replica stopped (nil: it runs).
	failedErr error
}

// raftReplicaConfig makes a raftReplica.
type raftReplicaConfig struct {
	Key                           storage.ShardKey
	Self                          uint64
	Peers                         []uint64
	Durable                       raftDurable
	Applied                       uint64
	Writer                        *actor.PID
	Link                          func(uint64) *actor.PID
	Tick                          time.Duration
	ElectionTicks, HeartbeatTicks int
	AfterFunc                     func(time.Duration, func()) (stop func() bool)
	// ForwardProposals lets a follower forward a proposal to the leader
	// (the metadata group: whoever proposes learns the outcome from its own
	// apply). Shards refuse on a follower instead, naming the leader.
	ForwardProposals bool
	// Join starts a replica that has nothing stored with no state at all,
	// not the group's first configuration: it waits for the leader to add
	// it and send it a snapshot (a node joining a running cluster's
	// metadata group, whose first configuration it does not know).
	Join  bool
	Apply func(actor.Context, *pb.Entry) error
	Soft  func(actor.Context, raft.SoftState)
	// OnConf learns of each configuration change applied, with the
	// configuration it made and the entry's index; fresh is false for one
	// a restart hands out again (the owner applied past it before).
	OnConf func(ctx actor.Context, conf *pb.ConfState, index uint64, fresh bool)
	// OnTick runs after each tick is handled.
	OnTick func(actor.Context)
	// Alive, Busy and OnQuiet make the group quiesce when idle
	// (raft_quiesce.go; Alive nil: it never does).
	Alive   func(uint64) bool
	Busy    func() bool
	OnQuiet func(int64)
	// Install installs a snapshot from the leader: the owner makes its
	// state the snapshot's, then calls finishInstall (nil: a snapshot
	// stops the replica).
	Install func(actor.Context, *pb.Snapshot)
}

// startRaftReplica makes the core from what storage holds and arms the
// tick.
func startRaftReplica(ctx actor.Context, cfg raftReplicaConfig) (*raftReplica, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	core, err := newRaftCore(raftCoreConfig{ID: cfg.Self, Peers: cfg.Peers, ElectionTicks: cfg.ElectionTicks,
		HeartbeatTicks: cfg.HeartbeatTicks, Durable: cfg.Durable, Applied: cfg.Applied, ForwardProposals: cfg.ForwardProposals, Join: cfg.Join})
	if err != nil {
		return nil, err
	}
	// Write tokens start at random: an answer to an earlier instance's
	// write (the same actor name, after a restart) never matches one of
	// this instance's.
	r := &raftReplica{key: cfg.Key, self: cfg.Self, core: core, writer: cfg.Writer, link: cfg.Link, tokens: rand.Uint64() >> 1,
		apply: cfg.Apply, soft: cfg.Soft, onConf: cfg.OnConf, tick: cfg.OnTick, install: cfg.Install, electionTicks: cmp.Or(cfg.ElectionTicks, 10), alive: cfg.Alive, busy: cfg.Busy, onQuiet: cfg.OnQuiet, applied: max(cfg.Applied, raftBootstrapIndex),
		tickEvery: cfg.Tick, afterFunc: cfg.AfterFunc}
	r.startApplied = r.applied
	r.arm(ctx)
	return r, nil
}

// raftTick is a replica's timer message; gen names the timer that sent it
// (a tick of a timer stopped by a quiesce, still in the mailbox when the
// group wakes, must not start a second chain of ticks).
type raftTick struct{ gen uint64 }

// receive handles the replica's own messages; it reports false for any
// other.
func (r *raftReplica) receive(ctx actor.Context, msg any) bool {
	switch m := msg.(type) {
	case *raftTick:
		if !r.stopped && !r.quiet && m.gen == r.tickGen {
			r.handle(ctx, r.core.tick())
			r.arm(ctx)
			if r.tick != nil && !r.stopped {
				r.tick(ctx)
			}
			r.maybeQuiesce(ctx)
		}
	case *ShardInbound:
		switch {
		case m.Msg.Quiesce != nil:
			r.onQuiesce(m.From, m.Msg.Quiesce)
		case m.Msg.Wake != nil:
			r.wake(ctx)
		case m.Msg.Removed != nil:
			if r.onRemoved != nil && !r.stopped {
				r.onRemoved(ctx, m.From, m.Msg.Removed)
			}
		default:
			return false // the owner's (a snapshot's pages)
		}
	case *PeerSuspect:
		r.onPeerSuspect(ctx, m.Peer)
	case *RaftInbound:
		if r.stopped {
			return true
		}
		pm := &pb.Message{}
		if err := proto.Unmarshal(m.Data, pm); err != nil {
			ctx.Logger().Warn("raft: a peer's message does not decode", slog.Uint64("stream", r.key.Stream),
				slog.Uint64("shard", uint64(r.key.Shard)), slog.Any("error", err))
			return true
		}
		if m.From != 0 && (pm.GetFrom() != m.From || pm.GetTo() != r.self) {
			// A message must come from the node whose link carried it and
			// be for this replica: a node does not speak for another.
			ctx.Logger().Warn("raft: a message names other replicas than its link's", slog.Uint64("stream", r.key.Stream),
				slog.Uint64("shard", uint64(r.key.Shard)), slog.Uint64("link", m.From), slog.Uint64("from", pm.GetFrom()), slog.Uint64("to", pm.GetTo()))
			return true
		}
		t := pm.GetType()
		member := slices.Contains(confMembers(r.core.conf), pm.GetFrom())
		switch {
		case !member:
			// A replica outside the configuration wakes nobody: it was
			// removed and may not know it.
			if r.onStranger != nil {
				r.onStranger(ctx, pm.GetFrom())
			}
		case t != pb.MessageType_MsgHeartbeat && t != pb.MessageType_MsgHeartbeatResp:
			// Anything but the heartbeats a quiet group still answers (the
			// last ones cross the quiesce on the wire) wakes it.
			r.wake(ctx)
		}
		if r.onLeaderMsg != nil && (t == pb.MessageType_MsgApp || t == pb.MessageType_MsgHeartbeat || t == pb.MessageType_MsgSnap) &&
			member && pm.GetTerm() >= r.core.status().GetTerm() {
			r.onLeaderMsg(pm.GetTerm(), pm.GetCommit())
		}
		r.handle(ctx, r.core.step(pm))
	case *MetaWriteResponse:
		r.onWritten(ctx, m)
	case *PeerUndelivered:
		if r.stopped {
			return true
		}
		r.core.reportUnreachable(m.Peer)
		if m.Snapshot {
			r.handle(ctx, r.core.reportSnapshot(m.Peer, false))
		}
	default:
		return false
	}
	return true
}

// propose proposes data; errNotLeader on a follower that does not forward.
func (r *raftReplica) propose(ctx actor.Context, data []byte) error {
	if r.stopped {
		return r.stoppedErr()
	}
	r.wake(ctx)
	out, err := r.core.propose(data)
	if err != nil {
		return err
	}
	r.handle(ctx, out)
	return nil
}

// proposeConfChange proposes a configuration change on the leader.
func (r *raftReplica) proposeConfChange(ctx actor.Context, cc *pb.ConfChangeV2) error {
	if r.stopped {
		return r.stoppedErr()
	}
	r.wake(ctx)
	out, err := r.core.proposeConfChange(cc)
	if err != nil {
		return err
	}
	r.handle(ctx, out)
	return nil
}

// stoppedErr is a stopped replica's answer to a proposal.
func (r *raftReplica) stoppedErr() error {
	if r.failedErr == nil {
		return errReplicaStopped
	}
	return fmt.Errorf("%w: %w", errRaftCoreFailed, r.failedErr)
}

// errReplicaStopped refuses a proposal on a replica that stopped without
// failing (it left its group).
var errReplicaStopped = errors.New("raft: this replica has stopped")

// readIndex asks for the commit index a linearizable read must wait for
// (answered through onReads, carrying rctx).
func (r *raftReplica) readIndex(ctx actor.Context, rctx []byte) {
	if !r.stopped {
		r.wake(ctx)
		r.handle(ctx, r.core.readIndex(rctx))
	}
}

// stop stops the timer; the replica does nothing more.
func (r *raftReplica) stop() {
	r.stopped = true
	if r.stopTick != nil {
		r.stopTick()
	}
}

func (r *raftReplica) arm(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	r.tickGen++
	gen := r.tickGen
	r.stopTick = r.afterFunc(r.tickEvery, func() { root.Send(self, &raftTick{gen: gen}) })
}

// handle does what the core asked: the write first (its messages wait in
// the core until it is durable), then the messages, then the applies.
func (r *raftReplica) handle(ctx actor.Context, out raftOutput) {
	if r.stopped {
		return
	}
	if out.Soft != nil && r.soft != nil {
		r.soft(ctx, *out.Soft)
	}
	if len(out.ReadStates) > 0 && r.onReads != nil {
		r.onReads(ctx, out.ReadStates)
	}
	var install *pb.Snapshot
	if out.Persist != nil && out.Persist.Snapshot != nil {
		if r.install == nil {
			r.fail(ctx, errors.New("raft: this group installs no snapshot"))
			return
		}
		// The owner installs it (a shard fetches its log up to the
		// snapshot in pages) and then writes it with finishInstall; raft
		// waits meanwhile. What was handed out before it goes on below.
		r.installing, install = out.Persist, out.Persist.Snapshot
	} else if out.Persist != nil {
		first, _ := r.core.log.FirstIndex()
		last, _ := r.core.log.LastIndex()
		metas, err := raftPersistMetas(r.key, out.Persist, first, last)
		if err != nil {
			r.fail(ctx, err)
			return
		}
		r.tokens++
		r.token = r.tokens
		ctx.Request(r.writer, &MetaWriteRequest{Puts: metas, Token: r.token})
	}
	r.send(ctx, out.Send)
	for _, e := range out.Apply {
		if isConfChange(e) {
			// Applied to raft whether or not the owner applied the entry
			// before a restart: raft starts from the snapshot's
			// configuration (replayFrom).
			cs, err := r.core.applyConfChange(e)
			if err != nil {
				r.fail(ctx, err)
				return
			}
			if r.onConf != nil {
				r.onConf(ctx, cs, e.GetIndex(), e.GetIndex() > r.applied)
			}
			if r.stopped {
				return
			}
		}
		if e.GetIndex() <= r.applied {
			continue
		}
		if e.GetIndex() != r.applied+1 {
			r.fail(ctx, fmt.Errorf("raft apply: entry %d after %d", e.GetIndex(), r.applied))
			return
		}
		r.applied = e.GetIndex()
		if r.apply != nil {
			if err := r.apply(ctx, e); err != nil {
				r.fail(ctx, err)
				return
			}
		}
	}
	if install != nil {
		r.install(ctx, install)
	}
}

// finishInstall writes the snapshot being installed, with the owner's
// puts first (its state as of the snapshot) and after (deletes), and
// raft goes on from it once the write is durable.
func (r *raftReplica) finishInstall(ctx actor.Context, before, after []storage.MetaPut) {
	p := r.installing
	if p == nil || r.stopped {
		return
	}
	r.installing = nil
	first, _ := r.core.log.FirstIndex()
	last, _ := r.core.log.LastIndex()
	metas, err := raftPersistMetas(r.key, p, first, last)
	if err != nil {
		r.fail(ctx, err)
		return
	}
	r.applied = max(r.applied, p.Snapshot.GetMetadata().GetIndex())
	r.tokens++
	r.token = r.tokens
	puts := append(append(slices.Clip(before), metas...), after...)
	ctx.Request(r.writer, &MetaWriteRequest{Puts: puts, Token: r.token})
}

// send hands each peer's messages to its link, one PeerSend per peer.
func (r *raftReplica) send(ctx actor.Context, msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	byPeer := map[uint64]*PeerSend{}
	links := map[uint64]*actor.PID{}
	group := peerwire.Group{Stream: r.key.Stream, Shard: r.key.Shard}
	for _, m := range msgs {
		to := m.GetTo()
		link := links[to]
		if link == nil && r.link != nil {
			link = r.link(to)
			links[to] = link
		}
		if link == nil {
			r.core.reportUnreachable(to)
			continue
		}
		data, err := proto.Marshal(m)
		if err != nil {
			ctx.Logger().Error("raft: encoding a message", slog.Any("error", err))
			continue
		}
		ps := byPeer[to]
		if ps == nil {
			ps = &PeerSend{ReplyTo: ctx.Self()}
			byPeer[to] = ps
		}
		ps.Msgs = append(ps.Msgs, peerwire.Message{Group: group, Data: data})
		ps.Snapshot = append(ps.Snapshot, m.GetType() == pb.MessageType_MsgSnap)
		if m.GetType() == pb.MessageType_MsgSnap && r.onSnapSent != nil {
			r.onSnapSent()
		}
	}
	for to, ps := range byPeer {
		ctx.Send(links[to], ps)
		for _, snap := range ps.Snapshot {
			if snap {
				// Handed to the link; a failure comes back as PeerUndelivered.
				r.handle(ctx, r.core.reportSnapshot(to, true))
			}
		}
	}
}

// onWritten continues the core once its write is durable.
func (r *raftReplica) onWritten(ctx actor.Context, m *MetaWriteResponse) {
	if m.Token != r.token || r.token == 0 || r.stopped {
		return // an answer to a write of an instance before a restart
	}
	r.token = 0
	if m.Err != nil {
		r.core.writeFailed()
		r.fail(ctx, m.Err)
		return
	}
	out, err := r.core.persisted()
	if err != nil {
		r.fail(ctx, err)
		return
	}
	r.handle(ctx, out)
}

// fail stops the replica: raft must not go on past a write it does not
// have, or an entry it cannot apply. The owner learns it from failed.
func (r *raftReplica) fail(ctx actor.Context, err error) {
	ctx.Logger().Error("raft: replica stopping", slog.Uint64("stream", r.key.Stream), slog.Uint64("shard", uint64(r.key.Shard)), slog.Any("error", err))
	r.failedErr = err
	r.stop()
}

// failed is why the replica stopped (nil: it runs).
func (r *raftReplica) failed() error { return r.failedErr }

// status is the replica's view of its group.
func (r *raftReplica) status() raft.BasicStatus { return r.core.status() }
