package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// GroupsConfig configures the groups registry.
type GroupsConfig struct {
	// Writer is the storage writer.
	Writer *actor.PID
	Limits GroupLimits
	// MaxPerStream bounds a stream's groups: a poll or join that would
	// create one more is refused with quota_exceeded (0: no bound).
	MaxPerStream int
	// Secret signs group cursors (the node keeps it in its metadata, so
	// cursors stay verifiable across restarts).
	Secret        []byte
	MaxFrameBytes int
	// Now and AfterFunc are the coordinators' clock (nil: real time).
	Now       func() time.Time
	AfterFunc func(time.Duration, func()) (stop func() bool)
	Stats     *Stats
	// CoordinatorProps, if set, wraps coordinator props (tests add
	// middleware).
	CoordinatorProps func(*actor.Props) *actor.Props
}

// groups is the registry of group coordinators: it routes each group
// request to the coordinator of its (stream, group), spawning it on first
// use, and is the coordinators' parent and supervisor. A coordinator that
// panics is restarted and reloads its state from storage.
type groups struct {
	cfg   GroupsConfig
	coord map[groupKey]*groupEntry
	// known are the groups of each stream seen so far: read from storage
	// when a new group is first asked for, added to as groups are created
	// (for group_max_per_stream).
	known map[uint64]map[string]struct{}
	log   *slog.Logger
}

type groupKey struct {
	stream uint64
	group  string
}

type groupEntry struct {
	pid    *actor.PID
	handle *StreamHandle
}

// NewGroupsProps returns the props of the groups registry.
func NewGroupsProps(cfg GroupsConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	return actor.PropsFromProducer(func() actor.Actor { return &groups{cfg: cfg} },
		actor.WithSupervisor(groupsStrategy{actor.NewOneForOneStrategy(10, 10*time.Second, func(reason any) actor.Directive {
			return actor.RestartDirective
		})}))
}

// errStopScan ends a metadata scan early.
var errStopScan = errors.New("stop scan")

func (r *groups) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.coord = map[groupKey]*groupEntry{}
		r.known = map[uint64]map[string]struct{}{}
		r.log = ctx.Logger()
	case groupAddressed:
		r.route(ctx, m)
	case *StreamGroupsDropped:
		r.onDropped(ctx, m)
	case *actor.Terminated:
		for k, e := range r.coord {
			if e.pid.Equal(m.Who) {
				delete(r.coord, k)
			}
		}
	}
}

func (r *groups) route(ctx actor.Context, m groupAddressed) {
	h, group := m.groupAddress()
	if h.Deleted() {
		r.refuse(ctx, m, wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", h.Name))
		return
	}
	k := groupKey{stream: h.ID, group: group}
	e, ok := r.coord[k]
	if ok && e.handle != h && e.handle.Deleted() {
		// The catalog restarted and handed out new handles: the old
		// coordinator's shards are gone (it is stopping itself, having seen
		// them go). Wait for it, so two never run for one group.
		ctx.Unwatch(e.pid)
		_ = ctx.PoisonFuture(e.pid).Wait()
		delete(r.coord, k)
		ok = false
	}
	if !ok {
		if !m.creates() && !r.exists(h, group) {
			r.refuse(ctx, m, wire.Errorf(wire.CodeGroupNotFound, "group %s has never been used on stream %s", group, h.Name))
			return
		}
		if m.creates() && r.cfg.MaxPerStream > 0 {
			known := r.groupsOf(h)
			if _, ok := known[group]; !ok {
				if len(known) >= r.cfg.MaxPerStream {
					r.cfg.Stats.Limits.Groups.Add(1)
					r.refuse(ctx, m, wire.Errorf(wire.CodeQuotaExceeded,
						"stream %s has its maximum of %d consumer groups (group_max_per_stream)", h.Name, r.cfg.MaxPerStream))
					return
				}
				known[group] = struct{}{}
			}
		}
		props := NewGroupCoordinatorProps(GroupCoordinatorConfig{Stream: h, Group: group, Writer: r.cfg.Writer,
			Limits: r.cfg.Limits, Secret: r.cfg.Secret, MaxFrameBytes: r.cfg.MaxFrameBytes, Now: r.cfg.Now,
			AfterFunc: r.cfg.AfterFunc, Stats: r.cfg.Stats})
		if r.cfg.CoordinatorProps != nil {
			props = r.cfg.CoordinatorProps(props)
		}
		pid := ctx.Spawn(props)
		ctx.Watch(pid)
		e = &groupEntry{pid: pid, handle: h}
		r.coord[k] = e
	}
	ctx.Forward(e.pid)
}

// groupsOf returns the groups known on h's stream, reading them from
// storage the first time: one key of each group, skipping the rest of its
// keys (claims, attempts and dead letters may be many).
func (r *groups) groupsOf(h *StreamHandle) map[string]struct{} {
	if known, ok := r.known[h.ID]; ok {
		return known
	}
	known := map[string]struct{}{}
	prefix := GroupStreamPrefix(h.ID)
	err := h.Log.ScanMetaKeys(prefix, func(key []byte) ([]byte, error) {
		// 'G' | stream | group length | group | kind | ...
		rest := key[len(prefix):]
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return nil, nil // not a group key
		}
		end := len(prefix) + 1 + int(rest[0])
		known[string(key[len(prefix)+1:end])] = struct{}{}
		return append(key[:end:end], 0xff), nil // past every kind of this group's keys
	})
	if err != nil {
		r.log.Error("groups: listing a stream's groups", slog.String("stream", h.Name.String()), slog.Any("error", err))
	}
	r.known[h.ID] = known
	return known
}

// exists reports whether the group has state in storage.
func (r *groups) exists(h *StreamHandle, group string) bool {
	found := false
	err := h.Log.ScanMeta(groupPrefix(h.ID, group), func(_, _ []byte) error {
		found = true
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		r.log.Error("groups: scanning group state", slog.String("stream", h.Name.String()), slog.String("group", group), slog.Any("error", err))
	}
	return found
}

// refuse answers a request without a coordinator.
func (r *groups) refuse(ctx actor.Context, m groupAddressed, err *wire.Error) {
	if _, ok := m.(*GroupJoinRequest); ok {
		ctx.Respond(&GroupJoinResponse{Err: err})
		return
	}
	if !AnswerLostGroupRequest(ctx.ActorSystem(), m, err) {
		r.log.Warn("groups: unanswerable request", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// groupTarget returns the answer address of a control-stream group request.
func groupTarget(msg any) *GroupTarget {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	switch m := msg.(type) {
	case *GroupPollRequest:
		return &m.GroupTarget
	case *GroupAckRequest:
		return &m.GroupTarget
	case *GroupDeadLettersRequest:
		return &m.GroupTarget
	case *GroupSelectRequest:
		return &m.GroupTarget
	case *GroupDescribeRequest:
		return &m.GroupTarget
	}
	return nil
}

// AnswerLostGroupRequest answers with err a control-stream group request
// that no coordinator will answer (it went to dead letters, or its
// coordinator failed on it), so neither the client nor its connection's
// AnswerMeter waits for it. It reports whether msg was such a request.
func AnswerLostGroupRequest(sys *actor.ActorSystem, msg any, err *wire.Error) bool {
	t := groupTarget(msg)
	if t == nil || t.ReplyTo == nil {
		return false
	}
	sys.Root.Send(t.ReplyTo, &WriteFrame{Frame: wire.AppendError(nil, t.ReqID, err), Dispatched: true})
	return true
}

// groupsStrategy restarts a failed coordinator (it reloads its state from
// storage) after answering the request it failed on.
type groupsStrategy struct {
	actor.SupervisorStrategy
}

// HandleFailure implements actor.SupervisorStrategy.
func (s groupsStrategy) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, message any) {
	AnswerLostGroupRequest(sys, message, wire.Errorf(wire.CodeInternal, "the consumer group failed while handling the request; it may or may not have been applied"))
	s.SupervisorStrategy.HandleFailure(sys, sup, child, rs, reason, message)
}

// onDropped stops a deleted stream's coordinators, then answers: whatever
// they sent the storage writer is in its mailbox by then, so the stream's
// group state can be deleted after it.
func (r *groups) onDropped(ctx actor.Context, m *StreamGroupsDropped) {
	for k, e := range r.coord {
		if k.stream == m.Stream {
			ctx.Unwatch(e.pid)
			// A user message, then a poison pill behind it: the coordinator
			// learns why before it stops.
			ctx.Send(e.pid, &groupStreamDropped{})
			_ = ctx.PoisonFuture(e.pid).Wait()
			delete(r.coord, k)
		}
	}
	delete(r.known, m.Stream)
	// Their last writes are committed before the catalog reads what group
	// state to delete.
	if r.cfg.Writer != nil {
		_, _ = ctx.RequestFuture(r.cfg.Writer, &MetaWriteRequest{}, 30*time.Second).Result()
	}
	ctx.Respond(&StreamGroupsDroppedResponse{})
}
