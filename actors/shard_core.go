package actors

import (
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// shardCore is a shard's logic without effects: offsets, the pending
// (admitted, not yet durable) batches, the replay ring and each
// subscription's credit. The shard actor wraps it and performs what it
// decides. It does no I/O and starts no goroutines.
type shardCore struct {
	// index is the shard's index within its stream.
	index uint32
	// durable shards end an overflowing live subscription with lagged;
	// ephemeral ones skip the batch for it (an offset gap).
	durable bool
	// overflow is the stream's overflow policy.
	overflow wire.Overflow
	// first is the first retained offset.
	first uint64
	// tail is the next offset to assign.
	tail uint64
	// committed is the offset below which every record is durable and
	// deliverable.
	committed uint64
	// pending are admitted batches waiting to be committed, in offset order.
	pending []pendingPublish
	// ring keeps the most recent committed sections for live catch-up.
	ring sectionRing
	// subs are the registered subscriptions, by actor id.
	subs map[string]*subState
	// producers are the idempotent producers seen on this shard.
	producers map[uint64]*producerState
	// blocked is set under the block policy while a live subscription is
	// behind: no publish is admitted until every one has caught up.
	blocked bool
	// drops counts what the overflow policy did.
	drops DropCounts
	// stats is the node's, for metrics (may be nil).
	stats *Stats
	// queueTotal is the node-wide budget of subscriber queue and egress
	// bytes (nil: none). A live push must fit it; catch-up does not wait
	// for it.
	queueTotal *Budget
}

// pendingPublish is an admitted batch waiting for storage.
type pendingPublish struct {
	batch storage.Batch
	// span is the batch's append span when its publish is traced.
	span trace.Span
	// received is when the node read the publish (for the ack latency).
	received time.Time
	reqID    uint64
	ack      wire.AckMode
	replyTo  *actor.PID
	// dups are re-sends of this batch by its idempotent producer that
	// arrived while it was pending; they are answered with it.
	dups []dupReply
}

// dupReply is a pending duplicate's requester.
type dupReply struct {
	reqID   uint64
	ack     wire.AckMode
	replyTo *actor.PID
}

// subState is what the shard knows of one subscription.
type subState struct {
	// pid is the subscription actor.
	pid *actor.PID
	// next is the next offset the subscription needs.
	next uint64
	// capacity bounds batches pushed and not yet returned as credit.
	capacity int
	// maxBytes bounds the records bytes in flight; 0 = no byte bound.
	maxBytes int64
	// inEntries and inBytes are pushed and not yet returned.
	inEntries int
	inBytes   int64
	// reading is true while the subscription reads history from storage;
	// the shard pushes nothing to it then and does not track its credit.
	reading bool
	// live is true once the subscription has caught up with the committed
	// tail: from then on a batch it has no room for overflows (history
	// replay before that is never subject to the overflow policy).
	live bool
	// skipped counts batches skipped for it by an ephemeral overflow.
	skipped int
	// replica is the replica the subscriber asked for (a replicated
	// shard's; shard_follower.go).
	replica wire.Replica
}

// fullBy says which bound a batch of size bytes would break, if any.
func (s *subState) fullBy(size int64) dropCause {
	if s.inEntries >= s.capacity {
		return dropCount
	}
	if s.maxBytes > 0 && s.inEntries > 0 && s.inBytes+size > s.maxBytes {
		return dropBytes
	}
	return dropNone
}

// dropCause says why a batch was not queued for a subscriber.
type dropCause int

const (
	dropNone  dropCause = iota
	dropCount           // the queue held capacity batches
	dropBytes           // the queue held too many bytes
	dropTotal           // the node's subscriber_queue_max_bytes_total was spent
)

// DropCounts counts what overflow did, by cause, for metrics.
type DropCounts struct {
	// TotalBound counts batches not queued because the node-wide
	// subscriber_queue_max_bytes_total was spent.
	TotalBound uint64
	// CountBound and ByteBound count batches not queued (drop_new: skipped
	// on an ephemeral stream, or the batch that ended a lagged subscription
	// on a durable one) because the queue's entry or byte bound was full.
	CountBound, ByteBound uint64
	// Evicted counts batches drop_old evicted from a queue.
	Evicted uint64
	// Lagged counts subscriptions ended with lagged.
	Lagged uint64
	// Overloaded counts publishes refused after waiting for admission.
	Overloaded uint64
}

func newShardCore(index uint32, first, tail uint64, ringRecords int, ringBytes int64) *shardCore {
	return &shardCore{
		index:     index,
		first:     first,
		tail:      tail,
		committed: tail,
		ring:      sectionRing{maxRecords: ringRecords, maxBytes: ringBytes},
		subs:      map[string]*subState{},
		producers: map[uint64]*producerState{},
		stats:     &Stats{},
	}
}

// publishDecision is what checkPublish decides for a publish.
type publishDecision int

const (
	decideWrite     publishDecision = iota // assign offsets and write it
	decideDuplicate                        // an idempotent re-send: answer, write nothing
	decideRefuse                           // refuse with an error
)

// checkPublish applies a conditional publish's expected offset and an
// idempotent producer's sequence, where offsets are assigned. For a
// duplicate of a batch still pending it returns the pending batch's index
// (dupOf ≥ 0); for one already committed, its offsets.
func (c *shardCore) checkPublish(m *PublishRequest) (d publishDecision, werr *wire.Error, dup producerBatch, dupOf int) {
	dupOf = -1
	if m.Conditional && !c.durable {
		return decideRefuse, wire.Errorf(wire.CodeInvalidRequest, "conditional publishes need a durable stream"), dup, dupOf
	}
	// An idempotent re-send is recognised first: a batch already written is
	// answered with its offsets even if it was conditional (its condition
	// held when it was written).
	if m.Idempotent {
		if m.Sequence == 0 {
			return decideRefuse, wire.Errorf(wire.CodeInvalidRequest, "idempotent sequences start at 1"), dup, dupOf
		}
		p := c.producers[m.ProducerID]
		last := uint64(0)
		if p != nil {
			last = p.lastSeq
		}
		switch {
		case m.Sequence > last+1:
			return decideRefuse, &wire.Error{Code: wire.CodeSequenceGap,
				Message: fmt.Sprintf("producer %d: sequence %d, expected %d", m.ProducerID, m.Sequence, last+1), Detail: last + 1}, dup, dupOf
		case m.Sequence <= last:
			b, ok := p.find(m.Sequence)
			if !ok {
				return decideRefuse, &wire.Error{Code: wire.CodeDuplicateSequence,
					Message: fmt.Sprintf("producer %d: sequence %d was written before the last %d batches", m.ProducerID, m.Sequence, producerMemory)}, dup, dupOf
			}
			if b.base >= c.committed {
				for i := range c.pending {
					if c.pending[i].batch.Base == b.base {
						return decideDuplicate, nil, b, i
					}
				}
			}
			return decideDuplicate, nil, b, dupOf
		}
	}
	if m.Conditional && m.ExpectedOffset != c.tail {
		return decideRefuse, &wire.Error{Code: wire.CodeConditionFailed,
			Message: fmt.Sprintf("expected offset %d, the shard's tail is %d", m.ExpectedOffset, c.tail), Detail: c.tail}, dup, dupOf
	}
	return decideWrite, nil, dup, dupOf
}

// admitProducer records an idempotent producer's admitted batch and returns
// its state to persist with the batch.
func (c *shardCore) admitProducer(id, seq uint64, b storage.Batch) *producerState {
	p := c.producers[id]
	if p == nil {
		p = &producerState{id: id}
		c.producers[id] = p
	}
	p.admit(producerBatch{seq: seq, base: b.Base, count: b.Count})
	return p
}

// admit assigns the next offsets to a batch and queues it as pending.
func (c *shardCore) admit(p pendingPublish) storage.Batch {
	p.batch.Base = c.tail
	c.tail += uint64(p.batch.Count)
	c.pending = append(c.pending, p)
	return p.batch
}

// commitThrough marks every pending batch ending at or before through as
// committed, puts it in the ring and returns it with its section.
func (c *shardCore) commitThrough(through uint64) []committedPublish {
	var out []committedPublish
	for len(c.pending) > 0 && c.pending[0].batch.End() <= through {
		p := c.pending[0]
		c.pending = c.pending[1:]
		sec := wire.NewSection(c.index, p.batch.Base, p.batch.Timestamp, p.batch.Count, p.batch.Records)
		c.ring.push(sec)
		c.committed = p.batch.End()
		out = append(out, committedPublish{pendingPublish: p, section: sec})
	}
	if len(c.pending) == 0 {
		c.pending = nil
	}
	return out
}

// failPending drops every pending batch and rewinds the tail to what is
// committed, returning the dropped batches so their publishers can be told.
func (c *shardCore) failPending() []pendingPublish {
	out := c.pending
	c.pending = nil
	c.tail = c.committed
	return out
}

// committedPublish is a batch that just became durable.
type committedPublish struct {
	pendingPublish
	section *wire.Section
}

// resolveStart turns a subscribe request's start into the first offset the
// subscription needs, or an error when the offset is past the tail.
func (c *shardCore) resolveStart(kind wire.StartKind, offset uint64) (uint64, *wire.Error) {
	switch kind {
	case wire.StartLatest:
		return c.committed, nil
	case wire.StartOffset:
		if offset > c.committed {
			return 0, &wire.Error{Code: wire.CodeOffsetOutOfRange,
				Message: fmt.Sprintf("offset %d is past the shard's tail %d", offset, c.committed), Detail: c.committed}
		}
		if offset < c.first {
			return 0, &wire.Error{Code: wire.CodeOffsetOutOfRange,
				Message: fmt.Sprintf("offset %d is below the first retained offset %d", offset, c.first), Detail: c.first}
		}
		return offset, nil
	default:
		return c.first, nil
	}
}

// addSub registers a subscription starting at next.
func (c *shardCore) addSub(pid *actor.PID, next uint64, capacity int, maxBytes int64) *subState {
	s := &subState{pid: pid, next: next, capacity: max(capacity, 1), maxBytes: maxBytes}
	c.subs[pid.Id] = s
	return s
}

// pump decides what to push to s now: the ring's sections from s.next on,
// within s's credit. If s needs records the ring no longer holds, it returns
// read = true and marks s as reading: the subscription reads them from
// storage itself and comes back with ResumeLive.
//
// A live subscription (one that has caught up with the committed tail) with
// no room for the next batch has overflowed, and the stream's policy
// decides:
//   - drop_new: an ephemeral shard skips the batch for it (an offset gap); a
//     durable one returns lagged = true (the caller ends the subscription,
//     which resumes from s.next);
//   - drop_old: the batch is pushed anyway, from index evictFrom of secs on:
//     the subscription evicts its oldest queued batch for each;
//   - block: nothing is pushed and the shard is blocked: it admits no
//     publish until every live subscription has caught up.
//
// History replay before the subscription is live is never subject to the
// policy: it waits for credit.
func (c *shardCore) pump(s *subState) (secs []*wire.Section, evictFrom int, read, lagged bool) {
	evictFrom = -1
	for !s.reading && s.next < c.committed {
		sec := c.ring.find(s.next)
		if sec == nil {
			s.reading, s.live = true, false
			return secs, evictFrom, true, false
		}
		size := int64(len(sec.Records))
		cause := s.fullBy(size)
		// The node's total refuses live pushes (never catch-up, and never
		// under block, which must not wait on bytes freed elsewhere: its own
		// queue bound limits it). The subscription takes the bytes when it
		// queues the batch, so nothing is taken for a push it never sees.
		if cause == dropNone && s.live && c.overflow != wire.OverflowBlock && !c.queueTotal.fits(size) {
			cause = dropTotal
		}
		if cause != dropNone {
			if !s.live {
				break
			}
			switch c.overflow {
			case wire.OverflowBlock:
				c.blocked = true
			case wire.OverflowDropOld:
				if cause == dropTotal {
					// Nothing in this subscriber's queue to make room in
					// the node's total: the arriving batch is the one lost.
					c.countDrop(cause)
					s.next = sec.End()
					s.skipped++
					continue
				}
				if evictFrom < 0 {
					evictFrom = len(secs)
				}
				c.drops.Evicted++
				secs = append(secs, sec)
				s.next = sec.End()
				continue
			default:
				c.countDrop(cause)
				if c.durable {
					c.drops.Lagged++
					c.stats.add(&c.stats.Lagged, 1)
					return secs, evictFrom, false, true
				}
				s.next = sec.End()
				s.skipped++
				continue
			}
			break
		}
		secs = append(secs, sec)
		s.inEntries++
		s.inBytes += size
		s.next = sec.End()
	}
	if !s.reading && s.next >= c.committed {
		s.live = true
	}
	return secs, evictFrom, false, false
}

func (c *shardCore) countDrop(cause dropCause) {
	if cause == dropTotal {
		c.drops.TotalBound++
		c.stats.add(&c.stats.DropTotalBound, 1)
		return
	}
	if cause == dropBytes {
		c.drops.ByteBound++
		c.stats.add(&c.stats.DropByteBound, 1)
	} else {
		c.drops.CountBound++
		c.stats.add(&c.stats.DropCountBound, 1)
	}
}

// unblock reports whether a blocked shard may admit publishes again: every
// live subscription has caught up with the committed tail.
func (c *shardCore) unblock() bool {
	if !c.blocked {
		return true
	}
	for _, s := range c.subs {
		if s.live && !s.reading && s.next < c.committed {
			return false
		}
	}
	c.blocked = false
	return true
}

// skipMissing moves s past records that neither storage nor the ring holds
// any more (an ephemeral shard's memory cap evicted them): to the ring's
// oldest record, or the committed tail when the ring is empty.
func (c *shardCore) skipMissing(s *subState) {
	if s.next >= c.committed || c.ring.find(s.next) != nil {
		return
	}
	if len(c.ring.secs) > 0 && c.ring.secs[0].Base() > s.next {
		s.next = c.ring.secs[0].Base()
		return
	}
	s.next = c.committed
}

// credit returns credit from s.
func (c *shardCore) credit(s *subState, entries int, bytes int64) {
	s.inEntries = max(0, s.inEntries-entries)
	s.inBytes = max(0, s.inBytes-bytes)
}

// sectionRing keeps the most recent committed sections, bounded by records
// and records bytes; the oldest sections go first, whole, but the newest is
// always kept. Sections are contiguous in offsets.
type sectionRing struct {
	maxRecords int
	maxBytes   int64
	// total is the node-wide replay_ring_max_bytes_total (nil: none).
	total   *Budget
	secs    []*wire.Section
	records int
	bytes   int64
}

func (r *sectionRing) push(s *wire.Section) {
	if r.maxRecords <= 0 {
		return
	}
	r.secs = append(r.secs, s)
	r.bytes += int64(len(s.Records))
	r.records += int(s.Count())
	// The node's total: make room from this ring's oldest, keeping the
	// newest section even if it alone does not fit.
	r.total.Acquire(int64(len(s.Records)))
	over := func() bool { return r.total != nil && r.total.Used() > r.total.limit }
	drop := 0
	for len(r.secs)-drop > 1 && (r.records > r.maxRecords || (r.maxBytes > 0 && r.bytes > r.maxBytes) || over()) {
		n := int64(len(r.secs[drop].Records))
		r.bytes -= n
		r.total.Release(n)
		r.records -= int(r.secs[drop].Count())
		r.secs[drop] = nil
		drop++
	}
	if drop > 0 {
		r.secs = r.secs[drop:]
	}
	// Compact now and then so the backing array does not grow without bound.
	if cap(r.secs) > 4*max(len(r.secs), 16) {
		r.secs = append([]*wire.Section(nil), r.secs...)
	}
}

// release gives the ring's bytes back to the node's total (the shard is
// going away).
func (r *sectionRing) release() {
	r.total.Release(r.bytes)
	r.secs, r.bytes, r.records = nil, 0, 0
}

// find returns the section holding offset off, or nil when the ring does not
// hold it.
func (r *sectionRing) find(off uint64) *wire.Section {
	if len(r.secs) == 0 || off < r.secs[0].Base() {
		return nil
	}
	i := sort.Search(len(r.secs), func(i int) bool { return r.secs[i].Base() > off }) - 1
	if i < 0 || r.secs[i].End() <= off {
		return nil
	}
	return r.secs[i]
}
