package actors

import (
	"cmp"
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
	// Cluster is set for a cluster stream's group: its state is committed
	// through the raft group of the stream's shard 0 (GroupStateWrite to
	// Stream.Shards[0], shard_groups.go) rather than Writer, and the
	// coordinator serves only while this node's replica of shard 0 leads.
	// A write that fails stops it (answering with not_leader), so a
	// coordinator never goes on from state storage may not hold.
	Cluster bool
	Limits  GroupLimits
	// Secret signs cursors.
	Secret []byte
	// MaxFrameBytes bounds the frames the coordinator builds.
	MaxFrameBytes int
	// Now and AfterFunc are the clock (tests inject them); nil: time.Now and
	// time.AfterFunc.
	Now       func() time.Time
	AfterFunc func(time.Duration, func()) (stop func() bool)
	Stats     *Stats
	// Goroutines starts the coordinator's storage reads (nil: untracked).
	Goroutines *Goroutines
	// Remote reads the shards of a cluster stream this node holds no
	// replica of from their replicas (nil: a single node).
	Remote *RemoteShards
}

// groupCoordinator owns one consumer group on one stream: the committed
// cursor per shard, claims with their visibility deadlines, records owed for
// redelivery, dead letters and push members with their shares of the
// shards (groupCore holds that state). Pull requests and push members both
// claim through it, so a workload can move between them without losing its
// place.
//
// It never blocks in Receive. It starts by waiting, with ReenterAfter, for
// the storage writer to commit what an earlier instance sent it, then loads
// its state in a goroutine it owns and learns each shard's tail; requests
// that arrive meanwhile wait in a stash. It reads the records it hands out
// in goroutines too (one read at a time per shard, answered with
// picksRead), so acks, heartbeats and every other group are served while a
// read waits on the disk. It learns of new records by watching each shard's
// tail (one notice per watch, and only while someone waits for work).
// Every change is committed through the storage writer; acks are answered
// only once durable. All fields are owned by the actor and touched only in
// Receive (and in the ReenterAfter callbacks it runs).
type groupCoordinator struct {
	cfg  GroupCoordinatorConfig
	core *groupCore
	log  *slog.Logger
	// ready is set once the state is loaded and every shard's tail is
	// known; until then requests wait in stash.
	ready bool
	stash []stashed
	// stopped is set when this instance stops or restarts: callbacks it
	// registered before must do nothing after. leaving is set once it has
	// poisoned itself (its stream's shards stopped).
	stopped, leaving bool
	// exists is false until the group has state (a poll or a join creates
	// it).
	exists bool

	pollers []*groupPoller
	// pollerLanes counts the polls of each requester (a connection's
	// control lane) that wait or are being read for, watched: when it
	// stops, its polls are dropped before they claim records no one would
	// receive.
	pollerLanes map[string]*pollerLane
	// members maps a push member's id to its actor; hungry members have a
	// claim request outstanding that no read serves yet.
	memberPIDs map[string]*actor.PID
	hungry     map[string]int
	// watching marks shards with a WatchTail outstanding.
	watching map[uint32]bool

	// reads are the log reads in flight, by id; busy marks the shards they
	// read (no two reads pick from one shard), reserved counts their picks
	// against the group's in-flight bound.
	reads    map[uint64]*groupRead
	readSeq  uint64
	busy     map[uint32]bool
	reserved int
	// cache is what the last log read returned.
	cache readCache

	// flushes are the answers waiting on each MetaWriteRequest sent, in
	// order (the writer answers in order); flush keeps at most one
	// outstanding (group commit).
	flushes [][]func(error)
	// waiting are answers for the next flush.
	waiting []func(error)

	reportedDead uint64
	// gauges are the group's lag and claims, for metrics; committed is
	// where it publishes its cursors for the lag.
	gauges    *GroupGauges
	committed []atomic.Uint64

	// token marks this instance's flushes and reads: a restarted
	// coordinator keeps its pid, and answers to its failed instance's
	// requests must not be taken for its own.
	token uint64
	// dropped is set when the registry says the stream was deleted;
	// deleting when the coordinator took a delete of its group and stops:
	// it writes nothing more.
	dropped, deleting bool
	// lost is why a cluster stream's coordinator stops: this node's
	// replica of shard 0 no longer leads, or a write through it failed
	// (members and polls are told, with not_leader, to come again).
	lost *wire.Error
	// shardPIDs are the stream's shards, watched: when they stop (the stream
	// was deleted or the catalog restarted) the coordinator stops too.
	shardPIDs map[string]bool

	timerAt   time.Time
	timerStop func() bool
	timerGen  uint64
}

// pollerLane is a requester with polls waiting or being read for.
type pollerLane struct {
	pid *actor.PID
	n   int
}

type groupPoller struct {
	replyTo  *actor.PID
	reqID    uint64
	shard    uint32
	max      int
	deadline time.Time
	// dropped is set when its requester stopped while a read for it ran.
	dropped bool
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
	return actor.PropsFromProducer(func() actor.Actor { return &groupCoordinator{cfg: cfg} }, actor.WithDispatcher(cfg.Goroutines.Dispatcher()))
}

// Receive dispatches. After each message that may change the group's state
// the pending changes are flushed, waiting consumers are served and the
// timer is re-armed (settle): lifecycle and loading messages return before
// it, and so does a message whose handler reports that nothing changed
// (onMetaWriteResponse, onGroupTick, onTerminated).
func (g *groupCoordinator) Receive(ctx actor.Context) {
	settle := true
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
		return
	case *actor.Stopping:
		g.onStopping(ctx)
		return
	case *actor.Restarting:
		g.onRestarting(ctx)
		return
	case *actor.Stopped:
		// Nothing to do: Stopping (or Restarting) answered everyone.
		return
	case *groupStreamDropped:
		g.onStreamDropped()
		return
	case *groupLeadershipLost:
		g.lost = cmp.Or(g.lost, m.err)
		return
	case *groupLoaded:
		g.onLoaded(ctx, m)
		return
	case *GroupPollRequest, *GroupAckRequest, *GroupAcksRequest, *GroupDeadLettersRequest, *GroupSelectRequest, *GroupDescribeRequest,
		*GroupJoinRequest, *GroupClaimRequest, *GroupCommitRequest, *GroupSeekRequest, *GroupDeleteRequest:
		g.onGroupRequest(ctx, m)
	case *TailAdvanced:
		g.onTail(ctx, m)
	case *picksRead:
		g.onPicksRead(ctx, m)
	case *MetaWriteResponse:
		settle = g.onMetaWriteResponse(ctx, m)
	case *groupTick:
		settle = g.onGroupTick(ctx, m)
	case *actor.Terminated:
		settle = g.onTerminated(ctx, m)
	case *memberGone:
		g.onMemberGone(ctx, m.who)
	default:
		ctx.Logger().Warn("group coordinator: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
		return
	}
	if settle {
		g.settle(ctx)
	}
}

// onGroupRequest stashes a request until the coordinator is ready, and
// serves it (onRequest) once it is. A stashed request settles nothing:
// settle does nothing before the coordinator is ready.
func (g *groupCoordinator) onGroupRequest(ctx actor.Context, msg any) {
	if !g.ready {
		g.stash = append(g.stash, stashed{msg: msg, sender: ctx.Sender()})
		return
	}
	g.onRequest(ctx, ctx.Sender(), msg)
}

// onMetaWriteResponse runs the answers waiting on the flush the storage
// writer answered. It reports false for an answer to the failed instance
// before a restart, which changes nothing.
func (g *groupCoordinator) onMetaWriteResponse(ctx actor.Context, m *MetaWriteResponse) bool {
	if m.Token != g.token {
		return false // an answer to the failed instance before a restart
	}
	g.onFlushed(m.Err)
	if m.Err != nil && g.cfg.Cluster {
		g.loseLeadership(ctx, m.Err)
		return false
	}
	return true
}

// loseLeadership stops a cluster stream's coordinator whose write through
// shard 0 failed or that could not start there: what it holds in memory
// may differ from what the group's replicas hold, so it goes, and the next
// request starts a coordinator that loads the state again after a barrier
// (here, if this replica still leads, or on the leader).
func (g *groupCoordinator) loseLeadership(ctx actor.Context, err error) {
	if g.lost == nil {
		g.lost = wire.Errorf(wire.CodeNotLeader, "the group's coordinator stopped: %v; retry (join again)", err)
		g.lost.Detail = groupLeaderHint(g.cfg.Stream)
		g.log.Info("group: coordinator stops", slog.Any("reason", err))
	}
	ctx.Stop(ctx.Self())
}

// onGroupTick runs the coordinator's timer (onTick). It reports false for
// the tick of a timer that was re-armed since, which changes nothing.
func (g *groupCoordinator) onGroupTick(ctx actor.Context, m *groupTick) bool {
	if m.gen != g.timerGen {
		return false
	}
	g.timerAt, g.timerStop = time.Time{}, nil
	g.onTick(ctx)
	return true
}

// onStreamDropped notes that the stream was deleted, so that stopping tells
// members and polls stream_not_found.
func (g *groupCoordinator) onStreamDropped() {
	g.dropped = true
}

// onRequest dispatches a group request (live, or from the stash once the
// coordinator is ready); from is its sender.
func (g *groupCoordinator) onRequest(ctx actor.Context, from *actor.PID, msg any) {
	if g.lost != nil {
		g.refuse(ctx, from, msg, g.lost)
		return
	}
	if g.deleting {
		// Behind the delete it took. The registry holds the group's
		// requests from the delete on; one that comes here anyway (sent
		// directly, as a member's are) finds the group gone.
		g.refuse(ctx, from, msg, g.stopError())
		return
	}
	switch m := msg.(type) {
	case *GroupPollRequest:
		g.onPoll(ctx, m)
	case *GroupAckRequest:
		g.onAck(ctx, m)
	case *GroupAcksRequest:
		g.onAcks(ctx, m)
	case *GroupDeadLettersRequest:
		g.onDeadLetters(ctx, m)
	case *GroupSelectRequest:
		g.onSelect(ctx, m)
	case *GroupDescribeRequest:
		g.reply(ctx, m.ReplyTo, wire.AppendGroupInfo(nil, m.ReqID, g.info()))
	case *GroupJoinRequest:
		g.onJoin(ctx, from, m)
	case *GroupClaimRequest:
		g.onClaim(ctx, m)
	case *GroupCommitRequest:
		g.onCommit(ctx, from, m)
	case *GroupSeekRequest:
		g.onSeek(ctx, m)
	case *GroupDeleteRequest:
		g.onDelete(ctx, m)
	}
}

// settle runs after each message: waiting consumers are served, the gauges
// updated, pending state changes flushed and the timer re-armed.
func (g *groupCoordinator) settle(ctx actor.Context) {
	if !g.ready || g.deleting {
		return
	}
	g.serve(ctx)
	g.updateGauges()
	if g.core.deadLettered > g.reportedDead {
		g.cfg.Stats.add(&g.cfg.Stats.GroupDeadLettered, g.core.deadLettered-g.reportedDead)
		if g.gauges != nil {
			g.gauges.DeadLettered.Add(g.core.deadLettered - g.reportedDead)
		}
		g.reportedDead = g.core.deadLettered
	}
	g.flush(ctx)
	g.arm(ctx)
}

func (g *groupCoordinator) stopError() *wire.Error {
	if g.lost != nil {
		return g.lost
	}
	if g.deleting {
		return wire.Errorf(wire.CodeGroupNotFound, "group %s was deleted from stream %s", g.cfg.Group, g.cfg.Stream.Name)
	}
	if g.dropped {
		return wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", g.cfg.Stream.Name)
	}
	return wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator stopped (the node is stopping, or the stream's shards restarted); join again")
}

// groupLoaded carries the state a coordinator's goroutine loaded.
type groupLoaded struct {
	token uint64
	core  *groupCore
	found bool
	err   error
}

func (g *groupCoordinator) onStarted(ctx actor.Context) {
	h := g.cfg.Stream
	g.log = ctx.Logger().With(slog.String("stream", h.Name.String()), slog.String("group", g.cfg.Group))
	g.token = groupTokens.Add(1)
	g.memberPIDs = map[string]*actor.PID{}
	g.hungry = map[string]int{}
	g.watching = map[uint32]bool{}
	g.reads = map[uint64]*groupRead{}
	g.busy = map[uint32]bool{}
	g.gauges = g.cfg.Stats.Group(h.Name.String(), g.cfg.Group)
	// What an earlier instance (a failed one, or the one the registry
	// replaced) sent the storage writer is committed before the state is
	// read: the writer answers this empty write after everything queued.
	// A cluster stream's group: every write an earlier leader's
	// coordinator committed through shard 0 applied here before the state
	// is read (the barrier is an empty write through the same raft group).
	f := ctx.RequestFuture(g.stateTarget(), g.stateWrite(nil), 30*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		if g.stopped {
			return
		}
		if r, ok := res.(*MetaWriteResponse); ok && err == nil && r.Err != nil && g.cfg.Cluster {
			err = r.Err
		}
		if err != nil && g.cfg.Cluster {
			g.loseLeadership(ctx, err)
			return
		}
		if err != nil {
			panic(fmt.Errorf("group %s on %s: waiting for the storage writer: %w", g.cfg.Group, h.Name, err))
		}
		g.load(ctx)
	})
}

// load reads the group's state in a goroutine; groupLoaded brings it back.
func (g *groupCoordinator) load(ctx actor.Context) {
	h, token := g.cfg.Stream, g.token
	self, root := ctx.Self(), ctx.ActorSystem().Root
	prefix := groupPrefix(h.ID, g.cfg.Group)
	core := newGroupCore(h.ID, g.cfg.Group, len(h.Shards), g.cfg.Limits)
	if !g.cfg.Goroutines.Go(func() {
		found, err := core.load(func(fn func(k, v []byte) error) error { return h.Log.ScanMeta(prefix, fn) })
		root.Send(self, &groupLoaded{token: token, core: core, found: found, err: err})
	}) {
		ctx.Stop(ctx.Self()) // the node is stopping
	}
}

// onLoaded takes the loaded state, then learns every shard's tail (and
// retention floor) before serving, so a poll that does not wait finds
// what is there. Shards answer at once (a recovering one once it knows its
// tail).
func (g *groupCoordinator) onLoaded(ctx actor.Context, m *groupLoaded) {
	if m.token != g.token || g.stopped {
		return
	}
	h := g.cfg.Stream
	if m.err != nil {
		// Bad state must not be guessed at: fail, and let the supervisor
		// decide (the registry stops a coordinator that keeps failing).
		panic(fmt.Errorf("group %s on %s: loading state: %w", g.cfg.Group, h.Name, m.err))
	}
	g.core, g.exists = m.core, m.found
	if g.gauges != nil && len(h.Progress) == len(h.Shards) {
		g.committed = g.gauges.trackLag(h.Progress)
		g.updateGauges() // the loaded cursors, not zeros, from the first scrape on
	}
	g.shardPIDs = make(map[string]bool, len(h.Shards))
	waiting := len(h.Shards)
	for i, pid := range h.Shards {
		g.shardPIDs[pid.Id] = true
		ctx.Watch(pid)
		f := ctx.RequestFuture(pid, &ShardInfoRequest{}, 10*time.Second)
		ctx.ReenterAfter(f, func(res any, err error) {
			if g.stopped {
				return
			}
			if info, ok := res.(*ShardInfoResponse); ok && err == nil {
				s := g.core.shards[i]
				s.tail, s.first = max(s.tail, info.Tail), max(s.first, info.First)
			} else {
				g.log.Warn("group: shard did not report its tail; watching it", slog.Int("shard", i), slog.Any("error", err))
				g.watch(ctx, uint32(i), true)
			}
			if waiting--; waiting == 0 {
				g.becomeReady(ctx)
			}
		})
	}
	if waiting == 0 {
		g.becomeReady(ctx)
	}
}

// becomeReady serves the requests that waited, in arrival order.
func (g *groupCoordinator) becomeReady(ctx actor.Context) {
	g.ready = true
	stash := g.stash
	g.stash = nil
	for _, st := range stash {
		g.onRequest(ctx, st.sender, st.msg)
	}
	g.settle(ctx)
}

// onStopping shuts the coordinator down with the error of why it stops
// (stopError).
func (g *groupCoordinator) onStopping(ctx actor.Context) {
	g.shutdown(ctx, g.stopError())
}

// onRestarting shuts the failed instance down: its members join again, on
// the new instance.
func (g *groupCoordinator) onRestarting(ctx actor.Context) {
	g.shutdown(ctx, wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator restarted; join again"))
}

// shutdown answers everyone waiting with err and ends the members. What
// changed since the last flush still goes to the storage writer (stopped
// after the coordinators), unanswered.
func (g *groupCoordinator) shutdown(ctx actor.Context, err *wire.Error) {
	g.stopped = true
	if g.gauges != nil {
		g.gauges.Members.Store(0)
	}
	if g.core != nil && !g.deleting && g.lost == nil {
		if puts := g.core.flushPuts(); len(puts) > 0 {
			ctx.Send(g.stateTarget(), g.stateWrite(puts))
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
	for _, st := range g.stash {
		g.refuse(ctx, st.sender, st.msg, err)
	}
	g.stash = nil
	for _, p := range g.pollers {
		g.replyErr(ctx, p.replyTo, p.reqID, err)
	}
	for _, r := range g.reads {
		if p := r.poller; p != nil && !p.dropped {
			g.replyErr(ctx, p.replyTo, p.reqID, err)
		}
	}
	for _, l := range g.pollerLanes {
		ctx.Unwatch(l.pid)
	}
	g.pollers, g.reads, g.pollerLanes = nil, nil, nil
	for id, pid := range g.memberPIDs {
		ctx.Unwatch(pid)
		ctx.Send(pid, &GroupMemberEnded{Err: err})
		delete(g.memberPIDs, id)
	}
	// A flush on its way may still be applied: its answers are in doubt
	// (replication_timeout), unlike those never sent, which were not.
	flushErr := err
	if g.lost != nil {
		flushErr = wire.Errorf(wire.CodeReplicationTimeout, "the group's coordinator stopped before its write was answered; it may or may not have been applied")
	}
	for _, fs := range g.flushes {
		for _, f := range fs {
			f(flushErr)
		}
	}
	for _, f := range g.waiting {
		f(err)
	}
	g.flushes, g.waiting = nil, nil
}

// refuse answers a request the coordinator will not serve.
func (g *groupCoordinator) refuse(ctx actor.Context, from *actor.PID, msg any, err *wire.Error) {
	switch m := msg.(type) {
	case *GroupJoinRequest:
		if from != nil {
			ctx.Send(from, &GroupJoinResponse{Err: err})
		}
	case *GroupCommitRequest:
		if from != nil {
			ctx.Send(from, &GroupCommitResponse{ReqID: m.ReqID, Seq: m.Seq, Err: err})
		}
	case *GroupClaimRequest:
		// The member is told by GroupMemberEnded.
	case *GroupDeleteRequest:
		AnswerLostGroupRequest(ctx.ActorSystem(), msg, err)
		g.deleteRefused(ctx, m)
	default:
		AnswerLostGroupRequest(ctx.ActorSystem(), msg, err)
	}
}

// onTerminated handles a watched actor that stopped: a shard (the
// coordinator stops too), a poller's lane, or a member. It reports whether
// the group's state may have changed.
func (g *groupCoordinator) onTerminated(ctx actor.Context, m *actor.Terminated) bool {
	if g.shardPIDs[m.Who.Id] {
		// The stream's shards are gone: this coordinator's handle is
		// stale. The registry spawns a new one on the next request. A
		// poison pill, not a stop: the requests already queued are served
		// first (Terminated, a system message, overtook them), and those
		// that come after it are answered as dead letters.
		if !g.leaving {
			g.leaving = true
			ctx.Poison(ctx.Self())
		}
		return false
	}
	if g.pollerLanes[m.Who.Id] != nil {
		g.dropPollersOf(m.Who)
		return false
	}
	// Terminated is a system message and overtakes what the member sent
	// before it went (its last ack): leave after those.
	ctx.Send(ctx.Self(), &memberGone{who: m.Who})
	return false
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

// groupTokens numbers coordinator instances (their flush and read tokens).
var groupTokens atomic.Uint64

func storageErr(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return wire.Errorf(wire.CodeStorageFailure, "committing group state: %v", err)
}

// flush sends the pending state changes (and the answers waiting on them)
// to the storage writer. Changes that only tidy (groupCore's lazy writes)
// wait for the next flush that goes anyway.
//
// Flushes are group-committed: at most one is outstanding. What changes
// while it is being committed (every ack, poll claim and join that arrives
// meanwhile) waits, staged, and goes in the next flush, sent as the
// outstanding one is answered (settle runs after onMetaWriteResponse): one
// write and one answer for all of it, however many requests it holds,
// as the storage writer commits what queued while it synced. Writes still
// reach the writer in order, which stageAck relies on.
func (g *groupCoordinator) flush(ctx actor.Context) {
	if !g.core.eager && len(g.waiting) == 0 || len(g.flushes) > 0 {
		return
	}
	puts := g.core.flushPuts()
	g.flushes = append(g.flushes, g.waiting)
	g.waiting = nil
	w := g.stateWrite(puts)
	if r, ok := w.(*GroupStateWrite); ok {
		r.Token = g.token
	} else {
		w.(*MetaWriteRequest).Token = g.token
	}
	ctx.Request(g.stateTarget(), w)
}

// stateTarget is where the group's state is committed: the storage
// writer, or a cluster stream's shard 0 (its raft group).
func (g *groupCoordinator) stateTarget() *actor.PID {
	if g.cfg.Cluster {
		return g.cfg.Stream.Shards[0]
	}
	return g.cfg.Writer
}

// stateWrite is the write of puts for stateTarget; both answer
// MetaWriteResponse.
func (g *groupCoordinator) stateWrite(puts []storage.MetaPut) any {
	if g.cfg.Cluster {
		return &GroupStateWrite{Puts: puts}
	}
	return &MetaWriteRequest{Puts: puts}
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
	var at time.Time
	set := func(t time.Time, ok bool) {
		if ok && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	set(g.core.nextDeadline())
	set(g.core.nextSessionDeadline())
	for _, p := range g.pollers {
		// A poll of a shard being read waits for the read (serve answers it
		// when the read comes back): its deadline would only fire again.
		set(p.deadline, !g.busy[p.shard])
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

// updateGauges publishes the group's claims and committed cursors for
// metrics (the lag is computed from the cursors and the shards' published
// tails when it is read).
func (g *groupCoordinator) updateGauges() {
	if g.gauges == nil {
		return
	}
	g.gauges.Claims.Store(int64(g.core.claimCount))
	g.gauges.Members.Store(int64(len(g.core.members)))
	dead := 0
	for i, s := range g.core.shards {
		if i < len(g.committed) {
			g.committed[i].Store(s.committed)
		}
		dead += len(s.dead)
	}
	g.gauges.Dead.Store(int64(dead))
}
