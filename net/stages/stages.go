// Package stages times records through the publish → deliver path, stage by
// stage, for `herald bench latency --in-process` in a build with the
// heraldstages tag (go build -tags heraldstages ./cmd/herald). Client and
// node mark a record at each stage with the payload it carries; a Recorder
// keys the marks by the payload's first eight bytes (the latency scenario's
// send time, unique per record) and reports the time between consecutive
// stages. Without the tag the marks are empty functions the compiler
// removes, and Enabled is false.
//
// Every process has its own marks: the report means something only when
// client and node share the process (and its clock).
package stages

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Stage is a point a record passes on its way from the publisher to the
// subscriber, in order.
type Stage int

// The stages of a publish and its delivery.
const (
	// Publish: the publisher called PublishAsync.
	Publish Stage = iota
	// ClientWrite: the client's publish actor writes the Publish frame.
	ClientWrite
	// NodeRead: the node has decoded the Publish frame.
	NodeRead
	// Shard: the shard handles the publish.
	Shard
	// Subscription: the subscription has the batch.
	Subscription
	// LaneWrite: the subscription's lane writes the EventBatch.
	LaneWrite
	// ClientRead: the subscriber's stream reader has the frame.
	ClientRead
	// ClientActor: the subscriber's subscription actor has the events.
	ClientActor
	// Next: the subscriber's Next returned the record.
	Next
	numStages
)

var stageNames = [numStages]string{
	"PublishAsync", "the client's publish actor writes the frame", "the node has decoded the Publish",
	"the shard handles it", "the subscription has the batch", "its lane writes the EventBatch",
	"the client's stream reader has the frame", "the subscription actor has it", "Next returns it",
}

// String names the stage.
func (s Stage) String() string {
	if s < 0 || s >= numStages {
		return fmt.Sprintf("stage %d", int(s))
	}
	return stageNames[s]
}

// MarshalText names the stage in JSON.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Recorder holds the first time each record reached each stage (or, with
// Last, the last time: the last of a fan-out's deliveries). Safe for
// concurrent use; set Now before the first mark, PayloadBytes and Last
// before it or with Reset.
type Recorder struct {
	// PayloadBytes is the size of every record's payload, which
	// MarkRecords finds at the end of a records block (0: MarkRecords
	// marks nothing).
	PayloadBytes int
	// Last makes the delivery stages (Subscription on) keep the latest
	// mark of a record instead of the first.
	Last bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	marks map[uint64]*[numStages]int64
}

// Reset forgets every mark and sets the payload size and Last for the
// next run.
func (r *Recorder) Reset(payloadBytes int, last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = nil
	r.PayloadBytes, r.Last = payloadBytes, last
}

// Mark notes that the record whose payload is payload reached stage s.
// Payloads shorter than eight bytes are ignored.
func (r *Recorder) Mark(s Stage, payload []byte) {
	if len(payload) < 8 || s < 0 || s >= numStages {
		return
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now().UnixNano()
	key := binary.LittleEndian.Uint64(payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.marks == nil {
		r.marks = make(map[uint64]*[numStages]int64)
	}
	m := r.marks[key]
	if m == nil {
		m = new([numStages]int64)
		r.marks[key] = m
	}
	if m[s] == 0 || (r.Last && s >= Subscription) {
		m[s] = t
	}
}

// MarkRecords marks stage s for the last record of a records block: a
// block ends with its last record's payload, PayloadBytes long.
func (r *Recorder) MarkRecords(s Stage, records []byte) {
	r.mu.Lock()
	n := r.PayloadBytes
	r.mu.Unlock()
	if n < 8 || len(records) < n {
		return
	}
	r.Mark(s, records[len(records)-n:])
}

// Step is the time between two consecutive stages over the records that
// reached every stage.
type Step struct {
	From Stage `json:"from"`
	To   Stage `json:"to"`
	// P10 to P99 are percentiles of the step's time, in nanoseconds.
	P10 time.Duration `json:"p10_ns"`
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// Report is what a Recorder saw.
type Report struct {
	// Records counts the records marked at any stage; Complete those marked
	// at every stage, which the steps are over.
	Records  int `json:"records"`
	Complete int `json:"complete"`
	// Last is true when the delivery stages kept each record's last mark.
	Last bool `json:"last"`
	// Steps are the consecutive stages, then Publish → Next.
	Steps []Step `json:"steps"`
}

// Report summarizes the marks.
func (r *Recorder) Report() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Records: len(r.marks), Last: r.Last}
	var d [numStages][]time.Duration // d[s]: s-1 → s; d[0]: Publish → Next
	for _, m := range r.marks {
		if slices.Contains(m[:], 0) {
			continue
		}
		rep.Complete++
		for s := Stage(1); s < numStages; s++ {
			d[s] = append(d[s], time.Duration(m[s]-m[s-1]))
		}
		d[0] = append(d[0], time.Duration(m[Next]-m[Publish]))
	}
	if rep.Complete == 0 {
		return rep
	}
	step := func(from, to Stage, x []time.Duration) Step {
		slices.Sort(x)
		n := len(x)
		return Step{From: from, To: to, P10: x[n/10], P50: x[n/2], P90: x[n*9/10], P99: x[n*99/100]}
	}
	for s := Stage(1); s < numStages; s++ {
		rep.Steps = append(rep.Steps, step(s-1, s, d[s]))
	}
	rep.Steps = append(rep.Steps, step(Publish, Next, d[0]))
	return rep
}

// String is the report as a table.
func (rep Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stages: %d records marked, %d at every stage\n", rep.Records, rep.Complete)
	for _, s := range rep.Steps {
		fmt.Fprintf(&b, "  %-44s → %-44s p10 %8v  p50 %8v  p90 %8v  p99 %8v\n", s.From, s.To,
			s.P10.Round(100*time.Nanosecond), s.P50.Round(100*time.Nanosecond), s.P90.Round(100*time.Nanosecond), s.P99.Round(100*time.Nanosecond))
	}
	return b.String()
}
