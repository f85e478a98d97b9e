package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/storage"
)

// AppendRequest asks the storage writer to make a batch durable. The writer
// answers the shard (ReplyTo) with AppendsCommitted or AppendFailed. Appends
// from one shard are committed in the order they were sent.
type AppendRequest struct {
	Shard storage.ShardKey
	Batch storage.Batch
	// Metas are written in the same commit (an idempotent producer's state).
	Metas []storage.MetaPut
	// Trace is the batch's append span (traceparent; "" when not traced).
	Trace string
}

func (m *AppendRequest) traceparent() string { return m.Trace }

// AppendsCommitted tells a shard that the batches it sent for Shard from
// offset From up to (not including) Through are durable. The shard checks
// From against its oldest pending batch: commits are answered in order, so a
// mismatch means a batch was lost on the way (it is then treated as failed).
type AppendsCommitted struct {
	Shard         storage.ShardKey
	From, Through uint64
	// Trace is the first traced batch's append span ("" when none).
	Trace string
}

// AppendFailed tells a shard that its batches from offset From on could not
// be made durable. The storage writer refuses every later append too: a log
// that failed to sync is not trusted again until the node restarts.
type AppendFailed struct {
	Shard storage.ShardKey
	From  uint64
	Err   error
}

// MetaWriteRequest asks the storage writer to write metadata durably, in
// order with the appends queued before it. It is answered with
// MetaWriteResponse.
type MetaWriteRequest struct {
	Puts []storage.MetaPut
	// Token is echoed in the response, so a requester that restarted (same
	// pid) can tell its own answers from its failed instance's.
	Token uint64
}

// MetaWriteResponse answers MetaWriteRequest.
type MetaWriteResponse struct {
	Err   error
	Token uint64
}

// TailRequest asks the storage writer for a shard's recovery state once
// every append queued before it has been committed, so a shard that
// (re)starts never reuses an offset still on its way to disk: its tail, its
// first retained offset and its idempotent producers (metadata under
// ProducerPrefix). Answered with TailResponse.
type TailRequest struct {
	Shard          storage.ShardKey
	ProducerPrefix []byte
	// Raft asks for the shard's raft state too (a replicated shard).
	Raft bool
}

// TailResponse answers TailRequest.
type TailResponse struct {
	Tail, First uint64
	// Producers holds the values found under the request's ProducerPrefix.
	Producers [][]byte
	// Raft is the shard's raft state (Raft requests).
	Raft raftDurable
	Err  error
}

// commitNow is the storage writer's marker to itself: it is queued behind
// whatever arrived before it, so when it is processed everything that queued
// up is in the pending group.
type commitNow struct{}

// DropStreamRequest asks the storage writer to remove a deleted stream's
// batches (durable ones from the log, ephemeral ones from Memory) and to
// write Metas, after everything queued before it. Answered with
// MetaWriteResponse. With no Shards it only deletes under MetaPrefixes:
// that is how a deleted consumer group's state goes.
type DropStreamRequest struct {
	Durable bool
	Shards  []storage.ShardKey
	Memory  storage.Log
	Metas   []storage.MetaPut
	// MetaPrefixes are durable metadata prefixes whose every key is deleted
	// with the stream (its consumer groups' state), scanned beside the
	// writer like the batches.
	MetaPrefixes [][]byte
}

// dropDone is the result of a stream drop the writer ran beside itself.
type dropDone struct {
	from  *actor.PID
	metas []storage.MetaPut
	err   error
}
