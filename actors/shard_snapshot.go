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
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Snapshots of a replicated shard. A compaction takes a snapshot at its
// entry (shard_raft.go): its data is the shard's tail there and its
// idempotent producers, the same on every replica, and nothing of the
// records themselves. A replica raft sends one to (it was down while the
// group compacted past it, or lost its disk) installs it in three steps:
//
//  1. it stores the snapshot as being installed (raft | … | 'i'), so a
//     crash from here on resumes the install rather than leaving a shard
//     log that raft's state does not describe;
//  2. it fetches the shard's log from its own tail to the snapshot's, a
//     page (peerwire ShardFetch / ShardPage, at most snapshotPageBytes of
//     records) at a time, from the leader first and any other replica
//     when one does not answer, and writes each page as it would an
//     applied batch: offsets never move, and what it serves meanwhile is
//     committed;
//  3. it writes, in one commit, the snapshot's producers, raft's snapshot
//     and HardState (the raft log before it dropped), the applied index and
//     tail, and the end of the install; raft goes on from there.
//
// Raft waits for the install: the Ready that carried the snapshot is not
// advanced until step 3 is durable.

// snapshotPageBytes bounds a page's records; snapshotFetchTimeout is how
// long a replica waits for a page before it asks another replica.
const (
	snapshotPageBytes    = 1 << 20
	snapshotFetchTimeout = time.Second
	snapshotRetryBehind  = 200 * time.Millisecond
	shardSnapshotVersion = 1
)

// shardSnapshot is the data of a replicated shard's raft snapshot.
type shardSnapshot struct {
	tail      uint64
	producers []*producerState
}

// encodeShardSnapshot encodes a shard's state: version u8 | tail u64 |
// count u32 | count × (length u32 | producer state), producers by id.
func encodeShardSnapshot(tail uint64, producers map[uint64]*producerState) []byte {
	ids := make([]uint64, 0, len(producers))
	for id := range producers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := []byte{shardSnapshotVersion}
	b = binary.BigEndian.AppendUint64(b, tail)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		p := producers[id].encode()
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

var errBadShardSnapshot = errors.New("actors: malformed shard snapshot")

func decodeShardSnapshot(b []byte) (shardSnapshot, error) {
	if len(b) < 13 || b[0] != shardSnapshotVersion {
		return shardSnapshot{}, errBadShardSnapshot
	}
	s := shardSnapshot{tail: binary.BigEndian.Uint64(b[1:])}
	n := binary.BigEndian.Uint32(b[9:])
	b = b[13:]
	if uint64(n)*22 > uint64(len(b)) {
		return shardSnapshot{}, errBadShardSnapshot
	}
	for range n {
		if len(b) < 4 {
			return shardSnapshot{}, errBadShardSnapshot
		}
		l := binary.BigEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return shardSnapshot{}, errBadShardSnapshot
		}
		p, err := decodeProducerState(b[4 : 4+l])
		if err != nil {
			return shardSnapshot{}, err
		}
		s.producers = append(s.producers, p)
		b = b[4+l:]
	}
	if len(b) != 0 {
		return shardSnapshot{}, errBadShardSnapshot
	}
	return s, nil
}

// shardInstall is a snapshot being installed.
type shardInstall struct {
	snap *pb.Snapshot
	data shardSnapshot
	// live is set when raft waits for the install (a snapshot it handed
	// out); clear when a restart resumes one, and raft starts after it.
	live bool
	// durable is what storage held at that restart.
	durable raftDurable
	// next is the next offset to fetch.
	next uint64
	// token names the fetch out (fetching), attempt counts fetches, to
	// turn from one replica to the next.
	token    uint64
	fetching bool
	attempt  int
	stop     func() bool
	// markToken names the write of the install's mark: no page is fetched
	// before it is durable. finishToken names the last write of a resumed
	// install.
	markToken   uint64
	marked      bool
	finishToken uint64
	started     time.Time
	// groups is the install's group-state part (shard 0 of a cluster
	// stream: shard_groups.go).
	groups groupStateInstall
}

// installTimeout is the install's timer message.
type installTimeout struct{ token uint64 }

// onSnapshot starts installing a snapshot raft handed out.
func (s *shard) onSnapshot(ctx actor.Context, snap *pb.Snapshot) {
	data, err := decodeShardSnapshot(snap.GetData())
	if err != nil {
		s.replica.fail(ctx, fmt.Errorf("raft: the snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err))
		return
	}
	if data.tail < s.core.tail {
		s.replica.fail(ctx, fmt.Errorf("raft: the snapshot at index %d ends the shard at offset %d, this replica holds offsets to %d",
			snap.GetMetadata().GetIndex(), data.tail, s.core.tail))
		return
	}
	mark, err := proto.Marshal(snap)
	if err != nil {
		s.replica.fail(ctx, err)
		return
	}
	s.compaction = nil
	s.install = &shardInstall{snap: snap, data: data, live: true, next: s.core.tail, started: s.cfg.Now(), markToken: rand.Uint64()>>1 | 1}
	// Durable before any page is fetched: a commit that holds both may
	// store the page first (appends go before metadata), and a crash
	// between the two would leave a page no mark explains.
	ctx.Request(s.cfg.Writer, &MetaWriteRequest{Puts: []storage.MetaPut{{Key: raftInstallKey(s.cfg.Key), Value: mark}}, Token: s.install.markToken})
	s.logger(ctx).Info("shard: installing a raft snapshot; fetching the shard's log from the other replicas",
		slog.Uint64("index", snap.GetMetadata().GetIndex()), slog.Uint64("from", s.core.tail), slog.Uint64("to", data.tail))
	s.continueInstall(ctx)
}

// resumeInstall goes on with an install a crash cut short; raft starts
// when it is done.
func (s *shard) resumeInstall(ctx actor.Context, d raftDurable) {
	snap := d.Installing
	data, err := decodeShardSnapshot(snap.GetData())
	if err == nil && (s.core.tail > data.tail || (d.HasAppliedTail && s.core.tail < d.AppliedTail)) {
		err = fmt.Errorf("the shard log ends at offset %d, outside the install from offset %d to %d", s.core.tail, d.AppliedTail, data.tail)
	}
	if err != nil {
		s.failed = fmt.Errorf("%w: resuming the install of the raft snapshot at index %d: %w: rebuild this replica",
			ErrStorageFailed, snap.GetMetadata().GetIndex(), err)
		s.logger(ctx).Error("shard: cannot start its raft replica; refusing publishes", slog.Any("error", s.failed))
		s.wakePeers(ctx)
		return
	}
	s.install = &shardInstall{snap: snap, data: data, durable: d, next: s.core.tail, started: s.cfg.Now(), marked: true}
	s.cfg.Raft.Router.Register(s.cfg.Key, ctx.Self()) // pages come back through it
	s.logger(ctx).Info("shard: resuming the install of a raft snapshot",
		slog.Uint64("index", snap.GetMetadata().GetIndex()), slog.Uint64("from", s.core.tail), slog.Uint64("to", data.tail))
	s.continueInstall(ctx)
}

// continueInstall fetches the next page once the last one is written, or
// ends the install once the shard log reaches the snapshot's tail.
func (s *shard) continueInstall(ctx actor.Context) {
	in := s.install
	if in == nil || !in.marked || in.fetching || in.finishToken != 0 || len(s.core.pending) > 0 || s.failed != nil {
		return
	}
	if s.installsGroupState() && !in.groups.done {
		// The group state first: the shard's tail, which readers see,
		// then reaches the snapshot's only as the install ends.
		s.continueGroupState(ctx)
		return
	}
	if in.next >= in.data.tail {
		s.finishInstall(ctx)
		return
	}
	s.fetchPage(ctx)
}

// fetchPage asks a replica for the page at in.next: the leader first, then
// the others in turn, one at a time.
func (s *shard) fetchPage(ctx actor.Context) {
	in := s.install
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
		ctx.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardFetch(nil, peerwire.ShardFetch{
			Group: peerwire.Group{Stream: s.cfg.Key.Stream, Shard: s.cfg.Key.Shard}, Token: in.token,
			From: in.next, To: in.data.tail, MaxBytes: snapshotPageBytes})})
	}
	s.armInstallTimer(ctx, snapshotFetchTimeout)
}

// installPeer is the replica to fetch the install's next page from: the
// leader first, then the others in turn (attempt counts the tries), or 0
// when there is none.
func (s *shard) installPeer() uint64 {
	in := s.install
	var peers []uint64
	lead := uint64(0)
	if s.replica != nil {
		lead = s.replica.status().Lead
	}
	if lead != 0 && lead != s.cfg.Raft.Self {
		peers = append(peers, lead)
	}
	// The snapshot's configuration is the group's as the leader knew it;
	// this replica's own may be the group's first (a new replica).
	ids := slices.Concat(confMembers(in.snap.GetMetadata().GetConfState()), s.members())
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		if id != s.cfg.Raft.Self && id != lead {
			peers = append(peers, id)
		}
	}
	if len(peers) == 0 {
		return 0
	}
	return peers[in.attempt%len(peers)]
}

func (s *shard) armInstallTimer(ctx actor.Context, d time.Duration) {
	in := s.install
	if in.stop != nil {
		in.stop()
	}
	self, root, token := ctx.Self(), ctx.ActorSystem().Root, in.token
	in.stop = s.raftAfterFunc()(d, func() { root.Send(self, &installTimeout{token: token}) })
}

func (s *shard) raftAfterFunc() func(time.Duration, func()) func() bool {
	if s.cfg.Raft.AfterFunc != nil {
		return s.cfg.Raft.AfterFunc
	}
	return func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
}

// onInstallTimeout asks the next replica: the last one did not answer (or
// was behind).
func (s *shard) onInstallTimeout(ctx actor.Context, m *installTimeout) {
	in := s.install
	if in == nil || m.token != in.token || !in.fetching {
		return
	}
	in.fetching = false
	in.attempt++
	s.continueInstall(ctx)
}

// onShardInbound handles a Shard frame: a replica's fetch, or a page this
// replica fetched.
func (s *shard) onShardInbound(ctx actor.Context, m *ShardInbound) {
	switch {
	case m.Msg.Fetch != nil:
		s.serveFetch(ctx, m.From, m.Msg.Fetch)
	case m.Msg.Page != nil:
		s.onPage(ctx, m.From, m.Msg.Page)
	case m.Msg.GroupStateFetch != nil:
		s.serveGroupStateFetch(ctx, m.From, m.Msg.GroupStateFetch)
	case m.Msg.GroupStatePage != nil:
		s.onGroupStatePage(ctx, m.From, m.Msg.GroupStatePage)
	}
}

// serveFetch answers a replica's fetch with a page of this replica's shard
// log, read off the actor. The log holds committed entries' batches only.
func (s *shard) serveFetch(ctx actor.Context, from uint64, f *peerwire.ShardFetch) {
	if s.core == nil || s.cfg.Raft == nil || !s.cfg.Raft.hosted() || s.failed != nil || s.install != nil {
		return // the fetcher asks another replica
	}
	link := s.cfg.Raft.Router.Link(from)
	if link == nil {
		return
	}
	log, key, root := s.cfg.Log, s.cfg.Key, ctx.ActorSystem().Root
	maxBytes := int(min(max(f.MaxBytes, 64<<10), 4<<20))
	logger := s.logger(ctx)
	s.cfg.Raft.Goroutines.Go(func() {
		batches, err := log.Read(key, f.From, 0, maxBytes)
		var first, tail uint64
		if err == nil {
			first, err = log.First(key)
		}
		if err == nil {
			tail, err = log.Tail(key)
		}
		if err != nil {
			logger.Warn("shard: reading a page for a replica's snapshot", slog.Uint64("replica", from), slog.Any("error", err))
			return
		}
		page := peerwire.ShardPage{Group: f.Group, Token: f.Token, First: first, Tail: tail}
		for _, b := range batches {
			if b.End() > f.To || b.End() > tail {
				break
			}
			page.Batches = append(page.Batches, peerwire.PageBatch{Base: b.Base, Count: b.Count, Timestamp: b.Timestamp, Records: b.Records})
		}
		root.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardPage(nil, page)})
	})
}

// onPage writes a page this replica fetched, as applied batches at their
// own offsets.
func (s *shard) onPage(ctx actor.Context, from uint64, p *peerwire.ShardPage) {
	in := s.install
	if in == nil || !in.fetching || p.Token != in.token {
		return // late, or for an install that ended
	}
	in.fetching = false
	if in.stop != nil {
		in.stop()
		in.stop = nil
	}
	batches := slices.DeleteFunc(p.Batches, func(b peerwire.PageBatch) bool { return b.End() <= in.next })
	if len(batches) == 0 {
		if p.First > in.next && p.Tail >= in.data.tail {
			s.abandonInstall(ctx, fmt.Errorf("node %d's retention deleted offsets %d to %d, which this replica lacks", from, in.next, p.First))
			return
		}
		// That replica is behind (or restarting): ask another shortly (the
		// timeout turns to the next).
		in.fetching = true
		s.armInstallTimer(ctx, snapshotRetryBehind)
		return
	}
	fail := func(err error) {
		err = fmt.Errorf("raft: installing the snapshot at index %d: node %d's page: %w", in.snap.GetMetadata().GetIndex(), from, err)
		if s.replica != nil {
			s.replica.fail(ctx, err)
			return
		}
		s.failInstall(ctx, err)
	}
	if b := batches[0]; b.Base > in.next && b.Base == p.First && s.core.first == s.core.tail && s.core.tail == in.next && len(s.core.pending) == 0 {
		// This replica holds no record (a new one): its log starts where
		// the serving replica's retention left it, as if its own retention
		// had deleted what came before.
		s.logger(ctx).Info("shard: a new replica's log starts at the other replicas' first retained offset", slog.Uint64("first", b.Base))
		s.core.first, s.core.tail, s.core.committed = b.Base, b.Base, b.Base
		in.next = b.Base
		s.publishProgress()
	}
	if b := batches[0]; b.Base > in.next {
		if p.First <= in.next {
			fail(fmt.Errorf("its log has no batch at offset %d but holds one at %d", in.next, b.Base))
			return
		}
		s.abandonInstall(ctx, fmt.Errorf("node %d's retention deleted offsets %d to %d, which this replica lacks", from, in.next, b.Base))
		return
	} else if b.Base < in.next {
		fail(fmt.Errorf("its batch at offset %d spans this replica's tail %d: the logs differ", b.Base, in.next))
		return
	}
	for _, b := range batches {
		if err := checkPageBatch(b); err != nil {
			fail(err)
			return
		}
		if b.End() > in.data.tail {
			fail(fmt.Errorf("its batch at offset %d ends past the snapshot's tail %d: the logs differ", b.Base, in.data.tail))
			return
		}
		if b.Base != s.core.tail {
			fail(fmt.Errorf("its batch at offset %d does not follow offset %d", b.Base, s.core.tail))
			return
		}
		batch := s.core.admit(pendingPublish{batch: storage.Batch{Count: b.Count, Timestamp: b.Timestamp, Records: b.Records}})
		ctx.Request(s.cfg.Writer, &AppendRequest{Shard: s.cfg.Key, Batch: batch})
		in.next = batch.End()
	}
	in.attempt = 0
	s.continueInstall(ctx)
}

// abandonInstall gives up an install the other replicas cannot serve (their
// retention deleted records this replica lacks): the replica stops and the
// shard refuses publishes and reads, while the other replicas go on.
// Rebuilding it needs membership changes (not built).
func (s *shard) abandonInstall(ctx actor.Context, err error) {
	err = fmt.Errorf("%w: installing the raft snapshot at index %d: %w: rebuild this replica",
		ErrStorageFailed, s.install.snap.GetMetadata().GetIndex(), err)
	s.logger(ctx).Error("shard: cannot catch up from a snapshot; this replica stops", slog.Any("error", err))
	s.stopReplica(ctx, storageError(err))
	s.failed = err
	s.wakePeers(ctx)
}

// checkPageBatch refuses a page's batch the storage would refuse (which
// would fail the node's writer for every shard): no records for a count,
// or records that do not hold count records.
func checkPageBatch(b peerwire.PageBatch) error {
	if b.Count == 0 || len(b.Records) == 0 {
		return fmt.Errorf("its batch at offset %d has %d records in %d bytes", b.Base, b.Count, len(b.Records))
	}
	if _, err := wire.ValidateRecords(b.Records, b.Count); err != nil {
		return fmt.Errorf("its batch at offset %d of %d records: %w", b.Base, b.Count, err)
	}
	return nil
}

// finishInstall writes the end of the install: the producers, raft's
// state from the snapshot on, the applied index and tail, and the end of
// the install's mark.
func (s *shard) finishInstall(ctx actor.Context) {
	in := s.install
	idx := in.snap.GetMetadata().GetIndex()
	var producers []storage.MetaPut
	s.core.producers = map[uint64]*producerState{}
	for _, p := range in.data.producers {
		s.core.producers[p.id] = p
		producers = append(producers, storage.MetaPut{Key: producerKey(s.cfg.Key, p.id), Value: p.encode()})
	}
	after := []storage.MetaPut{
		{Key: raftAppliedKey(s.cfg.Key), Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, idx), in.data.tail)},
		{Key: raftInstallKey(s.cfg.Key)},
	}
	if in.live {
		s.install = nil
		s.follow.marks.reset(idx, in.data.tail)
		s.replica.finishInstall(ctx, producers, after)
		s.installed(ctx, in)
		return
	}
	// A resumed install: raft starts from the snapshot once it is stored.
	d := in.durable
	hs := &pb.HardState{Term: new(max(d.HardState.GetTerm(), in.snap.GetMetadata().GetTerm())), Commit: new(idx)}
	if hs.GetTerm() == d.HardState.GetTerm() {
		hs.Vote = new(d.HardState.GetVote())
	}
	snapBytes, err := proto.Marshal(in.snap)
	hsBytes, err2 := proto.Marshal(hs)
	if err = errors.Join(err, err2); err != nil {
		s.failInstall(ctx, err)
		return
	}
	puts := append(producers, storage.MetaPut{Key: raftSnapshotKey(s.cfg.Key), Value: snapBytes})
	for _, e := range d.Entries {
		puts = append(puts, storage.MetaPut{Key: raftEntryKey(s.cfg.Key, e.GetIndex())})
	}
	puts = append(puts, storage.MetaPut{Key: raftHardStateKey(s.cfg.Key), Value: hsBytes})
	puts = append(puts, after...)
	in.finishToken = rand.Uint64()>>1 | 1
	in.durable = raftDurable{HardState: hs, Snapshot: in.snap, Applied: idx, AppliedTail: in.data.tail, HasAppliedTail: true}
	ctx.Request(s.cfg.Writer, &MetaWriteRequest{Puts: puts, Token: in.finishToken})
}

// onInstallWritten goes on once the install's mark is stored, and starts
// raft once a resumed install's end is.
func (s *shard) onInstallWritten(ctx actor.Context, m *MetaWriteResponse) {
	in := s.install
	if in == nil || m.Token == 0 {
		return
	}
	if m.Token == in.markToken && !in.marked {
		if m.Err != nil {
			s.replica.fail(ctx, fmt.Errorf("raft: storing the install of the snapshot at index %d: %w", in.snap.GetMetadata().GetIndex(), m.Err))
			return
		}
		in.marked = true
		s.continueInstall(ctx)
		return
	}
	if in.live || m.Token != in.finishToken {
		return
	}
	if m.Err != nil {
		s.failInstall(ctx, m.Err)
		return
	}
	s.install = nil
	s.installed(ctx, in)
	s.startReplica(ctx, in.durable)
}

func (s *shard) installed(ctx actor.Context, in *shardInstall) {
	s.cfg.Stats.add(&s.cfg.Stats.RaftSnapshotsInstalled, 1)
	s.logger(ctx).Info("shard: raft snapshot installed", slog.Uint64("index", in.snap.GetMetadata().GetIndex()),
		slog.Uint64("tail", in.data.tail), slog.Duration("took", s.cfg.Now().Sub(in.started)))
}

// failInstall ends a resumed install that cannot go on: the shard refuses
// publishes until restarted.
func (s *shard) failInstall(ctx actor.Context, err error) {
	s.stopInstall()
	s.failed = fmt.Errorf("%w: %w", ErrStorageFailed, err)
	s.logger(ctx).Error("shard: installing a raft snapshot failed; refusing publishes", slog.Any("error", err))
	s.wakePeers(ctx)
}

// stopInstall stops the install's timer (the shard stops).
func (s *shard) stopInstall() {
	if s.install != nil && s.install.stop != nil {
		s.install.stop()
	}
	s.install = nil
}

// installing refuses a publish while a restarted replica resumes an
// install (raft is not running yet).
func (s *shard) installing() *wire.Error {
	return &wire.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("shard %d of %s is catching up from a snapshot on this node; retry on another replica", s.cfg.Key.Shard, s.cfg.Stream)}
}
