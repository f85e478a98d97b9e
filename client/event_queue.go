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
// It does no I/O and starts no goroutines; the subscription actor owns it.
type eventQueue struct {
	// next is the lowest offset still to yield.
	next uint64
	// frames are the received frames' sections, oldest first.
	frames [][]wire.BatchView
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
}

// newEventQueue returns a queue that yields offsets from next on.
func newEventQueue(next uint64) *eventQueue { return &eventQueue{next: next} }

// push appends a received frame's sections.
func (q *eventQueue) push(sections []wire.BatchView) {
	q.frames = append(q.frames, sections)
	for i := range sections {
		q.held += int(sections[i].Count)
	}
}

// ready returns at most how many events pop can still yield.
func (q *eventQueue) ready() int { return q.held }

// frameCount returns how many frames are held (the current one included).
func (q *eventQueue) frameCount() int { return len(q.frames) }

// pop returns the next event, if a held frame has one, and how many frames
// it finished with (fully consumed or dropped) on the way.
func (q *eventQueue) pop() (ev Event, ok bool, finished int) {
	for len(q.frames) > 0 {
		sections := q.frames[0]
		if q.sec >= len(sections) {
			q.frames[0] = nil
			q.frames = q.frames[1:]
			q.sec = 0
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
		ev = eventOf(v, off, &q.rec)
		// Let the caller release a frame that this event finished.
		if q.sec >= len(sections) {
			q.frames[0] = nil
			q.frames = q.frames[1:]
			q.sec = 0
			finished++
		}
		return ev, true, finished
	}
	return Event{}, false, finished
}

// eventOf returns the record rec at offset off of batch v as an Event. The
// Event shares rec's key and payload (slices of the frame's body), not its
// headers slice.
func eventOf(v *wire.BatchView, off uint64, rec *wire.Record) Event {
	ev := Event{
		Shard:     v.Shard,
		Offset:    off,
		Timestamp: time.Unix(0, v.Timestamp),
		Key:       rec.Key,
		Payload:   rec.Payload,
	}
	if len(ev.Key) == 0 {
		ev.Key = nil
	}
	ev.Headers = headersOf(rec.Headers)
	return ev
}
