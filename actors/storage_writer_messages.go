package actors

import (
	"github.com/heraldmq/herald/storage"
)

// AppendRequest asks the storage writer to make a batch durable. The writer
// answers the shard (ReplyTo) with AppendsCommitted or AppendFailed. Appends
// from one shard are committed in the order they were sent.
type AppendRequest struct {
	Shard storage.ShardKey
	Batch storage.Batch
}

// AppendsCommitted tells a shard that every batch it sent for Shard up to
// (not including) offset Through is durable.
type AppendsCommitted struct {
	Shard   storage.ShardKey
	Through uint64
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
}

// MetaWriteResponse answers MetaWriteRequest.
type MetaWriteResponse struct {
	Err error
}

// TailRequest asks the storage writer for a shard's tail once every append
// queued before it has been committed, so a shard that (re)starts never
// reuses an offset still on its way to disk. Answered with TailResponse.
type TailRequest struct {
	Shard storage.ShardKey
}

// TailResponse answers TailRequest.
type TailResponse struct {
	Tail uint64
	Err  error
}

// commitNow is the storage writer's marker to itself: it is queued behind
// whatever arrived before it, so when it is processed everything that queued
// up is in the pending group.
type commitNow struct{}
