package actors

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
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
	// Goroutines starts the registry's and the coordinators' storage reads
	// (nil: untracked).
	Goroutines *Goroutines
	// Remote reads the shards of cluster streams this node holds no
	// replica of (nil: a single node).
	Remote *RemoteShards
	// Self is this node's id in its cluster (0: a single node).
	Self uint64
	// CoordinatorProps, if set, wraps coordinator props (tests add
	// middleware).
	CoordinatorProps func(*actor.Props) *actor.Props
}

// groups is the registry of group coordinators: it routes each group
// request to the coordinator of its (stream, group), spawning it on first
// use, and is the coordinators' parent and supervisor. A coordinator that
// panics is restarted and reloads its state from storage.
//
// It never blocks in Receive. A stream's group names are read from storage
// once, in a goroutine it owns (groupsListed brings them back), and the
// requests for the stream's groups wait for them in listing; a coordinator
// whose handle went stale is poisoned and the requests for it wait in its
// entry until it has stopped; a deleted stream's coordinators are stopped
// the same way before the deletion is answered. A group's delete goes to its
// coordinator, which refuses it or stops; the group's requests wait in its
// entry from the delete on, until the coordinator refused it or, having
// stopped, its state is deleted through the storage writer. Listing a
// stream's groups answers from the names it knows and the gauges the
// coordinators publish.
type groups struct {
	cfg   GroupsConfig
	coord map[groupKey]*groupEntry
	// known are the groups of each stream looked at so far: read from
	// storage when one of the stream's groups is first asked for, added to
	// as groups are created. A group not in it has no state.
	known map[uint64]map[string]struct{}
	// listing holds the requests waiting for a stream's group names;
	// starting the streams whose groups all start once listed.
	listing  map[uint64][]stashed
	starting map[uint64]*StreamHandle
	// drops are the stream deletions waiting for coordinators to stop.
	drops []*groupsDrop
	// leading marks the cluster streams whose shard 0 this node's replica
	// leads (GroupLeadership): their coordinators run here, and requests
	// for the others are refused with not_leader naming the leader.
	leading map[uint64]bool
	// catalog finds the handles of streams whose shard 0 started leading
	// (from GroupsStartAll; nil before it).
	catalog *actor.PID
	// token marks this instance's listings (a restarted registry keeps its
	// pid); stopped is set when it stops or restarts, for the callbacks it
	// registered before.
	token   uint64
	stopped bool
	log     *slog.Logger
}

type groupKey struct {
	stream uint64
	group  string
}

type groupEntry struct {
	pid    *actor.PID
	handle *StreamHandle
	// replacing is set while pid, whose handle went stale (the catalog
	// restarted), stops; queue holds the requests that wait for it, and
	// a coordinator for their handle starts once it has.
	replacing bool
	queue     []stashed
	// drop is set while pid stops because its stream was deleted.
	drop *groupsDrop
	// deleting is the delete forwarded to pid, while it has not refused
	// it; once pid has stopped with it accepted, pid is nil while the
	// group's state is deleted.
	deleting *GroupDeleteRequest
	// lost is set when pid stops because this node no longer leads the
	// cluster stream's shard 0: once it has stopped, the group's figures
	// are dropped here (the next coordinator reports them).
	lost bool
}

// groupsDrop is a stream deletion waiting for its coordinators to stop.
type groupsDrop struct {
	stream  uint64
	waiting int
	sender  *actor.PID
}

// groupsListed brings a stream's group names back from storage.
type groupsListed struct {
	token  uint64
	stream uint64
	names  map[string]struct{}
	err    error
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

// Receive dispatches.
func (r *groups) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.onStarted(ctx)
	case *GroupListRequest:
		r.onList(ctx, m)
	case groupAddressed:
		r.onGroupRequest(ctx, m)
	case *groupDeleteRefused:
		r.onDeleteRefused(ctx, m)
	case *groupsListed:
		r.onListed(ctx, m)
	case *GroupsStartAll:
		r.onStartAll(ctx, m)
	case *GroupLeadership:
		r.onLeadership(ctx, m)
	case *groupKeysListed:
		r.onGroupKeysListed(ctx, m)
	case *StreamGroupsDropped:
		r.onDropped(ctx, ctx.Sender(), m)
	case *actor.Terminated:
		r.onTerminated(ctx, m)
	case *actor.Stopping, *actor.Restarting:
		r.onStopping(ctx)
	case *actor.Stopped:
		// Nothing to do: Stopping answered what waited.
	default:
		r.log.Warn("groups: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// onStarted sets up an empty registry, with a new token for its listings.
func (r *groups) onStarted(ctx actor.Context) {
	r.coord = map[groupKey]*groupEntry{}
	r.known = map[uint64]map[string]struct{}{}
	r.listing = map[uint64][]stashed{}
	r.starting = map[uint64]*StreamHandle{}
	r.leading = map[uint64]bool{}
	r.token = groupTokens.Add(1)
	r.log = ctx.Logger()
}

// onGroupRequest routes a request addressed to a group, as it came.
func (r *groups) onGroupRequest(ctx actor.Context, m groupAddressed) {
	r.route(ctx, ctx.Sender(), m, true)
}

// route sends m to its coordinator, spawning it if the group exists (or
// m creates it). live is set when m is the message being handled (it is
// forwarded as it came), unset when it waited (sent on behalf of from).
func (r *groups) route(ctx actor.Context, from *actor.PID, m groupAddressed, live bool) {
	h, group := m.groupAddress()
	if h.Deleted() {
		r.refuse(ctx, from, m, wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", h.Name))
		return
	}
	if werr := r.notCoordinating(h); werr != nil {
		r.refuse(ctx, from, m, werr)
		return
	}
	k := groupKey{stream: h.ID, group: group}
	if e, ok := r.coord[k]; ok {
		switch {
		case e.drop != nil:
			r.refuse(ctx, from, m, wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", h.Name))
		case e.replacing || e.deleting != nil:
			e.queue = append(e.queue, stashed{msg: m, sender: from})
		case e.handle != h && e.handle.Deleted():
			// The catalog restarted and handed out new handles: the old
			// coordinator's shards are gone (it may be stopping itself,
			// having seen them go). Wait for it, so two never run for one
			// group.
			e.replacing = true
			e.queue = append(e.queue, stashed{msg: m, sender: from})
			ctx.Poison(e.pid)
		default:
			r.forward(ctx, e.pid, from, m, live)
			e.holdIfDelete(m)
		}
		return
	}
	known, ok := r.known[h.ID]
	if !ok {
		r.list(ctx, h)
		r.listing[h.ID] = append(r.listing[h.ID], stashed{msg: m, sender: from})
		return
	}
	if _, exists := known[group]; !exists {
		if !m.creates() {
			r.refuse(ctx, from, m, wire.Errorf(wire.CodeGroupNotFound, "group %s has never been used on stream %s", group, h.Name))
			return
		}
		if max := r.cfg.MaxPerStream; max > 0 && len(known) >= max {
			r.cfg.Stats.Limits.Groups.Add(1)
			r.refuse(ctx, from, m, wire.Errorf(wire.CodeQuotaExceeded,
				"stream %s has its maximum of %d consumer groups (group_max_per_stream)", h.Name, max))
			return
		}
		known[group] = struct{}{}
	}
	pid := r.spawn(ctx, h, group)
	e := &groupEntry{pid: pid, handle: h}
	r.coord[k] = e
	r.forward(ctx, pid, from, m, live)
	e.holdIfDelete(m)
}

// holdIfDelete holds the group's requests from m on if m (just forwarded
// to the coordinator) is a delete.
func (e *groupEntry) holdIfDelete(m groupAddressed) {
	if d, ok := m.(*GroupDeleteRequest); ok {
		e.deleting = d
	}
}

func (r *groups) spawn(ctx actor.Context, h *StreamHandle, group string) *actor.PID {
	props := NewGroupCoordinatorProps(GroupCoordinatorConfig{Stream: h, Group: group, Writer: r.cfg.Writer, Cluster: groupsClustered(h),
		Limits: r.cfg.Limits, Secret: r.cfg.Secret, MaxFrameBytes: r.cfg.MaxFrameBytes, Now: r.cfg.Now,
		AfterFunc: r.cfg.AfterFunc, Stats: r.cfg.Stats, Goroutines: r.cfg.Goroutines, Remote: r.cfg.Remote})
	if r.cfg.CoordinatorProps != nil {
		props = r.cfg.CoordinatorProps(props)
	}
	pid := ctx.Spawn(props)
	ctx.Watch(pid)
	return pid
}

// forward hands m to pid: as it came if it is the message being handled,
// otherwise on behalf of its sender.
func (r *groups) forward(ctx actor.Context, pid, from *actor.PID, m groupAddressed, live bool) {
	switch {
	case live:
		ctx.Forward(pid)
	case from != nil:
		ctx.RequestWithCustomSender(pid, m, from)
	default:
		ctx.Send(pid, m)
	}
}

// list reads the group names of h's stream in a goroutine, unless that is
// under way: one key of each group, skipping the rest of its keys (claims,
// attempts and dead letters may be many).
func (r *groups) list(ctx actor.Context, h *StreamHandle) {
	if _, ok := r.listing[h.ID]; ok {
		return
	}
	r.listing[h.ID] = nil
	token, stream, log := r.token, h.ID, h.Log
	self := ctx.Self()
	if groupsClustered(h) {
		// The group names are read from this replica's storage once every
		// group write committed before applied here (a barrier through
		// shard 0), so a group an earlier leader created is listed.
		ctx.ReenterAfter(ctx.RequestFuture(h.Shards[0], &GroupStateWrite{}, 30*time.Second), func(res any, err error) {
			if r.stopped || token != r.token {
				return
			}
			if w, ok := res.(*MetaWriteResponse); ok && err == nil {
				err = w.Err
			}
			if err != nil {
				ctx.Send(self, &groupsListed{token: token, stream: stream, err: err})
				return
			}
			r.listFrom(ctx, token, stream, log)
		})
		return
	}
	r.listFrom(ctx, token, stream, log)
}

// listFrom reads a stream's group names from log in a goroutine;
// groupsListed brings them back.
func (r *groups) listFrom(ctx actor.Context, token, stream uint64, log storage.Log) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if !r.cfg.Goroutines.Go(func() {
		names, err := listGroups(log, stream)
		root.Send(self, &groupsListed{token: token, stream: stream, names: names, err: err})
	}) {
		// The node is stopping: what waits is refused with the rest.
		ctx.Send(self, &groupsListed{token: token, stream: stream, err: errShuttingDown})
	}
}

// errShuttingDown is a listing the node refused to start.
var errShuttingDown = errors.New("the node is stopping")

// listGroups returns the names of the groups with state on stream.
func listGroups(log storage.Log, stream uint64) (map[string]struct{}, error) {
	names := map[string]struct{}{}
	prefix := GroupStreamPrefix(stream)
	err := log.ScanMetaKeys(prefix, func(key []byte) ([]byte, error) {
		// 'G' | stream | group length | group | kind | ...
		rest := key[len(prefix):]
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return nil, nil // not a group key
		}
		end := len(prefix) + 1 + int(rest[0])
		names[string(key[len(prefix)+1:end])] = struct{}{}
		return append(key[:end:end], 0xff), nil // past every kind of this group's keys
	})
	return names, err
}

// onListed takes a stream's group names and routes what waited for them.
func (r *groups) onListed(ctx actor.Context, m *groupsListed) {
	if m.token != r.token {
		return
	}
	waiting := r.listing[m.stream]
	delete(r.listing, m.stream)
	if m.err != nil {
		werr := wire.Errorf(wire.CodeStorageFailure, "listing the stream's consumer groups failed: %v", m.err)
		var we *wire.Error
		switch {
		case errors.Is(m.err, errShuttingDown):
			werr.Code = wire.CodeShuttingDown
		case errors.As(m.err, &we):
			// A cluster stream's barrier through shard 0 failed: this
			// replica does not lead (not_leader), or the write timed out.
			werr = we
		}
		if werr.Code != wire.CodeNotLeader {
			r.log.Error("groups: listing a stream's groups", slog.Uint64("stream", m.stream), slog.Any("error", m.err))
		}
		for _, st := range waiting {
			r.refuse(ctx, st.sender, st.msg, werr)
		}
		delete(r.starting, m.stream)
		return
	}
	if _, ok := r.known[m.stream]; !ok {
		r.known[m.stream] = m.names
	}
	for _, st := range waiting {
		if l, ok := st.msg.(*GroupListRequest); ok {
			r.onList(ctx, l)
			continue
		}
		r.route(ctx, st.sender, st.msg.(groupAddressed), false)
	}
	if h := r.starting[m.stream]; h != nil {
		delete(r.starting, m.stream)
		r.startGroups(ctx, h)
	}
}

// onStartAll starts the coordinators of every stored group, once the
// catalog has loaded its streams.
func (r *groups) onStartAll(ctx actor.Context, m *GroupsStartAll) {
	r.catalog = m.Catalog
	ctx.ReenterAfter(ctx.RequestFuture(m.Catalog, &AllStreamsRequest{}, time.Minute), func(res any, err error) {
		if r.stopped {
			return // a restarted registry's: its coordinators would be nobody's
		}
		all, ok := res.(*AllStreamsResponse)
		if err != nil || !ok {
			r.log.Warn("groups: the catalog did not list its streams; groups start on their first request", slog.Any("error", err))
			return
		}
		for _, h := range all.Streams {
			if !h.Config.Durable || h.Deleted() || r.notCoordinating(h) != nil {
				continue // a cluster stream's start when its shard 0 leads here
			}
			r.startStream(ctx, h)
		}
	})
}

// startStream starts the coordinators of every group of h's stream that
// has state, listing them first if need be.
func (r *groups) startStream(ctx actor.Context, h *StreamHandle) {
	if _, ok := r.known[h.ID]; ok {
		r.startGroups(ctx, h)
		return
	}
	r.starting[h.ID] = h
	r.list(ctx, h)
}

// notCoordinating returns the not_leader error that refuses a request for
// h's groups here, nil when this node coordinates them: always for a
// node's own stream, while its replica of shard 0 leads for a cluster
// stream's.
func (r *groups) notCoordinating(h *StreamHandle) *wire.Error {
	if !groupsClustered(h) || r.leading[h.ID] {
		return nil
	}
	lead := groupLeaderHint(h)
	if r.cfg.Self != 0 && lead == r.cfg.Self {
		// Leading, as this node's replica of shard 0 publishes it: a
		// registry that restarted heard no GroupLeadership since (a
		// coordinator's barrier still checks).
		r.leading[h.ID] = true
		return nil
	}
	if lead == 0 {
		return &wire.Error{Code: wire.CodeNotLeader,
			Message: fmt.Sprintf("the consumer groups of %s are coordinated by the leader of its shard 0, which is not known here yet; retry shortly", h.Name)}
	}
	return &wire.Error{Code: wire.CodeNotLeader, Detail: lead,
		Message: fmt.Sprintf("node %d coordinates the consumer groups of %s (it leads shard 0)", lead, h.Name)}
}

// onLeadership starts or stops a cluster stream's coordinators as this
// node's replica of its shard 0 starts or stops leading. A coordinator
// that stops tells its members and polls not_leader (they come again, to
// the new leader); the stream's group names are listed again, after a
// barrier, when it leads once more.
func (r *groups) onLeadership(ctx actor.Context, m *GroupLeadership) {
	if !m.Leading {
		delete(r.leading, m.Stream)
		// The stream's group figures are the next coordinator's to report
		// (dropped again as each coordinator here stops: one that started
		// meanwhile made them anew).
		for name := range r.known[m.Stream] {
			r.cfg.Stats.DropGroup(m.Name.String(), name)
		}
		delete(r.known, m.Stream)
		delete(r.starting, m.Stream)
		err := &wire.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("this node no longer coordinates the consumer groups of %s (it stopped leading shard 0); retry", m.Name)}
		for k, e := range r.coord {
			if k.stream != m.Stream || e.pid == nil || e.drop != nil {
				continue
			}
			ctx.Send(e.pid, &groupLeadershipLost{err: err})
			ctx.Poison(e.pid)
			e.lost = true
		}
		return
	}
	r.leading[m.Stream] = true
	if r.catalog == nil {
		return // started at GroupsStartAll, or on the first request
	}
	ctx.ReenterAfter(ctx.RequestFuture(r.catalog, &LookupStreamRequest{Name: m.Name}, 30*time.Second), func(res any, err error) {
		l, ok := res.(*LookupStreamResponse)
		if r.stopped || err != nil || !ok || l.Err != nil || l.Stream == nil || l.Stream.ID != m.Stream || !r.leading[m.Stream] {
			return
		}
		r.startStream(ctx, l.Stream)
	})
}

// startGroups starts the coordinator of each known group of h's stream
// that has none.
func (r *groups) startGroups(ctx actor.Context, h *StreamHandle) {
	if h.Deleted() {
		return
	}
	for name := range r.known[h.ID] {
		k := groupKey{stream: h.ID, group: name}
		if _, ok := r.coord[k]; !ok {
			r.coord[k] = &groupEntry{pid: r.spawn(ctx, h, name), handle: h}
		}
	}
}

// onTerminated forgets a coordinator that stopped; one being replaced
// gives way to a new one for the requests that waited, and a deleted
// stream's deletion is answered once its last coordinator has stopped.
func (r *groups) onTerminated(ctx actor.Context, m *actor.Terminated) {
	for k, e := range r.coord {
		if e.pid == nil || !e.pid.Equal(m.Who) {
			continue
		}
		if d := e.drop; d != nil {
			if d.waiting--; d.waiting == 0 {
				r.dropped(ctx, d)
			}
		}
		if e.deleting != nil && e.deleting.accepted.Load() {
			e.pid = nil
			r.deleteState(ctx, k, e)
			return
		}
		// A delete it never took was answered as it stopped (or as a
		// dead letter): the group stays.
		delete(r.coord, k)
		if e.lost && !r.leading[k.stream] {
			r.cfg.Stats.DropGroup(e.handle.Name.String(), k.group)
		}
		r.release(ctx, e)
		return
	}
}

// release routes the requests that waited in e (its coordinator gone, or
// its delete refused).
func (r *groups) release(ctx actor.Context, e *groupEntry) {
	q := e.queue
	e.queue = nil
	for _, st := range q {
		r.route(ctx, st.sender, st.msg.(groupAddressed), false)
	}
}

// onDeleteRefused lets the group's held requests go on to its coordinator,
// which refused (or lost) the delete and answered it.
func (r *groups) onDeleteRefused(ctx actor.Context, m *groupDeleteRefused) {
	for _, e := range r.coord {
		if e.deleting != m.req || e.pid == nil {
			continue
		}
		e.deleting = nil
		r.release(ctx, e)
		return
	}
}

// deleteState deletes the state of a group whose coordinator took its
// delete and has stopped: every key under the group's prefix, scanned and
// deleted by the storage writer after everything queued before (the
// coordinator's last writes among them). Then the group is forgotten, its
// gauges dropped, the delete answered, and the requests that waited are
// routed: a poll or join starts a new group.
func (r *groups) deleteState(ctx actor.Context, k groupKey, e *groupEntry) {
	if r.cfg.Writer == nil {
		r.deleted(ctx, k, e, nil)
		return
	}
	if groupsClustered(e.handle) {
		r.deleteClusterState(ctx, k, e)
		return
	}
	req := &DropStreamRequest{Durable: true, MetaPrefixes: [][]byte{groupPrefix(k.stream, k.group)}}
	ctx.ReenterAfter(ctx.RequestFuture(r.cfg.Writer, req, 30*time.Second), func(res any, err error) {
		if r.stopped {
			return // onStopping answered the delete
		}
		if resp, ok := res.(*MetaWriteResponse); ok && err == nil {
			err = resp.Err
		}
		r.deleted(ctx, k, e, err)
	})
}

// groupKeysListed brings the keys of a cluster stream's group, read from
// this replica's storage, back to the registry.
type groupKeysListed struct {
	token uint64
	key   groupKey
	keys  [][]byte
	err   error
}

// groupDeleteChunk bounds the deletes of one group-state write.
const groupDeleteChunk = 4096

// deleteClusterState deletes a cluster stream's group through shard 0's
// raft group, so every replica deletes it: the group's keys are read here,
// once every write its coordinator proposed has applied and been stored
// here (a barrier through shard 0: the coordinator stopped with a write on
// its way, and keys that write makes must go too), and its requests wait
// meanwhile, so nothing writes them; every replica holds the same keys at
// the same index. They are deleted by name, a chunk per write, the
// group's marker and cursors last: a delete cut short (the leadership
// moved between chunks) leaves a group that exists, with fewer records
// settled above its cursor, which a retried delete finishes.
func (r *groups) deleteClusterState(ctx actor.Context, k groupKey, e *groupEntry) {
	token, log := r.token, e.handle.Log
	self, root := ctx.Self(), ctx.ActorSystem().Root
	ctx.ReenterAfter(ctx.RequestFuture(e.handle.Shards[0], &GroupStateWrite{}, 30*time.Second), func(res any, err error) {
		if r.stopped || token != r.token {
			return
		}
		if err = writeErr(res, err); err != nil {
			r.deleted(ctx, k, e, err)
			return
		}
		if !r.cfg.Goroutines.Go(func() {
			var keys [][]byte
			prefix := groupPrefix(k.stream, k.group)
			err := log.ScanMeta(prefix, func(key, _ []byte) error {
				keys = append(keys, append([]byte(nil), key...))
				return nil
			})
			slices.SortStableFunc(keys, func(a, b []byte) int {
				return cmp.Compare(deleteRank(a[len(prefix)]), deleteRank(b[len(prefix)]))
			})
			root.Send(self, &groupKeysListed{token: token, key: k, keys: keys, err: err})
		}) {
			r.deleted(ctx, k, e, errShuttingDown)
		}
	})
}

// deleteRank orders a group's keys, by kind, for its delete: what is
// settled, owed, attempted and dead first, then the cursors, then the
// group's marker.
func deleteRank(kind byte) int {
	switch kind {
	case 'c':
		return 1
	case 'g':
		return 2
	}
	return 0
}

// onGroupKeysListed deletes the keys of a cluster stream's group, a chunk
// at a time, through shard 0.
func (r *groups) onGroupKeysListed(ctx actor.Context, m *groupKeysListed) {
	e := r.coord[m.key]
	if m.token != r.token || e == nil || e.deleting == nil || e.pid != nil {
		return
	}
	if m.err != nil {
		r.deleted(ctx, m.key, e, m.err)
		return
	}
	var next func(keys [][]byte)
	next = func(keys [][]byte) {
		if len(keys) == 0 {
			r.deleted(ctx, m.key, e, nil)
			return
		}
		n := min(len(keys), groupDeleteChunk)
		puts := make([]storage.MetaPut, n)
		for i, k := range keys[:n] {
			puts[i] = storage.MetaPut{Key: k}
		}
		ctx.ReenterAfter(ctx.RequestFuture(e.handle.Shards[0], &GroupStateWrite{Puts: puts}, 30*time.Second), func(res any, err error) {
			if r.stopped {
				return
			}
			if w, ok := res.(*MetaWriteResponse); ok && err == nil {
				err = w.Err
			}
			if err != nil {
				r.deleted(ctx, m.key, e, err)
				return
			}
			next(keys[n:])
		})
	}
	next(m.keys)
}

// deleted finishes a group's delete whose state deletion ended with err.
func (r *groups) deleted(ctx actor.Context, k groupKey, e *groupEntry, err error) {
	delete(r.coord, k)
	d := e.deleting
	e.deleting = nil
	if err != nil {
		// The group may be partly deleted: it stays known, and the next
		// request's coordinator loads what is left.
		r.log.Error("groups: deleting a group's state failed", slog.String("group", k.group), slog.Any("error", err))
		r.refuse(ctx, nil, d, storageErr(err))
	} else {
		if known := r.known[k.stream]; known != nil {
			delete(known, k.group)
		}
		r.cfg.Stats.DropGroup(e.handle.Name.String(), k.group)
		r.log.Info("group deleted", slog.String("stream", e.handle.Name.String()), slog.String("group", k.group))
		if d.ReplyTo != nil {
			ctx.Send(d.ReplyTo, &WriteFrame{Frame: wire.AppendOK(nil, d.ReqID), Dispatched: true})
		}
	}
	r.release(ctx, e)
}

// listFits reports whether a GroupList frame of size bytes fits the
// node's frame bound: entries past it are left out (a stream has far fewer
// groups with group_max_per_stream).
func (r *groups) listFits(size int) bool {
	limit := r.cfg.MaxFrameBytes
	if limit <= 0 {
		limit = wire.DefaultMaxFrameBytes
	}
	return size <= limit
}

// onList answers a stream's groups, in name order, with the members and
// lag their coordinators last published; a stream whose group names are
// not known yet is listed from storage first. Coordinators of known
// groups that have none are started, so their figures follow from then on.
func (r *groups) onList(ctx actor.Context, m *GroupListRequest) {
	h := m.Stream
	if h.Deleted() {
		r.refuse(ctx, nil, m, wire.Errorf(wire.CodeStreamNotFound, "stream %s was deleted", h.Name))
		return
	}
	if werr := r.notCoordinating(h); werr != nil {
		r.refuse(ctx, nil, m, werr)
		return
	}
	known, ok := r.known[h.ID]
	if !ok {
		r.list(ctx, h)
		r.listing[h.ID] = append(r.listing[h.ID], stashed{msg: m})
		return
	}
	r.startGroups(ctx, h)
	names := slices.Sorted(maps.Keys(known))
	out := make([]wire.GroupSummary, 0, len(names))
	size := wire.HeaderSize + wire.GroupListHeadSize
	for _, name := range names {
		g := wire.GroupSummary{Group: name}
		if gauges := r.cfg.Stats.Group(h.Name.String(), name); gauges != nil {
			g.Members, g.Lag = uint32(max(gauges.Members.Load(), 0)), uint64(max(gauges.Lag(), 0))
		}
		if size += wire.GroupSummarySize(&g); !r.listFits(size) {
			r.log.Warn("groups: a stream's group list is cut to the frame size", slog.String("stream", h.Name.String()), slog.Int("groups", len(names)))
			break
		}
		out = append(out, g)
	}
	if m.ReplyTo != nil {
		ctx.Send(m.ReplyTo, &WriteFrame{Frame: wire.AppendGroupList(nil, m.ReqID, out), Dispatched: true})
	}
}

// onStopping answers what waits: nothing will serve it.
func (r *groups) onStopping(ctx actor.Context) {
	r.stopped = true
	err := wire.Errorf(wire.CodeShuttingDown, "the node is stopping")
	for _, waiting := range r.listing {
		for _, st := range waiting {
			r.refuse(ctx, st.sender, st.msg, err)
		}
	}
	for _, e := range r.coord {
		for _, st := range e.queue {
			r.refuse(ctx, st.sender, st.msg, err)
		}
		e.queue = nil
		if e.deleting != nil && e.pid == nil {
			// Its state was being deleted: it may be partly.
			r.refuse(ctx, nil, e.deleting, wire.Errorf(wire.CodeShuttingDown, "the node stopped while deleting the group; it may be partly deleted: delete it again"))
			e.deleting = nil
		}
	}
	r.listing = map[uint64][]stashed{}
	for _, d := range r.drops {
		if d.sender != nil {
			ctx.Send(d.sender, &StreamGroupsDroppedResponse{})
		}
	}
	r.drops = nil
}

// refuse answers a request without a coordinator; from is its sender.
func (r *groups) refuse(ctx actor.Context, from *actor.PID, m any, err *wire.Error) {
	if _, ok := m.(*GroupJoinRequest); ok {
		if from != nil {
			ctx.Send(from, &GroupJoinResponse{Err: err})
		}
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
	case *GroupAcksRequest:
		return &m.GroupTarget
	case *GroupDeadLettersRequest:
		return &m.GroupTarget
	case *GroupSelectRequest:
		return &m.GroupTarget
	case *GroupDescribeRequest:
		return &m.GroupTarget
	case *GroupSeekRequest:
		return &m.GroupTarget
	case *GroupDeleteRequest:
		return &m.GroupTarget
	case *GroupListRequest:
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
	if env, ok := message.(*actor.MessageEnvelope); ok {
		message = env.Message
	}
	if d, ok := message.(*GroupDeleteRequest); ok {
		// The registry holds the group's requests behind it: let them go.
		if registry, ok := sup.(interface{ Self() *actor.PID }); ok {
			sys.Root.Send(registry.Self(), &groupDeleteRefused{req: d})
		}
	}
	s.SupervisorStrategy.HandleFailure(sys, sup, child, rs, reason, message)
}

// onDropped stops a deleted stream's coordinators, then (dropped) answers:
// whatever they sent the storage writer is in its mailbox by then, so the
// stream's group state can be deleted after it.
func (r *groups) onDropped(ctx actor.Context, from *actor.PID, m *StreamGroupsDropped) {
	d := &groupsDrop{stream: m.Stream, sender: from}
	for k, e := range r.coord {
		if k.stream != m.Stream || e.drop != nil || e.pid == nil {
			continue // a nil pid: a deleted group's state is going already
		}
		// A user message, then a poison pill behind it: the coordinator
		// learns why before it stops.
		e.drop = d
		d.waiting++
		ctx.Send(e.pid, &groupStreamDropped{})
		ctx.Poison(e.pid)
	}
	delete(r.known, m.Stream)
	r.drops = append(r.drops, d)
	if d.waiting == 0 {
		r.dropped(ctx, d)
	}
}

// dropped answers a stream deletion once its coordinators have stopped and
// the storage writer has committed their last writes.
func (r *groups) dropped(ctx actor.Context, d *groupsDrop) {
	r.drops = slices.DeleteFunc(r.drops, func(x *groupsDrop) bool { return x == d })
	answer := func() {
		if d.sender != nil {
			ctx.Send(d.sender, &StreamGroupsDroppedResponse{})
		}
	}
	if r.cfg.Writer == nil {
		answer()
		return
	}
	ctx.ReenterAfter(ctx.RequestFuture(r.cfg.Writer, &MetaWriteRequest{}, 30*time.Second), func(any, error) { answer() })
}
