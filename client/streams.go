package client

import (
	"context"
	"math"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// StreamName names a stream: tenant, namespace and stream, each 1–64 bytes
// of [A-Za-z0-9._-]. String gives "tenant/namespace/stream".
type StreamName = wire.StreamName

// ParseStreamName parses "stream", "namespace/stream" or
// "tenant/namespace/stream"; missing parts are "default", so "orders" is
// default/default/orders. It returns an ErrInvalidStreamName error for a bad
// name.
func ParseStreamName(s string) (StreamName, error) { return wire.ParseStreamName(s) }

// Routing says how a keyed publish picks its shard. Both routings hash the
// key with 64-bit FNV-1a (wire.KeyHash); an unkeyed publish goes to shard 0.
type Routing = wire.Routing

// Routings.
const (
	// RoutingHash (the default): shard = hash(key) % shards.
	RoutingHash = wire.RoutingHash
	// RoutingJump: jump consistent hashing of the same hash, so growing the
	// shard count moves the fewest keys.
	RoutingJump = wire.RoutingJump
)

// Overflow is what a stream does for a subscriber whose queue is full when
// a live batch arrives.
type Overflow = wire.Overflow

// Overflow policies.
const (
	// OverflowDropNew (the default): the subscriber misses the arriving
	// batch. On a durable stream its subscription ends with a *LaggedError
	// (see WithAutoResume); on an ephemeral one it sees an offset gap.
	OverflowDropNew = wire.OverflowDropNew
	// OverflowDropOld: the oldest queued batch is dropped instead.
	OverflowDropOld = wire.OverflowDropOld
	// OverflowBlock: the shard waits until the subscriber has room, holding
	// up every publisher of the shard meanwhile.
	OverflowBlock = wire.OverflowBlock
)

// StreamConfig is a stream's configuration. The zero value of every field
// but Durable means "the default".
type StreamConfig struct {
	// Shards is the number of shards; 0 means 1.
	Shards int
	// Durable streams are written to disk and survive restarts; ephemeral
	// ones live in memory.
	Durable bool
	// Routing picks a keyed publish's shard (default RoutingHash).
	Routing Routing
	// Overflow is the policy for a subscriber whose queue is full (default
	// OverflowDropNew).
	Overflow Overflow
	// QueueCapacity bounds each subscription's queue, in batches (0: the
	// node's default). A subscriber may ask for another capacity with the
	// QueueCapacity subscribe option.
	QueueCapacity int
	// QueueMaxBytes bounds each subscription's queue by the payload bytes
	// of the batches it holds (0: the node's default).
	QueueMaxBytes int64
	// RetentionAge deletes whole batches older than this (0: keep them
	// forever). It travels in milliseconds; a positive age below one
	// millisecond is rounded up to one.
	RetentionAge time.Duration
	// RetentionBytes deletes a shard's oldest whole batches while it holds
	// more than this many record bytes (0: no bound).
	RetentionBytes int64
	// Replicas is how many nodes of a cluster hold each shard (0 or 1: the
	// node the stream is created on alone). A replicated stream must be
	// durable; each shard is a raft group whose leader takes its publishes.
	Replicas int
}

// toWire checks cfg and converts it; Shards 0 becomes 1.
func (cfg StreamConfig) toWire() (wire.StreamConfig, error) {
	switch {
	case cfg.Shards < 0 || int64(cfg.Shards) > math.MaxUint32:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "shards %d out of range", cfg.Shards)
	case cfg.Routing > RoutingJump:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "unknown routing %d", cfg.Routing)
	case cfg.Overflow > OverflowBlock:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "unknown overflow policy %d", cfg.Overflow)
	case cfg.QueueCapacity < 0 || int64(cfg.QueueCapacity) > math.MaxUint32:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "queue capacity %d out of range", cfg.QueueCapacity)
	case cfg.QueueMaxBytes < 0:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "queue max bytes %d is negative", cfg.QueueMaxBytes)
	case cfg.RetentionAge < 0:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "retention age %v is negative", cfg.RetentionAge)
	case cfg.RetentionBytes < 0:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "retention bytes %d is negative", cfg.RetentionBytes)
	case cfg.Replicas < 0 || cfg.Replicas > math.MaxUint8:
		return wire.StreamConfig{}, wire.Errorf(wire.CodeInvalidConfig, "replicas %d out of range", cfg.Replicas)
	}
	replicas := uint8(cfg.Replicas)
	if replicas == 1 {
		replicas = 0
	}
	shards := uint32(cfg.Shards)
	if shards == 0 {
		shards = 1
	}
	// Round a positive age up to whole milliseconds, so that it never
	// becomes 0 ("forever").
	ageMillis := uint64((cfg.RetentionAge + time.Millisecond - 1) / time.Millisecond)
	return wire.StreamConfig{
		Shards:             shards,
		Durable:            cfg.Durable,
		Routing:            cfg.Routing,
		Overflow:           cfg.Overflow,
		QueueCapacity:      uint32(cfg.QueueCapacity),
		QueueMaxBytes:      uint64(cfg.QueueMaxBytes),
		RetentionAgeMillis: ageMillis,
		RetentionBytes:     uint64(cfg.RetentionBytes),
		Replicas:           replicas,
	}, nil
}

// configFromWire converts a config the node sent. Values beyond what the
// Go types hold are clamped.
func configFromWire(w wire.StreamConfig) StreamConfig {
	age := time.Duration(math.MaxInt64)
	if w.RetentionAgeMillis <= uint64(math.MaxInt64/int64(time.Millisecond)) {
		age = time.Duration(w.RetentionAgeMillis) * time.Millisecond
	}
	return StreamConfig{
		Shards:         int(w.Shards),
		Durable:        w.Durable,
		Routing:        w.Routing,
		Overflow:       w.Overflow,
		QueueCapacity:  int(w.QueueCapacity),
		QueueMaxBytes:  clampInt64(w.QueueMaxBytes),
		RetentionAge:   age,
		RetentionBytes: clampInt64(w.RetentionBytes),
		Replicas:       int(w.Replicas),
	}
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name   StreamName
	Config StreamConfig
	// Created is when the stream was created.
	Created time.Time
	// Tails holds each shard's tail: the offset its next record will get.
	Tails []uint64
	// Replication is each shard's raft group as the answering node sees it
	// (a replicated stream only; nil otherwise): its leader, term, commit
	// index and replicas. Each replica's lag is known only to the leader
	// (LagUnknown elsewhere); ClusterClient.DescribeStream asks each
	// shard's leader.
	Replication []ShardReplication
}

// ShardReplication is a replicated shard's raft group as one node sees it.
type ShardReplication = wire.ShardReplication

// ReplicaState is one replica of a shard: its node and its lag in raft
// entries behind the leader's commit index.
type ReplicaState = wire.ReplicaState

// LagUnknown is a ReplicaState's Lag when the answering node does not lead
// the shard.
const LagUnknown = wire.LagUnknown

func infoFromWire(i wire.StreamInfo) StreamInfo {
	return StreamInfo{
		Name:        i.Name,
		Config:      configFromWire(i.Config),
		Created:     time.Unix(0, i.CreatedUnixNano),
		Tails:       i.Tails,
		Replication: i.Replication,
	}
}

// CreateStream creates the stream name with cfg and returns its info.
// Creating a stream that exists with the same config succeeds; with another
// config it fails with ErrStreamExists. A config value out of range fails
// with ErrInvalidConfig (locally, or from the node).
func (c *Client) CreateStream(ctx context.Context, name StreamName, cfg StreamConfig) (StreamInfo, error) {
	if err := name.Validate(); err != nil {
		return StreamInfo{}, err
	}
	wc, err := cfg.toWire()
	if err != nil {
		return StreamInfo{}, err
	}
	req := wire.CreateStream{Name: name, Config: wc}
	v, err := c.call(ctx, wire.TypeStreamInfo, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendCreateStream(dst, id, req)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	info := v.(wire.StreamInfo)
	c.routes.learn(info)
	return infoFromWire(info), nil
}

// DescribeStream returns the info of the stream name, or ErrStreamNotFound.
// It also refreshes the shard count and routing the client publishes to
// name with.
func (c *Client) DescribeStream(ctx context.Context, name StreamName) (StreamInfo, error) {
	info, err := c.describe(ctx, name)
	if err != nil {
		return StreamInfo{}, err
	}
	c.routes.learn(info)
	return infoFromWire(info), nil
}

// describe asks the node for name's info.
func (c *Client) describe(ctx context.Context, name StreamName) (wire.StreamInfo, error) {
	if err := name.Validate(); err != nil {
		return wire.StreamInfo{}, err
	}
	v, err := c.call(ctx, wire.TypeStreamInfo, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendDescribeStream(dst, id, name)
	})
	if err != nil {
		return wire.StreamInfo{}, err
	}
	return v.(wire.StreamInfo), nil
}

// DeleteStream deletes the stream name and its records. Subscriptions to it
// end; later publishes get ErrStreamNotFound (unless the node auto-creates
// streams). Deleting a stream that does not exist fails with
// ErrStreamNotFound.
func (c *Client) DeleteStream(ctx context.Context, name StreamName) error {
	if err := name.Validate(); err != nil {
		return err
	}
	_, err := c.call(ctx, wire.TypeOK, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendDeleteStream(dst, id, name)
	})
	c.routes.forget(name)
	return err
}

// SetReplicas changes how many nodes of a cluster hold each shard of the
// cluster stream name (1 up to the cluster's size) and returns the stream
// with its new count. The count is the cluster's once this returns; each
// shard's raft group then moves to it on its own: new replicas join as
// learners, copy the log, and become voters once caught up; replicas no
// longer placed leave, the leader last. StreamInfo.Replication (for more
// than one replica) lists the new replicas with their lag; each group's
// voters and learners are in the node's GET /streams/describe. A stream of
// a node without a cluster fails with ErrInvalidConfig.
func (c *Client) SetReplicas(ctx context.Context, name StreamName, replicas int) (StreamInfo, error) {
	if err := name.Validate(); err != nil {
		return StreamInfo{}, err
	}
	if replicas < 1 || replicas > math.MaxUint8 {
		return StreamInfo{}, wire.Errorf(wire.CodeInvalidConfig, "replicas %d out of range", replicas)
	}
	req := wire.SetReplicas{Name: name, Replicas: uint8(replicas)}
	v, err := c.call(ctx, wire.TypeStreamInfo, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendSetReplicas(dst, id, req)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	info := v.(wire.StreamInfo)
	c.routes.learn(info)
	return infoFromWire(info), nil
}

// AllTenants as ListStreams' tenant lists the streams of every tenant.
const AllTenants = wire.AllTenants

// ListStreams returns the streams of tenant, of one namespace or, when
// namespace is "", of all of them. An empty tenant means the one the
// client's credentials are bound to ("default" on a node without
// authentication). AllTenants lists every tenant's: only credentials of
// every tenant (a node without authentication) may, others get
// ErrPermissionDenied, and a node without the list_all_tenants feature an
// *UnsupportedError.
func (c *Client) ListStreams(ctx context.Context, tenant, namespace string) ([]StreamInfo, error) {
	if tenant == AllTenants && c.session().welcome.Features&wire.FeatureListAllTenants == 0 {
		return nil, &UnsupportedError{Feature: "list_all_tenants", What: "listing every tenant's streams"}
	}
	req := wire.ListStreams{Tenant: tenant, Namespace: namespace}
	v, err := c.call(ctx, wire.TypeStreamList, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendListStreams(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	list := v.([]wire.StreamInfo)
	out := make([]StreamInfo, len(list))
	for i, info := range list {
		out[i] = infoFromWire(info)
	}
	return out, nil
}
