package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// PublishRequest carries one publish to the shard that owns its offsets. The
// records block has been validated by the connection. The shard answers
// ReplyTo (a writer lane) with PublishAcked or PublishRejected, whatever the
// ack mode: the lane writes what the mode asks for and frees the publish's
// window slot.
type PublishRequest struct {
	// Received is when the connection read the publish.
	Received time.Time
	// Trace is the connection's receive span (traceparent; "" when not
	// traced): the shard's spans are its children.
	Trace   string
	ReqID   uint64
	Ack     wire.AckMode
	Count   uint32
	Records []byte
	ReplyTo *actor.PID
	// Conditional publishes are written only if the shard's tail is
	// ExpectedOffset.
	Conditional    bool
	ExpectedOffset uint64
	// Idempotent publishes carry their producer and sequence.
	Idempotent bool
	ProducerID uint64
	Sequence   uint64
}

// PublishAcked tells a lane that a publish was written at
// [Offset, Offset+Count) on Shard (durably, on a durable stream).
type PublishAcked struct {
	// Trace is the batch's append span ("" when not traced).
	Trace string
	ReqID uint64
	// Ack is the publish's ack mode: nothing is written for AckNone.
	Ack    wire.AckMode
	Shard  uint32
	Offset uint64
	Count  uint32
	// Duplicate is set for an idempotent re-send: nothing was written again.
	Duplicate bool
}

// PublishRejected tells a lane that a publish failed.
type PublishRejected struct {
	ReqID uint64
	Ack   wire.AckMode
	Err   *wire.Error
}

// SubscribeShardRequest registers the sending subscription with the shard.
// Capacity and MaxBytes are its credit window. Answered with
// SubscribeShardResponse, after which the shard pushes SectionsPushed
// within the window, or ReadHistory.
type SubscribeShardRequest struct {
	Start    wire.StartKind
	Offset   uint64
	Capacity int
	MaxBytes int64
	// InEntries and InBytes are what the subscription already has queued
	// (it registers again after a shard restart): the shard starts its
	// account there, so the window is not pushed twice.
	InEntries int
	InBytes   int64
	// Replica is the replica the subscriber asked for: a replicated
	// shard's follower refuses ReplicaLeader (not_leader), and one behind
	// its leader refuses ReplicaNearest (replica_behind).
	Replica wire.Replica
}

// SubscriptionEnded tells a subscription that its shard dropped it with
// Err: its replica fell behind its leader (replica_behind), or stopped
// leading a subscription that asked for the leader (not_leader). The
// client resumes on another replica.
type SubscriptionEnded struct {
	Err *wire.Error
}

// SubscribeShardResponse answers SubscribeShardRequest.
type SubscribeShardResponse struct {
	// Next is the first offset the subscription will receive.
	Next uint64
	// Tail is the shard's committed tail at registration.
	Tail uint64
	Err  *wire.Error
}

// SectionsPushed delivers committed batches to a subscription, within its
// credit. Sections from index EvictFrom on were pushed by the drop_old
// policy into a full queue: for each, the subscription evicts its oldest
// queued batch (the shard did not count them against its credit).
type SectionsPushed struct {
	Sections  []*wire.Section
	EvictFrom int
}

// ReadHistory tells a subscription that the records it needs next (from
// From) are no longer in the shard's ring: it reads them from storage itself
// and comes back with ResumeLive. Until then the shard pushes nothing to it
// and ignores its credit: the subscription's own account of what it has in
// flight is the truth, and ResumeLive hands it back.
type ReadHistory struct {
	From uint64
	// Tail is the shard's committed tail when it sent this.
	Tail uint64
}

// ResumeLive tells the shard that the subscription has read history up to
// Next, with InEntries batches and InBytes records bytes still in flight to
// its client. With Skip, records below the ring that storage no longer holds
// are skipped (the subscriber sees the offset gap) instead of being asked for
// again.
type ResumeLive struct {
	Next      uint64
	InEntries int
	InBytes   int64
	Skip      bool
}

// CreditReturned returns credit to the shard: batches that left the
// subscription's queue. Negative values take credit back (a drop_old push
// that found nothing to evict now occupies a place).
type CreditReturned struct {
	Entries int
	Bytes   int64
}

// ShardRestarted tells the subscriptions of a shard that failed and is
// restarting that it forgot them: they subscribe again from where they are.
type ShardRestarted struct{}

// WatchTail asks a shard to tell the sender (a group coordinator) once its
// committed tail is past After: at once if it already is, otherwise after
// the commit that moves it. One notice per request; a restarting shard
// answers every watcher, so none waits on an instance that forgot it.
type WatchTail struct {
	After uint64
}

// TailAdvanced answers WatchTail.
type TailAdvanced struct {
	Shard       uint32
	Tail, First uint64
}

// ShardInfoRequest asks a shard for its committed tail. Answered with
// ShardInfoResponse; a durable shard still recovering its tail answers once
// it knows it.
type ShardInfoRequest struct {
	// Linearizable asks a replicated shard for a tail no older than the
	// request: its replica confirms with the leader (raft's ReadIndex)
	// and answers once it has stored everything committed by then.
	Linearizable bool
	// Replica is the replica a linearizable request must be answered by
	// (follower_reads.go): a follower refuses ReplicaLeader, and one behind
	// its leader ReplicaNearest.
	Replica wire.Replica
}

// ShardInfoResponse answers ShardInfoRequest.
type ShardInfoResponse struct {
	Shard uint32
	// First is the first retained offset, Tail the committed tail.
	First, Tail uint64
	// Blocked is set while a subscriber holds the shard under the block
	// policy; Held counts publishes waiting for admission.
	Blocked bool
	Held    int
	// Drops counts what the overflow policy did on this shard.
	Drops DropCounts
	// A replicated shard's raft state: its replicas' node ids, the leader
	// this replica knows of, its term, commit and applied indexes, and on
	// the leader each replica's matched index.
	Replicas                []uint64
	Leader, Term            uint64
	RaftCommit, RaftApplied uint64
	// RaftFirst is the first entry of this replica's raft log (entries
	// before it were compacted).
	RaftFirst uint64
	// Preferred is the replica that leads the shard when it is up.
	Preferred uint64
	Match     map[uint64]uint64
	// LagDetail is, on the leader, each replica's lag in entries, records
	// and bytes (nil elsewhere).
	LagDetail map[uint64]ReplicaLag
	// Quiesced is set while the replica's group is quiet.
	Quiesced bool
	// Voters and Learners are the group's raft configuration as this
	// replica applied it (Replicas is its target; they differ while the
	// replicas change).
	Voters, Learners []uint64
	// Err is set when a linearizable request could not be answered (no
	// leader, not confirmed in time, not hosted here).
	Err *wire.Error
}

// SubscriptionLagged tells a subscription on a durable stream that it had
// no room for a live batch (overflow under drop_new): the shard has dropped
// it, and it ends with CodeLagged so its client resumes from ResumeFrom.
type SubscriptionLagged struct {
	ResumeFrom uint64
}

// RetentionApplied tells a shard that retention deleted its batches below
// First.
type RetentionApplied struct {
	First uint64
}

// StreamDeletedRequest tells a shard its stream is being deleted. The shard
// becomes a tombstone: it refuses every publish and subscription with
// stream_not_found, ends its subscriptions, and stops itself after a grace
// period (by then no connection still routes to it). It answers
// StreamDeletedResponse once it will send nothing more to storage, so the
// catalog drops the stream's data only after the shard's last append.
type StreamDeletedRequest struct{}

// StreamDeletedResponse answers StreamDeletedRequest.
type StreamDeletedResponse struct{}

// tombstoneExpired is a deleted shard's timer message: its grace is over.
type tombstoneExpired struct{}

func (m *PublishRequest) traceparent() string { return m.Trace }
