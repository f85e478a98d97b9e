package actors

import "github.com/heraldmq/herald/storage"

// historyRead is the result of a subscription's storage read, sent by the
// read goroutine to its subscription.
type historyRead struct {
	batches []storage.Batch
	// first is the log's first offset, read when the read found nothing.
	first uint64
	err   error
}

// subscriberLeft tells a subscription that its client closed or reset the
// stream (or sent something after Subscribe).
type subscriberLeft struct {
	err error
}

// StreamGone tells a subscription its stream was deleted.
type StreamGone struct{}

// egressWaiting tells the connection that a subscription is waiting for
// Size bytes of room in the connection's shared egress pool (lane policy
// block).
type egressWaiting struct {
	Size int64
}

// egressFreed tells the connection that a subscription's lane wrote and gave
// bytes back to the shared egress pool.
type egressFreed struct{}

// egressAvailable tells a waiting subscription to try the pool again.
type egressAvailable struct{}
