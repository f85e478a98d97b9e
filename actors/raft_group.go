package actors

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/storage"
)

// raftGroup is an actor that is nothing but one replica of one raft group
// and its publish applier: a replicated shard embeds the same replica
// (raftReplica) beside its subscriptions; this one serves tests and tools
// that need the replication alone.
type raftGroup struct {
	cfg     RaftGroupConfig
	replica *raftReplica
	applier raftApplier
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
	// From is the peer's node id.
	From uint64
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
	if g.replica != nil && g.replica.receive(ctx, ctx.Message()) {
		if err := g.replica.failed(); err != nil {
			ctx.Stop(ctx.Self())
		}
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if g.restarted {
			ctx.Logger().Error("raft group: a replica does not restart in place; start it again from storage",
				slog.Uint64("stream", g.cfg.Group.Stream), slog.Uint64("shard", uint64(g.cfg.Group.Shard)))
			ctx.Stop(ctx.Self())
			return
		}
		g.applier = raftApplier{next: g.cfg.Next, applied: max(g.cfg.Applied, raftBootstrapIndex)}
		r, err := startRaftReplica(ctx, raftReplicaConfig{Key: g.cfg.Group, Self: g.cfg.Self, Peers: g.cfg.Peers,
			Durable: g.cfg.Durable, Applied: g.cfg.Applied, Writer: g.cfg.Writer, Link: func(id uint64) *actor.PID { return g.cfg.Links[id] },
			Tick: g.cfg.Tick, ElectionTicks: g.cfg.ElectionTicks, HeartbeatTicks: g.cfg.HeartbeatTicks, AfterFunc: g.cfg.AfterFunc,
			Apply: func(_ actor.Context, e *pb.Entry) error {
				a, err := g.applier.apply(e)
				if err != nil {
					return err
				}
				if g.cfg.OnApply != nil {
					g.cfg.OnApply(a)
				}
				return nil
			}})
		if err != nil {
			ctx.Logger().Error("raft group: cannot start", slog.Uint64("stream", g.cfg.Group.Stream), slog.Uint64("shard", uint64(g.cfg.Group.Shard)), slog.Any("error", err))
			ctx.Stop(ctx.Self())
			return
		}
		g.replica = r
	case *RaftPropose:
		var err error = errRaftCoreFailed
		if g.replica != nil {
			err = g.replica.propose(ctx, appendRaftPublish(nil, m.Publish))
		}
		if ctx.Sender() != nil {
			ctx.Respond(&RaftProposed{Err: err})
		}
	case *RaftStatusRequest:
		if g.replica == nil {
			ctx.Respond(&RaftStatus{ID: g.cfg.Self})
			return
		}
		st := g.replica.status()
		ctx.Respond(&RaftStatus{ID: g.cfg.Self, Lead: st.Lead, Term: st.GetTerm(), Commit: st.GetCommit(),
			Applied: g.applier.applied, Leader: st.Lead == g.cfg.Self, Next: g.applier.next})
	case *actor.Stopping, *actor.Restarting:
		if g.replica != nil {
			g.replica.stop()
		}
	case *actor.Stopped:
	default:
		ctx.Logger().Warn("raft group: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}
