package actors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// A replicated stream's shard is one replica of its raft group, and its
// actor is the group's event loop (an embedded raftReplica). On the leader
// a publish is proposed, not admitted: its offsets are assigned when its
// entry applies, on every replica alike, by the same rules a single node
// uses (shardCore.checkPublish: conditional tails and idempotent
// sequences), and its batch then goes to the shard log through the storage
// writer with the entry's index. It is acknowledged when that write is
// durable: after a quorum made the entry durable and this leader applied
// it. Followers apply the same entries and answer nobody; their
// subscribers see what is committed, never more.

// ShardRaft makes a shard one replica of its raft group.
type ShardRaft struct {
	// Self is this node's id; Replicas the group's node ids when the
	// shard was started. A shard whose replicas do not include Self is not
	// hosted here: it refuses publishes and subscriptions, naming a
	// replica.
	Self     uint64
	Replicas []uint64
	// Bootstrap is the group's first configuration, which a replica with
	// nothing stored starts from (nil: Replicas): a replica added later
	// starts outside it and is added by the leader (shard_reconfig.go).
	Bootstrap []uint64
	// Targets is the stream's placement now, which the group's leader
	// moves the group to (nil: Replicas and Preferred, unchanging).
	Targets *ReplicaTargets
	// Router finds the peer links and routes the group's messages here.
	Router *RaftRouter
	// Tick, ElectionTicks and HeartbeatTicks are raft's clock (defaults
	// 100 ms, 10 and 1: a leader is suspected dead after 1–2 s).
	Tick                          time.Duration
	ElectionTicks, HeartbeatTicks int
	// ProposalTimeout answers a publish that is not applied in time with
	// replication_timeout (default 5 s).
	ProposalTimeout time.Duration
	// AfterFunc is the shard's raft and proposal timer (nil: time.AfterFunc).
	AfterFunc func(time.Duration, func()) (stop func() bool)
	// Preferred is the replica that should lead the shard when it is up
	// and caught up (leaders spread over the nodes: spreadLeaders); 0:
	// whoever raft elects.
	Preferred uint64
	// CompactEntries is how many raft entries every live replica must
	// hold beyond the log's first before the leader compacts the group's
	// log (default 10000; see compactEntry).
	CompactEntries uint64
	// Goroutines owns the reads that serve another replica's snapshot
	// fetches (nil: untracked).
	Goroutines *Goroutines
	// FollowerMaxLag is how many raft entries a follower's applied index
	// may be behind its leader's commit before it refuses reads as
	// replica_behind (follower_reads.go; 0: no bound).
	FollowerMaxLag uint64
	// View is the cluster's state (drained nodes: shard_drain.go; nil:
	// none is drained).
	View *ClusterView
	// BalanceTicks is how many ticks apart a leader in its preferred
	// replica's place checks whether to hand leadership back
	// (shard_balance.go; 0: 20, the default; below 0: never).
	BalanceTicks int
}

// hosted reports whether this node holds a replica.
func (r *ShardRaft) hosted() bool { return slices.Contains(r.Replicas, r.Self) }

// proposalWait is a publish proposed by this replica as leader, waiting for
// its entry to apply.
type proposalWait struct {
	reqID    uint64
	ack      wire.AckMode
	replyTo  *actor.PID
	received time.Time
	deadline time.Time
	// group marks a group-state write (shard_groups.go): it is answered
	// with MetaWriteResponse carrying token, not as a publish.
	group bool
	token uint64
	// A traced publish's replication round (its span, ended when the
	// entry applies here) and the traceparent its apply's span is a child
	// of (shard_raft_trace.go).
	span  oteltrace.Span
	trace string
}

// reject answers the proposal with err: a publish's lane with
// PublishRejected, a group-state write's coordinator with
// MetaWriteResponse.
func (w *proposalWait) reject(ctx actor.Context, err *wire.Error) {
	if w.span != nil {
		w.span.SetStatus(codes.Error, err.Error())
		w.span.End()
	}
	if w.replyTo == nil {
		return
	}
	if w.group {
		ctx.Send(w.replyTo, &MetaWriteResponse{Err: err, Token: w.token})
		return
	}
	ctx.Send(w.replyTo, &PublishRejected{ReqID: w.reqID, Ack: w.ack, Err: err})
}

// proposalsExpired is the shard's timer message: the oldest proposal may
// have waited too long.
type proposalsExpired struct{}

// raftAppliedKey holds the last raft index whose batch the shard log holds
// (written with that batch).
func raftAppliedKey(shard storage.ShardKey) []byte {
	return append(raftGroupPrefix(shard), raftKindApplied)
}

// startReplica starts the shard's raft replica from what recovery read.
func (s *shard) startReplica(ctx actor.Context, d raftDurable) {
	rc := s.cfg.Raft
	if d.Installing != nil {
		s.resumeInstall(ctx, d)
		return
	}
	if d.HasAppliedTail && d.AppliedTail != s.core.tail {
		// Recovery cut batches off the shard log (a corrupt tail) that raft
		// counts as applied: going on would give the next entries other
		// offsets than the other replicas'. The replica must be rebuilt.
		s.failed = fmt.Errorf("%w: the shard log ends at offset %d, but its raft replica applied through offset %d (index %d): rebuild this replica",
			ErrStorageFailed, s.core.tail, d.AppliedTail, d.Applied)
		s.logger(ctx).Error("shard: cannot start its raft replica; refusing publishes", slog.Any("error", s.failed))
		s.wakePeers(ctx)
		return
	}
	if rc.ProposalTimeout <= 0 {
		rc.ProposalTimeout = 5 * time.Second
	}
	if rc.AfterFunc == nil {
		rc.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	r, err := startRaftReplica(ctx, raftReplicaConfig{Key: s.cfg.Key, Self: rc.Self, Peers: rc.bootstrap(),
		Durable: d, Applied: d.Applied, Writer: s.cfg.Writer, Link: rc.Router.Link,
		Tick: rc.Tick, ElectionTicks: rc.ElectionTicks, HeartbeatTicks: rc.HeartbeatTicks, AfterFunc: rc.AfterFunc,
		Apply: s.applyEntry, Soft: s.onSoftState, OnTick: s.onRaftTick, Install: s.onSnapshot,
		Alive: rc.Router.Alive, Busy: s.busy, OnQuiet: s.onQuiet, OnConf: s.onConf})
	if err != nil {
		s.logger(ctx).Error("shard: cannot start its raft replica; refusing publishes", slog.Any("error", err))
		s.failed = err
		s.wakePeers(ctx)
		return
	}
	s.replica = r
	s.publishRemote(nil) // its records are here
	s.startFollowerReads(r)
	s.members0 = confMembers(r.core.conf)
	if d.StaleFrom > 0 {
		var dels []storage.MetaPut
		for i := d.StaleFrom; i <= d.StaleTo && i >= d.StaleFrom; i++ {
			dels = append(dels, storage.MetaPut{Key: raftEntryKey(s.cfg.Key, i)})
		}
		ctx.Request(s.cfg.Writer, &MetaWriteRequest{Puts: dels}) // no token: the replica ignores its answer
	}
	s.raftGauges = s.cfg.Stats.RaftGroup(s.cfg.Key, s.cfg.Stream.String())
	r.onSnapSent = func() {
		s.cfg.Stats.add(&s.cfg.Stats.RaftSnapshotsSent, 1)
		s.raftGauges.SnapshotsSent.Add(1)
	}
	r.onReads = s.onReadStates
	r.onRemoved = s.onRemovedNotice
	r.onStranger = s.sendRemoved
	s.heard = map[uint64]int{}
	if rc.CompactEntries == 0 {
		rc.CompactEntries = 10000
	}
	s.proposals = map[uint64]*proposalWait{}
	s.nextProposal = rand.Uint64() >> 1 // distinct from an earlier instance's
	rc.Router.Register(s.cfg.Key, ctx.Self())
	if v := r.core.conf.GetVoters(); len(v) == 1 && v[0] == rc.Self {
		r.handle(ctx, r.core.campaign()) // its own quorum: it leads at once
	}
}

// notHosted is the refusal of a shard whose replicas live elsewhere.
func (s *shard) notHosted() *wire.Error {
	target, pref := s.cfg.Raft.target(s.cfg.Key.Shard)
	if pref == 0 && len(target) > 0 {
		pref = target[0]
	}
	return &wire.Error{Code: wire.CodeNotLeader, Detail: pref,
		Message: fmt.Sprintf("shard %d of %s is not hosted on this node; its replicas are on nodes %v", s.cfg.Key.Shard, s.cfg.Stream, target)}
}

// notLeader refuses a publish on a replica that does not lead.
func (s *shard) notLeader() *wire.Error {
	lead := s.replica.status().Lead
	if lead == 0 {
		return &wire.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("shard %d of %s has no leader yet (an election is under way); retry shortly", s.cfg.Key.Shard, s.cfg.Stream)}
	}
	return &wire.Error{Code: wire.CodeNotLeader, Detail: lead, Message: fmt.Sprintf("node %d leads shard %d of %s", lead, s.cfg.Key.Shard, s.cfg.Stream)}
}

// inFlight counts publishes admitted and not yet answered: proposed, or
// applied and on their way to the shard log.
func (s *shard) inFlight() int { return len(s.core.pending) + len(s.proposals) }

// proposePublish proposes a publish on the leader.
func (s *shard) proposePublish(ctx actor.Context, m *PublishRequest) {
	s.replica.wake(ctx) // its status below must be current
	reject := func(err *wire.Error) { ctx.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack, Err: err}) }
	if s.removed {
		target, pref := s.cfg.Raft.target(s.cfg.Key.Shard)
		reject(&wire.Error{Code: wire.CodeNotLeader, Detail: pref,
			Message: fmt.Sprintf("this node's replica of shard %d of %s was removed; its replicas are on nodes %v", s.cfg.Key.Shard, s.cfg.Stream, target)})
		return
	}
	if m.Idempotent && m.Sequence == 0 {
		reject(wire.Errorf(wire.CodeInvalidRequest, "idempotent sequences start at 1"))
		return
	}
	if st := s.replica.status(); st.RaftState != raft.StateLeader {
		reject(s.notLeader())
		return
	} else if st.LeadTransferee != 0 {
		// Handing leadership over: raft takes no proposal meanwhile.
		reject(&wire.Error{Code: wire.CodeNotLeader, Detail: st.LeadTransferee,
			Message: fmt.Sprintf("node %d is handing shard %d of %s to node %d", s.cfg.Raft.Self, s.cfg.Key.Shard, s.cfg.Stream, st.LeadTransferee)})
		return
	}
	s.nextProposal++
	id := s.nextProposal
	data := appendRaftPublish(nil, raftPublish{Proposal: id, Timestamp: s.cfg.Now().UnixNano(), Count: m.Count,
		Expected: m.ExpectedOffset, HasExpected: m.Conditional,
		ProducerID: m.ProducerID, Sequence: m.Sequence, Idempotent: m.Idempotent, Records: m.Records})
	w := &proposalWait{reqID: m.ReqID, ack: m.Ack, replyTo: m.ReplyTo, received: m.Received,
		deadline: s.cfg.Now().Add(s.cfg.Raft.ProposalTimeout)}
	s.proposals[id] = w
	s.proposalOrder = append(s.proposalOrder, id)
	propose := s.traceProposal(ctx, m, w, len(data))
	err := s.replica.propose(ctx, data)
	s.traceProposed(propose, w, err)
	if err != nil {
		delete(s.proposals, id)
		var nl errNotLeader
		switch {
		case errors.As(err, &nl):
			reject(s.notLeader())
		case errors.Is(err, raft.ErrProposalDropped):
			reject(&wire.Error{Code: wire.CodeOverloaded, Message: "the shard's leader has too many uncommitted bytes; retry after a delay"})
		default:
			reject(storageError(err))
		}
		s.afterRaft(ctx)
		return
	}
	s.armProposalTimer(ctx)
	s.afterRaft(ctx)
}

// applyEntry applies one committed entry: a publish is checked and
// admitted as on a single node, at the offsets every replica assigns.
func (s *shard) applyEntry(ctx actor.Context, e *pb.Entry) error {
	if e.GetType() != pb.EntryType_EntryNormal || len(e.GetData()) == 0 {
		return nil // a new leader's empty entry, or a configuration change: no offset
	}
	if e.GetData()[0] == raftEntryGroupState {
		return s.applyGroupState(ctx, e)
	}
	if d := e.GetData(); d[0] == raftEntryCompact {
		if len(d) != 9 {
			return fmt.Errorf("raft apply: entry %d: a compaction of %d bytes", e.GetIndex(), len(d))
		}
		if to := binary.BigEndian.Uint64(d[1:]); to > s.compactTo {
			// The snapshot is taken here, at this entry: the shard's state
			// now is its state at this index on every replica.
			s.compactTo = to
			s.compaction = &pendingCompaction{at: e.GetIndex(), to: to, data: encodeShardSnapshot(s.core.tail, s.core.producers),
				conf: proto.Clone(s.replica.core.conf).(*pb.ConfState)}
		}
		s.compactLog(ctx)
		return nil
	}
	p, err := decodeRaftPublish(e.GetData())
	if err != nil {
		return fmt.Errorf("raft apply: entry %d: %w", e.GetIndex(), err)
	}
	w := s.proposals[p.Proposal]
	if w != nil && w.group {
		w = nil // a group write's id: this entry is an earlier instance's
	} else {
		delete(s.proposals, p.Proposal)
	}
	s.traceReplicated(w, e)
	m := &PublishRequest{Count: p.Count, Records: p.Records, Conditional: p.HasExpected, ExpectedOffset: p.Expected,
		Idempotent: p.Idempotent, ProducerID: p.ProducerID, Sequence: p.Sequence}
	if w != nil {
		m.ReqID, m.Ack, m.ReplyTo, m.Received = w.reqID, w.ack, w.replyTo, w.received
	}
	decision, werr, dup, dupOf := s.core.checkPublish(m)
	switch decision {
	case decideRefuse:
		if w != nil {
			ctx.Send(w.replyTo, &PublishRejected{ReqID: w.reqID, Ack: w.ack, Err: werr})
		}
		return nil
	case decideDuplicate:
		if w == nil {
			return nil
		}
		if dupOf >= 0 {
			pp := &s.core.pending[dupOf]
			pp.dups = append(pp.dups, dupReply{reqID: w.reqID, ack: w.ack, replyTo: w.replyTo})
			return nil
		}
		ctx.Send(w.replyTo, &PublishAcked{ReqID: w.reqID, Ack: w.ack, Shard: s.cfg.Key.Shard, Offset: dup.base, Count: dup.count, Duplicate: true})
		return nil
	}
	b := s.core.admit(pendingPublish{batch: storage.Batch{Count: p.Count, Timestamp: p.Timestamp, Records: p.Records},
		reqID: m.ReqID, ack: m.Ack, replyTo: m.ReplyTo, received: m.Received})
	trace := s.traceApply(w, e, b)
	s.markApplied(e.GetIndex(), b.End(), len(p.Records))
	metas := []storage.MetaPut{{Key: raftAppliedKey(s.cfg.Key), Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, e.GetIndex()), b.End())}}
	if p.Idempotent {
		pr := s.core.admitProducer(p.ProducerID, p.Sequence, b)
		metas = append(metas, storage.MetaPut{Key: producerKey(s.cfg.Key, pr.id), Value: pr.encode()})
	}
	ctx.Request(s.cfg.Writer, &AppendRequest{Shard: s.cfg.Key, Batch: b, Metas: metas, Trace: trace})
	return nil
}

// onSoftState answers the proposals of a leader that stepped down: their
// entries may still commit under the next leader (and are then applied
// here as a follower's, answering nobody), so their outcome is unknown.
func (s *shard) onSoftState(ctx actor.Context, st raft.SoftState) {
	if st.Lead != s.lead {
		s.logger(ctx).Info("shard: raft leader changed", slog.Uint64("leader", st.Lead), slog.Uint64("was", s.lead),
			slog.Bool("self", st.Lead == s.cfg.Raft.Self), slog.Uint64("term", s.replica.status().GetTerm()))
		s.cfg.Stats.add(&s.cfg.Stats.RaftLeaderChanges, 1)
		if s.raftGauges != nil {
			s.raftGauges.LeaderChanges.Add(1)
		}
	}
	self := s.cfg.Raft.Self
	switch {
	case s.lead != self && st.Lead == self:
		s.cfg.Stats.RaftLeading.Add(1)
		s.ledSince = s.ticks
		s.tellGroupsLeadership(ctx, true)
	case s.lead == self && st.Lead != self:
		s.cfg.Stats.RaftLeading.Add(-1)
		s.tellGroupsLeadership(ctx, false)
	}
	s.lead = st.Lead
	s.publishRaft()
	// Reads not confirmed yet are lost with the leader raft asked: they
	// ask again once a leader is known (answerReads).
	for _, r := range s.reads {
		if !r.hasIndex {
			r.asked = false
		}
	}
	s.checkServing(ctx)
	if st.RaftState == raft.StateLeader || len(s.proposals) == 0 {
		return
	}
	s.cfg.Stats.add(&s.cfg.Stats.RaftProposalTimeouts, uint64(len(s.proposals)))
	s.answerProposals(ctx, &wire.Error{Code: wire.CodeReplicationTimeout, Detail: st.Lead,
		Message: fmt.Sprintf("this node stopped leading shard %d of %s before the publish committed; it may still commit", s.cfg.Key.Shard, s.cfg.Stream)})
}

// Compaction. Every replica compacts its raft log behind its shard log, at
// an index the leader chose and put in the log itself: a compaction entry
// (raftEntryCompact | index u64) naming an index every live replica's log
// had reached (the least Match of the leader's progress over the replicas
// heard from lately), proposed once that least Match is CompactEntries
// past the log's first index. When the entry applies, every replica takes
// a snapshot at the entry (the shard's tail and idempotent producers
// there: the same on every replica) and drops the raft entries up to the
// named index, once no write of its own is on its way to storage. A
// replica that was down meanwhile, or lost its disk, is behind the
// leader's first entry when it comes back, and raft sends it the snapshot:
// it fetches the shard's log up to the snapshot's tail from another
// replica in pages, then goes on from the snapshot (shard_snapshot.go). A
// live replica that is merely slow keeps the entries it lacks.
const (
	raftEntryCompact = 0xC0
	compactEvery     = 50 // ticks between a leader's looks at its followers' progress
)

// pendingCompaction is a compaction that applied and is not carried out
// yet: a snapshot at index at, holding data, and the raft log's entries up
// to to dropped.
type pendingCompaction struct {
	at, to uint64
	data   []byte
	// conf is the group's configuration at at (later entries may change
	// it before the compaction is carried out).
	conf *pb.ConfState
}

// proposeCompaction proposes a compaction when every live replica holds
// CompactEntries entries past the log's first index.
func (s *shard) proposeCompaction(ctx actor.Context) {
	st := s.replica.core.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || len(st.Progress) < len(confMembers(s.replica.core.conf)) {
		return
	}
	least := ^uint64(0)
	// A new leader has not heard from its followers for long (they spoke
	// to the old one): until it has led for two election timeouts, every
	// replica counts.
	settled := s.ticks-s.ledSince >= 2*s.electionTicks()
	for id, pr := range st.Progress {
		if heard, ok := s.heard[id]; settled && id != s.cfg.Raft.Self && (!ok || s.ticks-heard > 2*s.electionTicks()) {
			continue // down (or cut off): it catches up from a snapshot
		}
		least = min(least, pr.Match)
	}
	first, _ := s.replica.core.log.FirstIndex()
	if least == ^uint64(0) || least < first+s.cfg.Raft.CompactEntries || least <= s.compactTo {
		return
	}
	data := binary.BigEndian.AppendUint64([]byte{raftEntryCompact}, least)
	if err := s.replica.propose(ctx, data); err != nil {
		s.logger(ctx).Debug("shard: compaction not proposed", slog.Any("error", err))
	}
}

// electionTicks is the raft election timeout in ticks.
func (s *shard) electionTicks() int {
	if s.cfg.Raft.ElectionTicks > 0 {
		return s.cfg.Raft.ElectionTicks
	}
	return 10
}

// compactLog carries out the compaction that applied, once no write of
// the replica is on its way to storage (the write's drops were computed
// against the log as it was).
func (s *shard) compactLog(ctx actor.Context) {
	r, c := s.replica, s.compaction
	if c == nil || r.token != 0 || r.installing != nil || r.applied < c.at {
		return
	}
	s.compaction = nil
	first, _ := r.core.log.FirstIndex()
	if err := r.core.compact(c.at, c.to, c.conf, c.data); err != nil {
		s.logger(ctx).Warn("shard: raft log compaction", slog.Any("error", err))
		return
	}
	snap, _ := r.core.log.Snapshot()
	metas, err := raftCompactMetas(s.cfg.Key, snap, first, c.to)
	if err != nil {
		s.logger(ctx).Warn("shard: raft log compaction", slog.Any("error", err))
		return
	}
	// Its answer has no token: the replica ignores it.
	ctx.Request(s.cfg.Writer, &MetaWriteRequest{Puts: metas})
}

// onRaftTick hands leadership to the preferred replica when this one leads
// in its place and the preferred one is up and has every entry, so that
// leaders spread over the nodes again after a failover; it proposes and
// carries out log compactions.
func (s *shard) onRaftTick(ctx actor.Context) {
	s.ticks++
	s.publishRaft()
	s.expireReads(ctx, false, nil)
	s.checkServing(ctx)
	s.trimMarks()
	s.checkRestartSnapshot(ctx)
	s.tellRemoved(ctx)
	s.compactLog(ctx)
	if s.ticks%compactEvery == 0 {
		s.proposeCompaction(ctx)
	}
	if s.handingOff {
		s.handOff(ctx)
		return // its node stops: no change, no handover to the preferred replica
	}
	s.driveConfChange(ctx)
	if s.drainedLeader() {
		s.handAway(ctx) // shard_drain.go
		return
	}
	s.balanceLeader(ctx) // shard_balance.go
}

// answerProposals answers every waiting proposal with err.
func (s *shard) answerProposals(ctx actor.Context, err *wire.Error) {
	for _, id := range s.proposalOrder {
		if w, ok := s.proposals[id]; ok {
			w.reject(ctx, err)
		}
	}
	clear(s.proposals)
	s.proposalOrder = nil
	if s.proposalTimer != nil {
		s.proposalTimer()
		s.proposalTimer = nil
	}
}

// onProposalsExpired answers the proposals whose wait is over.
func (s *shard) onProposalsExpired(ctx actor.Context) {
	s.proposalTimer = nil
	now := s.cfg.Now()
	for len(s.proposalOrder) > 0 {
		id := s.proposalOrder[0]
		w, ok := s.proposals[id]
		if ok && w.deadline.After(now) {
			break
		}
		s.proposalOrder = s.proposalOrder[1:]
		if !ok {
			continue // applied, or answered already
		}
		delete(s.proposals, id)
		s.cfg.Stats.add(&s.cfg.Stats.RaftProposalTimeouts, 1)
		what := "publish"
		if w.group {
			what = "group state write"
		}
		w.reject(ctx, &wire.Error{Code: wire.CodeReplicationTimeout,
			Message: fmt.Sprintf("shard %d of %s: the %s was not committed by a quorum within %s; it may still commit", s.cfg.Key.Shard, s.cfg.Stream, what, s.cfg.Raft.ProposalTimeout)})
	}
	if len(s.proposalOrder) == 0 {
		s.proposalOrder = nil
	}
	s.armProposalTimer(ctx)
	s.admitHeld(ctx)
}

// armProposalTimer makes sure a timer wakes the shard when the oldest
// proposal's wait is over.
func (s *shard) armProposalTimer(ctx actor.Context) {
	for len(s.proposalOrder) > 0 {
		if _, ok := s.proposals[s.proposalOrder[0]]; ok {
			break
		}
		s.proposalOrder = s.proposalOrder[1:]
	}
	if s.proposalTimer != nil || len(s.proposalOrder) == 0 {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	d := max(s.proposals[s.proposalOrder[0]].deadline.Sub(s.cfg.Now()), time.Millisecond)
	s.proposalTimer = s.cfg.Raft.AfterFunc(d, func() { root.Send(self, &proposalsExpired{}) })
}

// afterRaft checks the replica after it handled something: one that
// failed (a write it could not make, an entry it could not apply) stops
// the shard, whose parent starts it again from storage.
func (s *shard) afterRaft(ctx actor.Context) {
	if s.replica == nil || s.replica.failed() == nil || s.stoppingRaft {
		return
	}
	s.stoppingRaft = true
	s.wakePeers(ctx)
	err := s.replica.failed()
	s.failed = err
	s.answerProposals(ctx, storageError(err))
	s.rejectPending(ctx, s.core.failPending(), storageError(err))
	s.rejectUnadmitted(ctx, storageError(err))
	ctx.Stop(ctx.Self())
}

// stopReplica stops the replica and its routing (the shard stops or
// restarts); what waits for an apply is answered as outcome unknown.
func (s *shard) stopReplica(ctx actor.Context, err *wire.Error) {
	s.stopInstall()
	if s.replica == nil {
		if s.cfg.Raft != nil && s.cfg.Raft.Router != nil {
			s.cfg.Raft.Router.Unregister(s.cfg.Key, ctx.Self())
		}
		return
	}
	if s.replica.quiet {
		s.onQuiet(-1)
		s.replica.quiet = false
	}
	s.replica.stop()
	if p := s.cfg.Progress; p != nil {
		p.Leader.Store(0) // no replica here any more
	}
	if s.raftGauges != nil {
		s.cfg.Stats.DropRaftGroup(s.cfg.Key, s.raftGauges)
		s.raftGauges = nil
	}
	s.expireReads(ctx, true, err)
	s.cfg.Raft.Router.Unregister(s.cfg.Key, ctx.Self())
	if s.lead == s.cfg.Raft.Self {
		s.cfg.Stats.RaftLeading.Add(-1)
		s.lead = 0
		s.tellGroupsLeadership(ctx, false)
	}
	s.answerProposals(ctx, err)
}

// raftInfo is the shard's replication state, for describe.
func (s *shard) raftInfo(resp *ShardInfoResponse) {
	if s.cfg.Raft == nil {
		return
	}
	resp.Replicas, resp.Preferred = s.cfg.Raft.target(s.cfg.Key.Shard)
	if s.replica == nil {
		return
	}
	st := s.replica.core.rn.Status()
	resp.Leader, resp.Term, resp.RaftCommit, resp.RaftApplied = st.Lead, st.GetTerm(), st.GetCommit(), s.replica.applied
	resp.RaftFirst, _ = s.replica.core.log.FirstIndex()
	resp.Quiesced = s.replica.quiet
	resp.Voters, resp.Learners = s.replica.core.conf.GetVoters(), s.replica.core.conf.GetLearners()
	if st.RaftState == raft.StateLeader {
		resp.Match = map[uint64]uint64{}
		for id, pr := range st.Progress {
			resp.Match[id] = pr.Match
		}
		resp.LagDetail = s.replicaLags(st)
	}
}

// Lags is, on a shard's leader, how many raft entries each replica's log is
// behind the leader's commit index (nil elsewhere: only the leader knows).
func (r *ShardInfoResponse) Lags() map[uint64]uint64 {
	if len(r.Match) == 0 {
		return nil
	}
	out := map[uint64]uint64{}
	for id, m := range r.Match {
		out[id] = r.RaftCommit - min(m, r.RaftCommit)
	}
	return out
}

// replicationOf is a shard's raft group as its info describes it, with
// each replica's lag in records and bytes when detail is set.
func replicationOf(r *ShardInfoResponse, detail bool) wire.ShardReplication {
	out := wire.ShardReplication{Leader: r.Leader, Term: r.Term, Commit: r.RaftCommit, LagDetail: detail}
	lags := r.Lags()
	for _, id := range r.Replicas {
		rs := wire.ReplicaState{Node: id, Lag: wire.LagUnknown, LagRecords: wire.LagUnknown, LagBytes: wire.LagUnknown}
		if l, ok := lags[id]; ok {
			rs.Lag = l
		}
		if l, ok := r.LagDetail[id]; ok && detail {
			rs.LagRecords, rs.LagBytes = l.Records, l.Bytes
		}
		if !detail {
			rs.LagRecords, rs.LagBytes = 0, 0
		}
		out.Replicas = append(out.Replicas, rs)
	}
	return out
}
