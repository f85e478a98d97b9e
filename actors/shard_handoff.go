package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
)

// Handing leadership over before a node stops. A node that stops while it
// leads replicated shards costs their publishers an election each (an
// election timeout of refusals and timeouts); one that hands its
// leaderships over first costs them a redirect: raft moves leadership to a
// caught-up replica (refusing proposals meanwhile, with not_leader naming
// it) and what this leader accepted before still commits. The node asks
// every shard (ShardHandOff) and its metadata replica (MetaHandOff), then
// waits, within a bound, until it leads nothing.

// ShardHandOff asks a replicated shard to hand its leadership to another
// replica and not to take it back: its node is about to stop. Answered
// with *ShardHandOffResponse.
type ShardHandOff struct{}

// ShardHandOffResponse answers ShardHandOff: Leading is set while this
// replica still leads; Handing while it does and has a live replica to
// hand over to (the handover is under way: worth waiting for).
type ShardHandOffResponse struct {
	Leading, Handing bool
}

// MetaHandOff asks the catalog to hand the metadata group's leadership
// over (ShardHandOff's for the metadata group). Answered with
// *ShardHandOffResponse.
type MetaHandOff struct{}

// onHandOff starts handing leadership over, for good.
func (s *shard) onHandOff(ctx actor.Context) {
	handing := false
	if s.cfg.Raft != nil && s.replica != nil {
		s.handingOff = true
		if s.lead == s.cfg.Raft.Self {
			s.replica.wake(ctx) // a quiet leader must tick to hand over
		}
		handing = s.handOff(ctx)
	}
	if ctx.Sender() != nil {
		leading := s.replica != nil && s.lead == s.cfg.Raft.Self
		ctx.Respond(&ShardHandOffResponse{Leading: leading, Handing: leading && handing})
	}
}

// handOff transfers leadership to the voter furthest along that was heard
// from lately, an undrained one if there is one (on each tick while the
// shard hands over: raft abandons a
// transfer that does not complete within an election timeout, and an
// election may make this replica leader again).
func (s *shard) handOff(ctx actor.Context) (handing bool) {
	r := s.replica
	if r == nil {
		return false
	}
	st := r.core.rn.Status()
	if st.RaftState != raft.StateLeader {
		return false
	}
	if st.LeadTransferee != 0 {
		return true
	}
	best := s.successor(st, false)
	if best == 0 {
		return false // no replica to take over: it leads on until it stops
	}
	s.logger(ctx).Info("shard: handing leadership over; this node stops", slog.Uint64("to", best))
	r.handle(ctx, r.core.transferLeader(best))
	return true
}

// metaHandOff hands the metadata group's leadership to the voter furthest
// along whose node is alive, an undrained one if there is one.
func (c *catalog) metaHandOff(ctx actor.Context) {
	leading, handing := false, false
	if c.meta != nil && c.meta.failed() == nil {
		st := c.meta.core.rn.Status()
		leading = st.RaftState == raft.StateLeader
		handing = leading && st.LeadTransferee != 0
		if leading && !handing {
			if best := c.metaSuccessor(false); best != 0 {
				c.meta.wake(ctx)
				c.meta.handle(ctx, c.meta.core.transferLeader(best))
				handing = true
			}
		}
	}
	if ctx.Sender() != nil {
		ctx.Respond(&ShardHandOffResponse{Leading: leading, Handing: handing})
	}
}
