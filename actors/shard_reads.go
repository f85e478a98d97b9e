package actors

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"

	"github.com/heraldmq/herald/net/wire"
)

// Linearizable tails. A range read of a replicated shard reports the
// shard's tail, and that tail must be no older than the read: a read that
// starts after a publish was acknowledged sees its record, whichever
// replica serves it. A replica's own committed tail may be older (a
// follower applies a moment after the leader; a leader cut off by a
// partition does not know yet that another leads), so the replica asks raft
// for a read index (ReadIndex, raft's ReadOnlySafe: the leader confirms
// with a quorum's heartbeat answers that it still leads, and a follower
// asks its leader), waits until it has applied through that index, then
// until the batches applied are stored, and answers with its committed
// tail then. A read that finds no leader (an election under way), or
// whose leader changed before it answered, asks again once a leader is
// known; one not confirmed within ProposalTimeout is answered
// replication_timeout. No lease is used: clocks play no part.

// tailRead is a linearizable info request waiting for its replica.
type tailRead struct {
	to *actor.PID
	// index is raft's read index once known; target the tail the shard
	// must have stored once it applied through index.
	index, target       uint64
	hasIndex, hasTarget bool
	// asked is set once raft was asked (with a leader known).
	asked    bool
	deadline time.Time
	// replica is the replica the read asked for (shard_follower.go).
	replica wire.Replica
}

// linearizableInfo answers a linearizable info request once the replica
// confirmed its tail.
func (s *shard) linearizableInfo(ctx actor.Context, to *actor.PID, replica wire.Replica) {
	// Not hosted here, failed, removed, installing a snapshot, not the
	// leader asked for, or a follower behind its leader.
	if werr := s.refuseNew(replica, true); werr != nil {
		resp := s.info()
		resp.Err = werr
		ctx.Send(to, resp)
		return
	}
	if s.reads == nil {
		s.reads = map[uint64]*tailRead{}
	}
	if s.nextRead == 0 {
		s.nextRead = s.nextProposal ^ 0x5bd1e995 // any start distinct from an earlier instance's
	}
	s.nextRead++
	s.reads[s.nextRead] = &tailRead{to: to, deadline: s.cfg.Now().Add(s.cfg.Raft.ProposalTimeout), replica: replica}
	s.replica.wake(ctx) // a quiet group: its clock runs while it reads
	s.answerReads(ctx)
	s.afterRaft(ctx)
}

// onReadStates takes raft's answers to read index requests.
func (s *shard) onReadStates(_ actor.Context, states []raft.ReadState) {
	for _, st := range states {
		if len(st.RequestCtx) != 8 {
			continue
		}
		if r, ok := s.reads[binary.BigEndian.Uint64(st.RequestCtx)]; ok && !r.hasIndex {
			r.index, r.hasIndex = st.Index, true
		}
	}
}

// answerReads answers the reads whose tail is confirmed and stored.
func (s *shard) answerReads(ctx actor.Context) {
	if len(s.reads) == 0 || s.replica == nil || s.core == nil {
		return
	}
	if s.replica.status().Lead != 0 {
		for id, r := range s.reads {
			if !r.asked {
				r.asked = true
				s.replica.readIndex(ctx, binary.BigEndian.AppendUint64(nil, id))
			}
		}
	}
	for id, r := range s.reads {
		if !r.hasIndex || s.replica.applied < r.index {
			continue
		}
		if !r.hasTarget {
			// Everything committed by the read's start is applied: what it
			// wrote ends at the tail now.
			r.target, r.hasTarget = s.core.tail, true
		}
		if s.core.committed >= r.target {
			delete(s.reads, id)
			ctx.Send(r.to, s.info())
		}
	}
}

// expireReads answers the reads not confirmed in time (a replica cut off
// from its leader, a group without a quorum): outcome unknown is not a
// thing for a read, so they are told to retry.
func (s *shard) expireReads(ctx actor.Context, all bool, err *wire.Error) {
	now := s.cfg.Now()
	for id, r := range s.reads {
		if !all && now.Before(r.deadline) {
			continue
		}
		delete(s.reads, id)
		e := err
		if e == nil {
			e = &wire.Error{Code: wire.CodeReplicationTimeout,
				Message: fmt.Sprintf("shard %d of %s: could not confirm the tail with a quorum within %s", s.cfg.Key.Shard, s.cfg.Stream, s.cfg.Raft.ProposalTimeout)}
		}
		resp := s.info()
		resp.Err = e
		ctx.Send(r.to, resp)
	}
}
