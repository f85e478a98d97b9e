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

// groupMemberActor is one push member. It owns its credit window: each push
// is at most min(MaxPerPush, Window − in flight) records, asked of the
// coordinator only while that budget is above zero; at zero it sends
// nothing and asks for nothing. An ack returns its count of credit and
// commits its cursor, in one request; an empty ack is a heartbeat. Both are
// answered with the member's current shards, so a rebalance is picked up
// on the next ack.
type groupMemberActor struct {
	cfg         GroupMemberConfig
	lane        *actor.PID
	coordinator *actor.PID
	epoch       uint64
	inFlight    uint32
	asking      bool
	// session is the session timeout (ms) the coordinator granted.
	session uint32
	closed  bool
	joined  bool
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

func (a *groupMemberActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
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
	case *GroupJoinResponse:
		if m.Err != nil {
			a.end(ctx, m.Err, a.cfg.ReqID)
			return
		}
		a.joined = true
		a.coordinator, a.epoch, a.session = m.Coordinator, m.Epoch, m.Session
		ctx.Watch(a.coordinator)
		ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendGroupAssignment(nil, a.cfg.ReqID, a.assignment(m.Generation, m.Shards, m.Session))})
		a.ask(ctx)
	case *GroupClaimGranted:
		a.asking = false
		if a.closed {
			return
		}
		a.inFlight += uint32(len(m.Records))
		ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: m.Cursor, Records: m.Records}), Push: true})
		a.ask(ctx)
	case *memberAck:
		a.onAck(ctx, m)
	case *GroupCommitResponse:
		if a.closed {
			return
		}
		if m.Err != nil {
			ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendError(nil, m.ReqID, m.Err)})
			return
		}
		ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendGroupAssignment(nil, m.ReqID, a.assignment(m.Generation, m.Shards, a.session))})
	case *GroupMemberEnded:
		a.coordinator = nil // it has forgotten us already
		a.end(ctx, m.Err, 0)
	case *memberStreamEnded:
		a.end(ctx, nil, 0)
	case *LaneFailed:
		a.end(ctx, nil, 0)
	case *actor.Terminated:
		switch {
		case a.lane != nil && m.Who.Equal(a.lane):
			ctx.Stop(ctx.Self())
		case a.coordinator != nil && m.Who.Equal(a.coordinator):
			// Terminated is a system message: it overtakes the coordinator's
			// GroupMemberEnded, which says why. Read that first.
			ctx.Send(ctx.Self(), &coordinatorGone{})
		}
	case *coordinatorGone:
		if !a.closed {
			a.coordinator = nil
			a.end(ctx, wire.Errorf(wire.CodeSubscriptionAborted, "the group coordinator stopped; join again"), 0)
		}
	case *actor.Stopping:
		if !a.closed {
			a.cfg.QUIC.Abort(wire.CodeSubscriptionAborted)
		} else {
			a.cfg.QUIC.StopReading(0)
		}
	case *actor.Stopped:
		a.cfg.Stats.gauge(&a.cfg.Stats.GroupMembers, -1)
	case *actor.Restarting:
		a.cfg.QUIC.Abort(wire.CodeInternal)
	default:
		ctx.Logger().Warn("group member: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (a *groupMemberActor) assignment(gen uint64, shards []uint32, session uint32) wire.GroupAssignment {
	return wire.GroupAssignment{Member: a.cfg.Member, Generation: gen, Shards: shards, Window: a.cfg.Request.Window,
		MaxPerPush: a.cfg.MaxPerPush, SessionMillis: session, InFlight: a.inFlight}
}

// budget is min(MaxPerPush, Window − in flight).
func (a *groupMemberActor) budget() uint32 {
	if a.inFlight >= a.cfg.Request.Window {
		return 0
	}
	return min(a.cfg.MaxPerPush, a.cfg.Request.Window-a.inFlight)
}

// ask requests records when the budget allows and no request is out.
func (a *groupMemberActor) ask(ctx actor.Context) {
	if a.asking || a.closed || a.coordinator == nil {
		return
	}
	if b := a.budget(); b > 0 {
		a.asking = true
		ctx.Request(a.coordinator, &GroupClaimRequest{Member: a.cfg.Member, Epoch: a.epoch, Max: int(b)})
	}
}

func (a *groupMemberActor) onAck(ctx actor.Context, m *memberAck) {
	if a.closed {
		return
	}
	if len(m.cursor) == 0 && m.count > 0 {
		ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendError(nil, m.reqID, wire.Errorf(wire.CodeInvalidRequest,
			"an ack returning %d credit needs the cursor of the records it commits", m.count))})
		return
	}
	if !a.joined {
		ctx.Send(a.lane, &WriteFrame{Frame: wire.AppendError(nil, m.reqID, wire.Errorf(wire.CodeProtocolViolation,
			"ack before the member joined"))})
		return
	}
	// Credit comes back at once, whatever the commit's outcome: the client
	// holds count fewer records either way.
	a.inFlight -= min(m.count, a.inFlight)
	if a.coordinator != nil {
		ctx.Request(a.coordinator, &GroupCommitRequest{Member: a.cfg.Member, Epoch: a.epoch, Cursor: m.cursor, ReqID: m.reqID, InFlight: a.inFlight})
	}
	a.ask(ctx)
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
