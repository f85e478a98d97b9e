package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// SubscriptionStatsRequest asks a subscription for its figures (the node's
// dashboard). Answered with SubscriptionStatsResponse from the actor's own
// fields.
type SubscriptionStatsRequest struct{}

// SubscriptionStatsResponse answers SubscriptionStatsRequest.
type SubscriptionStatsResponse struct {
	// Stream and Shard are what it subscribed to.
	Stream string
	Shard  uint32
	// Client is the connection's remote address; Principal the name of the
	// credentials it authenticated with ("dev" without authentication).
	Client, Principal string
	// Started is when the subscription actor started.
	Started time.Time
	// Next is the next offset it will queue.
	Next uint64
	// Capacity and MaxBytes are its queue's bounds (MaxBytes 0: none);
	// QueuedEntries and QueuedBytes what the queue holds.
	Capacity      int
	MaxBytes      int64
	QueuedEntries int
	QueuedBytes   int64
	// LaneEntries and LaneBytes are handed to its writer lane and not yet
	// written; LaneShare is its share of the connection's egress bound (0:
	// none, or a shared pool under subscriber_lane_queue_policy block).
	LaneEntries int
	LaneBytes   int64
	LaneShare   int64
	// Reading is set while it reads history from storage.
	Reading bool
	// DeliveredBatches and DeliveredBytes count what its lane wrote;
	// Evicted the batches drop_old evicted from its queue.
	DeliveredBatches, DeliveredBytes, Evicted uint64
}

// subscriptionFigures are a subscription's own counters for the dashboard.
// They are fields of the actor, touched only in its Receive.
type subscriptionFigures struct {
	// counters are its stream's (set once subscribed): the subscription
	// counts itself and what it delivers there.
	counters *StreamCounters
	started  time.Time
	// delivered and deliveredBytes count what the lane wrote; evicted the
	// batches drop_old evicted from the queue.
	delivered, deliveredBytes, evicted uint64
}

// countSubscribed counts the subscription in its stream's figures, once
// (not at all if the stream was deleted meanwhile: it is about to end).
func (s *subscription) countSubscribed() {
	if s.figures.counters == nil {
		if c := s.cfg.Stats.StreamIfAny(s.cfg.Request.Name.String()); c != nil {
			s.figures.counters = c
			c.Subscriptions.Add(1)
		}
	}
}

// countWritten counts what the lane wrote.
func (s *subscription) countWritten(entries int, bytes int64) {
	s.figures.delivered += uint64(entries)
	s.figures.deliveredBytes += uint64(bytes)
	if c := s.figures.counters; c != nil {
		c.DeliveredBatches.Add(uint64(entries))
		c.DeliveredBytes.Add(uint64(bytes))
	}
}

// uncount takes the stopped subscription out of its stream's figures.
func (s *subscription) uncount() {
	if c := s.figures.counters; c != nil {
		c.Subscriptions.Add(-1)
		s.figures.counters = nil
	}
}

// onStatsRequest answers a SubscriptionStatsRequest.
func (s *subscription) onStatsRequest(ctx actor.Context) {
	if ctx.Sender() == nil {
		return
	}
	var share int64
	if s.cfg.EgressShare != nil {
		share = s.cfg.EgressShare.Load()
	}
	ctx.Respond(&SubscriptionStatsResponse{
		Stream: s.cfg.Request.Name.String(), Shard: s.cfg.Request.Shard, Client: s.cfg.Client, Principal: s.cfg.Principal,
		Started: s.figures.started, Next: s.next, Capacity: s.cfg.Capacity, MaxBytes: s.cfg.MaxBytes,
		QueuedEntries: len(s.queue), QueuedBytes: s.queueBytes, LaneEntries: s.laneEntries, LaneBytes: s.laneBytes,
		LaneShare: share, Reading: s.reading, DeliveredBatches: s.figures.delivered,
		DeliveredBytes: s.figures.deliveredBytes, Evicted: s.figures.evicted,
	})
}
