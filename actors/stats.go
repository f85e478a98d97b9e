package actors

import "sync/atomic"

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
}

func (s *Stats) add(c *atomic.Uint64, n uint64) { c.Add(n) }

func (s *Stats) gauge(g *atomic.Int64, n int64) { g.Add(n) }
