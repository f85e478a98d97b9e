package actors

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// In a cluster the catalog of replicated streams is one raft group over
// every node: the metadata group. A create of a replicated stream is
// proposed to it from whichever node the client asked (a follower forwards
// the proposal to the leader), and every node creates the stream when the
// entry applies, under the same id (derived from the entry's index) and
// with the same placement, so every node spawns the same shard replicas.
// The node that proposed answers its client once its own apply has made
// the stream's record durable. Streams with one replica stay the node's own,
// as on a single node.

// CatalogCluster is the catalog's side of a cluster.
type CatalogCluster struct {
	// Self is this node's id; Router holds every node's (Nodes) and the
	// peer links.
	Self   uint64
	Router *RaftRouter
	// Tick, ElectionTicks and HeartbeatTicks are raft's clock, for the
	// metadata group and every replicated shard.
	Tick                          time.Duration
	ElectionTicks, HeartbeatTicks int
	// ProposalTimeout bounds a replicated publish or create (default 5 s).
	ProposalTimeout time.Duration
	// CompactEntries is each replicated shard's raft log compaction step
	// (ShardRaft.CompactEntries).
	CompactEntries uint64
	// FollowerMaxLag is ShardRaft.FollowerMaxLag.
	FollowerMaxLag uint64
	// View is where the catalog publishes the cluster's state (drained
	// nodes) for the shards and the node (nil: not published).
	View *ClusterView
	// BalanceTicks is each replicated shard's ShardRaft.BalanceTicks.
	BalanceTicks int
	// Join is set on a node added to a running cluster (--join): with
	// nothing stored, its metadata replica starts empty and takes the
	// cluster's state from the group's leader (a snapshot), instead of
	// starting a new group over the nodes of --peers.
	Join bool
	// OnPeers is told who this node's peers are, by id with the address
	// cluster add gave ("" for a node of --peers), whenever that changes
	// (nil: nobody is told). Called on the catalog's goroutine: it must
	// not block.
	OnPeers func(map[uint64]string)
}

// metaGroupKey names the metadata group: stream id 0 is never a stream's.
var metaGroupKey = storage.ShardKey{Stream: 0, Shard: 0}

// replicatedIDBase is where replicated streams' ids start: a replicated
// stream's id is the base plus its create entry's index, the same on every
// node; a node's own streams count up from 1 and never reach it.
const replicatedIDBase = uint64(1) << 63

// metaEntry is one entry of the metadata group.
type metaEntry struct {
	Op string `json:"op"` // "create", "replicas" (Config.Replicas is the new count), "drain" or "undrain" (of Target)
	// Node and Proposal name the proposer, which answers its client.
	Node     uint64            `json:"node"`
	Proposal uint64            `json:"proposal"`
	Name     wire.StreamName   `json:"name"`
	Config   wire.StreamConfig `json:"config"`
	Created  int64             `json:"created_unix_nano"`
	// Strict refuses an existing stream of another config (an explicit
	// create); an auto-create takes the stream as it is.
	Strict bool `json:"strict,omitempty"`
	// Target is the node a cluster operation changes (catalog_members.go),
	// Addr an added node's peer address, Force a removal at once.
	Target uint64 `json:"target,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

// metaWait is a create this node proposed, waiting for its apply.
type metaWait struct {
	waiters []*actor.PID
	timer   func() bool
	// cluster is set for a cluster operation: its waiters take a
	// ClusterChangeResponse, not a LookupStreamResponse; data is its
	// entry, proposed again every election timeout until it applies (a
	// proposal in flight at a change of leader is lost, and a cluster
	// change applied twice changes nothing the second time), and retry
	// stops that.
	cluster bool
	data    []byte
	retry   func() bool
}

// stop stops w's timers.
func (w *metaWait) stop() {
	w.timer()
	if w.retry != nil {
		w.retry()
	}
}

// fail answers w's waiters with err.
func (w *metaWait) fail(ctx actor.Context, err *wire.Error) {
	var resp any = &LookupStreamResponse{Err: err}
	if w.cluster {
		resp = &ClusterChangeResponse{Err: err}
	}
	for _, from := range w.waiters {
		ctx.Send(from, resp)
	}
}

// metaProposalExpired ends a create whose entry did not apply in time.
type metaProposalExpired struct{ proposal uint64 }

// metaStateLoaded carries the metadata group's raft state, read by the
// storage writer behind every write before it.
type metaStateLoaded struct {
	token uint64
	resp  *TailResponse
	err   error
}

// startMeta asks the storage writer for the metadata group's state; the
// replica starts when it answers.
func (c *catalog) startMeta(ctx actor.Context) {
	if c.cfg.Cluster == nil {
		return
	}
	token := c.token
	f := ctx.RequestFuture(c.cfg.Writer, &TailRequest{Shard: metaGroupKey, Raft: true}, 30*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		m := &metaStateLoaded{token: token, err: err}
		if r, ok := res.(*TailResponse); ok {
			m.resp, m.err = r, r.Err
		} else if err == nil {
			m.err = fmt.Errorf("unexpected response %T", res)
		}
		c.onMetaLoaded(ctx, m)
	})
}

func (c *catalog) onMetaLoaded(ctx actor.Context, m *metaStateLoaded) {
	if m.token != c.token || c.stopping {
		return
	}
	if m.err != nil {
		ctx.Logger().Error("catalog: cannot read the metadata group's state; replicated streams cannot be created here", slog.Any("error", m.err))
		return
	}
	cl := c.cfg.Cluster
	d := m.resp.Raft
	if c.left {
		ctx.Logger().Warn("cluster: this node left the cluster; its metadata replica does not start (stop the node: its data is no longer the cluster's)")
		return
	}
	// A node joining a running cluster with nothing stored starts its
	// replica empty: the group's leader sends it a snapshot of the
	// cluster's state once it was added.
	join := cl.Join && d.HardState == nil && d.Snapshot == nil && len(d.Entries) == 0
	if join {
		ctx.Logger().Info("cluster: joining a running cluster; waiting for its metadata group to send this node the cluster's state")
	}
	r, err := startRaftReplica(ctx, raftReplicaConfig{Key: metaGroupKey, Self: cl.Self, Peers: cl.Router.Nodes, Join: join,
		Durable: d, Applied: d.Applied, Writer: c.cfg.Writer, Link: cl.Router.Link,
		Tick: cl.Tick, ElectionTicks: cl.ElectionTicks, HeartbeatTicks: cl.HeartbeatTicks,
		ForwardProposals: true, Apply: c.applyMeta, OnTick: c.onMetaTick, OnConf: c.onMetaConf, Install: c.installMeta,
		Alive: cl.Router.Alive, Busy: func() bool { return len(c.metaWaits) > 0 || c.metaHandingAway() || c.metaReconfiguring() }})
	if err != nil {
		ctx.Logger().Error("catalog: cannot start the metadata group", slog.Any("error", err))
		return
	}
	c.meta = r
	c.metaWaits = map[uint64]*metaWait{}
	c.nextMetaProposal = rand.Uint64() >> 1
	c.metaConfChecked, c.metaConfUntil = false, 0
	cl.Router.Register(metaGroupKey, ctx.Self())
	c.notifyPeers()
}

// proposeCreate proposes a replicated stream's creation.
func (c *catalog) proposeCreate(ctx actor.Context, from *actor.PID, name wire.StreamName, cfg wire.StreamConfig, strict bool) {
	reply := func(r *LookupStreamResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	cl := c.cfg.Cluster
	switch {
	case cl == nil:
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "a stream with %d replicas needs a cluster (--peers)", cfg.Replicas)})
		return
	case !cfg.Durable:
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "a replicated stream must be durable")})
		return
	case c.joined() && int(cfg.Replicas) > len(c.placementNodes()):
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "%d replicas asked of a cluster of %d nodes", cfg.Replicas, len(c.placementNodes()))})
		return
	case !c.joined() || c.meta == nil || c.meta.failed() != nil:
		reply(&LookupStreamResponse{Err: &wire.Error{Code: wire.CodeNotLeader, Message: "the cluster's metadata group is not running on this node yet; retry shortly"}})
		return
	}
	c.nextMetaProposal++
	id := c.nextMetaProposal
	data, _ := json.Marshal(metaEntry{Op: "create", Node: cl.Self, Proposal: id, Name: name, Config: cfg, Created: c.cfg.Now().UnixNano(), Strict: strict})
	if err := c.meta.propose(ctx, data); err != nil {
		reply(&LookupStreamResponse{Err: &wire.Error{Code: wire.CodeNotLeader,
			Message: fmt.Sprintf("the cluster's metadata group has no leader this node can reach (%v); retry shortly", err)}})
		return
	}
	c.waitMeta(ctx, id, from)
}

// waitMeta waits for the apply of this node's proposal id, for from.
func (c *catalog) waitMeta(ctx actor.Context, id uint64, from *actor.PID) *metaWait {
	w := &metaWait{}
	if from != nil {
		w.waiters = append(w.waiters, from)
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	timeout := c.cfg.Cluster.ProposalTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	w.timer = time.AfterFunc(timeout, func() { root.Send(self, &metaProposalExpired{proposal: id}) }).Stop
	c.metaWaits[id] = w
	return w
}

func (c *catalog) onMetaProposalExpired(ctx actor.Context, m *metaProposalExpired) {
	w, ok := c.metaWaits[m.proposal]
	if !ok {
		return
	}
	delete(c.metaWaits, m.proposal)
	w.stop()
	msg := "the stream's creation or change was not committed by the cluster in time; it may still be: describe the stream, or ask again"
	if w.cluster {
		msg = "the cluster change was not committed in time; it may still be: look at herald cluster status, or ask again"
	}
	w.fail(ctx, &wire.Error{Code: wire.CodeReplicationTimeout, Message: msg})
}

// applyMeta applies one committed entry of the metadata group.
func (c *catalog) applyMeta(ctx actor.Context, e *pb.Entry) error {
	if e.GetType() != pb.EntryType_EntryNormal || len(e.GetData()) == 0 {
		return nil
	}
	var me metaEntry
	if err := json.Unmarshal(e.GetData(), &me); err != nil {
		return fmt.Errorf("metadata entry %d: %w", e.GetIndex(), err)
	}
	var w *metaWait
	if me.Node == c.cfg.Cluster.Self {
		if w = c.metaWaits[me.Proposal]; w != nil {
			delete(c.metaWaits, me.Proposal)
			w.stop()
		}
	}
	answer := func(r *LookupStreamResponse) {
		if w != nil {
			for _, from := range w.waiters {
				ctx.Send(from, r)
			}
		}
	}
	appliedPut := storage.MetaPut{Key: raftAppliedKey(metaGroupKey), Value: binary.BigEndian.AppendUint64(nil, e.GetIndex())}
	switch me.Op {
	case "create":
	case "replicas":
		c.applyReplicas(ctx, me, w, appliedPut)
		return nil
	case "drain", "undrain", "add", "remove", "left":
		c.applyClusterChange(ctx, me, w, appliedPut)
		return nil
	default:
		return fmt.Errorf("metadata entry %d: unknown op %q", e.GetIndex(), me.Op)
	}
	id := replicatedIDBase + e.GetIndex()
	key := nameKey(me.Name)
	if h, ok := c.streams[key]; ok {
		// Another create of the name came first (or this one applied
		// before a restart): the stream stands as it is.
		if h.ID < replicatedIDBase {
			ctx.Logger().Error("catalog: the cluster created a stream this node holds a stream of its own under; the node's own stays, and this node holds no replica of the cluster's",
				slog.String("stream", key))
		}
		if h.ID != id && w != nil {
			if me.Strict && h.Config != me.Config {
				answer(&LookupStreamResponse{Err: wire.Errorf(wire.CodeStreamExists,
					"stream %s exists with another config (%d shards, %d replicas)", me.Name, h.Config.Shards, h.Config.Replicas)})
			} else {
				answer(&LookupStreamResponse{Stream: h})
			}
		}
		c.writeMetaApplied(ctx, appliedPut)
		return nil
	}
	if cr, ok := c.creating[key]; ok {
		if w != nil {
			cr.waiters = append(cr.waiters, w.waiters...)
		}
		c.writeMetaApplied(ctx, appliedPut)
		return nil
	}
	if err := me.Name.Validate(); err != nil {
		answer(&LookupStreamResponse{Err: err.(*wire.Error)})
		c.writeMetaApplied(ctx, appliedPut)
		return nil
	}
	nodes := c.placementNodes()
	if int(me.Config.Replicas) > len(nodes) {
		// The cluster lost nodes since the proposer checked: every node
		// refuses it alike.
		answer(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "%d replicas asked of a cluster of %d nodes", me.Config.Replicas, len(nodes))})
		c.writeMetaApplied(ctx, appliedPut)
		return nil
	}
	st := storedFrom(id, me.Name, me.Config, me.Created)
	st.CreatedNodes = nodes
	cr := &creation{handle: c.newHandle(st)}
	if w != nil {
		cr.waiters = append(cr.waiters, w.waiters...)
	}
	c.creating[key] = cr
	c.persistStream(ctx, key, st, appliedPut)
	return nil
}

// writeMetaApplied records an applied entry that changed nothing.
func (c *catalog) writeMetaApplied(ctx actor.Context, put storage.MetaPut) {
	ctx.Send(c.cfg.Writer, &MetaWriteRequest{Puts: []storage.MetaPut{put}})
}

// replicaSet is where shard i of a replicated stream lives.
func (c *catalog) replicaSet(h *StreamHandle, i uint32) *ShardRaft {
	cl := c.cfg.Cluster
	if cl == nil || h.Config.Replicas < 1 {
		return nil
	}
	reps, pref := c.placement(h)
	p := c.placements[h.ID]
	return &ShardRaft{Self: cl.Self, Replicas: reps[i], Preferred: pref[i], Bootstrap: p.bootstrap[i], Targets: p.targets,
		Router: cl.Router, Tick: cl.Tick,
		ElectionTicks: cl.ElectionTicks, HeartbeatTicks: cl.HeartbeatTicks, ProposalTimeout: cl.ProposalTimeout, CompactEntries: cl.CompactEntries,
		Goroutines: c.cfg.Goroutines, FollowerMaxLag: cl.FollowerMaxLag,
		View: cl.View, BalanceTicks: cl.BalanceTicks}
}

// placement is where a replicated stream's shards live (rendezvous
// hashing over the nodes) and which replica of each should lead: the
// stream's leaders spread so that, with every node up, none leads more
// than ceil(shards / nodes) of its shards. Pure functions of the stream's
// id and the nodes, so every node computes the same; cached per stream.
func (c *catalog) placement(h *StreamHandle) (map[uint32][]uint64, map[uint32]uint64) {
	if p, ok := c.placements[h.ID]; ok && p.count == h.Config.Replicas && p.gen == c.clusterGen {
		return p.replicas, p.preferred
	}
	place := func(nodes []uint64, count uint8) map[uint32][]uint64 {
		reps := map[uint32][]uint64{}
		for i := uint32(0); i < h.Config.Shards; i++ {
			r, err := placeReplicas(h.ID, i, nodes, int(count))
			if err != nil {
				// Fewer nodes than replicas (refused at create): every node holds one.
				r = append([]uint64(nil), nodes...)
			}
			reps[i] = r
		}
		return reps
	}
	reps := place(c.placementNodes(), h.Config.Replicas)
	refs := map[shardRef][]uint64{}
	for i, r := range reps {
		refs[shardRef{Stream: h.ID, Shard: i}] = r
	}
	pref := map[uint32]uint64{}
	for ref, lead := range spreadLeaders(refs, c.leaderNodes()) {
		pref[ref.Shard] = lead
	}
	if c.placements == nil {
		c.placements = map[uint64]streamPlacement{}
	}
	p := c.placements[h.ID] // kept: the shards share its targets
	p.replicas, p.preferred = reps, pref
	p.bootstrap = place(c.createdNodes(h), cmp.Or(h.createdReplicas, h.Config.Replicas))
	if p.targets == nil {
		p.targets = NewReplicaTargets(reps, pref)
	} else {
		p.targets.p.Store(&streamPlacement{replicas: reps, preferred: pref})
	}
	p.count, p.gen = h.Config.Replicas, c.clusterGen
	c.placements[h.ID] = p
	return reps, pref
}

// streamPlacement is a replicated stream's placement: its replicas and
// preferred leaders by shard, and (in the catalog's cache) each shard's
// first configuration and the targets its shards read.
type streamPlacement struct {
	replicas  map[uint32][]uint64
	preferred map[uint32]uint64
	bootstrap map[uint32][]uint64
	targets   *ReplicaTargets
	// count is the replica count it places, gen the cluster state's
	// generation (catalog.clusterGen) it was placed under.
	count uint8
	gen   uint64
}

// proposeReplicas proposes a change of a cluster stream's replica count.
func (c *catalog) proposeReplicas(ctx actor.Context, from *actor.PID, m *SetReplicasRequest) {
	reply := func(r *LookupStreamResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	if err := m.Name.Validate(); err != nil {
		reply(&LookupStreamResponse{Err: err.(*wire.Error)})
		return
	}
	cl := c.cfg.Cluster
	// A stream this node does not know yet may be one whose create it has
	// not applied: the entry goes to the log all the same, after the
	// create, and its apply decides (stream_not_found if there is none).
	h, known := c.streams[nameKey(m.Name)]
	switch {
	case cl == nil && !known:
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeStreamNotFound, "stream %s does not exist", m.Name)})
		return
	case cl == nil || known && h.ID < replicatedIDBase:
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig,
			"stream %s is this node's own, not a cluster stream: its replicas cannot change (a cluster, --peers, places every durable stream)", m.Name)})
		return
	case m.Replicas < 1 || c.joined() && int(m.Replicas) > len(c.placementNodes()):
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "%d replicas asked of a cluster of %d nodes", m.Replicas, len(c.placementNodes()))})
		return
	case known && h.Config.Replicas == m.Replicas:
		reply(&LookupStreamResponse{Stream: h})
		return
	case !c.joined() || c.meta == nil || c.meta.failed() != nil:
		reply(&LookupStreamResponse{Err: &wire.Error{Code: wire.CodeNotLeader, Message: "the cluster's metadata group is not running on this node yet; retry shortly"}})
		return
	}
	var cfg wire.StreamConfig // only Replicas is read at apply
	cfg.Replicas = m.Replicas
	c.nextMetaProposal++
	id := c.nextMetaProposal
	data, _ := json.Marshal(metaEntry{Op: "replicas", Node: cl.Self, Proposal: id, Name: m.Name, Config: cfg, Created: c.cfg.Now().UnixNano()})
	if err := c.meta.propose(ctx, data); err != nil {
		reply(&LookupStreamResponse{Err: &wire.Error{Code: wire.CodeNotLeader,
			Message: fmt.Sprintf("the cluster's metadata group has no leader this node can reach (%v); retry shortly", err)}})
		return
	}
	c.waitMeta(ctx, id, from)
}

// applyReplicas applies a committed change of a stream's replica count:
// the catalog's handle and placement change at once (the shards are told,
// and their leaders move their groups), the record is stored with the
// entry's applied index, and the proposer answers once it is.
func (c *catalog) applyReplicas(ctx actor.Context, me metaEntry, w *metaWait, appliedPut storage.MetaPut) {
	answer := func(r *LookupStreamResponse) {
		if w != nil {
			for _, from := range w.waiters {
				ctx.Send(from, r)
			}
		}
	}
	key := nameKey(me.Name)
	n := me.Config.Replicas
	if n < 1 || int(n) > len(c.placementNodes()) {
		// Checked by the proposer; every node refuses it alike.
		answer(&LookupStreamResponse{Err: wire.Errorf(wire.CodeInvalidConfig, "%d replicas asked of a cluster of %d nodes", n, len(c.placementNodes()))})
		c.writeMetaApplied(ctx, appliedPut)
		return
	}
	var nh *StreamHandle
	if cr, ok := c.creating[key]; ok && cr.handle.ID >= replicatedIDBase {
		// Applied right behind the stream's create, which is still being
		// stored (a node catching up applies both at once): the creation
		// takes the new count. Its handle is nobody's yet, and its shards
		// start once it is stored, under the new placement; the record
		// written below follows the create's in the storage writer.
		cr.handle.createdReplicas = cmp.Or(cr.handle.createdReplicas, cr.handle.Config.Replicas)
		cr.handle.Config.Replicas = n
		nh = cr.handle
	} else if h, ok := c.streams[key]; ok && h.ID >= replicatedIDBase {
		nh = h
		if h.Config.Replicas != n {
			// A new handle (handles are immutable), with the same shards.
			nh = &StreamHandle{ID: h.ID, Name: h.Name, Config: h.Config, CreatedUnixNano: h.CreatedUnixNano, Log: h.Log,
				Shards: h.Shards, Progress: h.Progress, createdReplicas: cmp.Or(h.createdReplicas, h.Config.Replicas), createdNodes: h.createdNodes}
			nh.Config.Replicas = n
			c.streams[key] = nh
			ctx.Logger().Info("stream replicas changing", slog.String("stream", key),
				slog.Uint64("from", uint64(h.Config.Replicas)), slog.Uint64("to", uint64(n)))
			c.placement(nh)
			for _, pid := range nh.Shards {
				ctx.Send(pid, &ShardReplicasChanged{})
			}
		}
		// Equal: applied before (a restart, or a metadata replica started
		// again after a failed write), or asked twice; the record is
		// written again all the same, so that storage holds what the
		// catalog does.
	} else {
		answer(&LookupStreamResponse{Err: wire.Errorf(wire.CodeStreamNotFound, "stream %s does not exist in the cluster", me.Name)})
		c.writeMetaApplied(ctx, appliedPut)
		return
	}
	value, _ := json.Marshal(recordOf(nh))
	req := &MetaWriteRequest{Puts: []storage.MetaPut{{Key: append(append([]byte(nil), metaStreamPrefix...), key...), Value: value}, appliedPut}}
	f := ctx.RequestFuture(c.cfg.Writer, req, 30*time.Second)
	meta := c.meta
	ctx.ReenterAfter(f, func(res any, err error) {
		if r, ok := res.(*MetaWriteResponse); ok && err == nil {
			err = r.Err
		}
		if err != nil {
			ctx.Logger().Error("catalog: cannot store a stream's new replica count", slog.String("stream", key), slog.Any("error", err))
			answer(&LookupStreamResponse{Err: storageError(err)})
			// Later entries must not be recorded applied past this one:
			// the metadata replica starts again from what storage holds,
			// and applies it again (not a newer one started meanwhile).
			if c.meta != nil && c.meta == meta && c.meta.failed() == nil {
				c.meta.fail(ctx, fmt.Errorf("storing the replica count of %s: %w", key, err))
				c.restartMeta(ctx)
			}
			return
		}
		if _, creating := c.creating[key]; creating {
			// Answered with the created stream (onPersisted).
			if w != nil {
				if cr := c.creating[key]; cr != nil {
					cr.waiters = append(cr.waiters, w.waiters...)
				}
			}
			return
		}
		answer(&LookupStreamResponse{Stream: nh})
	})
}

// restartMeta replaces a metadata replica that failed (a write it could
// not make): what waited for it is answered, and after a pause a new
// replica starts from what storage holds, as at the catalog's start.
func (c *catalog) restartMeta(ctx actor.Context) {
	ctx.Logger().Error("catalog: the metadata replica failed; starting it again from storage", slog.Any("error", c.meta.failed()))
	c.stopMeta(ctx)
	c.meta = nil
	self, root := ctx.Self(), ctx.ActorSystem().Root
	c.metaRestartTimer = time.AfterFunc(time.Second, func() { root.Send(self, &metaRestart{}) }).Stop
}

// metaRestart starts the metadata replica again (restartMeta).
type metaRestart struct{}

// stopMeta stops the metadata replica (the catalog stops or restarts);
// creates waiting for it are answered as outcome unknown.
func (c *catalog) stopMeta(ctx actor.Context) {
	if c.metaRestartTimer != nil && c.stopping {
		c.metaRestartTimer()
	}
	if c.meta == nil {
		return
	}
	c.meta.stop()
	c.cfg.Cluster.Router.Unregister(metaGroupKey, ctx.Self())
	err := &wire.Error{Code: wire.CodeReplicationTimeout, Message: "the catalog stopped before the change applied; it may still"}
	for _, w := range c.metaWaits {
		w.stop()
		w.fail(ctx, err)
	}
	clear(c.metaWaits)
}

// recordOf is a replicated stream's record as stored: its config, and the
// replica count and nodes its shards' first configuration was placed with.
func recordOf(h *StreamHandle) storedStream {
	st := storedFrom(h.ID, h.Name, h.Config, h.CreatedUnixNano)
	if h.createdReplicas != h.Config.Replicas {
		st.CreatedReplicas = h.createdReplicas
	}
	st.CreatedNodes = h.createdNodes
	return st
}

// createdNodes are the nodes h's replicas were first placed over: those
// recorded at its creation, or the cluster's first nodes for a stream
// created before they were recorded.
func (c *catalog) createdNodes(h *StreamHandle) []uint64 {
	if len(h.createdNodes) > 0 {
		return h.createdNodes
	}
	if first := c.clusterState().First; len(first) > 0 {
		return first
	}
	return c.cfg.Cluster.Router.Nodes
}
