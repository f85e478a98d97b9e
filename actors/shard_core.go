package actors

import (
	"sort"

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
}

// pendingPublish is an admitted batch waiting for storage.
type pendingPublish struct {
	batch   storage.Batch
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
}

// hasRoom reports whether a batch of size bytes fits the credit window. A
// batch bigger than the byte bound still goes when nothing is in flight.
func (s *subState) hasRoom(size int64) bool {
	if s.inEntries >= s.capacity {
		return false
	}
	return s.maxBytes == 0 || s.inEntries == 0 || s.inBytes+size <= s.maxBytes
}

func newShardCore(index uint32, tail uint64, ringBatches int, ringBytes int64) *shardCore {
	return &shardCore{
		index:     index,
		tail:      tail,
		committed: tail,
		ring:      sectionRing{maxBatches: ringBatches, maxBytes: ringBytes},
		subs:      map[string]*subState{},
	}
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
				Message: "offset is past the shard's tail", Detail: c.committed}
		}
		return offset, nil
	default:
		return 0, nil // storage reads from below First start at the first stored batch
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
// readFrom = true and marks s as reading: the subscription reads them from
// storage itself and comes back with ResumeLive.
func (c *shardCore) pump(s *subState) (secs []*wire.Section, readFrom bool) {
	for !s.reading && s.next < c.committed {
		sec := c.ring.find(s.next)
		if sec == nil {
			s.reading = true
			return secs, true
		}
		size := int64(len(sec.Records))
		if !s.hasRoom(size) {
			break
		}
		secs = append(secs, sec)
		s.inEntries++
		s.inBytes += size
		s.next = sec.End()
	}
	return secs, false
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

// sectionRing keeps the most recent committed sections, bounded by count and
// records bytes; the oldest go first. Sections are contiguous in offsets.
type sectionRing struct {
	maxBatches int
	maxBytes   int64
	secs       []*wire.Section
	bytes      int64
}

func (r *sectionRing) push(s *wire.Section) {
	if r.maxBatches <= 0 {
		return
	}
	r.secs = append(r.secs, s)
	r.bytes += int64(len(s.Records))
	drop := 0
	for len(r.secs)-drop > 1 && (len(r.secs)-drop > r.maxBatches || (r.maxBytes > 0 && r.bytes > r.maxBytes)) {
		r.bytes -= int64(len(r.secs[drop].Records))
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
