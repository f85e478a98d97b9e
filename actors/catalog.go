package actors

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// MaxShards is the most shards a stream may have.
const MaxShards = 1024

// CatalogConfig configures the catalog.
type CatalogConfig struct {
	// Durable is the Badger log: durable streams' batches and every stream's
	// config live there.
	Durable storage.Log
	// Memory holds ephemeral streams' batches.
	Memory storage.Log
	// Writer is the storage writer.
	Writer *actor.PID
	// DefaultConfig is what an auto-created stream gets.
	DefaultConfig wire.StreamConfig
	// MaxStreamsPerTenant refuses a create beyond this many streams in
	// its tenant (0: no bound).
	MaxStreamsPerTenant int
	// Stats is the node's, for metrics (may be nil).
	Stats *Stats
	// QueueTotal and RingTotal are the node-wide byte budgets (nil: none).
	QueueTotal, RingTotal *Budget
	// MaxPending and PendingWait are each shard's publish admission bounds.
	MaxPending  int
	PendingWait time.Duration
	// RingRecords and RingBytes bound each shard's replay ring.
	RingRecords int
	RingBytes   int64
	// ShardProps, if set, wraps shard props (tests add middleware).
	ShardProps func(*actor.Props) *actor.Props
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Tracer traces publishes that arrive with trace context (nil: none).
	Tracer *Tracer
	// Groups is the groups registry: a deleted stream's coordinators stop
	// and its group state goes with it (nil: no groups).
	Groups *actor.PID
	// Goroutines starts the catalog's load at start (nil: untracked).
	Goroutines *Goroutines
	// Cluster is the node's cluster (nil: a single node): replicated
	// streams are created through its metadata group (catalog_cluster.go).
	Cluster *CatalogCluster
}

// Metadata keys.
var (
	metaStreamPrefix = []byte("stream/")
	metaNextID       = []byte("catalog/next_id")
)

// storedStream is a stream's persisted config.
type storedStream struct {
	ID                 uint64 `json:"id"`
	Tenant             string `json:"tenant"`
	NS                 string `json:"namespace"`
	Stream             string `json:"stream"`
	Shards             uint32 `json:"shards"`
	Durable            bool   `json:"durable"`
	Routing            uint8  `json:"routing"`
	Overflow           uint8  `json:"overflow"`
	QueueCapacity      uint32 `json:"queue_capacity"`
	QueueMaxBytes      uint64 `json:"queue_max_bytes"`
	RetentionAgeMillis uint64 `json:"retention_age_ms"`
	RetentionBytes     uint64 `json:"retention_bytes"`
	Replicas           uint8  `json:"replicas,omitempty"`
	// CreatedReplicas is the replica count at creation, when it changed
	// since (0: Replicas).
	CreatedReplicas uint8 `json:"created_replicas,omitempty"`
	// CreatedNodes are the cluster's nodes placement placed it over at
	// creation (none: the cluster's first nodes, for a stream created
	// before they were recorded).
	CreatedNodes []uint64 `json:"created_nodes,omitempty"`
	Created      int64    `json:"created_unix_nano"`
}

func storedFrom(id uint64, name wire.StreamName, cfg wire.StreamConfig, created int64) storedStream {
	return storedStream{ID: id, Tenant: name.Tenant, NS: name.Namespace, Stream: name.Stream,
		Shards: cfg.Shards, Durable: cfg.Durable, Routing: uint8(cfg.Routing), Overflow: uint8(cfg.Overflow),
		QueueCapacity: cfg.QueueCapacity, QueueMaxBytes: cfg.QueueMaxBytes,
		RetentionAgeMillis: cfg.RetentionAgeMillis, RetentionBytes: cfg.RetentionBytes, Replicas: cfg.Replicas, Created: created}
}

// errBadStreamRecord means a persisted stream record is not one the catalog
// could have written.
var errBadStreamRecord = errors.New("actors: malformed stream record")

// decodeStoredStream decodes a persisted stream record and checks it as
// onCreate checked it before writing it: a non-zero id, a valid name and a
// config ValidateConfig accepts (a shard count read back from disk decides
// how many actors start). Errors wrap errBadStreamRecord.
func decodeStoredStream(value []byte) (storedStream, error) {
	var st storedStream
	if err := json.Unmarshal(value, &st); err != nil {
		return storedStream{}, fmt.Errorf("%w: %w", errBadStreamRecord, err)
	}
	if st.ID == 0 {
		return storedStream{}, fmt.Errorf("%w: stream id 0", errBadStreamRecord)
	}
	name := wire.StreamName{Tenant: st.Tenant, Namespace: st.NS, Stream: st.Stream}
	if err := name.Validate(); err != nil {
		return storedStream{}, fmt.Errorf("%w: %w", errBadStreamRecord, err)
	}
	if err := ValidateConfig(st.config()); err != nil {
		return storedStream{}, fmt.Errorf("%w: stream %s: %w", errBadStreamRecord, name, err)
	}
	if nodes := st.CreatedNodes; len(nodes) > 0 && (!slices.IsSorted(nodes) || nodes[0] == 0 || len(slices.Compact(slices.Clone(nodes))) != len(nodes) ||
		len(nodes) < int(cmp.Or(st.CreatedReplicas, st.Replicas))) {
		return storedStream{}, fmt.Errorf("%w: stream %s: created over nodes %v", errBadStreamRecord, name, nodes)
	}
	return st, nil
}

func (st storedStream) config() wire.StreamConfig {
	return wire.StreamConfig{Shards: st.Shards, Durable: st.Durable, Routing: wire.Routing(st.Routing),
		Overflow: wire.Overflow(st.Overflow), QueueCapacity: st.QueueCapacity, QueueMaxBytes: st.QueueMaxBytes,
		RetentionAgeMillis: st.RetentionAgeMillis, RetentionBytes: st.RetentionBytes, Replicas: st.Replicas}
}

// catalog owns the streams: their configs (persisted through the storage
// writer) and their shard actors, which are its children. It never blocks:
// it loads the streams at start in a goroutine it owns (requests wait in
// stash until then), config writes are requests to the storage writer it
// awaits with ReenterAfter, and lookups of a stream being created wait in
// creating.
type catalog struct {
	cfg CatalogConfig
	// loaded is set once the persisted streams are loaded; until then
	// requests wait in stash.
	loaded bool
	stash  []stashed
	// token marks this instance's load (a restarted catalog keeps its pid).
	token uint64
	// streams by name key.
	streams map[string]*StreamHandle
	// creating holds the requests waiting for a stream being created.
	creating map[string]*creation
	// nextID is the next stream id to assign.
	nextID uint64
	// stopping is set once the catalog is stopping: shards are not respawned.
	stopping bool
	// meta is this node's replica of the cluster's metadata group (nil: a
	// single node, or not started yet); metaWaits are the creates it
	// proposed, by proposal.
	meta             *raftReplica
	metaWaits        map[uint64]*metaWait
	nextMetaProposal uint64
	// placements caches each replicated stream's placement, by id.
	placements map[uint64]streamPlacement
	// metaRestartTimer stops the pending restart of a failed metadata
	// replica (nil: none).
	metaRestartTimer func() bool
	// replaced are the shards (by actor id) that stop to be started again
	// under their stream's new placement.
	replaced map[string]bool
	// cluster is the cluster's state as this node applied it (nil: none
	// stored yet); clusterGen counts its changes, so that placements made
	// under an older one are made again (catalog_members.go).
	cluster    *ClusterMembership
	clusterGen uint64
	// metaTicks counts the metadata replica's ticks; metaConfUntil is the
	// tick until which its leader waits for the configuration change it
	// proposed last, in term metaConfTerm, to apply (0: none);
	// metaConfChecked is set once a restart's snapshot was checked against
	// the configuration (catalog_meta_conf.go).
	metaTicks       int
	metaConfUntil   int
	metaConfTerm    uint64
	metaConfChecked bool
	// leaveTimer stops the next check of a leaving node (nil: none armed);
	// leftTimer the end of a node that left; left is set once this node
	// left the cluster: it runs no metadata replica and has no peers.
	leaveTimer, leftTimer func() bool
	left                  bool
}

type creation struct {
	handle  *StreamHandle
	waiters []*actor.PID
}

// NewCatalogProps returns the props of the catalog. Its children (shards)
// restart on failure, at most 10 times in 10 seconds.
func NewCatalogProps(cfg CatalogConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return actor.PropsFromProducer(func() actor.Actor { return &catalog{cfg: cfg} },
		actor.WithSupervisor(answeringStrategy{actor.NewOneForOneStrategy(10, 10*time.Second, func(reason any) actor.Directive {
			return actor.RestartDirective
		})}))
}

// Receive dispatches.
func (c *catalog) Receive(ctx actor.Context) {
	if c.meta != nil && c.meta.receive(ctx, ctx.Message()) {
		if c.meta.failed() != nil {
			c.restartMeta(ctx)
		}
		return
	}
	switch m := ctx.Message().(type) {
	case *raftTick, *RaftInbound, *MetaWriteResponse, *PeerUndelivered, *PeerSuspect, *ShardInbound:
		// For a metadata replica that is not running (yet).
	case *metaProposalExpired:
		c.onMetaProposalExpired(ctx, m)
	case *metaRestart:
		if c.meta == nil && !c.stopping {
			c.startMeta(ctx)
		}
	case *actor.Started:
		c.onStarted(ctx)
	case *catalogLoaded:
		c.onLoaded(ctx, m)
	case *LookupStreamRequest, *CreateStreamRequest, *ListStreamsRequest, *DeleteStreamRequest, *AllStreamsRequest, *AllShardsRequest, *SetReplicasRequest,
		*ClusterChangeRequest:
		c.onStreamRequest(ctx, m)
	case *actor.Terminated:
		c.onTerminated(ctx, m)
	case *MetaHandOff:
		c.metaHandOff(ctx)
	case *MetaStatusRequest:
		ctx.Respond(c.metaStatus())
	case *leaveCheck:
		c.onLeaveCheck(ctx)
	case *metaRetry:
		c.onMetaRetry(ctx, m)
	case *leftDone:
		c.onLeftDone(ctx)
	case *ShardReplaced:
		if ctx.Sender() != nil && !c.stopping {
			if c.replaced == nil {
				c.replaced = map[string]bool{}
			}
			c.replaced[ctx.Sender().Id] = true
			ctx.Stop(ctx.Sender()) // onTerminated starts it again
		}
	case *actor.Stopping, *actor.Restarting:
		c.onStopping(ctx)
	case *actor.Stopped:
		// Nothing to do: Stopping marked the handles stale and answered
		// the stash.
	default:
		ctx.Logger().Warn("catalog: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func nameKey(n wire.StreamName) string { return n.String() }

// onStreamRequest stashes a request until the streams are loaded, and
// serves it (onRequest) once they are.
func (c *catalog) onStreamRequest(ctx actor.Context, msg any) {
	if !c.loaded {
		c.stash = append(c.stash, stashed{msg: msg, sender: ctx.Sender()})
		return
	}
	c.onRequest(ctx, ctx.Sender(), msg)
}

// onRequest dispatches a request (live, or from the stash once the
// streams are loaded); from is its sender.
func (c *catalog) onRequest(ctx actor.Context, from *actor.PID, msg any) {
	reply := func(resp any) {
		if from != nil {
			ctx.Send(from, resp)
		}
	}
	switch m := msg.(type) {
	case *LookupStreamRequest:
		c.onLookup(ctx, from, m)
	case *CreateStreamRequest:
		c.onCreate(ctx, from, m.Name, m.Config, true)
	case *ListStreamsRequest:
		reply(c.list(m))
	case *DeleteStreamRequest:
		c.onDelete(ctx, from, m)
	case *SetReplicasRequest:
		c.proposeReplicas(ctx, from, m)
	case *ClusterChangeRequest:
		c.proposeClusterChange(ctx, from, m)
	case *AllStreamsRequest:
		all := make([]*StreamHandle, 0, len(c.streams))
		for _, h := range c.streams {
			all = append(all, h)
		}
		reply(&AllStreamsResponse{Streams: all})
	case *AllShardsRequest:
		var all []*actor.PID
		for _, h := range c.streams {
			all = append(all, h.Shards...)
		}
		reply(&AllShardsResponse{Shards: all})
	}
}

// onStopping runs when the catalog stops or restarts. A restart stops the
// children first: do not respawn them, or the restart never completes. The
// new instance spawns them again, with new handles: the old ones are marked
// stale so their holders look the streams up again.
func (c *catalog) onStopping(ctx actor.Context) {
	c.stopping = true
	for _, stop := range []func() bool{c.leaveTimer, c.leftTimer} {
		if stop != nil {
			stop()
		}
	}
	c.stopMeta(ctx)
	for _, h := range c.streams {
		h.deleted.Store(true)
	}
	c.refuseStash(ctx)
}

// refuseStash answers the requests still waiting for the load: the
// catalog is stopping.
func (c *catalog) refuseStash(ctx actor.Context) {
	err := wire.Errorf(wire.CodeShuttingDown, "the node is stopping")
	for _, st := range c.stash {
		if st.sender == nil {
			continue
		}
		switch st.msg.(type) {
		case *LookupStreamRequest, *CreateStreamRequest, *SetReplicasRequest:
			ctx.Send(st.sender, &LookupStreamResponse{Err: err})
		case *DeleteStreamRequest:
			ctx.Send(st.sender, &DeleteStreamResponse{Err: err})
		case *ListStreamsRequest:
			ctx.Send(st.sender, &ListStreamsResponse{})
		case *AllStreamsRequest:
			ctx.Send(st.sender, &AllStreamsResponse{})
		case *AllShardsRequest:
			ctx.Send(st.sender, &AllShardsResponse{})
		case *ClusterChangeRequest:
			ctx.Send(st.sender, &ClusterChangeResponse{Err: err})
		}
	}
	c.stash = nil
}

// catalogLoaded brings the persisted streams back from the load goroutine.
type catalogLoaded struct {
	token   uint64
	nextID  uint64
	records []storedStream
	// cluster is the cluster's stored state (nil: none).
	cluster *ClusterMembership
	err     error
}

// onStarted loads the persisted streams in a goroutine (onLoaded spawns
// their shards). This read at start is the only storage access the catalog
// makes itself.
func (c *catalog) onStarted(ctx actor.Context) {
	c.streams = map[string]*StreamHandle{}
	c.creating = map[string]*creation{}
	c.token = catalogTokens.Add(1)
	token, log := c.token, c.cfg.Durable
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if !c.cfg.Goroutines.Go(func() {
		m := &catalogLoaded{token: token, nextID: 1}
		if v, err := log.GetMeta(metaNextID); err == nil && len(v) == 8 {
			m.nextID = binary.BigEndian.Uint64(v)
		}
		m.records, m.err = loadStreamRecords(log.ScanMeta)
		if v, err := log.GetMeta(clusterMetaKey); err == nil && m.err == nil {
			m.cluster, m.err = decodeClusterMembership(v)
		} else if err != nil && !errors.Is(err, storage.ErrNotFound) && m.err == nil {
			m.err = fmt.Errorf("catalog: the stored cluster state: %w", err)
		}
		root.Send(self, m)
	}) {
		ctx.Stop(self) // the node is stopping
	}
}

// catalogTokens numbers catalog instances.
var catalogTokens atomic.Uint64

// onLoaded spawns the loaded streams' shards and serves what waited.
func (c *catalog) onLoaded(ctx actor.Context, m *catalogLoaded) {
	if m.token != c.token || c.stopping {
		return
	}
	c.nextID = m.nextID
	if c.cfg.Cluster != nil {
		// Before the shards start: they are placed over the members, and
		// their preferred leaders skip drained nodes.
		c.loadClusterState(ctx, m.cluster)
	}
	for _, st := range m.records {
		h := c.newHandle(st)
		c.spawnShards(ctx, h)
		c.streams[nameKey(h.Name)] = h
		if st.ID < replicatedIDBase {
			c.nextID = max(c.nextID, st.ID+1)
		}
	}
	if m.err != nil {
		panic(m.err) // the node supervisor restarts the catalog
	}
	ctx.Logger().Info("catalog loaded", slog.Int("streams", len(c.streams)))
	c.loaded = true
	c.startMeta(ctx)
	stash := c.stash
	c.stash = nil
	for _, st := range stash {
		c.onRequest(ctx, st.sender, st.msg)
	}
}

// loadStreamRecords reads every stream record through scan (the durable
// log's ScanMeta). A record that does not decode, that sits under another
// stream's key, or that repeats another's id is an error wrapping
// errBadStreamRecord: one name or one id must never get two handles (and
// two sets of shard actors).
func loadStreamRecords(scan func(prefix []byte, fn func(key, value []byte) error) error) ([]storedStream, error) {
	var out []storedStream
	ids := map[uint64]bool{}
	err := scan(metaStreamPrefix, func(key, value []byte) error {
		st, err := decodeStoredStream(value)
		if err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
		name := wire.StreamName{Tenant: st.Tenant, Namespace: st.NS, Stream: st.Stream}
		if string(key) != string(metaStreamPrefix)+nameKey(name) {
			return fmt.Errorf("catalog: %w: the record of %s is stored under another stream's key", errBadStreamRecord, name)
		}
		if ids[st.ID] {
			return fmt.Errorf("catalog: %w: stream id %d is used twice", errBadStreamRecord, st.ID)
		}
		ids[st.ID] = true
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *catalog) newHandle(st storedStream) *StreamHandle {
	h := &StreamHandle{
		ID:              st.ID,
		Name:            wire.StreamName{Tenant: st.Tenant, Namespace: st.NS, Stream: st.Stream},
		Config:          st.config(),
		CreatedUnixNano: st.Created,
		Log:             c.cfg.Memory,
		createdReplicas: cmp.Or(st.CreatedReplicas, st.Replicas),
		createdNodes:    st.CreatedNodes,
	}
	if st.Durable {
		h.Log = c.cfg.Durable
	}
	h.Progress = c.cfg.Stats.StreamProgress(st.ID, int(st.Shards))
	return h
}

func shardName(id uint64, i uint32) string { return fmt.Sprintf("s%d-%d", id, i) }

func (c *catalog) shardProps(h *StreamHandle, i uint32) *actor.Props {
	p := NewShardProps(ShardConfig{
		Dispatcher:  c.cfg.Goroutines.Dispatcher(),
		Tracer:      c.cfg.Tracer,
		Counters:    c.cfg.Stats.Stream(h.Name.String()),
		Key:         h.ShardKey(i),
		Stream:      h.Name,
		Durable:     h.Config.Durable,
		Overflow:    h.Config.Overflow,
		Log:         h.Log,
		Writer:      c.cfg.Writer,
		RingRecords: c.cfg.RingRecords,
		MaxPending:  c.cfg.MaxPending,
		Stats:       c.cfg.Stats,
		QueueTotal:  c.cfg.QueueTotal,
		RingTotal:   c.cfg.RingTotal,
		PendingWait: c.cfg.PendingWait,
		RingBytes:   c.cfg.RingBytes,
		Now:         c.cfg.Now,
		Progress:    h.Progress[i],
		Raft:        c.replicaSet(h, i),
		Groups:      c.cfg.Groups,
	})
	if c.cfg.ShardProps != nil {
		p = c.cfg.ShardProps(p)
	}
	return p
}

func (c *catalog) spawnShards(ctx actor.Context, h *StreamHandle) {
	h.Shards = make([]*actor.PID, h.Config.Shards)
	for i := range h.Shards {
		pid, err := ctx.SpawnNamed(c.shardProps(h, uint32(i)), shardName(h.ID, uint32(i)))
		if err != nil {
			panic(fmt.Errorf("catalog: spawn shard %s/%d: %w", h.Name, i, err))
		}
		h.Shards[i] = pid
	}
}

// onTerminated respawns a shard that stopped after exhausting its restarts,
// under the same name, so the PIDs handed out stay valid.
func (c *catalog) onTerminated(ctx actor.Context, m *actor.Terminated) {
	if c.stopping {
		return
	}
	for _, h := range c.streams {
		for i, pid := range h.Shards {
			if pid.Id == m.Who.Id {
				if c.replaced[pid.Id] {
					delete(c.replaced, pid.Id)
					ctx.Logger().Info("catalog: starting a shard again under its stream's new placement",
						slog.String("stream", h.Name.String()), slog.Int("shard", i))
				} else {
					ctx.Logger().Error("catalog: shard stopped; starting it again",
						slog.String("stream", h.Name.String()), slog.Int("shard", i))
				}
				if _, err := ctx.SpawnNamed(c.shardProps(h, uint32(i)), shardName(h.ID, uint32(i))); err != nil {
					ctx.Logger().Error("catalog: respawn failed", slog.String("stream", h.Name.String()), slog.Int("shard", i), slog.Any("error", err))
				}
				return
			}
		}
	}
}

func (c *catalog) onLookup(ctx actor.Context, from *actor.PID, m *LookupStreamRequest) {
	reply := func(r *LookupStreamResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	if err := m.Name.Validate(); err != nil {
		reply(&LookupStreamResponse{Err: err.(*wire.Error)})
		return
	}
	if h, ok := c.streams[nameKey(m.Name)]; ok {
		reply(&LookupStreamResponse{Stream: h})
		return
	}
	if c.cfg.Cluster != nil && !c.joined() {
		// A node added to the cluster that has not taken its state yet
		// knows no cluster stream: ask another node.
		reply(&LookupStreamResponse{Err: &wire.Error{Code: wire.CodeNotLeader,
			Message: fmt.Sprintf("this node has not joined the cluster yet; stream %s may be the cluster's: ask another node", m.Name)}})
		return
	}
	if !m.AutoCreate {
		if cr, ok := c.creating[nameKey(m.Name)]; ok && from != nil {
			cr.waiters = append(cr.waiters, from)
			return
		}
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeStreamNotFound, "stream %s does not exist", m.Name)})
		return
	}
	c.onCreate(ctx, from, m.Name, c.cfg.DefaultConfig, false)
}

// ValidateConfig checks a stream config; the wire decoder has already
// refused unknown routings and overflow policies.
func ValidateConfig(cfg wire.StreamConfig) *wire.Error {
	switch {
	case cfg.Shards < 1 || cfg.Shards > MaxShards:
		return wire.Errorf(wire.CodeInvalidConfig, "shards must be between 1 and %d, got %d", MaxShards, cfg.Shards)
	case cfg.Routing > wire.RoutingJump:
		return wire.Errorf(wire.CodeInvalidConfig, "unknown routing %d", cfg.Routing)
	case cfg.Overflow > wire.OverflowBlock:
		return wire.Errorf(wire.CodeInvalidConfig, "unknown overflow policy %d", cfg.Overflow)
	case cfg.QueueCapacity > MaxQueueCapacity:
		return wire.Errorf(wire.CodeInvalidConfig, "queue capacity %d is over %d", cfg.QueueCapacity, MaxQueueCapacity)
	case cfg.RetentionAgeMillis > 0 && cfg.RetentionAgeMillis < 1000:
		return wire.Errorf(wire.CodeInvalidConfig, "retention age %d ms is under one second", cfg.RetentionAgeMillis)
	case cfg.Replicas > 1 && !cfg.Durable:
		return wire.Errorf(wire.CodeInvalidConfig, "a replicated stream must be durable")
	}
	return nil
}

// MaxQueueCapacity bounds a stream's subscriber queue capacity.
const MaxQueueCapacity = 1 << 20

// onCreate creates a stream, or answers the existing one. strict refuses an
// existing stream whose config differs.
func (c *catalog) onCreate(ctx actor.Context, from *actor.PID, name wire.StreamName, cfg wire.StreamConfig, strict bool) {
	reply := func(r *LookupStreamResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	if err := name.Validate(); err != nil {
		reply(&LookupStreamResponse{Err: err.(*wire.Error)})
		return
	}
	if err := ValidateConfig(cfg); err != nil {
		reply(&LookupStreamResponse{Err: err})
		return
	}
	if c.cfg.Cluster != nil && cfg.Durable && cfg.Replicas == 0 {
		// In a cluster every durable stream is the cluster's, created
		// through the metadata group, so that no node makes a stream of
		// its own under a name the cluster gives another (a publish racing
		// a replicated create would): one replica is placed on one node.
		cfg.Replicas = 1
	}
	key := nameKey(name)
	if h, ok := c.streams[key]; ok {
		if strict && h.Config != cfg {
			reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeStreamExists,
				"stream %s exists with another config (%d shards, durable=%t)", name, h.Config.Shards, h.Config.Durable)})
			return
		}
		reply(&LookupStreamResponse{Stream: h})
		return
	}
	if cr, ok := c.creating[key]; ok {
		if from != nil {
			cr.waiters = append(cr.waiters, from)
		}
		return
	}
	if max := c.cfg.MaxStreamsPerTenant; max > 0 && c.tenantStreams(name.Tenant) >= max {
		c.cfg.Stats.Limits.TenantStreams.Add(1)
		reply(&LookupStreamResponse{Err: wire.Errorf(wire.CodeQuotaExceeded,
			"tenant %s has its maximum of %d streams (max_streams_per_tenant); delete one first", name.Tenant, max)})
		return
	}
	if cfg.Replicas >= 1 {
		c.proposeCreate(ctx, from, name, cfg, strict)
		return
	}
	st := storedFrom(c.nextID, name, cfg, c.cfg.Now().UnixNano())
	c.nextID++
	cr := &creation{handle: c.newHandle(st)}
	if from != nil {
		cr.waiters = append(cr.waiters, from)
	}
	c.creating[key] = cr

	c.persistStream(ctx, key, st, storage.MetaPut{Key: metaNextID, Value: binary.BigEndian.AppendUint64(nil, c.nextID)})
}

// persistStream writes st's record, with more puts in the same commit, and
// goes on with onPersisted when the storage writer answers.
func (c *catalog) persistStream(ctx actor.Context, key string, st storedStream, more ...storage.MetaPut) {
	value, _ := json.Marshal(st)
	req := &MetaWriteRequest{Puts: append([]storage.MetaPut{
		{Key: append(append([]byte(nil), metaStreamPrefix...), key...), Value: value}}, more...)}
	f := ctx.RequestFuture(c.cfg.Writer, req, 30*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		if err == nil {
			if r, ok := res.(*MetaWriteResponse); ok {
				err = r.Err
			} else {
				err = fmt.Errorf("unexpected response %T", res)
			}
		}
		c.onPersisted(ctx, &streamPersisted{key: key, err: err})
	})
}

// tenantStreams counts the tenant's streams, those being created included.
func (c *catalog) tenantStreams(tenant string) int {
	n := 0
	for _, h := range c.streams {
		if h.Name.Tenant == tenant {
			n++
		}
	}
	for _, cr := range c.creating {
		if cr.handle.Name.Tenant == tenant {
			n++
		}
	}
	return n
}

func (c *catalog) onPersisted(ctx actor.Context, m *streamPersisted) {
	cr, ok := c.creating[m.key]
	if !ok {
		return
	}
	delete(c.creating, m.key)
	var resp *LookupStreamResponse
	if m.err != nil {
		ctx.Logger().Error("catalog: cannot persist stream", slog.String("stream", m.key), slog.Any("error", m.err))
		resp = &LookupStreamResponse{Err: storageError(m.err)}
		c.cfg.Stats.DropProgress(cr.handle.ID)
	} else {
		c.spawnShards(ctx, cr.handle)
		c.streams[m.key] = cr.handle
		ctx.Logger().Info("stream created", slog.String("stream", m.key),
			slog.Uint64("shards", uint64(cr.handle.Config.Shards)), slog.Bool("durable", cr.handle.Config.Durable))
		resp = &LookupStreamResponse{Stream: cr.handle}
	}
	for _, w := range cr.waiters {
		ctx.Send(w, resp)
	}
}

func (c *catalog) list(m *ListStreamsRequest) *ListStreamsResponse {
	var out []*StreamHandle
	for _, h := range c.streams {
		if (m.Tenant == wire.AllTenants || h.Name.Tenant == m.Tenant) && (m.Namespace == "" || h.Name.Namespace == m.Namespace) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return nameKey(out[i].Name) < nameKey(out[j].Name) })
	return &ListStreamsResponse{Streams: out}
}

// onDelete removes a stream: it leaves the catalog at once (a new stream of
// the same name gets a new id), its shards stop (their publishers and
// subscribers are told), and the storage writer drops its batches and config
// after everything queued before.
func (c *catalog) onDelete(ctx actor.Context, sender *actor.PID, m *DeleteStreamRequest) {
	refuse := func(err *wire.Error) {
		if sender != nil {
			ctx.Send(sender, &DeleteStreamResponse{Err: err})
		}
	}
	if err := m.Name.Validate(); err != nil {
		refuse(err.(*wire.Error))
		return
	}
	key := nameKey(m.Name)
	h, ok := c.streams[key]
	if !ok {
		refuse(wire.Errorf(wire.CodeStreamNotFound, "stream %s does not exist", m.Name))
		return
	}
	if h.Config.Replicas >= 1 {
		refuse(wire.Errorf(wire.CodeInvalidRequest, "stream %s is the cluster's: deleting a cluster stream is not supported yet", m.Name))
		return
	}
	delete(c.streams, key)
	h.deleted.Store(true)
	c.cfg.Stats.DropStream(h.Name.String())
	c.cfg.Stats.DropProgress(h.ID)
	keys := make([]storage.ShardKey, len(h.Shards))
	for i := range h.Shards {
		keys[i] = h.ShardKey(uint32(i))
	}
	req := &DropStreamRequest{
		Durable: h.Config.Durable,
		Shards:  keys,
		Memory:  c.cfg.Memory,
		Metas:   []storage.MetaPut{{Key: append(append([]byte(nil), metaStreamPrefix...), key...)}},
	}
	reply := func(err error) {
		resp := &DeleteStreamResponse{}
		if err != nil {
			ctx.Logger().Error("catalog: deleting a stream failed", slog.String("stream", key), slog.Any("error", err))
			resp.Err = storageError(err)
		} else {
			ctx.Logger().Info("stream deleted", slog.String("stream", key))
		}
		if sender != nil {
			ctx.Send(sender, resp)
		}
	}
	// First every shard becomes a tombstone and says it will append
	// nothing more; then the storage writer drops the data, after the
	// shards' last appends.
	waiting := len(h.Shards)
	drop := func() {
		f := ctx.RequestFuture(c.cfg.Writer, req, 30*time.Second)
		ctx.ReenterAfter(f, func(res any, err error) {
			if err == nil {
				if r, ok := res.(*MetaWriteResponse); ok {
					err = r.Err
				}
			}
			reply(err)
		})
	}
	if c.cfg.Groups != nil && h.Config.Durable {
		// Groups live on durable streams only: their coordinators stop
		// first, then their state is deleted with the stream (the storage
		// writer scans for it beside itself).
		req.MetaPrefixes = [][]byte{GroupStreamPrefix(h.ID)}
		plain := drop
		drop = func() {
			f := ctx.RequestFuture(c.cfg.Groups, &StreamGroupsDropped{Stream: h.ID}, 30*time.Second)
			ctx.ReenterAfter(f, func(_ any, err error) {
				if err != nil {
					ctx.Logger().Warn("catalog: a deleted stream's groups did not stop", slog.String("stream", key), slog.Any("error", err))
				}
				plain()
			})
		}
	}
	for _, pid := range h.Shards {
		f := ctx.RequestFuture(pid, &StreamDeletedRequest{}, 30*time.Second)
		ctx.ReenterAfter(f, func(_ any, err error) {
			if err != nil {
				ctx.Logger().Warn("catalog: a deleted stream's shard did not confirm", slog.String("stream", key), slog.Any("error", err))
			}
			if waiting--; waiting == 0 {
				drop()
			}
		})
	}
}

// answeringStrategy supervises shards: before the wrapped strategy decides,
// it answers the message whose handling failed when that is a publish, so
// the publisher learns the outcome is unknown instead of waiting forever
// (the message is lost with the failure).
type answeringStrategy struct {
	actor.SupervisorStrategy
}

// HandleFailure implements actor.SupervisorStrategy.
func (s answeringStrategy) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, message any) {
	if env, ok := message.(*actor.MessageEnvelope); ok {
		message = env.Message
	}
	if m, ok := message.(*PublishRequest); ok && m.ReplyTo != nil {
		sys.Root.Send(m.ReplyTo, &PublishRejected{ReqID: m.ReqID, Ack: m.Ack,
			Err: wire.Errorf(wire.CodeInternal, "the shard failed while handling the publish; it may or may not have been written")})
	}
	s.SupervisorStrategy.HandleFailure(sys, sup, child, rs, reason, message)
}
