package history

import (
	"slices"
	"strconv"
	"sync"
)

// Kind is what an Event records.
type Kind uint8

const (
	// KindInvoke is a publish about to be sent: Invoke or InvokeIf.
	KindInvoke Kind = iota + 1
	// KindAck is a publish acknowledged at a shard and offset.
	KindAck
	// KindFail is a publish that failed definitely: it was not written and
	// never will be.
	KindFail
	// KindUnknown is a publish whose outcome the client does not know: it
	// may have been written, or may yet be.
	KindUnknown
	// KindRead is what a read or a subscription returned.
	KindRead
)

// String returns the kind's lower-case name ("invoke", "ack"...).
func (k Kind) String() string {
	switch k {
	case KindInvoke:
		return "invoke"
	case KindAck:
		return "ack"
	case KindFail:
		return "fail"
	case KindUnknown:
		return "unknown"
	case KindRead:
		return "read"
	}
	return "kind(" + strconv.FormatUint(uint64(k), 10) + ")"
}

// Event is one thing a client did or saw. Which fields mean something
// depends on Kind; the others are zero.
type Event struct {
	// Seq is the event's place in real-time order: the Recorder numbers
	// events 1, 2, 3... in the order they were recorded.
	Seq uint64
	// Kind says what the event records.
	Kind Kind
	// ID is the payload id of the record published (Invoke, Ack, Fail,
	// Unknown); empty for a Read.
	ID string
	// Shard is the shard published to (Invoke), the shard the ack named
	// (Ack) or the shard read (Read).
	Shard uint32
	// Conditional reports a conditional publish (InvokeIf), written only if
	// the shard's tail was Expected.
	Conditional bool
	// Expected is the tail a conditional publish expected (InvokeIf): the
	// offset it must be written at.
	Expected uint64
	// Offset is the offset the ack gave (Ack), or the offset of the first
	// record read, IDs[0] (Read).
	Offset uint64
	// IDs are the ids of the records read, IDs[i] at offset Offset+i (Read).
	IDs []string
	// Err is the error the client got (Fail, Unknown); it may be nil.
	Err error
}

// History is a run's events in Seq order, as Recorder.History returns them.
// Check takes one; a test may also build or edit one by hand, keeping Seq
// strictly increasing.
type History []Event

// Recorder records the events of a run. It is safe for concurrent use by
// any number of goroutines, and its zero value is ready to use. Each method
// records one event and numbers it; none blocks for longer than it takes to
// append to a slice.
//
// Record an Invoke just before the request is sent and its outcome once the
// client knows it, and a Read after the read returned: then the order of
// the events is a real-time order the checker can rely on.
type Recorder struct {
	mu struct {
		sync.Mutex
		// events are the recorded events in Seq order; events[i].Seq is
		// i+1. Protected by mu.
		events []Event
	}
}

// New returns an empty Recorder (the same as a zero Recorder).
func New() *Recorder { return &Recorder{} }

// Invoke records that a publish of the record id to shard is about to be
// sent. id is the record's payload id, unique to the run; invoke it again
// only to retry the record after the previous attempt's outcome was
// recorded.
func (r *Recorder) Invoke(id string, shard uint32) {
	r.record(Event{Kind: KindInvoke, ID: id, Shard: shard})
}

// InvokeIf records that a conditional publish of the record id to shard,
// written only if the shard's tail is expected, is about to be sent. For a
// conditional batch, invoke each record with the offset it is to be written
// at (expected+i for the i-th).
func (r *Recorder) InvokeIf(id string, shard uint32, expected uint64) {
	r.record(Event{Kind: KindInvoke, ID: id, Shard: shard, Conditional: true, Expected: expected})
}

// Ack records that the publish of id was acknowledged at shard and offset,
// as the acknowledgement said (for a batch, each record at its own offset).
func (r *Recorder) Ack(id string, shard uint32, offset uint64) {
	r.record(Event{Kind: KindAck, ID: id, Shard: shard, Offset: offset})
}

// Fail records that the publish of id failed definitely with err: the node
// refused it (a failed condition, an invalid request, a redirect before
// anything was written), so the record is not written and never will be.
// An error that leaves the outcome in doubt goes to Unknown instead.
func (r *Recorder) Fail(id string, err error) {
	r.record(Event{Kind: KindFail, ID: id, Err: err})
}

// Unknown records that the outcome of the publish of id is unknown: err
// (a timeout, a lost connection, an ErrOutcomeUnknown) came after the
// request may have reached the node, so the record may be written, now or
// later.
func (r *Recorder) Unknown(id string, err error) {
	r.record(Event{Kind: KindUnknown, ID: id, Err: err})
}

// Read records that a read of shard returned the records ids at
// consecutive offsets from from: ids[i] at offset from+i. A subscription's
// deliveries may be recorded one at a time, or as a run of consecutive
// offsets. Read copies ids; the caller may reuse the slice.
func (r *Recorder) Read(shard uint32, from uint64, ids []string) {
	r.record(Event{Kind: KindRead, Shard: shard, Offset: from, IDs: slices.Clone(ids)})
}

// History returns a copy of the events recorded so far, in Seq order. It
// shares nothing with the Recorder: recording goes on unaffected, and the
// caller may edit the copy.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := make(History, len(r.mu.events))
	for i, e := range r.mu.events {
		e.IDs = slices.Clone(e.IDs)
		h[i] = e
	}
	return h
}

// Len returns the number of events recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.events)
}

// record numbers e and appends it.
func (r *Recorder) record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Seq = uint64(len(r.mu.events)) + 1
	r.mu.events = append(r.mu.events, e)
}
