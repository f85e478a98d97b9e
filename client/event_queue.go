package client

import (
	"go.opentelemetry.io/otel/trace"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Event is one record delivered to a Subscription.
type Event struct {
	// Shard is the record's shard.
	Shard uint32
	// Offset is the record's offset in its shard.
	Offset uint64
	// Timestamp is when the node committed the record's batch.
	Timestamp time.Time
	// Key is the record's key (nil when it has none).
	Key []byte
	// Headers are the record's headers, in the order they were published
	// (nil when it has none).
	Headers Headers
	// Payload is the record's payload.
	Payload []byte
	// Trace is the span context of the consumer span Next recorded for a
	// record that carries trace context (the child of its publish span):
	// use it as the parent of the record's processing,
	// trace.ContextWithSpanContext(ctx, ev.Trace). Invalid otherwise.
	Trace trace.SpanContext
}

// eventQueue is the subscription's deterministic core: it holds received
// EventBatch frames and yields their records one at a time, in offset order,
// dropping each record below the next offset it expects. A batch is delivered
// whole, so a section may start before the subscription's start offset or
// repeat records already seen; those are dropped. A gap (offsets skipped by
// the node) is passed over: the next offset expected follows the record
// yielded last.
//
// Across a lost connection the queue carries over: the shard resumes at
// resumeOffset (one past the last record received), and two markers, queued
// in line with the frames, say what the resume found: a gap marker (the node
// no longer had records from there: pop yields the *GapError in their place,
// and the offsets go on from its To, also when To is below From because the
// shard's offsets restarted), and a watch marker (the first record after it
// must be at its offset; a later one means the node skipped records, and pop
// yields a *GapError before it).
//
// It does no I/O and starts no goroutines; the subscription actor owns it.
type eventQueue struct {
	// next is the lowest offset still to yield.
	next uint64
	// frames are the received frames' sections, and the markers, oldest
	// first.
	frames []queuedFrame
	// sec is the index of the current section in frames[0].
	sec int
	// iterating is set while it walks the current section.
	iterating bool
	// it walks the current section's records.
	it wire.RecordIter
	// offset is the offset of the record it yields next.
	offset uint64
	// rec is scratch for the iterator.
	rec wire.Record
	// dropped counts records dropped for being below next.
	dropped uint64
	// held counts the records of the held frames not yet walked past: an
	// upper bound on what pop can still yield, to size answers.
	held int
	// markers counts the markers held.
	markers int
	// received is one past the highest offset received since the last gap
	// marker (or the start): where the shard resumes.
	received uint64
	// watching is set once a watch marker was passed: the next record
	// yielded must be at watchAt.
	watching bool
	watchAt  uint64
	// stashed is the record found past a watched offset, yielded after the
	// gap.
	stashed *Event
}

// queuedFrame is one received frame's sections, or a marker.
type queuedFrame struct {
	sections []wire.BatchView
	// gap, when set, is a gap marker: yield it, then expect gap.To.
	gap *GapError
	// watch is set on a watch marker: the next record must be at watchAt.
	watch   bool
	watchAt uint64
}

// newEventQueue returns a queue that yields offsets from next on.
func newEventQueue(next uint64) *eventQueue { return &eventQueue{next: next, received: next} }

// push appends a received frame's sections.
func (q *eventQueue) push(sections []wire.BatchView) {
	q.frames = append(q.frames, queuedFrame{sections: sections})
	for i := range sections {
		q.held += int(sections[i].Count)
		q.received = max(q.received, sections[i].Base+uint64(sections[i].Count))
	}
}

// resumeOffset returns where the shard resumes after a lost connection: one
// past the last record received (held or yielded), so that nothing is
// yielded twice and nothing is skipped.
func (q *eventQueue) resumeOffset() uint64 { return q.received }

// pushGap queues a gap marker: once the frames before it are yielded, pop
// yields g, and the offsets go on from g.To (the shard resumed there).
func (q *eventQueue) pushGap(g *GapError) {
	q.frames = append(q.frames, queuedFrame{gap: g})
	q.markers++
	q.received = g.To
}

// pushWatch queues a watch marker: the first record yielded after it must be
// at offset (the shard resumed there); a later one is a gap.
func (q *eventQueue) pushWatch(offset uint64) {
	q.frames = append(q.frames, queuedFrame{watch: true, watchAt: offset})
	q.markers++
}

// ready returns at most how many results pop can still yield.
func (q *eventQueue) ready() int {
	n := q.held + q.markers
	if q.stashed != nil {
		n++
	}
	return n
}

// frameCount returns how many received frames are held (the current one
// included).
func (q *eventQueue) frameCount() int { return len(q.frames) - q.markers }

// dropFrame drops frames[0], a received frame, and counts it finished.
func (q *eventQueue) dropFrame() {
	q.frames = popFront(q.frames)
	q.sec = 0
}

// popFront removes s[0], zeroing its slot. Removing the last element keeps
// the slice at its array's start, so a queue that a consumer keeps empty
// reuses one array instead of allocating at every push.
func popFront[T any](s []T) []T {
	var zero T
	s[0] = zero
	if len(s) == 1 {
		return s[:0]
	}
	return s[1:]
}

// popInto writes the next event into *ev, or returns the next gap, if a
// held frame or marker has one, and how many received frames it finished
// with (fully consumed or dropped) on the way. *ev is left as it was when
// there is nothing, and zeroed with a gap. The event is built in place, in
// the slice it is returned in: an Event is some 180 bytes, and each copy of
// one on the way to Next cost its writes and their write barriers.
func (q *eventQueue) popInto(ev *Event) (gap *GapError, ok bool, finished int) {
	if q.stashed != nil {
		*ev, q.stashed = *q.stashed, nil
		return nil, true, 0
	}
	for len(q.frames) > 0 {
		fr := &q.frames[0]
		switch {
		case fr.gap != nil:
			g := fr.gap
			q.frames = popFront(q.frames)
			q.markers--
			q.next, q.watching = g.To, false
			return g, true, finished
		case fr.watch:
			q.watching, q.watchAt = true, fr.watchAt
			q.frames = popFront(q.frames)
			q.markers--
			continue
		}
		sections := fr.sections
		if q.sec >= len(sections) {
			q.dropFrame()
			finished++
			continue
		}
		v := &sections[q.sec]
		if !q.iterating {
			if v.Count == 0 || v.Base+uint64(v.Count) <= q.next {
				q.dropped += uint64(v.Count)
				q.held -= int(v.Count)
				q.sec++
				continue
			}
			q.it = *wire.NewRecordIter(v.Records)
			q.offset = v.Base
			q.iterating = true
		}
		if !q.it.Next(&q.rec) {
			// The decoder checked the section holds Count records, so this
			// is the end of it.
			q.held -= int(v.Base + uint64(v.Count) - q.offset)
			q.iterating = false
			q.sec++
			continue
		}
		off := q.offset
		q.offset++
		q.held--
		if q.offset == v.Base+uint64(v.Count) {
			q.iterating = false
			q.sec++
		}
		if off < q.next {
			q.dropped++
			continue
		}
		q.next = off + 1
		fillEvent(ev, v, off, &q.rec)
		// Let the caller release a frame that this event finished.
		if q.sec >= len(sections) {
			q.dropFrame()
			finished++
		}
		if q.watching && off >= q.watchAt {
			q.watching = false
			if off > q.watchAt {
				stash := *ev
				q.stashed = &stash
				*ev = Event{}
				return &GapError{Shard: stash.Shard, From: q.watchAt, To: off}, true, finished
			}
		}
		return nil, true, finished
	}
	return nil, false, finished
}

// eventOf returns the record rec at offset off of batch v as an Event. The
// Event shares rec's key and payload (slices of the frame's body), not its
// headers slice.
func eventOf(v *wire.BatchView, off uint64, rec *wire.Record) Event {
	var ev Event
	fillEvent(&ev, v, off, rec)
	return ev
}

// fillEvent sets *ev to the record at off of v, rec.
func fillEvent(ev *Event, v *wire.BatchView, off uint64, rec *wire.Record) {
	*ev = Event{Shard: v.Shard, Offset: off, Timestamp: time.Unix(0, v.Timestamp), Key: rec.Key, Payload: rec.Payload,
		Headers: headersOf(rec.Headers)}
	if len(ev.Key) == 0 {
		ev.Key = nil
	}
}
