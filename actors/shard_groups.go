package actors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Consumer groups of a cluster stream keep their state in the raft group
// of the stream's shard 0. A group's coordinator runs on shard 0's leader,
// and what a single node's coordinator writes through the storage writer
// (cursors, settled offsets, attempts, dead letters, the membership
// generation) it proposes to shard 0 instead (GroupStateWrite). The entry
// takes no offset. Every replica of shard 0 writes its puts together with
// the applied index, as it writes a publish's batch, so every replica holds
// the same group state at the same index, and the leader answers the
// coordinator once its own write is durable: after a quorum made the entry
// durable and the leader applied it. A new leader's coordinator loads the
// group's state from its own storage after an empty GroupStateWrite (a
// barrier) applied: every entry an earlier leader committed applied before
// it, so a failover never moves a committed cursor back and never skips a
// settled record. Claims are the coordinator's soft state: records claimed
// and unacknowledged when the coordinator's node goes are delivered again.
//
// The entry:
//
//	raftEntryGroupState u8 | proposal u64 | count u32 |
//	count × (key length u16 | key | flag u8 (0 delete, 1 put) | [value length u32 | value])
//
// Every key is under the stream's group prefix (GroupStreamPrefix),
// checked before it is proposed.
const raftEntryGroupState = 0xC1

// raftGroupState is a group-state entry as proposed.
type raftGroupState struct {
	Proposal uint64
	Puts     []storage.MetaPut
}

// appendRaftGroupState encodes g as an entry's data.
func appendRaftGroupState(dst []byte, g raftGroupState) []byte {
	dst = append(dst, raftEntryGroupState)
	dst = binary.BigEndian.AppendUint64(dst, g.Proposal)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Puts)))
	for _, p := range g.Puts {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Key)))
		dst = append(dst, p.Key...)
		if p.Value == nil {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, 1)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Value)))
		dst = append(dst, p.Value...)
	}
	return dst
}

var errBadGroupState = errors.New("actors: malformed group-state entry")

// decodeRaftGroupState decodes an entry's data; keys and values share data.
func decodeRaftGroupState(data []byte) (raftGroupState, error) {
	if len(data) < 13 || data[0] != raftEntryGroupState {
		return raftGroupState{}, errBadGroupState
	}
	g := raftGroupState{Proposal: binary.BigEndian.Uint64(data[1:9])}
	n := binary.BigEndian.Uint32(data[9:13])
	rest := data[13:]
	if uint64(n)*3 > uint64(len(rest)) {
		return raftGroupState{}, errBadGroupState
	}
	g.Puts = make([]storage.MetaPut, 0, n)
	for range n {
		if len(rest) < 3 {
			return raftGroupState{}, errBadGroupState
		}
		kl := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+kl+1 {
			return raftGroupState{}, errBadGroupState
		}
		p := storage.MetaPut{Key: rest[2 : 2+kl : 2+kl]}
		flag := rest[2+kl]
		rest = rest[2+kl+1:]
		switch flag {
		case 0:
		case 1:
			if len(rest) < 4 {
				return raftGroupState{}, errBadGroupState
			}
			vl := binary.BigEndian.Uint32(rest)
			if uint64(vl) > uint64(len(rest)-4) {
				return raftGroupState{}, errBadGroupState
			}
			p.Value = rest[4 : 4+vl : 4+vl]
			rest = rest[4+vl:]
		default:
			return raftGroupState{}, errBadGroupState
		}
		g.Puts = append(g.Puts, p)
	}
	if len(rest) != 0 {
		return raftGroupState{}, errBadGroupState
	}
	return g, nil
}

// checkGroupStatePuts refuses puts a group-state entry must not carry: a
// key outside the stream's group keys, or one too long to encode.
func checkGroupStatePuts(stream uint64, puts []storage.MetaPut) error {
	prefix := GroupStreamPrefix(stream)
	for _, p := range puts {
		if !bytes.HasPrefix(p.Key, prefix) || len(p.Key) > 0xFFFF {
			return fmt.Errorf("group state key %x is not a group key of stream %d", p.Key, stream)
		}
	}
	return nil
}

// onGroupStateWrite proposes a coordinator's write on shard 0's leader,
// or refuses it (not_leader naming the leader, or why the shard cannot).
// The sender hears MetaWriteResponse{Token} once the write is durable
// here, or with the error that refused it; a write whose proposal may
// still commit (this replica stopped leading, or it timed out) is answered
// replication_timeout, and the coordinator stops and reloads.
func (s *shard) onGroupStateWrite(ctx actor.Context, m *GroupStateWrite) {
	from := ctx.Sender()
	refuse := func(err *wire.Error) {
		if from != nil {
			ctx.Send(from, &MetaWriteResponse{Err: err, Token: m.Token})
		}
	}
	switch {
	case s.deleted:
		refuse(errStreamDeleted())
		return
	case !s.ready:
		s.stash = append(s.stash, stashed{msg: m, sender: from})
		return
	case s.cfg.Raft == nil || s.cfg.Key.Shard != 0:
		refuse(wire.Errorf(wire.CodeInternal, "group state goes through shard 0 of a cluster stream"))
		return
	case !s.cfg.Raft.hosted():
		refuse(s.notHosted())
		return
	case s.failed != nil:
		refuse(storageError(s.failed))
		return
	case s.replica == nil:
		refuse(s.installing())
		return
	}
	if err := checkGroupStatePuts(s.cfg.Key.Stream, m.Puts); err != nil {
		refuse(wire.Errorf(wire.CodeInternal, "%v", err))
		return
	}
	s.replica.wake(ctx)
	if st := s.replica.status(); st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || s.removed {
		refuse(s.notLeader())
		return
	}
	s.nextProposal++
	id := s.nextProposal
	s.proposals[id] = &proposalWait{replyTo: from, group: true, token: m.Token, received: s.cfg.Now(),
		deadline: s.cfg.Now().Add(s.cfg.Raft.ProposalTimeout)}
	s.proposalOrder = append(s.proposalOrder, id)
	if err := s.replica.propose(ctx, appendRaftGroupState(nil, raftGroupState{Proposal: id, Puts: m.Puts})); err != nil {
		delete(s.proposals, id)
		var nl errNotLeader
		switch {
		case errors.As(err, &nl):
			refuse(s.notLeader())
		case errors.Is(err, raft.ErrProposalDropped):
			refuse(&wire.Error{Code: wire.CodeOverloaded, Message: "shard 0's leader has too many uncommitted bytes; retry after a delay"})
		default:
			refuse(storageError(err))
		}
		s.afterRaft(ctx)
		return
	}
	s.armProposalTimer(ctx)
	s.afterRaft(ctx)
}

// applyGroupState applies a committed group-state entry: its puts go to
// storage with the applied index, on every replica; the leader that
// proposed it has the storage writer answer the coordinator (its custom
// sender) once the write is durable.
func (s *shard) applyGroupState(ctx actor.Context, e *pb.Entry) error {
	g, err := decodeRaftGroupState(e.GetData())
	if err != nil {
		return fmt.Errorf("raft apply: entry %d: %w", e.GetIndex(), err)
	}
	if err := checkGroupStatePuts(s.cfg.Key.Stream, g.Puts); err != nil {
		return fmt.Errorf("raft apply: entry %d: %w", e.GetIndex(), err)
	}
	w := s.proposals[g.Proposal]
	if w != nil && !w.group {
		w = nil // a publish's id: this entry is an earlier instance's
	} else {
		delete(s.proposals, g.Proposal)
	}
	puts := append(g.Puts, storage.MetaPut{Key: raftAppliedKey(s.cfg.Key),
		Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, e.GetIndex()), s.core.tail)})
	req := &MetaWriteRequest{Puts: puts}
	if w != nil && w.replyTo != nil {
		req.Token = w.token
		ctx.RequestWithCustomSender(s.cfg.Writer, req, w.replyTo)
		return nil
	}
	ctx.Send(s.cfg.Writer, req)
	return nil
}

// tellGroupsLeadership tells the groups registry when this replica of a
// cluster stream's shard 0 starts or stops leading: the stream's group
// coordinators run on shard 0's leader only.
func (s *shard) tellGroupsLeadership(ctx actor.Context, leading bool) {
	if s.cfg.Groups == nil || s.cfg.Raft == nil || s.cfg.Key.Shard != 0 || !s.cfg.Durable {
		return
	}
	ctx.Send(s.cfg.Groups, &GroupLeadership{Stream: s.cfg.Key.Stream, Name: s.cfg.Stream, Leading: leading})
}

// groupLeaderHint is the leader of h's shard 0 as this node's replica
// knows it (0: unknown, or no replica here).
func groupLeaderHint(h *StreamHandle) uint64 {
	if len(h.Progress) == 0 || h.Progress[0] == nil {
		return 0
	}
	return h.Progress[0].Leader.Load()
}

// groupsClustered reports whether h's groups keep their state in its
// shard 0's raft group: a cluster stream (every durable stream of a
// cluster has at least one replica).
func groupsClustered(h *StreamHandle) bool { return h.Config.Durable && h.Config.Replicas >= 1 }
