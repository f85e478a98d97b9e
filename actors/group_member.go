package actors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// GroupMemberConfig configures a push member: one group stream of a
// connection.
type GroupMemberConfig struct {
	// Groups is the groups registry.
	Groups *actor.PID
	Stream *StreamHandle
	// Request is the GroupSubscribe that opened the stream, with its
	// request id; Member is the id to join as (the request's, or one the
	// connection named).
	Request wire.GroupSubscribe
	ReqID   uint64
	Member  string
	// QUIC is the stream: the member's lane writes to it.
	QUIC SubscriberStream
	// Answers, if set, meters the frames waiting for the member's lane (the
	// reader of the stream's acks waits on it).
	Answers *AnswerMeter
	// MaxPerPush is the granted push cap (at most the window).
	MaxPerPush uint32
	Stats      *Stats
}

// memberAck is a GroupStreamAck the connection read from the member's
// stream.
type memberAck struct {
	reqID  uint64
	cursor []byte
	count  uint32
}

// memberStreamEnded: the client closed or reset its side of the stream.
type memberStreamEnded struct{}

// coordinatorGone is a member's note to itself that its coordinator
// stopped, queued behind what the coordinator sent before.
type coordinatorGone struct{}

// The connection's reader may outlive the member by a moment (the member
// ended the stream itself): what it sends then is dropped quietly.
func (*memberAck) IgnoreDeadLetterLogging()         {}
func (*memberStreamEnded) IgnoreDeadLetterLogging() {}

// groupMemberActor is one push member. Its credit window (memberCredit)
// decides what it asks the coordinator for and what an ack returns: each
// push is at most min(MaxPerPush, Window − in flight) records, asked for
// only while that budget is above zero; at zero it sends nothing and asks
// for nothing. An ack commits its delivery's cursor and, once the commit
// is durable, returns exactly that delivery's credit; an empty ack is a
// heartbeat. Both are answered with the member's current shards, so a
// rebalance is picked up on the next ack. All fields are owned by the
// actor and touched only in Receive.
type groupMemberActor struct {
	cfg         GroupMemberConfig
	lane        *actor.PID
	coordinator *actor.PID
	epoch       uint64
	// credit is the window, from the join on.
	credit *memberCredit
	// session is the session timeout (ms) the coordinator granted.
	session uint32
	closed  bool
}

// NewGroupMemberProps returns the props of a push member.
func NewGroupMemberProps(cfg GroupMemberConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	// A failing lane is stopped, not restarted: its stream state is lost
	// (and its meter would keep the frame it failed on), and its
	// Terminated ends the member.
	return actor.PropsFromProducer(func() actor.Actor { return &groupMemberActor{cfg: cfg} },
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
			return actor.StopDirective
		})))
}

// Receive dispatches.
func (a *groupMemberActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *GroupJoinResponse:
		a.onJoined(ctx, m)
	case *GroupClaimGranted:
		a.onGranted(ctx, m)
	case *memberAck:
		a.onAck(ctx, m)
	case *GroupCommitResponse:
		a.onCommitted(ctx, m)
	case *GroupMemberEnded:
		a.onMemberEnded(ctx, m)
	case *GroupClaimsLapsed:
		a.onClaimsLapsed(ctx)
	case *memberStreamEnded:
		a.onStreamEnded(ctx)
	case *LaneFailed:
		a.onLaneFailed(ctx)
	case *actor.Terminated:
		a.onTerminated(ctx, m)
	case *coordinatorGone:
		a.onCoordinatorGone(ctx)
	case *actor.Stopping:
		a.onStopping()
	case *actor.Stopped:
		a.onStopped()
	case *actor.Restarting:
		a.onRestarting()
	default:
		ctx.Logger().Warn("group member: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *groupMemberActor) onStarted(ctx actor.Context) {
	lane, err := ctx.SpawnNamed(NewLaneProps(LaneConfig{W: a.cfg.QUIC, Meter: a.cfg.Answers}), "lane")
	if err != nil {
		a.cfg.QUIC.Abort(wire.CodeInternal)
		ctx.Stop(ctx.Self())
		return
	}
	a.lane = lane
	a.cfg.Stats.gauge(&a.cfg.Stats.GroupMembers, 1)
	ctx.Request(a.cfg.Groups, &GroupJoinRequest{Stream: a.cfg.Stream, Group: a.cfg.Request.Group, Member: a.cfg.Member,
		Window: a.cfg.Request.Window, MaxPerPush: a.cfg.MaxPerPush})
}

func (a *groupMemberActor) onJoined(ctx actor.Context, m *GroupJoinResponse) {
	if m.Err != nil {
		a.end(ctx, m.Err, a.cfg.ReqID)
		return
	}
	a.credit = newMemberCredit(a.cfg.Request.Window, a.cfg.MaxPerPush)
	a.coordinator, a.epoch, a.session = m.Coordinator, m.Epoch, m.Session
	ctx.Watch(a.coordinator)
	a.write(ctx, wire.AppendGroupAssignment(nil, a.cfg.ReqID, a.assignment(m.Generation, m.Shards, m.Session)), false)
	a.ask(ctx)
}

func (a *groupMemberActor) onGranted(ctx actor.Context, m *GroupClaimGranted) {
	if a.closed {
		return
	}
	if err := a.credit.granted(m.Cursor, uint32(len(m.Records))); err != nil {
		// The coordinator broke the window: the records are not pushed
		// (their claims lapse and they are delivered again).
		ctx.Logger().Error("group member: refusing a push", slog.String("member", a.cfg.Member), slog.Any("error", err))
		a.end(ctx, wire.Errorf(wire.CodeInternal, "the node broke the member's credit window; join again"), 0)
		return
	}
	a.write(ctx, wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: m.Cursor, Records: m.Records}), true)
	a.ask(ctx)
}

func (a *groupMemberActor) onTerminated(ctx actor.Context, m *actor.Terminated) {
	switch {
	case a.lane != nil && m.Who.Equal(a.lane):
		ctx.Stop(ctx.Self())
	case a.coordinator != nil && m.Who.Equal(a.coordinator):
		// Terminated is a system message: it overtakes the coordinator's
		// GroupMemberEnded, which says why. Read that first.
		ctx.Send(ctx.Self(), &coordinatorGone{})
	}
}

// write hands a frame to the member's lane (push: a delivery, which the
// answer meter does not count: credit bounds it).
func (a *groupMemberActor) write(ctx actor.Context, frame []byte, push bool) {
	ctx.Send(a.lane, &WriteFrame{Frame: frame, Push: push})
}

func (a *groupMemberActor) assignment(gen uint64, shards []uint32, session uint32) wire.GroupAssignment {
	return wire.GroupAssignment{Member: a.cfg.Member, Generation: gen, Shards: shards, Window: a.cfg.Request.Window,
		MaxPerPush: a.cfg.MaxPerPush, SessionMillis: session, InFlight: a.credit.inFlight}
}

// ask requests records when the budget allows and no request is out.
func (a *groupMemberActor) ask(ctx actor.Context) {
	if a.closed || a.coordinator == nil {
		return
	}
	if n := a.credit.ask(); n > 0 {
		ctx.Request(a.coordinator, &GroupClaimRequest{Member: a.cfg.Member, Epoch: a.epoch, Max: int(n)})
	}
}

// onAck sends an ack's commit (or heartbeat) to the coordinator, or
// refuses it. No credit comes back here: only the commit's durable answer
// returns it (onCommitted).
func (a *groupMemberActor) onAck(ctx actor.Context, m *memberAck) {
	if a.closed {
		return
	}
	if a.credit == nil {
		a.write(ctx, wire.AppendError(nil, m.reqID, wire.Errorf(wire.CodeProtocolViolation, "ack before the member joined")), false)
		return
	}
	d := a.credit.ack(m.cursor, m.count)
	if d.kind == ackRefused {
		a.write(ctx, wire.AppendError(nil, m.reqID, d.err), false)
		return
	}
	if a.coordinator == nil {
		return // the member is ending
	}
	req := &GroupCommitRequest{Member: a.cfg.Member, Epoch: a.epoch, ReqID: m.reqID, InFlight: a.credit.inFlight}
	switch d.kind {
	case ackCommit:
		req.Cursor, req.Count, req.Seq = m.cursor, m.count, d.seq
	case ackVerify:
		req.Cursor, req.Count, req.Verify = m.cursor, m.count, true
	}
	ctx.Request(a.coordinator, req)
}

// onCommitted answers an ack once the coordinator has: a durable commit
// returns its delivery's credit, and the member asks for more.
func (a *groupMemberActor) onCommitted(ctx actor.Context, m *GroupCommitResponse) {
	if a.closed {
		return
	}
	returned := a.credit.committed(m.Seq, m.Err == nil)
	if m.Err != nil {
		a.write(ctx, wire.AppendError(nil, m.ReqID, m.Err), false)
		return
	}
	a.write(ctx, wire.AppendGroupAssignment(nil, m.ReqID, a.assignment(m.Generation, m.Shards, a.session)), false)
	if returned > 0 {
		a.ask(ctx)
	}
}

// onMemberEnded ends the member with the coordinator's error.
func (a *groupMemberActor) onMemberEnded(ctx actor.Context, m *GroupMemberEnded) {
	a.coordinator = nil // it has forgotten us already
	a.end(ctx, m.Err, 0)
}

// onClaimsLapsed ends a member that holds a whole window of deliveries the
// visibility timeout gave back to the group, acking none: no push could
// come until it acks, and its shards would wait on it for good. Its stream
// ends with session_expired; it joins again and its shards' records flow.
func (a *groupMemberActor) onClaimsLapsed(ctx actor.Context) {
	if a.closed || a.credit == nil || !a.credit.stalled() {
		return
	}
	a.end(ctx, wire.Errorf(wire.CodeSessionExpired,
		"member %s held its whole window of %d records unacked past the visibility timeout: they are delivered again; join again, and ack within the timeout",
		a.cfg.Member, a.credit.window), 0)
}

// onStreamEnded ends the member: the client closed or reset its side of
// the stream.
func (a *groupMemberActor) onStreamEnded(ctx actor.Context) {
	a.end(ctx, nil, 0)
}

// onLaneFailed ends the member: its lane could not write.
func (a *groupMemberActor) onLaneFailed(ctx actor.Context) {
	a.end(ctx, nil, 0)
}

// onCoordinatorGone ends the member when its coordinator stopped, unless it
// has ended already (the coordinator's GroupMemberEnded, read first, says
// why).
func (a *groupMemberActor) onCoordinatorGone(ctx actor.Context) {
	if !a.closed {
		a.coordinator = nil
		a.end(ctx, wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator stopped; join again"), 0)
	}
}

// onStopping resets the stream if the member was stopped from outside, and
// otherwise only stops reading it (end had the lane close it).
func (a *groupMemberActor) onStopping() {
	if !a.closed {
		a.cfg.QUIC.Abort(wire.CodeSubscriptionAborted)
	} else {
		a.cfg.QUIC.StopReading(0)
	}
}

// onStopped counts the member out of the node's gauge.
func (a *groupMemberActor) onStopped() {
	a.cfg.Stats.gauge(&a.cfg.Stats.GroupMembers, -1)
}

// onRestarting resets the stream: what the failed instance held is lost.
func (a *groupMemberActor) onRestarting() {
	a.cfg.QUIC.Abort(wire.CodeInternal)
}

// end finishes the member: an Error frame (with reqID) if err is set, then
// the stream is closed and the actor stops once its lane has.
func (a *groupMemberActor) end(ctx actor.Context, err *wire.Error, reqID uint64) {
	if a.closed {
		return
	}
	a.closed = true
	if a.coordinator != nil {
		ctx.Unwatch(a.coordinator)
	}
	if a.lane == nil {
		ctx.Stop(ctx.Self())
		return
	}
	ctx.Send(a.lane, &CloseLane{ReqID: reqID, Err: err})
	ctx.Poison(a.lane)
}
