package actors

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// The group coordinator's request handlers: polls, acks and nacks, dead
// letters, describe, members joining, claiming, committing and leaving,
// and the timer.

// create brings the group into being on its first poll, join or seek,
// with an incarnation of its own (a group deleted before under the name had
// another).
func (g *groupCoordinator) create() {
	if !g.exists {
		g.exists = true
		g.core.incarnation = newIncarnation()
		g.core.saveGeneration()
	}
}

// newIncarnation draws a group's incarnation: random, never 0.
func newIncarnation() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

func (g *groupCoordinator) checkShard(shard uint32) *wire.Error {
	if int(shard) >= len(g.core.shards) {
		return wire.ShardOutOfRange(g.cfg.Stream.Name, uint64(shard), len(g.core.shards))
	}
	return nil
}

// info describes the group, with each shard's tail as the shard last
// published it.
func (g *groupCoordinator) info() wire.GroupInfo {
	g.refreshTails()
	return g.core.info(g.cfg.Now())
}

// refreshTails takes each shard's committed tail and first offset as the
// shard published them (StreamHandle.Progress): the coordinator hears of
// new records by message only while someone waits for them, and its lag
// must follow the tail without.
func (g *groupCoordinator) refreshTails() {
	for i, s := range g.core.shards {
		if i < len(g.cfg.Stream.Progress) {
			if p := g.cfg.Stream.Progress[i]; p != nil {
				s.tail, s.first = max(s.tail, p.Tail.Load()), max(s.first, p.First.Load())
			}
		}
	}
}

// onPoll queues a poll: serve claims records for it (reading them in a
// goroutine) or, once its wait is over, answers it empty.
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
	if claims := g.core.claimCount + g.reserved; claims >= g.cfg.Limits.MaxInFlight {
		g.cfg.Stats.Limits.GroupClaims.Add(1)
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeTooManyClaims,
			"group %s holds %d claims, its maximum (group_max_in_flight); ack or nack some first", g.cfg.Group, claims))
		return
	}
	wait := min(m.Wait, g.cfg.Limits.MaxPollWait)
	if len(g.pollers) >= maxWaitingPolls {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeOverloaded,
			"group %s has %d polls waiting already; poll with a shorter wait or retry later", g.cfg.Group, len(g.pollers)))
		return
	}
	p := &groupPoller{replyTo: m.ReplyTo, reqID: m.ReqID, shard: m.Shard, max: m.Max, deadline: g.cfg.Now().Add(max(wait, 0))}
	g.pollers = append(g.pollers, p)
	if g.pollerLanes == nil {
		g.pollerLanes = map[string]*pollerLane{}
	}
	l := g.pollerLanes[p.replyTo.Id]
	if l == nil {
		l = &pollerLane{pid: p.replyTo}
		g.pollerLanes[p.replyTo.Id] = l
		ctx.Watch(p.replyTo)
	}
	l.n++
}

// forgetPoller ends the watch of p's requester once none of its polls
// waits any more.
func (g *groupCoordinator) forgetPoller(ctx actor.Context, p *groupPoller) {
	l := g.pollerLanes[p.replyTo.Id]
	if l == nil {
		return
	}
	if l.n--; l.n <= 0 {
		delete(g.pollerLanes, p.replyTo.Id)
		ctx.Unwatch(l.pid)
	}
}

// dropPollersOf forgets the polls of a requester that stopped (its
// connection closed): answering them would claim records for no one, and
// those records would wait out the visibility timeout and lose an attempt.
// A read in flight for one of them claims nothing when it comes back.
func (g *groupCoordinator) dropPollersOf(lane *actor.PID) {
	kept := g.pollers[:0]
	for _, p := range g.pollers {
		if p.replyTo.Id != lane.Id {
			kept = append(kept, p)
		}
	}
	clear(g.pollers[len(kept):])
	g.pollers = kept
	for _, r := range g.reads {
		if r.poller != nil && r.poller.replyTo.Id == lane.Id {
			r.poller.dropped = true
		}
	}
	delete(g.pollerLanes, lane.Id)
}

// maxWaitingPolls bounds the polls one group holds while they wait for
// work or for a read of their shard (the rest are refused as overloaded).
const maxWaitingPolls = 4096

// onAck nacks at once, or acks once durable: the ack's writes are staged
// and flushed, and the records are settled only when they are durable (a
// failed commit leaves them claimed).
func (g *groupCoordinator) onAck(ctx actor.Context, m *GroupAckRequest) {
	if err := g.checkShard(m.Shard); err != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
		return
	}
	if m.Nack {
		n, werr := g.core.nack(m.Shard, m.Offsets, g.cfg.Now())
		if werr != nil {
			g.replyErr(ctx, m.ReplyTo, m.ReqID, werr)
			return
		}
		g.countSettled(true, n)
		g.answerDone(ctx, m.ReplyTo, m.ReqID, n)
		return
	}
	stage, werr := g.core.stageAck(m.Shard, m.Offsets)
	if werr != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, werr)
		return
	}
	to, id, shard, offsets := m.ReplyTo, m.ReqID, m.Shard, m.Offsets
	g.afterFlush(func(err error) {
		if err != nil {
			g.core.unstageAck(shard, offsets, stage)
			g.replyErr(ctx, to, id, storageErr(err))
			return
		}
		n := g.core.applyAck(shard, offsets, stage)
		g.countSettled(false, n)
		g.reply(ctx, to, wire.AppendGroupDone(nil, id, uint64(n)))
	})
}

// onAcks acks each entry of a coalesced GroupAcks as onAck acks one
// GroupAck: an entry the group refuses (a shard the stream lacks, an offset
// never delivered) gets its error and changes nothing, the others are
// staged, and all are answered in one GroupAcksDone once their writes are
// durable (a failed commit unstages every entry and fails each with it).
func (g *groupCoordinator) onAcks(ctx actor.Context, m *GroupAcksRequest) {
	outs := make([]wire.GroupAckOutcome, len(m.Entries))
	stages := make([]uint64, len(m.Entries))
	for i, e := range m.Entries {
		if werr := g.checkShard(e.Shard); werr != nil {
			outs[i].Err = werr
			continue
		}
		stages[i], outs[i].Err = g.core.stageAck(e.Shard, e.Offsets)
	}
	to, id, entries := m.ReplyTo, m.ReqID, m.Entries
	g.afterFlush(func(err error) {
		for i, e := range entries {
			switch {
			case outs[i].Err != nil:
			case err != nil:
				g.core.unstageAck(e.Shard, e.Offsets, stages[i])
				outs[i].Err = storageErr(err)
			default:
				n := g.core.applyAck(e.Shard, e.Offsets, stages[i])
				g.countSettled(false, n)
				outs[i].Count = uint64(n)
			}
		}
		g.reply(ctx, to, wire.AppendGroupAcksDone(nil, id, outs))
	})
}

// answerDone answers GroupDone(n) once what changed is durable.
func (g *groupCoordinator) answerDone(ctx actor.Context, to *actor.PID, id uint64, n int) {
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
	g.answerDone(ctx, m.ReplyTo, m.ReqID, n)
}

// onSeek moves the group's position on the shards sought (groupCore.seek)
// and answers the positions once they are durable. A shard being read for
// a consumer is refused too: its picks would be claimed at the old
// position.
func (g *groupCoordinator) onSeek(ctx actor.Context, m *GroupSeekRequest) {
	for _, sh := range m.Shards {
		if err := g.checkShard(sh); err != nil {
			g.replyErr(ctx, m.ReplyTo, m.ReqID, err)
			return
		}
	}
	for _, sh := range m.Shards {
		if g.busy[sh] {
			g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeGroupInUse,
				"records of shard %d of group %s are being read for a consumer; retry", sh, g.cfg.Group))
			return
		}
	}
	g.refreshTails()
	pos, werr := g.core.seek(m.Shards, m.Offsets)
	if werr != nil {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, werr)
		return
	}
	g.create()
	offs := make([]wire.ShardOffset, len(pos))
	for i, p := range pos {
		offs[i] = wire.ShardOffset{Shard: m.Shards[i], Offset: p}
	}
	g.log.Info("group: seek", slog.Any("positions", offs))
	to, id := m.ReplyTo, m.ReqID
	g.afterFlush(func(err error) {
		if err != nil {
			g.replyErr(ctx, to, id, storageErr(err))
			return
		}
		g.reply(ctx, to, wire.AppendShardOffsets(nil, id, offs))
	})
}

// onDelete takes a delete of the group, unless push members hold it: then
// it stops, writing nothing more, and the registry deletes the group's
// state once it has (see GroupDeleteRequest). What is waiting (polls,
// acks not yet durable) is answered group_not_found as it stops.
func (g *groupCoordinator) onDelete(ctx actor.Context, m *GroupDeleteRequest) {
	if n := len(g.core.members); n > 0 {
		g.replyErr(ctx, m.ReplyTo, m.ReqID, wire.Errorf(wire.CodeGroupInUse,
			"group %s has %d push members; stop them (or wait for their session to expire) before deleting it", g.cfg.Group, n))
		g.deleteRefused(ctx, m)
		return
	}
	g.deleting = true
	m.accepted.Store(true)
	g.log.Info("group: deleting")
	ctx.Stop(ctx.Self())
}

// deleteRefused tells the registry that a delete it forwarded here will not
// be carried out, so the group's requests it holds go on.
func (g *groupCoordinator) deleteRefused(ctx actor.Context, m *GroupDeleteRequest) {
	if parent := ctx.Parent(); parent != nil {
		ctx.Send(parent, &groupDeleteRefused{req: m})
	}
}

func (g *groupCoordinator) onJoin(ctx actor.Context, from *actor.PID, m *GroupJoinRequest) {
	if from == nil {
		return
	}
	if m.Window < 1 || int(m.Window) > g.cfg.Limits.MaxWindow {
		ctx.Send(from, &GroupJoinResponse{Err: wire.Errorf(wire.CodeInvalidRequest,
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

// onCommit commits a member's ack (or takes its heartbeat) and answers once
// the commit is durable. A Verify request commits nothing: it says why a
// cursor the member does not hold returns no credit.
func (g *groupCoordinator) onCommit(ctx actor.Context, from *actor.PID, m *GroupCommitRequest) {
	mem := g.member(m.Member, m.Epoch)
	if mem == nil {
		if from != nil {
			ctx.Send(from, &GroupCommitResponse{ReqID: m.ReqID, Seq: m.Seq, Err: wire.Errorf(wire.CodeStaleCursor,
				"member %s is no longer in group %s; its records are redelivered", m.Member, g.cfg.Group)})
		}
		return
	}
	mem.lastSeen = g.cfg.Now()
	mem.inFlight = m.InFlight
	var werr *wire.Error
	var ranges []stagedRange
	switch {
	case m.Verify:
		werr = g.verifyCursor(mem.epoch, m.Cursor, m.Count)
	case len(m.Cursor) > 0:
		ranges, werr = g.stageCursor(mem.epoch, m.Cursor, m.Count)
	}
	id, epoch, reqID, seq, count := m.Member, m.Epoch, m.ReqID, m.Seq, m.Count
	g.afterFlush(func(err error) {
		resp := &GroupCommitResponse{ReqID: reqID, Seq: seq, Err: werr}
		if err != nil && werr == nil {
			resp.Err = storageErr(err)
		}
		switch {
		case resp.Err == nil:
			g.countSettled(false, g.applyCursor(ranges))
		case err != nil:
			for _, r := range ranges {
				g.core.unstageAck(r.shard, r.offsets, r.stage)
			}
		}
		if cur := g.member(id, epoch); cur != nil {
			if resp.Err == nil && len(ranges) > 0 {
				cur.inFlight -= min(count, cur.inFlight) // the member takes the credit back now
			}
			resp.Generation, resp.Shards = g.core.generation, append([]uint32(nil), cur.shards...)
		}
		if from != nil {
			ctx.Send(from, resp)
		}
	})
}

// checkCursor checks that cursor is a delivery of this group to the member
// at epoch, of count records.
func (g *groupCoordinator) checkCursor(epoch uint64, cursor []byte, count uint32) (cursorToken, *wire.Error) {
	t, werr := parseCursor(g.cfg.Secret, cursor)
	if werr != nil {
		return t, werr
	}
	if t.stream != g.cfg.Stream.ID || t.group != cursorGroup(g.cfg.Group, g.core.incarnation) {
		return t, wire.Errorf(wire.CodeInvalidCursor, "the cursor belongs to another stream or group")
	}
	if t.epoch != epoch {
		return t, wire.Errorf(wire.CodeStaleCursor,
			"the cursor is from an earlier membership (epoch %d, now %d); its records are redelivered", t.epoch, epoch)
	}
	var total uint64
	for _, r := range t.ranges {
		if int(r.shard) >= len(g.core.shards) || r.first+uint64(r.count) > g.core.shards[r.shard].next {
			return t, wire.Errorf(wire.CodeInvalidCursor, "the cursor names records of shard %d the group never delivered", r.shard)
		}
		total += uint64(r.count)
	}
	if total != uint64(count) {
		return t, wire.Errorf(wire.CodeInvalidRequest,
			"the cursor names %d records and the ack says %d: an ack returns the credit of exactly its delivery", total, count)
	}
	return t, nil
}

// stagedRange is a range of a cursor whose ack is staged.
type stagedRange struct {
	shard   uint32
	offsets []uint64
	stage   uint64
}

// stageCursor checks a cursor and stages the ack of every record it names
// (applyCursor applies them once durable).
func (g *groupCoordinator) stageCursor(epoch uint64, cursor []byte, count uint32) ([]stagedRange, *wire.Error) {
	t, werr := g.checkCursor(epoch, cursor, count)
	if werr != nil {
		return nil, werr
	}
	staged := make([]stagedRange, 0, len(t.ranges))
	for _, r := range t.ranges {
		offs := rangeOffsets(r)
		stage, werr := g.core.stageAck(r.shard, offs)
		if werr != nil {
			return nil, werr // never: checkCursor checked every range was delivered
		}
		staged = append(staged, stagedRange{shard: r.shard, offsets: offs, stage: stage})
	}
	return staged, nil
}

// applyCursor settles the records of a staged cursor whose writes are
// durable, and returns how many it settled.
func (g *groupCoordinator) applyCursor(ranges []stagedRange) int {
	n := 0
	for _, r := range ranges {
		n += g.core.applyAck(r.shard, r.offsets, r.stage)
	}
	return n
}

func rangeOffsets(r cursorRangeOf) []uint64 {
	offs := make([]uint64, r.count)
	for i := range offs {
		offs[i] = r.first + uint64(i)
	}
	return offs
}

// verifyCursor says why a cursor the member does not hold returns no
// credit: it is not the node's, or of another membership, or its delivery
// was acked already (a member holds every delivery of its membership until
// its commit is durable).
func (g *groupCoordinator) verifyCursor(epoch uint64, cursor []byte, count uint32) *wire.Error {
	if _, werr := g.checkCursor(epoch, cursor, count); werr != nil {
		return werr
	}
	return wire.Errorf(wire.CodeInvalidRequest,
		"the cursor's delivery was acked already: its records are committed and its credit returned")
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
	if g.core == nil || int(m.Shard) >= len(g.core.shards) {
		// Loading: a notice the failed instance asked for (the shard keeps
		// watchers by pid); onLoaded learns every tail anyway.
		return
	}
	g.watching[m.Shard] = false
	s := g.core.shards[m.Shard]
	s.tail = max(s.tail, m.Tail)
	s.first = max(s.first, m.First)
}

// onTick redelivers claims whose visibility lapsed and removes members
// silent past the session timeout; serve then answers the polls whose wait
// is over.
func (g *groupCoordinator) onTick(ctx actor.Context) {
	now := g.cfg.Now()
	if n := g.core.expire(now); n > 0 {
		g.cfg.Stats.add(&g.cfg.Stats.GroupRedelivered, uint64(n))
		if g.gauges != nil {
			g.gauges.Redelivered.Add(uint64(n))
		}
	}
	for _, id := range g.core.lapsedIdle() {
		if pid := g.memberPIDs[id]; pid != nil {
			ctx.Send(pid, &GroupClaimsLapsed{})
		}
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
}
