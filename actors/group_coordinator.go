package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// GroupCoordinatorConfig configures the coordinator of one (stream, group).
type GroupCoordinatorConfig struct {
	Stream *StreamHandle
	Group  string
	// Writer is the storage writer: group state is committed through it, in
	// order with everything else.
	Writer *actor.PID
	Limits GroupLimits
	// Secret signs cursors.
	Secret []byte
	// MaxFrameBytes bounds the frames the coordinator builds.
	MaxFrameBytes int
	// Now and AfterFunc are the clock (tests inject them); nil: time.Now and
	// time.AfterFunc.
	Now       func() time.Time
	AfterFunc func(time.Duration, func()) (stop func() bool)
	Stats     *Stats
}

// groupCoordinator owns one consumer group on one stream: the committed
// cursor per shard, claims with their visibility deadlines, records owed for
// redelivery, dead letters and push members with their shares of the
// shards (groupCore holds that state). Pull requests and push members both
// claim through it, so a workload can move between them without losing its
// place.
//
// It reads records from the stream's log itself, only what it hands out,
// and learns of new records by watching each shard's tail (one notice per
// watch, and only while someone waits for work). Every change is committed
// through the storage writer; acks are answered only once durable.
type groupCoordinator struct {
	cfg  GroupCoordinatorConfig
	core *groupCore
	log  *slog.Logger
	// exists is false until the group has state (a poll or a join creates
	// it).
	exists bool

	pollers []*groupPoller
	// pollerLanes counts the waiting polls of each requester (a
	// connection's control lane), watched: when it stops, its polls are
	// dropped before they claim records no one would receive.
	pollerLanes map[string]int
	// members maps a push member's id to its actor; hungry members have a
	// claim request outstanding.
	memberPIDs map[string]*actor.PID
	hungry     map[string]int
	// watching marks shards with a WatchTail outstanding.
	watching map[uint32]bool

	// flushes are the answers waiting on each MetaWriteRequest sent, in
	// order (the writer answers in order).
	flushes [][]func(error)
	// waiting are answers for the next flush.
	waiting []func(error)

	reportedDead uint64
	// gauges are the group's lag and claims, for metrics.
	gauges *GroupGauges

	// token marks this instance's flushes: a restarted coordinator keeps
	// its pid, and answers to its failed instance's flushes must not be
	// taken for its own.
	token uint64
	// dropped is set when the registry says the stream was deleted.
	dropped bool
	// shardPIDs are the stream's shards, watched: when they stop (the stream
	// was deleted or the catalog restarted) the coordinator stops too.
	shardPIDs map[string]bool

	timerAt   time.Time
	timerStop func() bool
	timerGen  uint64
}

type groupPoller struct {
	replyTo  *actor.PID
	reqID    uint64
	shard    uint32
	max      int
	deadline time.Time
}

// NewGroupCoordinatorProps returns the props of a group coordinator.
func NewGroupCoordinatorProps(cfg GroupCoordinatorConfig) *actor.Props {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return actor.PropsFromProducer(func() actor.Actor { return &groupCoordinator{cfg: cfg} })
}

// Receive dispatches. After each message the pending state changes are
// flushed, waiting consumers are served and the timer is re-armed.
func (g *groupCoordinator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
		return
	case *actor.Stopping:
		err := wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator stopped (the node is stopping, or the stream's shards restarted); join again")
		if g.dropped {
			err = wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", g.cfg.Stream.Name)
		}
		g.onStopping(ctx, err)
		return
	case *groupStreamDropped:
		g.dropped = true
		return
	case *actor.Restarting:
		g.onStopping(ctx, wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator restarted; join again"))
		return
	case *actor.Stopped:
		return
	case *GroupPollRequest:
		g.onPoll(ctx, m)
	case *GroupAckRequest:
		g.onAck(ctx, m)
	case *GroupDeadLettersRequest:
		g.onDeadLetters(ctx, m)
	case *GroupSelectRequest:
		g.onSelect(ctx, m)
	case *GroupDescribeRequest:
		g.reply(ctx, m.ReplyTo, wire.AppendGroupInfo(nil, m.ReqID, g.core.info(g.cfg.Now())))
	case *GroupJoinRequest:
		g.onJoin(ctx, m)
	case *GroupClaimRequest:
		g.onClaim(ctx, m)
	case *GroupCommitRequest:
		g.onCommit(ctx, m)
	case *TailAdvanced:
		g.onTail(ctx, m)
	case *MetaWriteResponse:
		if m.Token != g.token {
			return // an answer to the failed instance before a restart
		}
		g.onFlushed(m.Err)
	case *groupTick:
		if m.gen != g.timerGen {
			return
		}
		g.timerAt, g.timerStop = time.Time{}, nil
		g.onTick(ctx)
	case *actor.Terminated:
		if g.shardPIDs[m.Who.Id] {
			// The stream's shards are gone: this coordinator's handle is
			// stale. The registry spawns a new one on the next request.
			ctx.Stop(ctx.Self())
			return
		}
		if g.pollerLanes[m.Who.Id] > 0 {
			g.dropPollersOf(m.Who)
			return
		}
		// Terminated is a system message and overtakes what the member sent
		// before it went (its last ack): leave after those.
		ctx.Send(ctx.Self(), &memberGone{who: m.Who})
		return
	case *memberGone:
		g.onMemberGone(ctx, m.who)
	default:
		g.log.Warn("group coordinator: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
		return
	}
	g.serve(ctx)
	g.updateGauges()
	if g.core != nil && g.core.deadLettered > g.reportedDead {
		g.cfg.Stats.add(&g.cfg.Stats.GroupDeadLettered, g.core.deadLettered-g.reportedDead)
		g.reportedDead = g.core.deadLettered
	}
	g.flush(ctx)
	g.arm(ctx)
}

func (g *groupCoordinator) onStarted(ctx actor.Context) {
	h := g.cfg.Stream
	g.log = ctx.Logger().With(slog.String("stream", h.Name.String()), slog.String("group", g.cfg.Group))
	g.token = groupTokens.Add(1)
	// What an earlier instance (a failed one, or the one the registry
	// replaced) sent the storage writer is committed before the state is
	// read: the writer answers this empty write after everything queued.
	if _, err := ctx.RequestFuture(g.cfg.Writer, &MetaWriteRequest{}, 30*time.Second).Result(); err != nil {
		panic(fmt.Errorf("group %s on %s: waiting for the storage writer: %w", g.cfg.Group, h.Name, err))
	}
	g.core = newGroupCore(h.ID, g.cfg.Group, len(h.Shards), g.cfg.Limits)
	g.memberPIDs = map[string]*actor.PID{}
	g.hungry = map[string]int{}
	g.watching = map[uint32]bool{}
	prefix := groupPrefix(h.ID, g.cfg.Group)
	found, err := g.core.load(func(fn func(k, v []byte) error) error { return h.Log.ScanMeta(prefix, fn) })
	if err != nil {
		// Bad state must not be guessed at: fail, and let the supervisor
		// decide (the registry stops a coordinator that keeps failing).
		panic(fmt.Errorf("group %s on %s: loading state: %w", g.cfg.Group, h.Name, err))
	}
	g.exists = found
	g.gauges = g.cfg.Stats.Group(h.Name.String(), g.cfg.Group)
	// Learn every shard's tail (and retention floor) before the first
	// request, so a poll that does not wait finds what is there. Shards
	// answer at once (a recovering one once it knows its tail).
	futures := make([]*actor.Future, len(h.Shards))
	g.shardPIDs = make(map[string]bool, len(h.Shards))
	for i, pid := range h.Shards {
		g.shardPIDs[pid.Id] = true
		ctx.Watch(pid)
		futures[i] = ctx.RequestFuture(pid, &ShardInfoRequest{}, 10*time.Second)
	}
	for i, f := range futures {
		res, err := f.Result()
		if info, ok := res.(*ShardInfoResponse); ok && err == nil {
			s := g.core.shards[i]
			s.tail, s.first = info.Tail, info.First
			continue
		}
		g.log.Warn("group: shard did not report its tail; watching it", slog.Int("shard", i), slog.Any("error", err))
		g.watch(ctx, uint32(i), true)
	}
}

// onStopping answers everyone waiting and ends the members. What changed
// since the last flush still goes to the storage writer (stopped after the
// coordinators), unanswered.
func (g *groupCoordinator) onStopping(ctx actor.Context, err *wire.Error) {
	if g.core != nil {
		if puts := g.core.flushPuts(); len(puts) > 0 {
			ctx.Send(g.cfg.Writer, &MetaWriteRequest{Puts: puts})
		}
	}
	if g.timerStop != nil {
		g.timerStop()
		g.timerStop = nil
	}
	for _, pid := range g.cfg.Stream.Shards {
		if g.shardPIDs[pid.Id] {
			ctx.Unwatch(pid)
		}
	}
	for _, p := range g.pollers {
		ctx.Send(p.replyTo, &WriteFrame{Frame: wire.AppendError(nil, p.reqID, err), Dispatched: true})
		g.forgetPoller(ctx, p)
	}
	g.pollers = nil
	for id, pid := range g.memberPIDs {
		ctx.Unwatch(pid)
		ctx.Send(pid, &GroupMemberEnded{Err: err})
		delete(g.memberPIDs, id)
	}
	for _, fs := range g.flushes {
		for _, f := range fs {
			f(err)
		}
	}
	for _, f := range g.waiting {
		f(err)
	}
	g.flushes, g.waiting = nil, nil
}

func (g *groupCoordinator) reply(ctx actor.Context, to *actor.PID, frame []byte) {
	if to != nil {
		ctx.Send(to, &WriteFrame{Frame: frame, Dispatched: true})
	}
}

func (g *groupCoordinator) replyErr(ctx actor.Context, to *actor.PID, reqID uint64, err *wire.Error) {
	g.reply(ctx, to, wire.AppendError(nil, reqID, err))
}

// afterFlush runs f once everything changed so far is durable (or failed).
func (g *groupCoordinator) afterFlush(f func(error)) { g.waiting = append(g.waiting, f) }

// create brings the group into being on its first poll or join.
func (g *groupCoordinator) create() {
	if !g.exists {
		g.exists = true
		g.core.saveGeneration()
	}
}

func (g *groupCoordinator) checkShard(shard uint32) *wire.Error {
	if int(shard) >= len(g.core.shards) {
		return wire.Errorf(wire.CodeInvalidShard, "stream %s has %d shards", g.cfg.Stream.Name, len(g.core.shards))
	}
	return nil
}

func (g *groupCoordinator) onPoll(ctx actor.Context, m *GroupPollRequest) {
	if err := g.checkShard(m.Shard); err != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
		return
	}
	if m.Max < 1 || m.Max > g.cfg.Limits.MaxPoll {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeInvalidRequest,
			"poll max must be 1-%d (group_max_poll), got %d", g.cfg.Limits.MaxPoll, m.Max))
		return
	}
	g.create()
	if g.core.claimCount >= g.cfg.Limits.MaxInFlight {
		g.cfg.Stats.Limits.GroupClaims.Add(1)
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeTooManyClaims,
			"group %s holds %d claims, its maximum (group_max_in_flight); ack or nack some first", g.cfg.Group, g.core.claimCount))
		return
	}
	wait := min(m.Wait, g.cfg.Limits.MaxPollWait)
	p := &groupPoller{replyTo: m.ReplyTo, reqID: m.ReqID, shard: m.Shard, max: m.Max, deadline: g.cfg.Now().Add(wait)}
	if g.core.claimable(m.Shard) || wait <= 0 {
		g.answerPoll(ctx, p)
		return
	}
	if len(g.pollers) >= maxWaitingPolls {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeOverloaded,
			"group %s has %d polls waiting for work already; poll with a shorter wait or retry later", g.cfg.Group, len(g.pollers)))
		return
	}
	g.pollers = append(g.pollers, p)
	if g.pollerLanes == nil {
		g.pollerLanes = map[string]int{}
	}
	if g.pollerLanes[p.replyTo.Id]++; g.pollerLanes[p.replyTo.Id] == 1 {
		ctx.Watch(p.replyTo)
	}
	g.watch(ctx, m.Shard, false)
}

// forgetPoller ends the watch of p's requester once none of its polls
// waits any more.
func (g *groupCoordinator) forgetPoller(ctx actor.Context, p *groupPoller) {
	if g.pollerLanes[p.replyTo.Id]--; g.pollerLanes[p.replyTo.Id] <= 0 {
		delete(g.pollerLanes, p.replyTo.Id)
		ctx.Unwatch(p.replyTo)
	}
}

// dropPollersOf forgets the waiting polls of a requester that stopped (its
// connection closed): answering them would claim records for no one, and
// those records would wait out the visibility timeout and lose an attempt.
func (g *groupCoordinator) dropPollersOf(lane *actor.PID) {
	kept := g.pollers[:0]
	for _, p := range g.pollers {
		if p.replyTo.Id != lane.Id {
			kept = append(kept, p)
		}
	}
	clear(g.pollers[len(kept):])
	g.pollers = kept
	delete(g.pollerLanes, lane.Id)
}

// maxWaitingPolls bounds the polls one group holds while they wait for
// work (the rest are refused as overloaded).
const maxWaitingPolls = 4096

// groupTokens numbers coordinator instances (their flush tokens).
var groupTokens atomic.Uint64

// answerPoll claims what it can for p and answers (possibly empty).
func (g *groupCoordinator) answerPoll(ctx actor.Context, p *groupPoller) {
	budget := g.cfg.MaxFrameBytes - wire.GroupRecordsHeadSize(0)
	recs := g.claimRecords(ctx, "", []uint32{p.shard}, p.max, budget, 0)
	frame := wire.AppendGroupRecords(nil, p.reqID, wire.GroupRecords{Records: recs})
	g.cfg.Stats.add(&g.cfg.Stats.GroupDelivered, uint64(len(recs)))
	// The claims' state goes to storage with the next flush; the answer
	// does not wait for it (attempts may undercount by one across a crash).
	g.reply(ctx, p.replyTo, frame)
}

// claimRecords picks up to max records of shards for owner, reads them
// from the log, and claims those it could read within budget bytes and, if
// maxRanges is set, within that many runs of consecutive offsets (a push's
// cursor names them). Records retention deleted are settled as skipped; if
// that was all it found, it looks again (a few times).
func (g *groupCoordinator) claimRecords(ctx actor.Context, owner string, shards []uint32, max, budget, maxRanges int) []wire.GroupRecord {
	now := g.cfg.Now()
	var recs []wire.GroupRecord
	for range 8 {
		picks := g.core.candidates(shards, max)
		if len(picks) == 0 {
			return nil
		}
		var used int
		var gone map[pick]bool
		var err error
		recs, used, gone, err = g.readPicks(picks, budget, maxRanges)
		if err != nil {
			g.log.Error("group: reading records to deliver", slog.Any("error", err))
			return nil
		}
		g.core.take(owner, picks[:used], gone, now)
		if len(recs) > 0 || len(gone) == 0 {
			break
		}
	}
	for i := range recs {
		recs[i].Attempts = g.core.shards[recs[i].Shard].attempts[recs[i].Offset]
	}
	return recs
}

// readPicksBatches is how many batches readPicks asks the log for at once.
const readPicksBatches = 8

// readPicks reads the picked records from the log, in pick order, until
// budget bytes and (if set) maxRanges runs of consecutive offsets. It
// returns the records, how many picks they cover (a prefix), and which of
// those picks the log no longer holds. Picks of one shard come in offset
// order, so one pass over the shard's batches serves them all: a batch is
// read once and its records are walked once, however scattered the picks.
func (g *groupCoordinator) readPicks(picks []pick, budget, maxRanges int) ([]wire.GroupRecord, int, map[pick]bool, error) {
	h := g.cfg.Stream
	out := make([]wire.GroupRecord, 0, len(picks))
	gone := map[pick]bool{}
	size, ranges := 0, 0
	var (
		shard   uint32
		batches []storage.Batch // read, not yet passed
		it      *wire.RecordIter
		itOff   uint64 // the offset of the record it yields next
		rec     wire.Record
	)
	for k, pk := range picks {
		if it != nil && (pk.shard != shard || pk.offset < itOff) {
			batches, it = nil, nil // another shard, or (never, for sorted picks) going back
		}
		shard = pk.shard
		// Drop batches wholly before the pick; read more when none is left.
		for len(batches) > 0 && batches[0].End() <= pk.offset {
			batches, it = batches[1:], nil
		}
		if len(batches) == 0 {
			var err error
			batches, err = h.Log.Read(h.ShardKey(pk.shard), pk.offset, readPicksBatches, budget-size+1)
			if err != nil {
				return nil, 0, nil, err
			}
			it = nil
		}
		if len(batches) == 0 || batches[0].Base > pk.offset {
			gone[pk] = true // deleted by retention
			continue
		}
		b := batches[0]
		if it == nil {
			it, itOff = wire.NewRecordIter(b.Records), b.Base
		}
		found := false
		for itOff <= pk.offset && it.Next(&rec) {
			itOff++
			found = itOff-1 == pk.offset
		}
		if err := it.Err(); err != nil {
			return nil, 0, nil, fmt.Errorf("shard %d batch %d: %w", pk.shard, b.Base, err)
		}
		if !found {
			return nil, 0, nil, fmt.Errorf("shard %d batch %d: offset %d missing from the batch", pk.shard, b.Base, pk.offset)
		}
		if n := len(out); n == 0 || out[n-1].Shard != pk.shard || out[n-1].Offset+1 != pk.offset {
			if maxRanges > 0 && ranges == maxRanges {
				return out, k, gone, nil // the cursor would grow past its bound
			}
			ranges++
		}
		r := wire.GroupRecord{Shard: pk.shard, Offset: pk.offset, Timestamp: b.Timestamp, Record: wire.AppendRecord(nil, &rec)}
		if size+wire.GroupRecordSize(&r) > budget && len(out) > 0 {
			return out, k, gone, nil
		}
		size += wire.GroupRecordSize(&r)
		out = append(out, r)
	}
	return out, len(picks), gone, nil
}

func (g *groupCoordinator) onAck(ctx actor.Context, m *GroupAckRequest) {
	if err := g.checkShard(m.Shard); err != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
		return
	}
	var n int
	var werr *wire.Error
	if m.Nack {
		n, werr = g.core.nack(m.Shard, m.Offsets, g.cfg.Now())
	} else {
		n, werr = g.core.ack(m.Shard, m.Offsets)
	}
	if werr != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, werr)
		return
	}
	g.countSettled(m.Nack, n)
	to, id := m.ReplyTo, m.ReqID
	g.afterFlush(func(err error) {
		if err != nil {
			g.replyErr(ctx, to, id, storageErr(err))
			return
		}
		g.reply(ctx, to, wire.AppendGroupDone(nil, id, uint64(n)))
	})
}

func (g *groupCoordinator) countSettled(nack bool, n int) {
	if nack {
		g.cfg.Stats.add(&g.cfg.Stats.GroupNacked, uint64(n))
	} else {
		g.cfg.Stats.add(&g.cfg.Stats.GroupAcked, uint64(n))
	}
}

func storageErr(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return wire.Errorf(wire.CodeStorageFailure, "committing group state: %v", err)
}

func (g *groupCoordinator) selectShards(shard uint32) ([]uint32, *wire.Error) {
	if shard == wire.AnyShard {
		return g.core.allShards(), nil
	}
	if err := g.checkShard(shard); err != nil {
		return nil, err
	}
	return []uint32{shard}, nil
}

func (g *groupCoordinator) onDeadLetters(ctx actor.Context, m *GroupDeadLettersRequest) {
	shards, err := g.selectShards(m.Shard)
	if err != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
		return
	}
	list, more := g.core.deadLetters(shards, m.From, m.Limit)
	g.reply(ctx, m.ReplyTo, wire.AppendGroupDeadList(nil, m.ReqID, wire.GroupDeadList{Letters: list, More: more}))
}

func (g *groupCoordinator) onSelect(ctx actor.Context, m *GroupSelectRequest) {
	shards, err := g.selectShards(m.Shard)
	if err != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
		return
	}
	var n int
	if m.Discard {
		n = g.core.discard(shards, m.Offsets)
	} else {
		n = g.core.redrive(shards, m.Offsets)
	}
	to, id := m.ReplyTo, m.ReqID
	g.afterFlush(func(err error) {
		if err != nil {
			g.replyErr(ctx, to, id, storageErr(err))
			return
		}
		g.reply(ctx, to, wire.AppendGroupDone(nil, id, uint64(n)))
	})
}

func (g *groupCoordinator) onJoin(ctx actor.Context, m *GroupJoinRequest) {
	from := ctx.Sender()
	if from == nil {
		return
	}
	if m.Window < 1 || int(m.Window) > g.cfg.Limits.MaxWindow {
		ctx.Respond(&GroupJoinResponse{Err: wire.Errorf(wire.CodeInvalidRequest,
			"window must be 1-%d (group_max_window), got %d", g.cfg.Limits.MaxWindow, m.Window)})
		return
	}
	g.create()
	now := g.cfg.Now()
	if old, ok := g.memberPIDs[m.Member]; ok {
		ctx.Unwatch(old)
		ctx.Send(old, &GroupMemberEnded{Err: wire.Errorf(wire.CodeSessionExpired, "member %s joined again on another stream", m.Member)})
		delete(g.hungry, m.Member)
	}
	mem := g.core.join(m.Member, m.Window, now)
	g.memberPIDs[m.Member] = from
	ctx.Watch(from)
	g.cfg.Stats.add(&g.cfg.Stats.GroupJoins, 1)
	resp := &GroupJoinResponse{Coordinator: ctx.Self(), Epoch: mem.epoch, Generation: g.core.generation,
		Shards: append([]uint32(nil), mem.shards...), Session: uint32(g.cfg.Limits.Session.Milliseconds())}
	// The join is answered once the new generation is durable, so epochs
	// never repeat across a restart.
	g.afterFlush(func(err error) {
		if err != nil {
			resp = &GroupJoinResponse{Err: storageErr(err)}
		}
		ctx.Send(from, resp)
	})
}

// member returns the current member with id and epoch, or nil.
func (g *groupCoordinator) member(id string, epoch uint64) *groupMember {
	if m, ok := g.core.members[id]; ok && m.epoch == epoch {
		return m
	}
	return nil
}

func (g *groupCoordinator) onClaim(ctx actor.Context, m *GroupClaimRequest) {
	if g.member(m.Member, m.Epoch) == nil {
		return // an ended membership: its actor has been told
	}
	g.hungry[m.Member] = max(m.Max, 1)
}

func (g *groupCoordinator) onCommit(ctx actor.Context, m *GroupCommitRequest) {
	from := ctx.Sender()
	mem := g.member(m.Member, m.Epoch)
	if mem == nil {
		if from != nil {
			ctx.Send(from, &GroupCommitResponse{ReqID: m.ReqID, Err: wire.Errorf(wire.CodeStaleCursor,
				"member %s is no longer in group %s; its records are redelivered", m.Member, g.cfg.Group)})
		}
		return
	}
	mem.lastSeen = g.cfg.Now()
	mem.inFlight = m.InFlight
	var werr *wire.Error
	n := 0
	if len(m.Cursor) > 0 {
		n, werr = g.commitCursor(m.Member, mem.epoch, m.Cursor)
	}
	g.countSettled(false, n)
	reqID := m.ReqID
	g.afterFlush(func(err error) {
		if from == nil {
			return
		}
		resp := &GroupCommitResponse{ReqID: reqID, Err: werr}
		if err != nil && werr == nil {
			resp.Err = storageErr(err)
		}
		if cur := g.member(m.Member, m.Epoch); cur != nil {
			resp.Generation, resp.Shards = g.core.generation, append([]uint32(nil), cur.shards...)
		}
		ctx.Send(from, resp)
	})
}

// commitCursor acks every record a cursor names.
func (g *groupCoordinator) commitCursor(member string, epoch uint64, cursor []byte) (int, *wire.Error) {
	t, werr := parseCursor(g.cfg.Secret, cursor)
	if werr != nil {
		return 0, werr
	}
	if t.stream != g.cfg.Stream.ID || t.group != groupHash(g.cfg.Group) {
		return 0, wire.Errorf(wire.CodeInvalidCursor, "the cursor belongs to another stream or group")
	}
	if t.epoch != epoch {
		return 0, wire.Errorf(wire.CodeStaleCursor,
			"the cursor is from an earlier membership of %s (epoch %d, now %d); its records are redelivered", member, t.epoch, epoch)
	}
	for _, r := range t.ranges {
		if int(r.shard) >= len(g.core.shards) || r.first+uint64(r.count) > g.core.shards[r.shard].next {
			return 0, wire.Errorf(wire.CodeInvalidCursor, "the cursor names records of shard %d the group never delivered", r.shard)
		}
	}
	n := 0
	for _, r := range t.ranges {
		offs := make([]uint64, r.count)
		for i := range offs {
			offs[i] = r.first + uint64(i)
		}
		k, err := g.core.ack(r.shard, offs)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (g *groupCoordinator) onMemberGone(ctx actor.Context, who *actor.PID) {
	for id, pid := range g.memberPIDs {
		if pid.Equal(who) {
			delete(g.memberPIDs, id)
			delete(g.hungry, id)
			if mem, ok := g.core.members[id]; ok {
				g.core.leave(id, mem.epoch, g.cfg.Now())
			}
			g.cfg.Stats.add(&g.cfg.Stats.GroupLeaves, 1)
			return
		}
	}
}

func (g *groupCoordinator) onTail(ctx actor.Context, m *TailAdvanced) {
	if int(m.Shard) >= len(g.core.shards) {
		return
	}
	g.watching[m.Shard] = false
	s := g.core.shards[m.Shard]
	s.tail = max(s.tail, m.Tail)
	s.first = max(s.first, m.First)
}

func (g *groupCoordinator) onTick(ctx actor.Context) {
	now := g.cfg.Now()
	if n := g.core.expire(now); n > 0 {
		g.cfg.Stats.add(&g.cfg.Stats.GroupRedelivered, uint64(n))
	}
	for _, mem := range g.core.expireMembers(now) {
		if pid, ok := g.memberPIDs[mem.id]; ok {
			ctx.Unwatch(pid)
			ctx.Send(pid, &GroupMemberEnded{Err: wire.Errorf(wire.CodeSessionExpired,
				"member %s sent no ack or heartbeat for %v (the session timeout); join again", mem.id, g.cfg.Limits.Session)})
			delete(g.memberPIDs, mem.id)
			delete(g.hungry, mem.id)
		}
		g.cfg.Stats.add(&g.cfg.Stats.GroupExpired, 1)
	}
	kept := g.pollers[:0]
	for _, p := range g.pollers {
		if !p.deadline.After(now) {
			g.reply(ctx, p.replyTo, wire.AppendGroupRecords(nil, p.reqID, wire.GroupRecords{}))
			g.forgetPoller(ctx, p)
			continue
		}
		kept = append(kept, p)
	}
	clear(g.pollers[len(kept):])
	g.pollers = kept
}

// serve hands work to whoever waits for it: polls first (in arrival order),
// then hungry members; and watches the tails of shards someone still waits
// on.
func (g *groupCoordinator) serve(ctx actor.Context) {
	if g.core == nil {
		return
	}
	kept := g.pollers[:0]
	for _, p := range g.pollers {
		if g.core.claimable(p.shard) && g.core.claimCount < g.cfg.Limits.MaxInFlight {
			g.answerPoll(ctx, p)
			g.forgetPoller(ctx, p)
			continue
		}
		kept = append(kept, p)
		g.watch(ctx, p.shard, false)
	}
	clear(g.pollers[len(kept):])
	g.pollers = kept
	for id, max := range g.hungry {
		mem := g.core.members[id]
		if mem == nil {
			delete(g.hungry, id)
			continue
		}
		work := false
		for _, s := range mem.shards {
			if g.core.claimable(s) {
				work = true
				break
			}
			g.watch(ctx, s, false)
		}
		if !work || g.core.claimCount >= g.cfg.Limits.MaxInFlight {
			continue
		}
		budget := g.cfg.MaxFrameBytes - wire.GroupRecordsHeadSize(wire.MaxCursorBytes)
		recs := g.claimRecords(ctx, id, mem.shards, max, budget, maxCursorRanges)
		if len(recs) == 0 {
			continue
		}
		delete(g.hungry, id)
		g.cfg.Stats.add(&g.cfg.Stats.GroupDelivered, uint64(len(recs)))
		cursor := mintCursor(g.cfg.Secret, cursorToken{stream: g.cfg.Stream.ID, group: groupHash(g.cfg.Group), epoch: mem.epoch,
			ranges: cursorRanges(recs)})
		ctx.Send(g.memberPIDs[id], &GroupClaimGranted{Records: recs, Cursor: cursor})
	}
}

// watch asks shard for a notice when its tail moves past what the group
// knows, unless one is outstanding. Without force it only does so when the
// group has delivered everything up to the known tail.
func (g *groupCoordinator) watch(ctx actor.Context, shard uint32, force bool) {
	if g.watching[shard] {
		return
	}
	s := g.core.shards[shard]
	if !force && s.next < s.tail {
		return
	}
	g.watching[shard] = true
	ctx.Request(g.cfg.Stream.Shards[shard], &WatchTail{After: s.tail})
}

// flush sends the pending state changes (and the answers waiting on them)
// to the storage writer.
func (g *groupCoordinator) flush(ctx actor.Context) {
	if g.core == nil {
		return
	}
	puts := g.core.flushPuts()
	if len(puts) == 0 && len(g.waiting) == 0 {
		return
	}
	g.flushes = append(g.flushes, g.waiting)
	g.waiting = nil
	ctx.Request(g.cfg.Writer, &MetaWriteRequest{Puts: puts, Token: g.token})
}

func (g *groupCoordinator) onFlushed(err error) {
	if len(g.flushes) == 0 {
		return
	}
	fs := g.flushes[0]
	g.flushes = g.flushes[1:]
	if err != nil {
		g.log.Error("group: committing state failed", slog.Any("error", err))
	}
	for _, f := range fs {
		f(err)
	}
}

// arm sets the timer for the earliest deadline: a claim's visibility, a
// member's session or a poll's wait.
func (g *groupCoordinator) arm(ctx actor.Context) {
	if g.core == nil {
		return
	}
	var at time.Time
	set := func(t time.Time, ok bool) {
		if ok && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	set(g.core.nextDeadline())
	set(g.core.nextSessionDeadline())
	for _, p := range g.pollers {
		set(p.deadline, true)
	}
	if at.IsZero() || (!g.timerAt.IsZero() && !at.Before(g.timerAt) && g.timerStop != nil) {
		return
	}
	if g.timerStop != nil {
		g.timerStop()
	}
	g.timerGen++
	gen, self, root := g.timerGen, ctx.Self(), ctx.ActorSystem().Root
	g.timerAt = at
	g.timerStop = g.cfg.AfterFunc(max(at.Sub(g.cfg.Now()), 0), func() { root.Send(self, &groupTick{gen: gen}) })
}

// GroupStateKeys lists a stream's group metadata keys (to delete them with
// the stream).
func GroupStateKeys(log storage.Log, stream uint64) ([]storage.MetaPut, error) {
	var puts []storage.MetaPut
	err := log.ScanMeta(GroupStreamPrefix(stream), func(k, _ []byte) error {
		puts = append(puts, storage.MetaPut{Key: append([]byte(nil), k...)})
		return nil
	})
	return puts, err
}

// updateGauges publishes the group's lag (records between the committed
// cursors and the tails) and claims for metrics.
func (g *groupCoordinator) updateGauges() {
	if g.gauges == nil || g.core == nil {
		return
	}
	var lag int64
	for _, s := range g.core.shards {
		if s.tail > s.committed {
			lag += int64(s.tail - s.committed)
		}
	}
	g.gauges.Lag.Store(lag)
	g.gauges.Claims.Store(int64(g.core.claimCount))
}
