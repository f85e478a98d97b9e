package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/storage"
)

// raftGroup is the actor of one replica of one raft group: the group's
// event loop around a raftCore. It does the effects the core asks for, in
// the core's order, and never blocks: a Ready's writes go to the storage
// writer (group-committed with every other write of the node) and the core
// goes on when the writer answers; messages go to the peer links, which
// batch them with every other group's; committed entries go to the
// applier, and what they did to OnApply.
//
// It is the replication engine of a replicated shard; the shard's publish
// path, reads and the catalog's placement are not wired to it yet (issue
// 17).
type raftGroup struct {
	cfg     RaftGroupConfig
	core    *raftCore
	applier raftApplier
	// token names the write on its way to storage (0: none).
	token, tokens uint64
	stopTick      func() bool
	stopped       bool
	// restarted marks an instance made by a restart: it stops at once.
	restarted bool
}

// RaftGroupConfig configures one replica of one raft group.
type RaftGroupConfig struct {
	// Group is the replicated shard.
	Group storage.ShardKey
	// Self and Peers are the replica's node id and every replica's (Self
	// included).
	Self  uint64
	Peers []uint64
	// Durable and Applied are what storage holds of the group (loaded
	// before the actor starts) and the last index the shard log applied.
	// Next is the offset the shard's next record gets.
	Durable raftDurable
	Applied uint64
	Next    uint64
	// Writer is the node's storage writer; Links the peer links by node id.
	Writer *actor.PID
	Links  map[uint64]*actor.PID
	// Tick is raft's tick (default 100 ms: elections after 1–2 s, a
	// heartbeat a tick); ElectionTicks and HeartbeatTicks as raftCore's.
	Tick                          time.Duration
	ElectionTicks, HeartbeatTicks int
	// AfterFunc is the group's timer (tests inject it).
	AfterFunc func(time.Duration, func()) (stop func() bool)
	// OnApply receives what each committed entry did, in order, on the
	// actor's goroutine: it must not block.
	OnApply func(raftApplied)
}

// RaftPropose proposes a publish on the group's leader; the answer is a
// *RaftProposed.
type RaftPropose struct {
	Publish raftPublish
}

// RaftProposed answers RaftPropose: Err is errNotLeader (naming the
// leader) on a follower. Acceptance is not commitment: the proposer learns
// the publish's fate from its apply, and needs a timeout.
type RaftProposed struct {
	Err error
}

// RaftInbound is a raft message for the group from a peer.
type RaftInbound struct {
	Data []byte
}

// RaftStatusRequest asks the group for its raft status (a *RaftStatus).
type RaftStatusRequest struct{}

// RaftStatus is a replica's view of its group.
type RaftStatus struct {
	ID, Lead, Term, Commit, Applied uint64
	Leader                          bool
	// Next is the offset of the shard's next record.
	Next uint64
}

type raftTick struct{}

// NewRaftGroupProps returns the props of one replica's actor.
func NewRaftGroupProps(cfg RaftGroupConfig) *actor.Props {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	// A replica never restarts in place: the new instance would start from
	// the state captured here, behind what it wrote since (a second vote in
	// a term, entries it acked forgotten). Its parent starts it again from
	// storage; a restart only stops it.
	var made atomic.Bool
	return actor.PropsFromProducer(func() actor.Actor {
		if made.Swap(true) {
			return &raftGroup{cfg: cfg, restarted: true}
		}
		return &raftGroup{cfg: cfg}
	})
}

// Receive dispatches.
func (g *raftGroup) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if g.restarted {
			ctx.Logger().Error("raft group: a replica does not restart in place; start it again from storage",
				slog.Uint64("stream", g.cfg.Group.Stream), slog.Uint64("shard", uint64(g.cfg.Group.Shard)))
			g.stopped = true
			ctx.Stop(ctx.Self())
			return
		}
		core, err := newRaftCore(raftCoreConfig{ID: g.cfg.Self, Peers: g.cfg.Peers, ElectionTicks: g.cfg.ElectionTicks,
			HeartbeatTicks: g.cfg.HeartbeatTicks, Durable: g.cfg.Durable, Applied: g.cfg.Applied})
		if err != nil {
			ctx.Logger().Error("raft group: cannot start", slog.Uint64("stream", g.cfg.Group.Stream), slog.Uint64("shard", uint64(g.cfg.Group.Shard)), slog.Any("error", err))
			ctx.Stop(ctx.Self())
			return
		}
		g.core = core
		g.applier = raftApplier{next: g.cfg.Next, applied: max(g.cfg.Applied, raftBootstrapIndex)}
		g.arm(ctx)
	case *raftTick:
		if !g.stopped {
			g.handle(ctx, g.core.tick())
			g.arm(ctx)
		}
	case *RaftInbound:
		msg := &pb.Message{}
		if err := proto.Unmarshal(m.Data, msg); err != nil {
			ctx.Logger().Warn("raft group: a peer's message does not decode", slog.Any("error", err))
			return
		}
		g.handle(ctx, g.core.step(msg))
	case *RaftPropose:
		out, err := g.core.propose(appendRaftPublish(nil, m.Publish))
		if ctx.Sender() != nil {
			ctx.Respond(&RaftProposed{Err: err})
		}
		if err == nil {
			g.handle(ctx, out)
		}
	case *MetaWriteResponse:
		g.onWritten(ctx, m)
	case *PeerUndelivered:
		g.core.reportUnreachable(m.Peer)
		if m.Snapshot {
			g.handle(ctx, g.core.reportSnapshot(m.Peer, false))
		}
	case *RaftStatusRequest:
		st := g.core.status()
		ctx.Respond(&RaftStatus{ID: g.cfg.Self, Lead: st.Lead, Term: st.GetTerm(), Commit: st.GetCommit(),
			Applied: g.applier.applied, Leader: st.Lead == g.cfg.Self, Next: g.applier.next})
	case *actor.Stopping, *actor.Restarting:
		g.stopped = true
		if g.stopTick != nil {
			g.stopTick()
		}
	case *actor.Stopped:
	default:
		ctx.Logger().Warn("raft group: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (g *raftGroup) arm(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	g.stopTick = g.cfg.AfterFunc(g.cfg.Tick, func() { root.Send(self, &raftTick{}) })
}

// handle does what the core asked: the write first (its messages wait in
// the core until it is durable), then the messages, then the applies.
func (g *raftGroup) handle(ctx actor.Context, out raftOutput) {
	if out.Persist != nil {
		if out.Persist.Snapshot != nil {
			// Installing a shard's snapshot (its log read from the leader in
			// pages) is not built yet, and no replica compacts, so none is
			// sent; one arriving is refused rather than applied wrongly.
			g.fail(ctx, errors.New("raft: installing a snapshot is not supported yet"))
			return
		}
		first, _ := g.core.log.FirstIndex()
		last, _ := g.core.log.LastIndex()
		metas, err := raftPersistMetas(g.cfg.Group, out.Persist, first, last)
		if err != nil {
			g.fail(ctx, err)
			return
		}
		g.tokens++
		g.token = g.tokens
		ctx.Request(g.cfg.Writer, &MetaWriteRequest{Puts: metas, Token: g.token})
	}
	g.send(ctx, out.Send)
	for _, e := range out.Apply {
		if e.GetIndex() <= g.applier.applied {
			continue
		}
		a, err := g.applier.apply(e)
		if err != nil {
			g.fail(ctx, err)
			return
		}
		if g.cfg.OnApply != nil {
			g.cfg.OnApply(a)
		}
	}
}

// send hands each peer's messages to its link, one PeerSend per peer.
func (g *raftGroup) send(ctx actor.Context, msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	byPeer := map[uint64]*PeerSend{}
	group := peerwire.Group{Stream: g.cfg.Group.Stream, Shard: g.cfg.Group.Shard}
	for _, m := range msgs {
		link := g.cfg.Links[m.GetTo()]
		if link == nil {
			g.core.reportUnreachable(m.GetTo())
			continue
		}
		data, err := proto.Marshal(m)
		if err != nil {
			ctx.Logger().Error("raft group: encoding a message", slog.Any("error", err))
			continue
		}
		ps := byPeer[m.GetTo()]
		if ps == nil {
			ps = &PeerSend{ReplyTo: ctx.Self()}
			byPeer[m.GetTo()] = ps
		}
		snap := m.GetType() == pb.MessageType_MsgSnap
		ps.Msgs = append(ps.Msgs, peerwire.Message{Group: group, Data: data})
		ps.Snapshot = append(ps.Snapshot, snap)
	}
	for to, ps := range byPeer {
		ctx.Send(g.cfg.Links[to], ps)
		for _, snap := range ps.Snapshot {
			if snap {
				// Handed to the link; a failure comes back as PeerUndelivered.
				g.handle(ctx, g.core.reportSnapshot(to, true))
			}
		}
	}
}

// onWritten continues the core once its write is durable.
func (g *raftGroup) onWritten(ctx actor.Context, m *MetaWriteResponse) {
	if m.Token != g.token || g.token == 0 {
		return // an answer to a write of an instance before a restart
	}
	g.token = 0
	if m.Err != nil {
		g.core.writeFailed()
		g.fail(ctx, m.Err)
		return
	}
	out, err := g.core.persisted()
	if err != nil {
		g.fail(ctx, err)
		return
	}
	g.handle(ctx, out)
}

// fail stops the replica: raft must not go on past a write it does not
// have, or an entry it cannot apply.
func (g *raftGroup) fail(ctx actor.Context, err error) {
	ctx.Logger().Error("raft group: stopping", slog.Uint64("stream", g.cfg.Group.Stream), slog.Uint64("shard", uint64(g.cfg.Group.Shard)), slog.Any("error", err))
	g.stopped = true
	ctx.Stop(ctx.Self())
}
