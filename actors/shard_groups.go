package actors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Consumer groups of a cluster stream keep their state in the raft group
// of the stream's shard 0. A group's coordinator runs on shard 0's leader,
// and what a single node's coordinator writes through the storage writer
// (cursors, settled offsets, attempts, dead letters, the membership
// generation) it proposes to shard 0 instead (GroupStateWrite). The entry
// takes no offset. Every replica of shard 0 writes its puts when it
// applies it, so every replica holds the same group state at the same
// index, and the leader answers the coordinator once its own write is
// durable: after a quorum made the entry durable and the leader applied
// it. A replica that crashes applies again every entry above the index its
// last batch stored, these among them: each puts or deletes whole keys, in
// order, and ends where it did. A new leader's coordinator loads the
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
	// Not with the applied index: the storage writer puts a commit's
	// appends (each with the index of its publish) before its metadata
	// writes, so this entry's index could be stored over a later publish's.
	// After a crash the entries above the stored index apply again, these
	// among them: each puts or deletes whole keys, in order, and ends where
	// it did.
	req := &MetaWriteRequest{Puts: g.Puts}
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

// The group state of a replica of shard 0 that installs a raft snapshot.
// A snapshot holds the shard's tail and producers, not its records, and
// not the stream's group state either: the installing replica fetches the
// records in pages (shard_snapshot.go), then the group state, from the
// other replicas. It first deletes its own group state of the stream (what
// it held from before: behind the snapshot, and maybe of groups deleted
// since), then writes the pages of another replica's, each read once that
// replica had stored every entry up to its Applied, which must be at least
// the snapshot's index. The pages may be later than the snapshot, and read
// at different times: raft then hands the entries after the snapshot to
// this replica, which applies them again over that state. Every group-state
// entry puts or deletes whole keys, so after them each key holds what the
// newest entry wrote, as on the other replicas. No coordinator reads a
// follower's group state meanwhile (it runs on the leader only).

// groupStatePageBytes bounds a group-state page's keys and values.
const groupStatePageBytes = 1 << 20

// installsGroupState reports whether an install of this shard fetches
// group state: shard 0 of a cluster stream, on a node with groups.
func (s *shard) installsGroupState() bool {
	return s.cfg.Key.Shard == 0 && s.cfg.Groups != nil && s.cfg.Durable
}

// groupStateInstall is the group-state part of a snapshot install.
type groupStateInstall struct {
	// dropped is set once this replica's own group state of the stream is
	// deleted; done once every page is written; busy while a drop or a
	// page's write is on its way; after is the last key written.
	dropped, done, busy bool
	after               []byte
}

// continueGroupState takes the install's group-state part a step further:
// the drop of this replica's own state, then a page at a time.
func (s *shard) continueGroupState(ctx actor.Context) {
	in := s.install
	gi := &in.groups
	if gi.busy {
		return
	}
	if !gi.dropped {
		gi.busy = true
		f := ctx.RequestFuture(s.cfg.Writer, &DropStreamRequest{Durable: true, MetaPrefixes: [][]byte{GroupStreamPrefix(s.cfg.Key.Stream)}}, 30*time.Second)
		ctx.ReenterAfter(f, func(res any, err error) {
			if s.install != in {
				return
			}
			gi.busy = false
			if err = writeErr(res, err); err != nil {
				s.failInstallStep(ctx, fmt.Errorf("raft: installing the snapshot at index %d: deleting this replica's group state: %w", in.snap.GetMetadata().GetIndex(), err))
				return
			}
			gi.dropped = true
			s.continueInstall(ctx)
		})
		return
	}
	to := s.installPeer()
	if to == 0 {
		return
	}
	if in.token == 0 {
		in.token = rand.Uint64() >> 1
	}
	in.token++
	in.fetching = true
	if link := s.cfg.Raft.Router.Link(to); link != nil {
		ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendGroupStateFetch(nil, peerwire.GroupStateFetch{
			Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}, Token: in.token,
			After: gi.after, MaxBytes: groupStatePageBytes})})
	}
	s.armInstallTimer(ctx, snapshotFetchTimeout)
}

// writeErr is the error of a write answered with res (MetaWriteResponse)
// or err.
func writeErr(res any, err error) error {
	if err != nil {
		return err
	}
	if r, ok := res.(*MetaWriteResponse); ok {
		return r.Err
	}
	return fmt.Errorf("unexpected answer %T to a write", res)
}

// failInstallStep fails the install with err: the running replica fails
// (its parent starts it again from storage), a resumed install refuses.
func (s *shard) failInstallStep(ctx actor.Context, err error) {
	if s.replica != nil {
		s.replica.fail(ctx, err)
		s.afterRaft(ctx)
		return
	}
	s.failInstall(ctx, err)
}

// onGroupStatePage writes a page of another replica's group state.
func (s *shard) onGroupStatePage(ctx actor.Context, from uint64, p *peerwire.GroupStatePage) {
	in := s.install
	if in == nil || !in.fetching || p.Token != in.token || !in.groups.dropped {
		return // late, or for an install that ended
	}
	in.fetching = false
	if in.stop != nil {
		in.stop()
		in.stop = nil
	}
	idx := in.snap.GetMetadata().GetIndex()
	if p.Applied < idx || (p.More && len(p.Entries) == 0) {
		// That replica is behind the snapshot: another one, shortly (the
		// timeout turns to the next).
		in.fetching = true
		s.armInstallTimer(ctx, snapshotRetryBehind)
		return
	}
	prefix := GroupStreamPrefix(s.cfg.Key.Stream)
	puts := make([]storage.MetaPut, 0, len(p.Entries))
	for _, e := range p.Entries {
		if !bytes.HasPrefix(e.Key, prefix) || bytes.Compare(e.Key, in.groups.after) <= 0 {
			s.failInstallStep(ctx, fmt.Errorf("raft: installing the snapshot at index %d: node %d's group state page holds key %x, not after %x under %x",
				idx, from, e.Key, in.groups.after, prefix))
			return
		}
		puts = append(puts, storage.MetaPut{Key: e.Key, Value: e.Value})
	}
	gi := &in.groups
	gi.busy = true
	ctx.ReenterAfter(ctx.RequestFuture(s.cfg.Writer, &MetaWriteRequest{Puts: puts}, 30*time.Second), func(res any, err error) {
		if s.install != in {
			return
		}
		gi.busy = false
		if err = writeErr(res, err); err != nil {
			s.failInstallStep(ctx, fmt.Errorf("raft: installing the snapshot at index %d: writing group state: %w", idx, err))
			return
		}
		if len(puts) > 0 {
			gi.after = puts[len(puts)-1].Key
		}
		gi.done = !p.More
		in.attempt = 0
		s.continueInstall(ctx)
	})
}

// serveGroupStateFetch answers another replica's fetch of the stream's
// group state with a page read off the actor, once every write of the
// entries applied here so far is stored (the page's Applied).
func (s *shard) serveGroupStateFetch(ctx actor.Context, from uint64, f *peerwire.GroupStateFetch) {
	if s.core == nil || s.cfg.Raft == nil || !s.cfg.Raft.hosted() || s.failed != nil || s.install != nil || s.replica == nil || s.cfg.Key.Shard != 0 {
		return // the fetcher asks another replica
	}
	link := s.cfg.Raft.Router.Link(from)
	if link == nil {
		return
	}
	applied := s.replica.applied
	log, root, prefix := s.cfg.Log, ctx.ActorSystem().Root, GroupStreamPrefix(s.cfg.Key.Stream)
	maxBytes := int(min(max(f.MaxBytes, 64<<10), 4<<20))
	after := bytes.Clone(f.After)
	logger := s.logger(ctx)
	ctx.ReenterAfter(ctx.RequestFuture(s.cfg.Writer, &MetaWriteRequest{}, 30*time.Second), func(res any, err error) {
		if writeErr(res, err) != nil {
			return
		}
		s.cfg.Raft.Goroutines.Go(func() {
			page := peerwire.GroupStatePage{Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}, Token: f.Token, Applied: applied}
			size := 0
			errFull := errors.New("page full")
			err := log.ScanMeta(prefix, func(k, v []byte) error {
				if bytes.Compare(k, after) <= 0 {
					return nil
				}
				if size > 0 && size+len(k)+len(v) > maxBytes {
					page.More = true
					return errFull
				}
				size += len(k) + len(v)
				page.Entries = append(page.Entries, peerwire.GroupStateEntry{Key: bytes.Clone(k), Value: bytes.Clone(v)})
				return nil
			})
			if err != nil && !errors.Is(err, errFull) {
				logger.Warn("shard: reading group state for a replica's snapshot", slog.Uint64("replica", from), slog.Any("error", err))
				return
			}
			root.Send(link, &PeerSendFrame{Frame: peerwire.AppendGroupStatePage(nil, page)})
		})
	})
}
