package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// StreamHandle is what the catalog hands out for a stream: its identity,
// config, log and shard actors. It is immutable and shared.
type StreamHandle struct {
	// ID is the stream's numeric id in storage.
	ID uint64
	// Name is the stream's name.
	Name wire.StreamName
	// Config is the stream's config.
	Config wire.StreamConfig
	// CreatedUnixNano is when the stream was created.
	CreatedUnixNano int64
	// Log is where the stream's batches are stored (Badger or memory).
	Log storage.Log
	// Shards are the shard actors, by index. A PID stays valid across a
	// shard's restart.
	Shards []*actor.PID
	// Progress is each shard's committed tail and first retained offset,
	// by index, as the shard actor last published them: written only by
	// the shard, read by anyone (a group's lag follows the tail through it
	// without a message).
	Progress []*ShardProgress
	// deleted is set when the stream is deleted (or the catalog that made
	// the handle restarted); holders drop the handle and look again.
	deleted atomic.Bool
	// createdReplicas is the replica count the stream was created with
	// (its shards' first raft configuration); Config.Replicas is its
	// count now.
	createdReplicas uint8
	// createdNodes are the nodes the stream's replicas were placed over
	// at its creation (nil: the cluster's first nodes); with
	// createdReplicas they give each shard's first configuration.
	createdNodes []uint64
}

// ShardProgress is a shard's committed tail and first retained offset, as
// the shard published them.
type ShardProgress struct {
	Tail, First atomic.Uint64
	// Leader is the leader a replicated shard's replica here knows of (0:
	// none known, or no replica here): where a cluster stream's group
	// requests go, for its shard 0.
	Leader atomic.Uint64
	// Remote, for a cluster stream's shard this node holds no replica of,
	// lists the nodes that do (nil when one runs here): where a group
	// coordinator here reads the shard's records (shard_remote.go).
	Remote atomic.Pointer[[]uint64]
}

// Deleted reports whether the handle is stale: the stream has been deleted,
// or the catalog restarted, since the handle was handed out.
func (h *StreamHandle) Deleted() bool { return h.deleted.Load() }

// ShardKey returns the storage key of shard i.
func (h *StreamHandle) ShardKey(i uint32) storage.ShardKey {
	return storage.ShardKey{Stream: h.ID, Shard: i}
}

// LookupStreamRequest asks the catalog for a stream. With AutoCreate a
// missing stream is created with the node's defaults. Answered with
// LookupStreamResponse.
type LookupStreamRequest struct {
	Name       wire.StreamName
	AutoCreate bool
}

// LookupStreamResponse answers LookupStreamRequest and CreateStreamRequest.
type LookupStreamResponse struct {
	Stream *StreamHandle
	Err    *wire.Error
}

// CreateStreamRequest asks the catalog to create a stream; creating one that
// exists with the same config answers the existing stream. Answered with
// LookupStreamResponse.
type CreateStreamRequest struct {
	Name   wire.StreamName
	Config wire.StreamConfig
}

// ListStreamsRequest asks for the streams of a tenant (and namespace, if not
// empty). Answered with ListStreamsResponse, sorted by name.
type ListStreamsRequest struct {
	Tenant    string
	Namespace string
}

// ListStreamsResponse answers ListStreamsRequest.
type ListStreamsResponse struct {
	Streams []*StreamHandle
}

// streamPersisted is the outcome of writing a new stream's config.
type streamPersisted struct {
	key string
	err error
}

// AllShardsRequest asks the catalog for every shard actor of every stream.
// Answered with AllShardsResponse.
type AllShardsRequest struct{}

// AllShardsResponse answers AllShardsRequest.
type AllShardsResponse struct {
	Shards []*actor.PID
}

// DeleteStreamRequest asks the catalog to delete a stream and its records.
// Answered with DeleteStreamResponse once the records are gone.
type DeleteStreamRequest struct {
	Name wire.StreamName
}

// DeleteStreamResponse answers DeleteStreamRequest.
type DeleteStreamResponse struct {
	Err *wire.Error
}

// SetReplicasRequest asks the catalog to change a cluster stream's replica
// count. Answered with LookupStreamResponse once the new count is the
// catalog's (committed by the metadata group and stored on this node);
// every shard's leader then moves its raft group to the new replicas.
type SetReplicasRequest struct {
	Name     wire.StreamName
	Replicas uint8
}

// AllStreamsRequest asks the catalog for every stream. Answered with
// AllStreamsResponse.
type AllStreamsRequest struct{}

// AllStreamsResponse answers AllStreamsRequest.
type AllStreamsResponse struct {
	Streams []*StreamHandle
}
