package supervisors

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/heraldmq/herald/actors"
)

// nodeMetrics exports a node's Stats through an OpenTelemetry meter to a
// Prometheus registry of its own, served at /metrics. docs/backpressure.md
// and docs/operations.md list the names.
type nodeMetrics struct {
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

func newNodeMetrics(stats *actors.Stats) (*nodeMetrics, error) {
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's own figures (go_goroutines,
	// go_memstats_*, process_resident_memory_bytes, open fds, ...): what an
	// operator watches for leaks and what herald bench idle reads.
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("metrics: go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("metrics: process collector: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	m := mp.Meter("herald")
	var errs []error
	counter := func(name, unit, desc string, read func(o metric.Int64Observer)) {
		_, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error { read(o); return nil }))
		errs = append(errs, err)
	}
	gauge := func(name, unit, desc string, read func(o metric.Int64Observer)) {
		_, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error { read(o); return nil }))
		errs = append(errs, err)
	}
	u := func(v uint64) int64 { return int64(v) }
	cause := func(c string) metric.ObserveOption { return metric.WithAttributes(attribute.String("cause", c)) }

	counter("herald.subscriber.drops", "{batch}", "Batches a subscriber did not get because its queue was full, by cause.",
		func(o metric.Int64Observer) {
			o.Observe(u(stats.DropCountBound.Load()), cause("count_bound"))
			o.Observe(u(stats.DropByteBound.Load()), cause("byte_bound"))
			o.Observe(u(stats.DropEvicted.Load()), cause("drop_old_eviction"))
			o.Observe(u(stats.DropTotalBound.Load()), cause("total_bound"))
		})
	counter("herald.subscriptions.lagged", "{subscription}", "Subscriptions ended with lagged (durable streams, drop_new).",
		func(o metric.Int64Observer) { o.Observe(u(stats.Lagged.Load())) })
	counter("herald.actor.dead_letters", "{message}", "Actor messages that reached no actor (mostly notices to actors that had just stopped; the node logs them at debug).",
		func(o metric.Int64Observer) { o.Observe(u(stats.DeadLetters.Load())) })
	build := ReadBuildInfo()
	gauge("herald.build.info", "", "The node's build: 1, with its version, VCS revision and Go version as labels.",
		func(o metric.Int64Observer) {
			o.Observe(1, metric.WithAttributes(attribute.String("version", build.Version), attribute.String("revision", build.Revision),
				attribute.String("go_version", build.GoVersion)))
		})
	counter("herald.publish.overloaded", "{publish}", "Publishes refused as overloaded after waiting for admission.",
		func(o metric.Int64Observer) { o.Observe(u(stats.Overloaded.Load())) })
	counter("herald.raft.leader_changes", "{change}", "Leader changes seen by the raft groups of the replicated shards held here.",
		func(o metric.Int64Observer) { o.Observe(u(stats.RaftLeaderChanges.Load())) })
	gauge("herald.raft.leading", "{group}", "Raft groups of replicated shards this node leads now.",
		func(o metric.Int64Observer) { o.Observe(stats.RaftLeading.Load()) })
	counter("herald.raft.proposal_timeouts", "{publish}", "Publishes to replicated shards answered replication_timeout.",
		func(o metric.Int64Observer) { o.Observe(u(stats.RaftProposalTimeouts.Load())) })
	gauge("herald.raft.quiesced", "{replica}", "Replicas of replicated shards here whose groups are quiesced (idle: no ticks, no heartbeats).",
		func(o metric.Int64Observer) { o.Observe(stats.RaftQuiesced.Load()) })
	counter("herald.raft.snapshots_sent", "{snapshot}", "Snapshots the leaders here sent to replicas behind their compacted raft logs.",
		func(o metric.Int64Observer) { o.Observe(u(stats.RaftSnapshotsSent.Load())) })
	counter("herald.raft.snapshots_installed", "{snapshot}", "Snapshots the replicas here installed: a shard's, its log fetched in pages, and the metadata group's (a node that joined, or was behind its first entry).",
		func(o metric.Int64Observer) {
			o.Observe(u(stats.RaftSnapshotsInstalled.Load() + stats.MetaSnapshotsInstalled.Load()))
		})
	counter("herald.raft.conf_changes", "{change}", "Raft configuration changes (a learner added or promoted, a replica removed) the replicas here applied.",
		func(o metric.Int64Observer) { o.Observe(u(stats.RaftConfChanges.Load())) })
	counter("herald.raft.replica_behind", "{request}", "Range reads and subscriptions the followers here refused as replica_behind.",
		func(o metric.Int64Observer) { o.Observe(u(stats.ReplicaBehind.Load())) })
	counter("herald.raft.subscriptions_ended", "{subscription}", "Live subscriptions the replicas here ended because they fell behind their leaders (or, asked of the leader, stopped leading): their clients resume on another replica.",
		func(o metric.Int64Observer) { o.Observe(u(stats.SubscriptionsEnded.Load())) })
	gauge("herald.raft.replicas", "{replica}", "Replicas of replicated shards held here (raft groups this node is a member of, or waits to be added to).",
		func(o metric.Int64Observer) {
			n := int64(0)
			stats.EachRaftGroup(func(*actors.RaftGauges) { n++ })
			o.Observe(n)
		})
	gauge("herald.cluster.members", "{node}", "The cluster's members as this node applied its metadata group (leaving ones included; 0 on a node that has not joined).",
		func(o metric.Int64Observer) { o.Observe(stats.ClusterMembers.Load()) })
	gauge("herald.cluster.drained", "{node}", "The cluster's drained nodes, as this node applied its metadata group.",
		func(o metric.Int64Observer) { o.Observe(stats.ClusterDrained.Load()) })
	gauge("herald.cluster.leaving", "{node}", "The cluster's nodes being removed (their replicas moving off them), as this node applied its metadata group.",
		func(o metric.Int64Observer) { o.Observe(stats.ClusterLeaving.Load()) })
	gauge("herald.cluster.node_state", "", "This node's state in its cluster: 1 for the state it is in (joining, active, drained, leaving or left), by state.",
		func(o metric.Int64Observer) {
			if !stats.InCluster.Load() {
				return
			}
			self := actors.ClusterSelfState(stats.ClusterSelf.Load())
			for s := actors.ClusterSelfJoining; s <= actors.ClusterSelfLeft; s++ {
				v := int64(0)
				if s == self {
					v = 1
				}
				o.Observe(v, metric.WithAttributes(attribute.String("state", s.String())))
			}
		})
	limit := func(key string) metric.ObserveOption { return metric.WithAttributes(attribute.String("limit", key)) }
	counter("herald.limit.hits", "{refusal}", "Requests, frames or connections refused by a configured limit, by its configuration key.",
		func(o metric.Int64Observer) {
			l := &stats.Limits
			o.Observe(u(l.Connections.Load()), limit("max_connections"))
			o.Observe(u(l.Subscriptions.Load()), limit("max_subscriptions_per_connection"))
			o.Observe(u(l.TenantStreams.Load()), limit("max_streams_per_tenant"))
			o.Observe(u(l.FrameBytes.Load()), limit("max_frame_bytes"))
			o.Observe(u(l.BatchBytes.Load()), limit("publish_batch_bytes"))
			o.Observe(u(l.Handshake.Load()), limit("handshake_timeout"))
			o.Observe(u(l.Idle.Load()), limit("idle_timeout"))
			o.Observe(u(l.GroupClaims.Load()), limit("group_max_in_flight"))
			o.Observe(u(l.Groups.Load()), limit("group_max_per_stream"))
		})
	counter("herald.auth.failures", "{connection}", "Connections refused at the handshake for missing or wrong credentials.",
		func(o metric.Int64Observer) { o.Observe(u(stats.AuthFailures.Load())) })
	counter("herald.auth.denied", "{request}", "Requests refused as permission_denied.",
		func(o metric.Int64Observer) { o.Observe(u(stats.AuthDenied.Load())) })
	byStream := func(read func(c *actors.StreamCounters) uint64) func(o metric.Int64Observer) {
		return func(o metric.Int64Observer) {
			stats.EachStream(func(name string, c *actors.StreamCounters) {
				o.Observe(u(read(c)), metric.WithAttributes(attribute.String("stream", name)))
			})
		}
	}
	counter("herald.publish.batches", "{batch}", "Committed publish batches, by stream.",
		byStream(func(c *actors.StreamCounters) uint64 { return c.Batches.Load() }))
	counter("herald.publish.records", "{record}", "Committed records, by stream.",
		byStream(func(c *actors.StreamCounters) uint64 { return c.Records.Load() }))
	counter("herald.publish.bytes", "By", "Committed records bytes, by stream.",
		byStream(func(c *actors.StreamCounters) uint64 { return c.Bytes.Load() }))
	counter("herald.delivered.batches", "{batch}", "Batches written to subscribers' streams.",
		func(o metric.Int64Observer) { o.Observe(u(stats.DeliveredBatches.Load())) })
	counter("herald.delivered.bytes", "By", "Records bytes written to subscribers' streams.",
		func(o metric.Int64Observer) { o.Observe(u(stats.DeliveredBytes.Load())) })
	byRaft := func(read func(g *actors.RaftGauges) uint64) func(o metric.Int64Observer) {
		return func(o metric.Int64Observer) {
			stats.EachRaftGroup(func(g *actors.RaftGauges) {
				o.Observe(u(read(g)), metric.WithAttributes(attribute.String("stream", g.Stream), attribute.Int("shard", int(g.Shard))))
			})
		}
	}
	gauge("herald.raft.group.term", "{term}", "A replicated shard's raft term as its replica here knows it, by stream and shard (groups held here).",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.Term.Load() }))
	gauge("herald.raft.group.commit", "{index}", "A replicated shard's raft commit index at its replica here, by stream and shard.",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.Commit.Load() }))
	gauge("herald.raft.group.applied", "{index}", "The last raft index a replicated shard's replica here applied to its shard log, by stream and shard.",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.Applied.Load() }))
	gauge("herald.raft.group.leader", "{node}", "The node id a replicated shard's replica here knows as its leader (0: none), by stream and shard.",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.Leader.Load() }))
	counter("herald.raft.group.leader_changes", "{change}", "Changes of leader a replicated shard's replica here saw, by stream and shard.",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.LeaderChanges.Load() }))
	counter("herald.raft.group.snapshots_sent", "{snapshot}", "Snapshots a replicated shard's replica here sent as leader, by stream and shard.",
		byRaft(func(g *actors.RaftGauges) uint64 { return g.SnapshotsSent.Load() }))
	byReplica := func(read func(l actors.ReplicaLag) uint64) func(o metric.Int64Observer) {
		return func(o metric.Int64Observer) {
			stats.EachRaftGroup(func(g *actors.RaftGauges) {
				for id, lag := range g.Lag() {
					o.Observe(u(read(lag)), metric.WithAttributes(attribute.String("stream", g.Stream), attribute.Int("shard", int(g.Shard)),
						attribute.Int64("replica", int64(id))))
				}
			})
		}
	}
	gauge("herald.raft.group.lag", "{entry}", "On a replicated shard's leader here, each replica's raft entries behind the commit index, by stream, shard and replica node id.",
		byReplica(func(l actors.ReplicaLag) uint64 { return l.Entries }))
	gauge("herald.raft.group.lag_records", "{record}", "On a replicated shard's leader here, the records it applied to the shard log that each replica's raft log does not hold, by stream, shard and replica node id.",
		byReplica(func(l actors.ReplicaLag) uint64 { return l.Records }))
	gauge("herald.raft.group.lag_bytes", "By", "On a replicated shard's leader here, the records bytes it applied to the shard log that each replica's raft log does not hold, by stream, shard and replica node id.",
		byReplica(func(l actors.ReplicaLag) uint64 { return l.Bytes }))
	gauge("herald.raft.group.behind", "", "1 while a replicated shard's replica here is a follower behind its leader (it refuses reads and subscriptions as replica_behind), else 0, by stream and shard.",
		func(o metric.Int64Observer) {
			stats.EachRaftGroup(func(g *actors.RaftGauges) {
				o.Observe(g.Behind.Load(), metric.WithAttributes(attribute.String("stream", g.Stream), attribute.Int("shard", int(g.Shard))))
			})
		})
	byGroup := func(read func(g *actors.GroupGauges) int64) func(o metric.Int64Observer) {
		return func(o metric.Int64Observer) {
			stats.EachGroup(func(g *actors.GroupGauges) {
				o.Observe(read(g), metric.WithAttributes(attribute.String("stream", g.Stream), attribute.String("group", g.Group)))
			})
		}
	}
	gauge("herald.group.lag", "{record}", "Records between a group's committed cursors and its stream's committed tails, computed when scraped (it follows the tail with no consumer attached), by stream and group.",
		byGroup(func(g *actors.GroupGauges) int64 { return g.Lag() }))
	gauge("herald.group.claims", "{record}", "A group's records delivered and not yet settled, by stream and group.",
		byGroup(func(g *actors.GroupGauges) int64 { return g.Claims.Load() }))
	histogram := func(name, unit, desc string, bounds ...float64) actors.Recorder {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return recorder{h}
	}
	latency := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	stats.Hist.PublishAckSeconds = histogram("herald.publish.ack.duration", "s",
		"From a publish's arrival at the node to its answer (durable on a durable stream).", latency...)
	stats.Hist.CommitSeconds = histogram("herald.storage.commit.duration", "s", "One storage commit, sync included.", latency...)
	stats.Hist.CommitBatches = histogram("herald.storage.commit.batches", "{batch}", "Batches carried by one storage commit.",
		1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
	counter("herald.storage.commits", "{commit}", "Storage writer commits (one sync each).",
		func(o metric.Int64Observer) { o.Observe(u(stats.Commits.Load())) })
	counter("herald.storage.committed_batches", "{batch}", "Batches carried by storage writer commits.",
		func(o metric.Int64Observer) { o.Observe(u(stats.CommittedBatches.Load())) })
	counter("herald.group.delivered", "{record}", "Records handed to consumer-group consumers (polls and pushes, redeliveries included).",
		func(o metric.Int64Observer) { o.Observe(u(stats.GroupDelivered.Load())) })
	counter("herald.group.acked", "{record}", "Consumer-group records settled by an ack.",
		func(o metric.Int64Observer) { o.Observe(u(stats.GroupAcked.Load())) })
	counter("herald.group.nacked", "{record}", "Consumer-group records handed back by a nack.",
		func(o metric.Int64Observer) { o.Observe(u(stats.GroupNacked.Load())) })
	counter("herald.group.redeliveries", "{record}", "Consumer-group claims whose visibility timeout lapsed.",
		func(o metric.Int64Observer) { o.Observe(u(stats.GroupRedelivered.Load())) })
	counter("herald.group.dead_letters", "{record}", "Consumer-group records dead-lettered after their last attempt.",
		func(o metric.Int64Observer) { o.Observe(u(stats.GroupDeadLettered.Load())) })
	counter("herald.group.member.events", "{event}", "Push members joining, leaving, and removed by the session timeout, by event.",
		func(o metric.Int64Observer) {
			ev := func(e string) metric.ObserveOption { return metric.WithAttributes(attribute.String("event", e)) }
			o.Observe(u(stats.GroupJoins.Load()), ev("join"))
			o.Observe(u(stats.GroupLeaves.Load()), ev("leave"))
			o.Observe(u(stats.GroupExpired.Load()), ev("session_expired"))
		})
	gauge("herald.group.members", "{member}", "Live consumer-group push members, node-wide.",
		func(o metric.Int64Observer) { o.Observe(stats.GroupMembers.Load()) })
	gauge("herald.subscriber.queue.batches", "{batch}", "Batches waiting in subscription queues, node-wide.",
		func(o metric.Int64Observer) { o.Observe(stats.QueuedBatches.Load()) })
	gauge("herald.subscriber.queue.bytes", "By", "Records bytes waiting in subscription queues, node-wide.",
		func(o metric.Int64Observer) { o.Observe(stats.QueuedBytes.Load()) })
	gauge("herald.subscriber.egress.bytes", "By", "Records bytes handed to subscription lanes and not yet written, node-wide.",
		func(o metric.Int64Observer) { o.Observe(stats.EgressBytes.Load()) })
	gauge("herald.subscriptions", "{subscription}", "Live subscriptions.",
		func(o metric.Int64Observer) { o.Observe(stats.Subscriptions.Load()) })
	gauge("herald.connections", "{connection}", "Live client connections.",
		func(o metric.Int64Observer) { o.Observe(stats.Connections.Load()) })
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return &nodeMetrics{registry: reg, provider: mp, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

// shutdown stops the meter provider.
func (m *nodeMetrics) shutdown(ctx context.Context) error {
	return m.provider.Shutdown(ctx)
}

// Metric returns the current value of one series of the node's metrics,
// summed over its labels (0 if absent). Benchmarks read their counters
// through it.
func (n *Node) Metric(name string) float64 {
	families, err := n.metrics.registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// recorder records into an OpenTelemetry histogram.
type recorder struct{ h metric.Float64Histogram }

func (r recorder) Record(v float64) { r.h.Record(context.Background(), v) }
