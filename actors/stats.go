package actors

import (
	"sync"
	"sync/atomic"
)

// Stats are node-wide counters and gauges that actors update and the node
// exports as metrics. One Stats is shared by every actor of a node; its
// fields are atomics. Actor constructors give a private one to an actor
// configured without.
type Stats struct {
	// DropCountBound and DropByteBound count batches a live subscriber had no
	// room for (drop_new), by the bound that was full.
	DropCountBound, DropByteBound atomic.Uint64
	// DropTotalBound counts batches a live subscriber did not get because
	// the node-wide subscriber_queue_max_bytes_total was spent.
	DropTotalBound atomic.Uint64
	// DropEvicted counts batches drop_old evicted from subscriber queues.
	DropEvicted atomic.Uint64
	// Lagged counts subscriptions ended with lagged.
	Lagged atomic.Uint64
	// Overloaded counts publishes refused after waiting for admission.
	Overloaded atomic.Uint64
	// RaftLeaderChanges counts the leader changes the replicated shards
	// held here saw (a new leader elected, or none known); RaftLeading is
	// how many of them this node leads now.
	RaftLeaderChanges atomic.Uint64
	RaftLeading       atomic.Int64
	// RaftProposalTimeouts counts publishes to replicated shards answered
	// replication_timeout (not applied in time, or their leader stepped
	// down first).
	RaftProposalTimeouts atomic.Uint64
	// RaftSnapshotsSent counts snapshots the replicated shards' leaders
	// sent to followers behind their logs; RaftSnapshotsInstalled the
	// snapshots this node's replicas installed (their logs fetched in
	// pages).
	RaftSnapshotsSent, RaftSnapshotsInstalled atomic.Uint64
	// RaftConfChanges counts raft configuration changes (a learner added
	// or promoted, a replica removed) the replicas here applied.
	RaftConfChanges atomic.Uint64
	// MetaSnapshotsInstalled counts the metadata group's snapshots this
	// node's replica installed (it joined, or was behind the group's first
	// entry).
	MetaSnapshotsInstalled atomic.Uint64
	// RaftQuiesced counts the replicated shards' replicas here that are
	// quiesced now (idle: no ticks, no heartbeats).
	RaftQuiesced atomic.Int64
	// ReplicaBehind counts range reads and subscriptions the replicated
	// shards' followers here refused as replica_behind; SubscriptionsEnded
	// the live subscriptions they ended because their replica fell behind
	// (or, asked of the leader, stopped leading).
	ReplicaBehind, SubscriptionsEnded atomic.Uint64
	// ClusterMembers, ClusterDrained and ClusterLeaving count the
	// cluster's members, drained nodes and leaving nodes as this node
	// applied the metadata group; ClusterSelf is this node's own state
	// there (ClusterSelfState).
	ClusterMembers, ClusterDrained, ClusterLeaving atomic.Int64
	ClusterSelf                                    atomic.Int32
	// InCluster is set on a node with peers (the cluster metrics are
	// exported only then).
	InCluster atomic.Bool
	// PublishedBatches, PublishedRecords and PublishedBytes count committed
	// publishes.
	PublishedBatches, PublishedRecords, PublishedBytes atomic.Uint64
	// DeliveredBatches counts batches written to subscribers' streams.
	DeliveredBatches atomic.Uint64
	// QueuedBatches and QueuedBytes are the batches (and their records
	// bytes) waiting in subscription queues, node-wide.
	QueuedBatches, QueuedBytes atomic.Int64
	// EgressBytes are the records bytes handed to subscription lanes and
	// not yet written, node-wide.
	EgressBytes atomic.Int64
	// Subscriptions and Connections are the live ones.
	Subscriptions, Connections atomic.Int64
	// Commits and CommittedBatches count storage writer commits and the
	// batches they carried.
	Commits, CommittedBatches atomic.Uint64
	// GroupDelivered counts records handed to group consumers (polls and
	// pushes, redeliveries included); GroupAcked and GroupNacked count
	// records settled and handed back; GroupRedelivered counts claims whose
	// visibility timeout lapsed; GroupDeadLettered counts records
	// dead-lettered.
	GroupDelivered, GroupAcked, GroupNacked, GroupRedelivered, GroupDeadLettered atomic.Uint64
	// GroupJoins, GroupLeaves and GroupExpired count push members joining,
	// leaving, and removed by the session timeout.
	GroupJoins, GroupLeaves, GroupExpired atomic.Uint64
	// GroupMembers are the live push members, node-wide.
	GroupMembers atomic.Int64
	// DeliveredBytes counts the records bytes of those batches.
	DeliveredBytes atomic.Uint64
	// Limits counts each configured limit's refusals (herald_limit_hits_total).
	Limits LimitHits
	// AuthFailures counts handshakes refused for their credentials;
	// AuthDenied counts requests refused as permission_denied.
	AuthFailures, AuthDenied atomic.Uint64
	// DeadLetters counts actor messages that reached no actor (most are
	// harmless: a notice to an actor that just stopped).
	DeadLetters atomic.Uint64
	// Hist are the distributions (set by the node before actors start).
	Hist   Histograms
	labels labelled
}

func (s *Stats) add(c *atomic.Uint64, n uint64) { c.Add(n) }

func (s *Stats) gauge(g *atomic.Int64, n int64) { g.Add(n) }

// Recorder takes samples of a distribution (a histogram of the node's
// metrics). A nil Recorder drops them.
type Recorder interface {
	Record(v float64)
}

// Histograms are the node's distributions; nil fields record nothing.
type Histograms struct {
	// PublishAckSeconds is from a publish's arrival at the node to its
	// answer (durable on a durable stream).
	PublishAckSeconds Recorder
	// CommitSeconds is one storage writer commit, sync included;
	// CommitBatches is the batches it carried.
	CommitSeconds, CommitBatches Recorder
}

func record(r Recorder, v float64) {
	if r != nil {
		r.Record(v)
	}
}

// StreamCounters count one stream's committed publishes, and what its
// subscriptions delivered.
type StreamCounters struct {
	Batches, Records, Bytes atomic.Uint64
	// DeliveredBatches and DeliveredBytes count what the stream's
	// subscriptions' lanes wrote; Subscriptions are its live ones (the
	// dashboard's figures, not metrics).
	DeliveredBatches, DeliveredBytes atomic.Uint64
	Subscriptions                    atomic.Int64
}

// GroupGauges are one consumer group's gauges: Claims, its records in
// flight, kept up to date by its coordinator; and Lag, computed when read.
type GroupGauges struct {
	Stream, Group string
	Claims        atomic.Int64
	// Members are its push members (for ListGroups; not a metric).
	Members atomic.Int64
	// Redelivered and DeadLettered count the claims whose visibility
	// lapsed and the records dead-lettered by its coordinator here; Dead
	// is the dead letters it holds now (the dashboard's figures).
	Redelivered, DeadLettered atomic.Uint64
	Dead                      atomic.Int64
	// lag is what Lag reads: the cursors the coordinator publishes and the
	// tails the shards publish.
	lag atomic.Pointer[groupLag]
}

// groupLag is a group's committed cursor per shard, as its coordinator
// last published them, beside the shards' own progress.
type groupLag struct {
	committed []atomic.Uint64
	shards    []*ShardProgress
}

// Lag returns the records between the group's committed cursors and the
// shards' committed tails, summed over shards, as of now: it follows the
// tail with no consumer attached (0 before the coordinator has loaded).
func (g *GroupGauges) Lag() int64 {
	l := g.lag.Load()
	if l == nil {
		return 0
	}
	var lag int64
	for i := range l.committed {
		if tail, c := l.shards[i].Tail.Load(), l.committed[i].Load(); tail > c {
			lag += int64(tail - c)
		}
	}
	return lag
}

// trackLag points Lag at a coordinator's cursors for shards, and returns
// them for it to publish into.
func (g *GroupGauges) trackLag(shards []*ShardProgress) []atomic.Uint64 {
	l := &groupLag{committed: make([]atomic.Uint64, len(shards)), shards: shards}
	g.lag.Store(l)
	return l.committed
}

// labelled are the per-stream and per-group gauges and counters; streams
// and groups come and go, so they live in maps the metrics walk.
type labelled struct {
	streams  sync.Map // stream name → *StreamCounters
	groups   sync.Map // stream name + "\x00" + group → *GroupGauges
	progress sync.Map // stream id → []*ShardProgress
	raft     sync.Map // storage.ShardKey → *RaftGauges (stats_raft.go)
}

// StreamProgress returns where the shards of stream id publish their
// progress: the same objects for every handle of the stream, so a lag
// computed from an old handle's (a catalog that restarted hands out new
// ones) keeps following the tails.
func (s *Stats) StreamProgress(id uint64, shards int) []*ShardProgress {
	if s != nil {
		if v, ok := s.labels.progress.Load(id); ok && len(v.([]*ShardProgress)) == shards {
			return v.([]*ShardProgress)
		}
	}
	p := make([]*ShardProgress, shards)
	for i := range p {
		p[i] = &ShardProgress{}
	}
	if s != nil {
		s.labels.progress.Store(id, p)
	}
	return p
}

// DropProgress forgets a deleted stream's shard progress.
func (s *Stats) DropProgress(id uint64) {
	if s != nil {
		s.labels.progress.Delete(id)
	}
}

// Stream returns the counters of stream (created on first use).
func (s *Stats) Stream(stream string) *StreamCounters {
	if s == nil {
		return nil
	}
	if v, ok := s.labels.streams.Load(stream); ok {
		return v.(*StreamCounters)
	}
	v, _ := s.labels.streams.LoadOrStore(stream, &StreamCounters{})
	return v.(*StreamCounters)
}

// DropStream forgets a deleted stream's counters and its groups' gauges.
func (s *Stats) DropStream(stream string) {
	if s == nil {
		return
	}
	s.labels.streams.Delete(stream)
	s.labels.groups.Range(func(k, v any) bool {
		if v.(*GroupGauges).Stream == stream {
			s.labels.groups.Delete(k)
		}
		return true
	})
}

// DropGroup forgets a deleted group's gauges: its metrics series go.
func (s *Stats) DropGroup(stream, group string) {
	if s != nil {
		s.labels.groups.Delete(stream + "\x00" + group)
	}
}

// Group returns the gauges of a group (created on first use).
func (s *Stats) Group(stream, group string) *GroupGauges {
	if s == nil {
		return nil
	}
	k := stream + "\x00" + group
	if v, ok := s.labels.groups.Load(k); ok {
		return v.(*GroupGauges)
	}
	v, _ := s.labels.groups.LoadOrStore(k, &GroupGauges{Stream: stream, Group: group})
	return v.(*GroupGauges)
}

// EachStream calls fn for every stream's counters.
func (s *Stats) EachStream(fn func(stream string, c *StreamCounters)) {
	s.labels.streams.Range(func(k, v any) bool {
		fn(k.(string), v.(*StreamCounters))
		return true
	})
}

// EachGroup calls fn for every group's gauges.
func (s *Stats) EachGroup(fn func(g *GroupGauges)) {
	s.labels.groups.Range(func(_, v any) bool {
		fn(v.(*GroupGauges))
		return true
	})
}

// LimitHits counts what each limit refused: the label of
// herald_limit_hits_total is the field's configuration key.
type LimitHits struct {
	// Connections: max_connections (a connection refused at accept).
	Connections atomic.Uint64
	// Subscriptions: max_subscriptions_per_connection (a subscription or
	// group push member refused).
	Subscriptions atomic.Uint64
	// TenantStreams: max_streams_per_tenant (a create refused).
	TenantStreams atomic.Uint64
	// FrameBytes: max_frame_bytes (a frame over it closed its connection).
	FrameBytes atomic.Uint64
	// BatchBytes: a publish whose records would not fit a delivery frame.
	BatchBytes atomic.Uint64
	// Handshake: handshake_timeout (no control stream or Hello in time, or
	// a data stream that never sent its first frame).
	Handshake atomic.Uint64
	// Idle: idle_timeout (a silent connection closed).
	Idle atomic.Uint64
	// GroupClaims: group_max_in_flight (a poll refused too_many_claims;
	// push deliveries pause instead, uncounted).
	GroupClaims atomic.Uint64
	// Groups: group_max_per_stream (a poll or join of a new group refused
	// quota_exceeded).
	Groups atomic.Uint64
}
